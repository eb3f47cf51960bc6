"""A region's local metadata: bookie registrations and ledger metadata.

Layout (in the region's own ZooKeeper)::

    /bookies/available/<bookie-id>    BookieRegistration, ephemeral (writable bookies)
    /bookies/readonly/<bookie-id>     BookieRegistration, ephemeral (read-only bookies)
    /ledgers/<ledger-id>              LedgerMetadata (decimal id)
    /ledgers/idgen/ID-<10 digits>     transient persistent-sequential nodes that allocate ledger ids

Guarantees: a bookie registration lives as long as the registering process (it is re-created after a session
loss); ledger metadata changes only by compare-and-set (``write_ledger`` never overwrites a newer version);
allocated ledger ids are unique and increasing (not dense: ZooKeeper's sequence counter also counts deletes).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable

from .configuration import check_name
from .ephemeral import EphemeralRegistration
from .errors import InvalidMetadataError, MetadataError, MetadataUnavailableError, NodeExistsError, NotFoundError
from .models import Versioned
from .region_models import BookieRegistration, LedgerMetadata
from .store import MetadataStore, join_path
from .watches import WatchHandle

log = logging.getLogger("config_store")

BOOKIES_AVAILABLE = "/bookies/available"
BOOKIES_READONLY = "/bookies/readonly"
LEDGERS = "/ledgers"
LEDGER_IDGEN_PREFIX = "/ledgers/idgen/ID-"

_DECIMAL = re.compile(r"[0-9]+")


def bookie_path(bookie_id: str, *, read_only: bool = False) -> str:
    return join_path(BOOKIES_READONLY if read_only else BOOKIES_AVAILABLE, check_name("bookie id", bookie_id))


def ledger_path(ledger_id: int) -> str:
    if type(ledger_id) is not int or ledger_id < 0:
        raise InvalidMetadataError(f"ledger id must be a non-negative integer, got {ledger_id!r}")
    return f"{LEDGERS}/{ledger_id}"


@dataclass
class _HeldBookie:
    registration: EphemeralRegistration
    read_only: bool
    data: bytes


class RegionStore:
    """Typed access to one region's local metadata (see the module docstring for paths and guarantees)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._held: dict[str, _HeldBookie] = {}

    # ------------------------------------------------------------------------------------------ bookies

    async def register_bookie(self, reg: BookieRegistration, *, read_only: bool = False) -> None:
        """Publishes ``reg`` as an ephemeral node the store keeps alive across session losses.

        NodeExistsError if this RegionStore already registered the bookie, or if another live session holds
        the path with different content.
        """
        if reg.bookie_id in self._held:
            raise NodeExistsError(f"bookie {reg.bookie_id} is already registered by this process")
        data = reg.to_json()
        handle = await self.store.register_ephemeral(bookie_path(reg.bookie_id, read_only=read_only), data)
        self._held[reg.bookie_id] = _HeldBookie(handle, read_only, data)

    async def set_bookie_read_only(self, bookie_id: str, read_only: bool) -> None:
        """Moves a bookie registered by this RegionStore between available/ and readonly/. The new node is
        created before the old one is deleted, so the bookie never disappears from view."""
        held = self._held.get(bookie_id)
        if held is None:
            raise NotFoundError(f"bookie {bookie_id} is not registered by this process")
        if held.read_only == read_only:
            return
        handle = await self.store.register_ephemeral(bookie_path(bookie_id, read_only=read_only), held.data)
        self._held[bookie_id] = _HeldBookie(handle, read_only, held.data)
        await held.registration.close()

    async def unregister_bookie(self, bookie_id: str) -> None:
        """Removes the bookie's registration (ours, or a stale one at either path). Missing is a no-op."""
        held = self._held.pop(bookie_id, None)
        if held is not None:
            await held.registration.close()
            return
        for read_only in (False, True):
            await self.store.delete(bookie_path(bookie_id, read_only=read_only))

    async def list_bookies(self, *, read_only: bool = False) -> dict[str, BookieRegistration]:
        """The registered bookies (writable, or read-only), by id. Unreadable entries are logged and skipped."""
        base = BOOKIES_READONLY if read_only else BOOKIES_AVAILABLE
        ids = await self.store.children(base)
        values = await asyncio.gather(*(self.store.get(join_path(base, i)) for i in ids))
        bookies: dict[str, BookieRegistration] = {}
        for bookie_id, versioned in zip(ids, values):
            if versioned is None:
                continue  # vanished between the listing and the read
            try:
                bookies[bookie_id] = BookieRegistration.from_json(versioned.value)
            except InvalidMetadataError as e:
                log.warning("skipping unreadable bookie registration %s: %s", join_path(base, bookie_id), e)
        return bookies

    async def bookie_cache(self, *, timeout_s: float = 30.0) -> "BookieCache":
        """A started, watch-driven view of the registered bookies (see :class:`BookieCache`)."""
        cache = BookieCache(self.store)
        await cache.start(timeout_s=timeout_s)
        return cache

    # ------------------------------------------------------------------------------------------ ledgers

    async def allocate_ledger_id(self) -> int:
        """A new ledger id, unique and greater than every id allocated before in this region."""
        path = await self.store.create(LEDGER_IDGEN_PREFIX, b"", sequential=True, make_parents=True)
        suffix = path[len(LEDGER_IDGEN_PREFIX):]
        if not path.startswith(LEDGER_IDGEN_PREFIX) or not _DECIMAL.fullmatch(suffix):
            raise MetadataError(f"ledger id allocation: unexpected sequential node {path}")
        try:
            await self.store.delete(path)
        except MetadataError as e:  # a leftover node is harmless: the id is still ours alone
            log.warning("ledger id allocation: could not delete %s: %s", path, e)
        return int(suffix) + 1

    async def create_ledger(self, md: LedgerMetadata) -> int:
        """Stores new ledger metadata; NodeExistsError if the id is taken. Returns the version (0)."""
        path = ledger_path(md.ledger_id)
        try:
            await self.store.create(path, md.to_json(), make_parents=True)
        except NodeExistsError as e:
            raise NodeExistsError(f"ledger {md.ledger_id} already exists ({path})") from e
        return 0

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """The ledger's metadata; NotFoundError if it does not exist, InvalidMetadataError if unreadable."""
        path = ledger_path(ledger_id)
        versioned = await self.store.get(path)
        if versioned is None:
            raise NotFoundError(f"ledger {ledger_id} does not exist ({path})")
        try:
            return Versioned(LedgerMetadata.from_json(versioned.value), versioned.version)
        except InvalidMetadataError as e:
            raise InvalidMetadataError(f"{path}: {e}") from None

    async def write_ledger(self, md: LedgerMetadata, *, expected_version: int) -> int:
        """Compare-and-set of the ledger's metadata; returns the new version. BadVersionError if someone
        else wrote it since ``expected_version`` was read: re-read, never overwrite."""
        if expected_version < 0:
            raise InvalidMetadataError(f"ledger {md.ledger_id}: metadata writes are compare-and-set; "
                                       f"expected_version must be >= 0, got {expected_version}")
        return await self.store.set(ledger_path(md.ledger_id), md.to_json(), expected_version=expected_version)

    async def delete_ledger(self, ledger_id: int, *, expected_version: int = -1) -> None:
        """Deletes the ledger's metadata. A missing ledger is a no-op unless ``expected_version`` is given."""
        await self.store.delete(ledger_path(ledger_id), expected_version=expected_version)

    async def list_ledgers(self) -> list[int]:
        """Every ledger id with metadata, ascending (other children such as ``idgen`` are ignored)."""
        return sorted(int(c) for c in await self.store.children(LEDGERS) if _DECIMAL.fullmatch(c))


class BookieCache:
    """The registered bookies, kept current by watches (one on each folder, one per bookie node).

    Once started it has loaded both folders; afterwards it follows every registration, removal, move and
    content change. ``address_of`` / ``registration_of`` remember the last known registration of a bookie that
    has gone, so readers
    can still reach a bookie that is briefly unregistered (e.g. during its session re-establishment).
    Listeners and ``wait_for`` predicates run on the loop.
    """

    _KINDS = {False: BOOKIES_AVAILABLE, True: BOOKIES_READONLY}

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._entries: dict[bool, dict[str, BookieRegistration]] = {False: {}, True: {}}
        self._last_seen: dict[str, BookieRegistration] = {}
        self._folder_watches: dict[bool, WatchHandle] = {}
        self._node_watches: dict[tuple[bool, str], WatchHandle] = {}
        self._folders_loaded: set[bool] = set()
        self._pending: set[tuple[bool, str]] = set()
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._listeners: list[Callable[["BookieCache"], Any]] = []
        self._closed = False

    async def start(self, *, timeout_s: float = 30.0) -> None:
        """Arms the watches and waits until both folders and every bookie in them have been read."""
        for read_only, base in self._KINDS.items():
            self._folder_watches[read_only] = self._store.watch_children(
                base, functools.partial(self._on_folder, read_only))
        try:
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        except TimeoutError:
            self.close()
            raise MetadataUnavailableError(f"bookie cache: bookies not loaded within {timeout_s:g}s") from None

    def writable(self) -> dict[str, BookieRegistration]:
        return dict(self._entries[False])

    def read_only(self) -> dict[str, BookieRegistration]:
        return dict(self._entries[True])

    def address_of(self, bookie_id: str) -> str | None:
        """The bookie's current address, else the last one seen, else None."""
        registration = self.registration_of(bookie_id)
        return registration.address if registration is not None else None

    def registration_of(self, bookie_id: str) -> BookieRegistration | None:
        """The bookie's current registration, else the last one seen, else None."""
        for entries in self._entries.values():
            if bookie_id in entries:
                return entries[bookie_id]
        return self._last_seen.get(bookie_id)

    def add_listener(self, callback: Callable[["BookieCache"], Any]) -> None:
        """``callback(cache)`` runs on the loop after each change."""
        self._listeners.append(callback)

    async def wait_for(self, predicate: Callable[["BookieCache"], bool], timeout_s: float) -> None:
        """Returns once ``predicate(cache)`` holds; TimeoutError after ``timeout_s``."""
        async def until() -> None:
            while not predicate(self):
                changed = self._changed
                await changed.wait()

        try:
            async with asyncio.timeout(timeout_s):
                await until()
        except TimeoutError:
            raise TimeoutError(f"bookie cache: condition not met within {timeout_s:g}s (writable: "
                               f"{sorted(self._entries[False])}, read-only: {sorted(self._entries[True])})") from None

    def close(self) -> None:
        """Cancels every watch; idempotent."""
        self._closed = True
        for handle in [*self._folder_watches.values(), *self._node_watches.values()]:
            handle.cancel()
        self._folder_watches.clear()
        self._node_watches.clear()

    # ------------------------------------------------------------------------------------------ watches

    def _on_folder(self, read_only: bool, ids: list[str]) -> None:
        if self._closed:
            return
        current = set(ids)
        changed = False
        for key in [k for k in self._node_watches if k[0] == read_only and k[1] not in current]:
            self._node_watches.pop(key).cancel()
            self._pending.discard(key)
            changed |= self._entries[read_only].pop(key[1], None) is not None
        base = self._KINDS[read_only]
        for bookie_id in sorted(current):
            key = (read_only, bookie_id)
            if key not in self._node_watches:
                self._pending.add(key)
                self._node_watches[key] = self._store.watch_data(
                    join_path(base, bookie_id), functools.partial(self._on_node, read_only, bookie_id))
        self._folders_loaded.add(read_only)
        if changed:
            self._notify()
        self._check_ready()

    def _on_node(self, read_only: bool, bookie_id: str, versioned: Versioned[bytes] | None) -> None:
        if self._closed:
            return
        self._pending.discard((read_only, bookie_id))
        entries = self._entries[read_only]
        if versioned is None:
            entries.pop(bookie_id, None)
        else:
            try:
                reg = BookieRegistration.from_json(versioned.value)
            except InvalidMetadataError as e:
                log.warning("bookie cache: ignoring unreadable registration of %s: %s", bookie_id, e)
                entries.pop(bookie_id, None)
            else:
                entries[bookie_id] = reg
                self._last_seen[bookie_id] = reg
        self._notify()
        self._check_ready()

    def _check_ready(self) -> None:
        if len(self._folders_loaded) == len(self._KINDS) and not self._pending:
            self._ready.set()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for listener in list(self._listeners):
            try:
                listener(self)
            except Exception:
                log.exception("bookie cache listener failed")
