"""An in-memory :class:`~config_store.store.MetadataStore` with ZooKeeper's semantics, for unit tests.

Same versions, ephemeral ownership, sequential suffixes (the parent's ``cversion``, 10 digits, bumped by every
child create *and* delete as in ZooKeeper), NotEmpty/NoNode/BadVersion rules and one-shot watches as the real
thing; every call yields to the loop once, so concurrent callers interleave like real round trips.

Several stores built on one :class:`MemoryTree` behave like several sessions of one ZooKeeper ensemble (a
bookie registering and a client watching, say). Faults on demand: :meth:`MemoryMetadataStore.fail_next`
(the next n writes fail), :meth:`~MemoryMetadataStore.expire_session`, :meth:`~MemoryMetadataStore.suspend`
and :meth:`~MemoryMetadataStore.resume`. Never use it outside tests: nothing is persisted.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import (BadVersionError, InvalidMetadataError, MetadataError, MetadataUnavailableError,
                     NodeExistsError, NotEmptyError, NotFoundError)
from .models import Versioned
from .store import MetadataStore, NodeRead, SessionEvent, join_path

Trigger = Callable[[], None]


@dataclass
class _Node:
    data: bytes
    owner: int = 0  # session id of an ephemeral node's owner; 0 = persistent
    version: int = 0
    cversion: int = 0
    mzxid: int = 0
    children: set[str] = field(default_factory=set)


def _parent_and_name(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return parent or "/", name


class MemoryTree:
    """The data several in-memory stores share: nodes, the zxid counter, sessions and armed watches."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._zxid = 0
        self._last_session = 0
        self._data_watchers: dict[str, set[Trigger]] = defaultdict(set)
        self._child_watchers: dict[str, set[Trigger]] = defaultdict(set)

    def new_session(self) -> int:
        self._last_session += 1
        return self._last_session

    def paths(self) -> list[str]:
        """Every node path, sorted (for test assertions)."""
        return sorted(self._nodes)

    def node(self, path: str) -> _Node | None:
        return self._nodes.get(path)

    def _tick(self) -> int:
        self._zxid += 1
        return self._zxid

    def _fire(self, watchers: dict[str, set[Trigger]], path: str) -> None:
        for trigger in watchers.pop(path, ()):
            trigger()

    # ------------------------------------------------------------------------------------------ operations

    def create(self, path: str, data: bytes, *, owner: int, sequential: bool, make_parents: bool) -> str:
        parent_path, name = _parent_and_name(path)
        parent = self._nodes.get(parent_path)
        if parent is None:
            if not make_parents:
                raise NotFoundError(f"create {path}: parent {parent_path} does not exist")
            self._ensure_path(parent_path)
            parent = self._nodes[parent_path]
        if parent.owner:
            raise InvalidMetadataError(f"create {path}: ephemeral node {parent_path} cannot have children")
        if sequential:
            name = f"{name}{parent.cversion:010d}"
            path = join_path(parent_path, name)
        if path in self._nodes:
            raise NodeExistsError(f"create {path}: node already exists")
        self._nodes[path] = _Node(data, owner=owner, mzxid=self._tick())
        parent.children.add(name)
        parent.cversion += 1
        self._fire(self._data_watchers, path)
        self._fire(self._child_watchers, parent_path)
        return path

    def _ensure_path(self, path: str) -> None:
        if path in self._nodes:
            return
        parent_path, name = _parent_and_name(path)
        self._ensure_path(parent_path)
        try:
            self.create(path, b"", owner=0, sequential=False, make_parents=False)
        except NodeExistsError:
            pass

    def set(self, path: str, data: bytes, expected_version: int) -> int:
        node = self._nodes.get(path)
        if node is None:
            raise NotFoundError(f"set {path}: no such node")
        if expected_version != -1 and expected_version != node.version:
            raise BadVersionError(f"set {path}: version is {node.version}, expected {expected_version} "
                                  "(lost a compare-and-set race); re-read and retry")
        node.data, node.version, node.mzxid = data, node.version + 1, self._tick()
        self._fire(self._data_watchers, path)
        return node.version

    def delete(self, path: str, expected_version: int) -> None:
        node = self._nodes.get(path)
        if node is None:
            raise NotFoundError(f"delete {path}: no such node")
        if expected_version != -1 and expected_version != node.version:
            raise BadVersionError(f"delete {path}: version is {node.version}, expected {expected_version}")
        if node.children:
            raise NotEmptyError(f"delete {path}: node has children")
        del self._nodes[path]
        parent_path, name = _parent_and_name(path)
        parent = self._nodes[parent_path]
        parent.children.discard(name)
        parent.cversion += 1
        self._tick()
        self._fire(self._data_watchers, path)
        self._fire(self._child_watchers, path)
        self._fire(self._child_watchers, parent_path)

    def drop_session(self, owner: int) -> None:
        """Deletes every ephemeral node of session ``owner`` (what ZooKeeper does when a session ends)."""
        for path in [p for p, n in self._nodes.items() if n.owner == owner]:
            self.delete(path, -1)

    def watch_data(self, path: str, trigger: Trigger) -> None:
        self._data_watchers[path].add(trigger)

    def watch_children(self, path: str, trigger: Trigger) -> None:
        self._child_watchers[path].add(trigger)


class MemoryMetadataStore(MetadataStore):
    """:class:`MetadataStore` in memory. ``MemoryMetadataStore(other.tree)`` is a second session on the same
    data.

    Unlike the kazoo store, a call made while the store is suspended fails at once with
    MetadataUnavailableError (it does not wait for the connection), which keeps unit tests deterministic.
    """

    def __init__(self, tree: MemoryTree | None = None, *, name: str = "memory",
                 ephemeral_conflict_timeout_s: float = 1.0) -> None:
        super().__init__(name=name, ephemeral_conflict_timeout_s=ephemeral_conflict_timeout_s)
        self.tree = tree if tree is not None else MemoryTree()
        self._sid: int | None = None
        self._faults: list[tuple[int, type[MetadataError] | MetadataError]] = []
        self.write_count = 0

    # ------------------------------------------------------------------------------------------ faults

    def fail_next(self, n: int, error: type[MetadataError] | MetadataError = MetadataUnavailableError) -> None:
        """Makes the next ``n`` writes (create, set, delete — each node-level write counts) raise ``error``
        (a class, instantiated with a message naming the operation, or an instance) without applying."""
        if n < 0:
            raise ValueError("n must be >= 0")
        self._faults.append((n, error))

    def expire_session(self) -> None:
        """Expires the session now: its ephemerals vanish, LOST is delivered, then a new session CONNECTED
        (which re-arms watches and re-creates registrations, as after a real expiry)."""
        self._check_open()
        if self._sid is not None:
            self.tree.drop_session(self._sid)
        self._session_event(SessionEvent.LOST)
        self._sid = self.tree.new_session()
        self._session_event(SessionEvent.CONNECTED)

    def suspend(self) -> None:
        """Drops the connection (the session lives on): calls fail with MetadataUnavailableError."""
        self._check_open()
        self._session_event(SessionEvent.SUSPENDED)

    def resume(self) -> None:
        """Restores the connection with the same session (RECONNECTED)."""
        self._check_open()
        self._session_event(SessionEvent.RECONNECTED)

    def _take_fault(self, op: str, path: str) -> MetadataError | None:
        while self._faults:
            n, error = self._faults[0]
            if n <= 0:
                self._faults.pop(0)
                continue
            self._faults[0] = (n - 1, error)
            if isinstance(error, MetadataError):
                return error
            return error(f"{op} {path}: injected fault")
        return None

    async def _enter(self, op: str, path: str, *, write: bool = False) -> None:
        await asyncio.sleep(0)  # one round trip: let concurrent callers interleave
        self._check_open()
        if not self._connected.is_set():
            raise MetadataUnavailableError(f"{op} {path}: not connected (in-memory store suspended)")
        if write:
            fault = self._take_fault(op, path)
            if fault is not None:
                raise fault
            self.write_count += 1

    # ------------------------------------------------------------------------------------------ backend

    async def _open(self) -> None:
        self._sid = self.tree.new_session()
        self._session_event(SessionEvent.CONNECTED)

    async def _shutdown(self) -> None:
        if self._sid is not None:
            self.tree.drop_session(self._sid)
            self._sid = None

    def _session_id(self) -> int | None:
        return self._sid

    async def _get(self, path: str) -> NodeRead | None:
        await self._enter("get", path)
        node = self.tree.node(path)
        return None if node is None else NodeRead(Versioned(node.data, node.version), node.mzxid, node.owner)

    async def _exists(self, path: str) -> int | None:
        await self._enter("exists", path)
        node = self.tree.node(path)
        return None if node is None else node.version

    async def _create(self, path: str, data: bytes, *, ephemeral: bool, sequential: bool,
                      make_parents: bool) -> str:
        await self._enter("create", path, write=True)
        return self.tree.create(path, data, owner=self._sid if ephemeral else 0, sequential=sequential,
                                make_parents=make_parents)

    async def _set(self, path: str, data: bytes, expected_version: int) -> int:
        await self._enter("set", path, write=True)
        return self.tree.set(path, data, expected_version)

    async def _delete_one(self, path: str, expected_version: int) -> None:
        await self._enter("delete", path, write=True)
        self.tree.delete(path, expected_version)

    async def _children(self, path: str) -> list[str] | None:
        await self._enter("children", path)
        node = self.tree.node(path)
        return None if node is None else sorted(node.children)

    async def _read_watch(self, kind: str, path: str, trigger: Callable[..., None]) -> tuple[Any, Any]:
        await self._enter("watch", path)
        node = self.tree.node(path)
        if kind == "data":
            self.tree.watch_data(path, trigger)
            return (None, None) if node is None else (Versioned(node.data, node.version), node.mzxid)
        if node is None:
            self.tree.watch_data(path, trigger)  # tells us when it appears
            return [], ()
        self.tree.watch_children(path, trigger)
        kids = sorted(node.children)
        return kids, tuple(kids)
