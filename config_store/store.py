"""The metadata store: one small async interface over ZooKeeper (its kazoo implementation is in
``kazoo_store.py``, re-exported here; the in-memory one in ``memory.py``; watches in ``watches.py`` and
ephemeral registrations in ``ephemeral.py``).

Theory of operation
-------------------
:class:`MetadataStore` implements everything that does not depend on the backend once: argument checks,
recursive delete, watches, ephemeral registrations and session bookkeeping. A backend supplies a handful of
primitives (``_get``, ``_create``, ``_set``, ``_delete_one``, ``_children``, ``_read_watch``, ...).

Threads. kazoo runs its connection, completion and watcher callbacks on its own threads. Nothing here blocks
the event loop on ZooKeeper: requests go out through kazoo's ``*_async`` methods, whose completions are
handed back to the loop with ``loop.call_soon_threadsafe``; kazoo's state listener and one-shot watchers are
bridged the same way. Every callback a user registers runs on the event loop.

Watches. ZooKeeper watches are one-shot and kazoo drops them all when the connection is lost; a
:class:`~config_store.watches.WatchHandle` re-reads and re-arms after every event, reconnect and new session,
so a change is never missed (see :mod:`config_store.watches`).

Sessions. kazoo's CONNECTED/SUSPENDED/LOST become :class:`SessionEvent`: CONNECTED when a *new* session is
established (the first, or after a loss), RECONNECTED when the same session resumes, SUSPENDED on a
dropped connection, LOST when the session expired. A LOST increments ``session_lost_count`` and is logged at
WARNING. After every (re)connection the store re-creates its ephemeral registrations (see
:class:`~config_store.ephemeral.EphemeralRegistration`).

Retries. Reads retry on connection loss under a ``KazooRetry`` policy (delay, backoff, jitter, deadline).
Writes are sent once: a lost connection makes their outcome unknown, and a blind retry could apply a
sequential create twice or report a successful compare-and-set as a lost race. Only idempotent writes
(unconditional ``set``, unconditional ``delete``) are retried.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
import random
from typing import Any, Callable, NamedTuple

from .errors import (InvalidMetadataError, MetadataError, NodeExistsError, NotEmptyError, NotFoundError,
                     StoreClosedError)
from .models import Versioned
from .watches import WatchHandle

log = logging.getLogger("config_store")


class SessionEvent(enum.Enum):
    """What happened to the store's ZooKeeper session (delivered to session listeners on the loop)."""

    CONNECTED = "connected"  # a new session: the first one, or a fresh one after LOST
    SUSPENDED = "suspended"  # connection dropped; the session may still be alive
    RECONNECTED = "reconnected"  # connection back with the same session: ephemerals intact
    LOST = "lost"  # the session expired: its ephemeral nodes are gone


class StoreState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    STARTED = "started"
    CLOSING = "closing"
    CLOSED = "closed"


class NodeRead(NamedTuple):
    """A backend's answer to a read: the value, a change token (``mzxid``) and the ephemeral owner (0 if
    persistent)."""

    versioned: Versioned[bytes]
    token: int
    owner: int


DataCallback = Callable[[Versioned[bytes] | None], Any]
ChildrenCallback = Callable[[list[str]], Any]


def validate_path(path: str) -> None:
    """Raises InvalidMetadataError unless ``path`` is an absolute, normalised ZooKeeper path."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidMetadataError(f"metadata path must be a string starting with '/', got {path!r}")
    if path == "/":
        return
    parts = path.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts) or "\x00" in path:
        raise InvalidMetadataError(f"malformed metadata path {path!r}")


def join_path(parent: str, child: str) -> str:
    return f"{parent.rstrip('/')}/{child}"


def check_data(path: str, data: bytes) -> bytes:
    """``data`` as bytes; InvalidMetadataError unless it is bytes or a bytearray."""
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidMetadataError(f"{path}: data must be bytes, got {type(data).__name__}")
    return bytes(data)


class MetadataStore(abc.ABC):
    """Typed async access to a hierarchical, versioned metadata store (ZooKeeper's model).

    Lifecycle: ``await start()`` (idempotent), use, ``await close()`` (idempotent; cancels and awaits every
    watch and background task). ``async with store:`` does both. Versions are ZooKeeper's: a node is created
    at version 0 and each ``set`` increments it; ``expected_version=-1`` means unconditional.

    Attributes:
        session_lost_count: how many sessions this store has lost (each one also logged at WARNING).
        session_event_counts: how many times each :class:`SessionEvent` happened since the store was created
            (what ``config_store.metrics`` exports; a LOST before the first session is not an event).
        ephemeral_conflict_timeout_s: how long an ephemeral re-creation waits for a foreign node to vanish.
    """

    _CLOSE_TASKS_TIMEOUT_S = 10.0

    def __init__(self, *, name: str, ephemeral_conflict_timeout_s: float) -> None:
        self.name = name
        self.session_lost_count = 0
        self.session_event_counts: dict[SessionEvent, int] = {event: 0 for event in SessionEvent}
        self.ephemeral_conflict_timeout_s = ephemeral_conflict_timeout_s
        self._state = StoreState.NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lifecycle = asyncio.Lock()
        self._connected = asyncio.Event()
        self._fail_fast = asyncio.Event()  # see fail_fast()
        self._resync = asyncio.Event()
        self._had_session = False
        self._session_listeners: list[Callable[[SessionEvent], Any]] = []
        self._watches: set[WatchHandle] = set()
        self._tasks: set[asyncio.Task] = set()
        self._registrations: dict[str, EphemeralRegistration] = {}

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def state(self) -> StoreState:
        return self._state

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def fail_fast(self) -> None:
        """From now on a call that finds no connection fails at once (``MetadataUnavailableError``) instead of
        waiting for one until its deadline (30 s by default), and calls already waiting stop. For a process
        shutting down: if its ZooKeeper is unreachable, its ephemeral nodes go with its session and what it
        cannot write now (a ledger's close, a bundle's release) whoever takes over redoes, so waiting for a
        connection per call would only delay the exit."""
        self._fail_fast.set()
        if not self._connected.is_set():
            self._abandon_in_flight()

    def _abandon_in_flight(self) -> None:
        """Fail-fast and disconnected: fails the requests sent and not answered (a client library may hold
        them until it reconnects). Stores that send requests override it."""

    def _giving_up(self) -> bool:
        """True when a call should fail now rather than wait or retry: fail-fast and not connected."""
        return self._fail_fast.is_set() and not self._connected.is_set()

    async def _wait_connected(self) -> None:
        """Returns once connected; raises TimeoutError when :meth:`fail_fast` was or is called first."""
        if self._connected.is_set():
            return
        if self._fail_fast.is_set():
            raise TimeoutError
        waiters = [asyncio.ensure_future(self._connected.wait()), asyncio.ensure_future(self._fail_fast.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if not self._connected.is_set():
            raise TimeoutError

    async def start(self) -> None:
        """Connects (first session established) and starts background work. Idempotent."""
        async with self._lifecycle:
            if self._state is StoreState.STARTED:
                return
            if self._state is not StoreState.NEW:
                raise StoreClosedError(f"[{self.name}] a closed store cannot be restarted")
            self._loop = asyncio.get_running_loop()
            self._state = StoreState.STARTING
            try:
                await self._open()
            except BaseException:
                self._state = StoreState.CLOSED
                await self._shutdown()
                raise
            self._state = StoreState.STARTED
            self._resync.clear()  # the first session has nothing to re-create yet
            self._spawn(self._maintain(), "ephemeral-maintenance")

    async def close(self) -> None:
        """Stops every watch and background task, ends the session (its ephemerals vanish). Idempotent."""
        async with self._lifecycle:
            if self._state in (StoreState.CLOSED, StoreState.NEW):
                self._state = StoreState.CLOSED
                return
            self._state = StoreState.CLOSING
            for watch in list(self._watches):
                watch.cancel()
            for reg in self._registrations.values():
                reg._closed = True
            self._registrations.clear()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                _, stuck = await asyncio.wait(tasks, timeout=self._CLOSE_TASKS_TIMEOUT_S)
                if stuck:
                    log.error("[%s] %d background task(s) ignored cancellation: %s", self.name, len(stuck),
                              ", ".join(sorted(t.get_name() for t in stuck)))
            try:
                await self._shutdown()
            finally:
                self._connected.clear()
                self._state = StoreState.CLOSED

    async def __aenter__(self) -> "MetadataStore":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._state not in (StoreState.STARTED, StoreState.STARTING):
            raise StoreClosedError(f"[{self.name}] metadata store is {self._state.value}; call start() first"
                                   if self._state is StoreState.NEW else f"[{self.name}] metadata store is closed")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("[%s] background task %s died", self.name, task.get_name(), exc_info=task.exception())

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Runs ``fn(*args)`` on the store's loop; callable from any thread; dropped once the loop is gone."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # loop closed between the check and the call

    # ------------------------------------------------------------------------------------------ operations

    async def get(self, path: str) -> Versioned[bytes] | None:
        """The node's data and version, or None if it does not exist."""
        validate_path(path)
        self._check_open()
        read = await self._get(path)
        return read.versioned if read is not None else None

    async def exists(self, path: str) -> int | None:
        """The node's version, or None if it does not exist."""
        validate_path(path)
        self._check_open()
        return await self._exists(path)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False,
                     make_parents: bool = True) -> str:
        """Creates a node and returns its actual path (with the 10-digit suffix when ``sequential``).

        Raises NodeExistsError if it exists; NotFoundError if the parent is missing and not ``make_parents``.
        Missing parents are created persistent and empty.
        """
        validate_path(path)
        self._check_open()
        return await self._create(path, check_data(path, data), ephemeral=ephemeral, sequential=sequential,
                                  make_parents=make_parents)

    async def set(self, path: str, data: bytes, *, expected_version: int) -> int:
        """Compare-and-set: writes ``data`` if the node is at ``expected_version`` (-1: any) and returns the
        new version. Raises BadVersionError on a lost race, NotFoundError if the node is missing."""
        validate_path(path)
        self._check_open()
        return await self._set(path, check_data(path, data), expected_version)

    async def delete(self, path: str, *, expected_version: int = -1, recursive: bool = False) -> None:
        """Deletes a node (and with ``recursive`` its subtree, not atomically; ``expected_version`` applies
        to ``path`` itself). A missing node is a no-op when ``expected_version == -1``, else NotFoundError.
        NotEmptyError if the node has children and not ``recursive``."""
        validate_path(path)
        if path == "/":
            raise InvalidMetadataError("refusing to delete the root node")
        self._check_open()
        if recursive:
            await self._delete_tree(path, expected_version)
            return
        try:
            await self._delete_one(path, expected_version)
        except NotFoundError:
            if expected_version != -1:
                raise

    async def _delete_tree(self, path: str, expected_version: int) -> None:
        for _ in range(10):
            kids = await self._children(path)
            if kids is None:
                if expected_version != -1:
                    raise NotFoundError(f"delete {path}: no such node")
                return
            for kid in kids:
                await self._delete_tree(join_path(path, kid), -1)
            try:
                await self._delete_one(path, expected_version)
                return
            except NotEmptyError:
                continue  # a child was created meanwhile
            except NotFoundError:
                if expected_version != -1:
                    raise
                return
        raise NotEmptyError(f"delete {path}: children keep appearing")

    async def children(self, path: str) -> list[str]:
        """The names of the node's children, sorted; [] if the node does not exist."""
        validate_path(path)
        self._check_open()
        return sorted(await self._children(path) or [])

    # ------------------------------------------------------------------------------------------ watches

    def watch_data(self, path: str, callback: DataCallback) -> WatchHandle:
        """Calls ``callback(Versioned[bytes] | None)`` on the loop now and after every change of the node."""
        return self._watch(path, "data", callback)

    def watch_children(self, path: str, callback: ChildrenCallback) -> WatchHandle:
        """Calls ``callback(sorted children)`` on the loop now and after every change of the child list."""
        return self._watch(path, "children", callback)

    def _watch(self, path: str, kind: str, callback: Callable[[Any], Any]) -> WatchHandle:
        validate_path(path)
        self._check_open()
        handle = WatchHandle(self, path, kind, callback)
        self._watches.add(handle)
        handle._task = self._spawn(handle._run(), f"watch-{kind}:{path}")
        return handle

    async def _wait_gone(self, path: str, timeout_s: float) -> bool:
        """Waits until ``path`` does not exist; True if it vanished within ``timeout_s``."""
        gone = asyncio.Event()
        handle = self.watch_data(path, lambda v: gone.set() if v is None else None)
        try:
            async with asyncio.timeout(timeout_s):
                await gone.wait()
            return True
        except TimeoutError:
            return False
        finally:
            handle.cancel()

    # ------------------------------------------------------------------------------------------ sessions

    def add_session_listener(self, callback: Callable[[SessionEvent], Any]) -> None:
        """``callback(SessionEvent)`` runs on the loop for every session transition."""
        self._session_listeners.append(callback)

    def remove_session_listener(self, callback: Callable[[SessionEvent], Any]) -> None:
        if callback in self._session_listeners:
            self._session_listeners.remove(callback)

    def _session_event(self, event: SessionEvent) -> None:
        """Applies a session transition (on the loop): bookkeeping, watch refresh, re-registration, listeners."""
        if self._state in (StoreState.CLOSING, StoreState.CLOSED):
            return
        if event is SessionEvent.LOST and not self._had_session:
            return
        self.session_event_counts[event] += 1
        if event in (SessionEvent.LOST, SessionEvent.SUSPENDED) and self._fail_fast.is_set():
            self._connected.clear()
            self._abandon_in_flight()
        if event is SessionEvent.LOST:
            self.session_lost_count += 1
            self._connected.clear()
            log.warning("[%s] ZooKeeper session LOST (%d so far): its ephemeral nodes are gone; a new session "
                        "will re-create %d registration(s) and re-arm %d watch(es)", self.name,
                        self.session_lost_count, len(self._registrations), len(self._watches))
        elif event is SessionEvent.SUSPENDED:
            self._connected.clear()
            log.info("[%s] ZooKeeper connection suspended", self.name)
        else:
            self._had_session = True
            self._connected.set()
            log.info("[%s] ZooKeeper %s", self.name, event.value)
            for watch in list(self._watches):
                watch._mark_dirty()
            self._resync.set()
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("[%s] session listener failed on %s", self.name, event.value)

    # ------------------------------------------------------------------------------------------ ephemerals

    async def register_ephemeral(self, path: str, data: bytes) -> EphemeralRegistration:
        """Creates an ephemeral node that this store re-creates after every session loss.

        Raises NodeExistsError if another session holds the path with different content and does not let
        go within ``ephemeral_conflict_timeout_s``, or if this store already registered the path.
        """
        validate_path(path)
        self._check_open()
        if path in self._registrations:
            raise NodeExistsError(f"{path}: already registered by this store")
        reg = EphemeralRegistration(self, path, check_data(path, data))
        self._registrations[path] = reg
        try:
            await reg._ensure(self.ephemeral_conflict_timeout_s)
        except BaseException:
            if self._registrations.get(path) is reg:
                del self._registrations[path]
            reg._closed = True
            raise
        return reg

    async def _maintain(self) -> None:
        """Re-creates registrations after each (re)connection; retries with bounded backoff on failure."""
        backoff_s = 0.1
        while True:
            await self._resync.wait()
            self._resync.clear()
            await self._connected.wait()
            failed = False
            for reg in list(self._registrations.values()):
                try:
                    await reg._ensure(self.ephemeral_conflict_timeout_s)
                except StoreClosedError:
                    return
                except MetadataError as e:
                    failed = True
                    log.warning("[%s] could not re-create ephemeral %s: %s; retrying", self.name, reg.path, e)
            if failed:
                await asyncio.sleep(backoff_s * random.uniform(0.8, 1.2))
                backoff_s = min(backoff_s * 2, 5.0)
                self._resync.set()
            else:
                backoff_s = 0.1

    # ------------------------------------------------------------------------------------------ backend

    @abc.abstractmethod
    async def _open(self) -> None:
        """Connects; returns once the first session is established (and CONNECTED was delivered)."""

    @abc.abstractmethod
    async def _shutdown(self) -> None:
        """Ends the session and releases every thread and socket. Idempotent."""

    @abc.abstractmethod
    def _session_id(self) -> int | None:
        """The current session's id (an ephemeral node's owner), None while there is none."""

    @abc.abstractmethod
    async def _get(self, path: str) -> NodeRead | None: ...

    @abc.abstractmethod
    async def _exists(self, path: str) -> int | None: ...

    @abc.abstractmethod
    async def _create(self, path: str, data: bytes, *, ephemeral: bool, sequential: bool,
                      make_parents: bool) -> str: ...

    @abc.abstractmethod
    async def _set(self, path: str, data: bytes, expected_version: int) -> int: ...

    @abc.abstractmethod
    async def _delete_one(self, path: str, expected_version: int) -> None:
        """Deletes one node; NotFoundError if missing (whatever the version), NotEmptyError if it has children."""

    @abc.abstractmethod
    async def _children(self, path: str) -> list[str] | None:
        """The children, or None if the node does not exist."""

    @abc.abstractmethod
    async def _read_watch(self, kind: str, path: str, trigger: Callable[..., None]) -> tuple[Any, Any]:
        """Reads ``path`` (``kind`` "data" or "children") and arms a one-shot ``trigger`` for its next change,
        also when it does not exist yet. Returns ``(value, change_token)``."""


# The ephemeral registrations and the kazoo implementation live in their own modules to keep each focused;
# both need the names above. The kazoo implementation is part of this module's face.
from .ephemeral import EphemeralRegistration  # noqa: E402
from .kazoo_store import KazooMetadataStore  # noqa: E402

__all__ = ["DataCallback", "ChildrenCallback", "KazooMetadataStore", "MetadataStore", "NodeRead", "SessionEvent",
           "StoreState", "check_data", "join_path", "validate_path"]
