"""The managed-ledger implementation: a topic's ledgers, reads, cursors, trimming and metadata.

Theory of operation
-------------------
Opening (:meth:`ManagedLedgerImpl._initialize`, called by the factory) recovers the last ledger a previous
owner may have left open and claims the metadata and the cursors, so that owner's later writes fail
(:mod:`broker.managed_ledger.opening`, which this class inherits).

Appends, rollover and write failures are the :class:`~broker.managed_ledger.appender.AppendPipeline`'s;
this class gives it ledgers (``_create_ledger_and_switch``) and learns of confirmed entries
(``_on_confirmed``: ledger counts, last confirmed position, tail cache, waking waiting cursors).

Reads go through an :class:`~broker.managed_ledger.reader.EntryReader`: the tail cache first (entries just
added, for caught-up cursors), else the bookies.

Every metadata write (new ledger, trim, close, properties) is serialised by ``_meta_lock`` and is a
compare-and-set; a lost race means another broker owns the topic now: the managed ledger is fenced (appends
fail at once; reads keep working).

Properties (Pulsar's ``ManagedLedger.getProperties`` / ``asyncSetProperties``): string pairs stored in the
metadata (``properties``), read when the managed ledger is opened; :meth:`ManagedLedgerImpl.set_properties`
returns once the change is stored. The broker keeps the exclusive producers' topic epoch there.

State (``state``, Pulsar's internal-stats names): Initializing -> LedgerOpened <-> CreatingLedger (rollover),
LedgerClosed when no ledger could be created (the next append retries), Fenced, and finally Closed/Deleted.

Termination (:meth:`ManagedLedgerImpl.terminate`, Pulsar's topic termination): appends are refused at once
(ManagedLedgerTerminatedError), in-flight ones complete, the current ledger is closed and the metadata is
stored with ``state: TERMINATED`` (compare-and-set). A terminated managed ledger opened again (by this or
another broker) creates no new ledger and stays Terminated; reads, cursors and trimming keep working.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
import uuid
import weakref
from typing import Any, Callable, Mapping, Optional

from bookie.client import LedgerClient, LedgerNotFoundError, WriteHandle
from bookie.errors import BookieError, NoSuchLedgerError
from config_store import BadVersionError, MetadataError, NodeExistsError, NotFoundError
from config_store.managed_ledgers import LedgerInfo, ManagedLedgerInfo, ManagedLedgerMetaState, ManagedLedgerStore

from .api import Entry, InitialPosition, ManagedLedger, Position
from .appender import AppendPipeline, AppendState
from .cache import EntryCache
from .config import ManagedLedgerConfig
from .cursor import CursorFlusher, CursorState, ManagedCursorImpl
from .errors import (CursorNotFoundError, EntryTooLargeError, InvalidCursorPositionError, ManagedLedgerClosedError,
                     ManagedLedgerError, ManagedLedgerFencedError, ManagedLedgerMetadataError,
                     ManagedLedgerTerminatedError)
from .layout import LedgerLayout, LedgerStats, select_ledgers_to_trim
from .indexes import BrokerEntryIndexes
from .interceptor import BrokerEntryMetadataInterceptor
from .opening import LedgerOpening
from .reader import EntryReader

log = logging.getLogger(__name__)


class LedgerState(enum.Enum):
    """Values are Pulsar's internal-stats state names."""

    INITIALIZING = "Initializing"
    LEDGER_OPENED = "LedgerOpened"
    CREATING_LEDGER = "CreatingLedger"
    LEDGER_CLOSED = "LedgerClosed"
    FENCED = "Fenced"
    TERMINATED = "Terminated"
    CLOSED = "Closed"
    DELETED = "Deleted"


_FROM_APPENDER = {AppendState.WRITING: LedgerState.LEDGER_OPENED, AppendState.ROLLING_OVER: LedgerState.CREATING_LEDGER,
                  AppendState.NO_LEDGER: LedgerState.LEDGER_CLOSED, AppendState.FENCED: LedgerState.FENCED,
                  AppendState.CLOSED: LedgerState.CLOSED}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso_ms(ms: int) -> str:
    """``2024-05-01T12:00:00.123Z`` as Pulsar's internal stats print timestamps."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class ManagedLedgerImpl(LedgerOpening, BrokerEntryIndexes, ManagedLedger):
    """One topic's managed ledger. Obtain it from ``ManagedLedgerFactory.open``."""

    def __init__(self, name: str, *, client: LedgerClient, store: ManagedLedgerStore, config: ManagedLedgerConfig,
                 on_closed: Optional[Callable[["ManagedLedgerImpl"], Any]] = None) -> None:
        self.name = name
        self.config = config
        self._client = client
        self._store = store
        self._on_closed = on_closed
        self._lifecycle = LedgerState.INITIALIZING  # INITIALIZING, LEDGER_OPENED (= open), CLOSED, DELETED
        self._closing = False
        self.layout = LedgerLayout()
        self._version = -1
        self._properties: dict[str, str] = {}
        self._last_confirmed = Position(0, -1)
        self._terminated = False  # appends refused (set first by terminate, then stored)
        self._terminate_stored = False
        self._terminate_lock = asyncio.Lock()
        self.entries_added_counter = 0
        self._appender = AppendPipeline(name, config, create_ledger=self._create_ledger_and_switch,
                                        on_confirmed=self._on_confirmed, on_ledger_closed=self._on_ledger_closed,
                                        on_rolled_over=lambda: self._trim_requested.set(),
                                        on_unsent_failed=self._indexes_unsent)
        self._bem = BrokerEntryMetadataInterceptor.from_names(config.broker_entry_metadata_interceptors)
        self._init_indexes()
        self._cache = EntryCache(config.entry_cache_max_bytes)
        self._reader = EntryReader(name, client, self._cache, batch_entries=config.read_batch_max_entries,
                                   writers=lambda: (self._appender.writer, self._appender.closing_writer))
        self._cursors: dict[str, ManagedCursorImpl] = {}  # durable
        self._readers: "weakref.WeakSet[ManagedCursorImpl]" = weakref.WeakSet()  # non-durable, alive while used
        self._entries_event = asyncio.Event()
        self._meta_lock = asyncio.Lock()
        self._cursor_lock = asyncio.Lock()
        self._trim_lock = asyncio.Lock()
        self._flusher = CursorFlusher(name, config.cursor_persist_interval_ms / 1000)
        self._trim_requested = asyncio.Event()
        self._flusher_task: Optional[asyncio.Task] = None
        self._housekeeping_task: Optional[asyncio.Task] = None

    @property
    def state(self) -> LedgerState:
        if self._lifecycle is not LedgerState.LEDGER_OPENED:
            return self._lifecycle
        if self._terminated:
            return LedgerState.TERMINATED
        return _FROM_APPENDER[self._appender.state]

    @property
    def terminated(self) -> bool:
        return self._terminated

    # ------------------------------------------------------------------------------------------ opening

    async def _initialize(self) -> None:
        try:
            await self._open_and_claim()
        except BaseException:
            writer = await self._appender.close()  # leave nothing open behind a failed open
            self._lifecycle = LedgerState.CLOSED
            if writer is not None:
                log.info("[%s] closed ledger %d after a failed open", self.name, writer.ledger_id)
            raise
        self._lifecycle = LedgerState.LEDGER_OPENED
        loop = asyncio.get_running_loop()
        self._flusher_task = loop.create_task(self._flusher.run(), name=f"ml-flusher:{self.name}")
        self._housekeeping_task = loop.create_task(self._housekeeping(), name=f"ml-housekeeping:{self.name}")
        log.info("[%s] opened: ledgers %s, last confirmed %s, cursors %s", self.name, self.layout.ledger_ids,
                 self._last_confirmed, sorted(self._cursors))

    # ------------------------------------------------------------------------------------------ metadata

    def _info_from(self, layout: LedgerLayout, open_ledger_id: Optional[int],
                   properties: Optional[dict[str, str]] = None) -> ManagedLedgerInfo:
        ledgers = [LedgerInfo(s.ledger_id) if s.ledger_id == open_ledger_id
                   else LedgerInfo(s.ledger_id, s.entries, s.size, s.timestamp_ms) for s in layout.stats()]
        state = ManagedLedgerMetaState.TERMINATED if self._terminated else ManagedLedgerMetaState.OPEN
        return ManagedLedgerInfo(ledgers=ledgers, state=state,
                                 properties=self._properties if properties is None else properties)

    async def _write_metadata(self, layout: LedgerLayout, open_ledger_id: Optional[int], *,
                              properties: Optional[dict[str, str]] = None) -> None:
        """Compare-and-set of the ledger list (caller holds ``_meta_lock``); fences on a lost race."""
        try:
            self._version = await self._store.write(self.name, self._info_from(layout, open_ledger_id, properties),
                                                    expected_version=self._version)
        except (BadVersionError, NotFoundError) as e:
            error = ManagedLedgerFencedError(
                f"[{self.name}] metadata was changed by someone else ({e}): another broker owns this topic now")
            self._fence(error)
            raise error from e
        except MetadataError as e:
            raise ManagedLedgerMetadataError(f"[{self.name}] could not update the ledger list: {e}") from e

    @property
    def ledger_client(self) -> LedgerClient:
        """The ledger client this managed ledger writes with (topic compaction writes its ledgers with it)."""
        return self._client

    @property
    def properties(self) -> dict[str, str]:
        """The stored properties (as of the last successful write or the open)."""
        return dict(self._properties)

    async def set_properties(self, updates: Mapping[str, str]) -> None:
        """Merges ``updates`` into the properties and stores them (compare-and-set; no write when nothing
        changes). Raises ManagedLedgerClosedError when closed, ManagedLedgerFencedError when another broker
        wrote the metadata, ManagedLedgerMetadataError when ZooKeeper cannot be reached (then nothing
        changed)."""
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in updates.items()):
            raise TypeError(f"[{self.name}] managed-ledger properties map strings to strings: {dict(updates)!r}")
        async with self._meta_lock:
            if self._closing or self._lifecycle is not LedgerState.LEDGER_OPENED:
                raise ManagedLedgerClosedError(f"[{self.name}] managed ledger is {self.state.value}: "
                                               "cannot set properties")
            properties = {**self._properties, **updates}
            if properties == self._properties:
                return
            writer = self._appender.writer
            await self._write_metadata(self.layout, writer.ledger_id if writer is not None else None,
                                       properties=properties)
            self._properties = properties

    async def _create_ledger_and_switch(self) -> WriteHandle:
        """Creates a ledger and appends it to the list (compare-and-set); deletes it again if that fails."""
        c = self.config
        writer = await self._client.create_ledger(
            ensemble_size=c.ensemble_size, write_quorum_size=c.write_quorum_size, ack_quorum_size=c.ack_quorum_size,
            custom_metadata={"component": "managed-ledger", "managed-ledger": self.name})
        try:
            async with self._meta_lock:
                new_layout = self.layout.copy()
                new_layout.append(LedgerStats(writer.ledger_id))
                await self._write_metadata(new_layout, writer.ledger_id)
                self.layout.append(LedgerStats(writer.ledger_id))
        except BaseException:
            await self._delete_ledger_quietly(writer.ledger_id)
            raise
        log.info("[%s] created ledger %d", self.name, writer.ledger_id)
        return writer

    async def _delete_ledger_quietly(self, ledger_id: int) -> None:
        try:
            await self._client.delete_ledger(ledger_id)
        except (LedgerNotFoundError, NoSuchLedgerError):
            pass
        except (BookieError, MetadataError) as e:
            log.warning("[%s] could not delete ledger %d: %s", self.name, ledger_id, e)

    # ------------------------------------------------------------------------------------------ appending

    def add_entry_nowait(self, data: bytes, *, num_messages: Optional[int] = None,
                         on_done: Optional[Callable[["asyncio.Future[Position]"], None]] = None,
                         ) -> "asyncio.Future[Position]":
        """Appends one entry; the future resolves to its position once it is durable at Qa bookies, futures
        in append order. Raises at once (no future) if the managed ledger is closed, fenced or the entry too
        large; a later failure fails the future with ManagedLedgerFencedError / ManagedLedgerWriteError.
        ``num_messages``: the entry's message count (its metadata's ``num_messages_in_batch``, 1 when unset)
        when the caller has parsed it; else the broker entry index reads it from ``data``."""
        if self._terminated:
            raise ManagedLedgerTerminatedError(f"[{self.name}] managed ledger is terminated: no appends")
        if self._closing or self._lifecycle is not LedgerState.LEDGER_OPENED:
            raise ManagedLedgerClosedError(f"[{self.name}] managed ledger is {self.state.value}: no appends")
        data = bytes(data)
        limit = self._client.config.entry_max_size_bytes
        base_index = None
        if self._bem is not None:  # broker entry metadata: index assigned here, in append order
            data, base_index = self._bem.intercept(data, _now_ms(), num_messages)
        try:
            if len(data) > limit:
                raise EntryTooLargeError(f"[{self.name}] entry of {len(data)} bytes exceeds the limit of {limit}")
            return self._appender.add(data, base_index, on_done)
        except BaseException:
            if base_index is not None:
                self._bem.rollback(base_index)
            raise

    async def add_entry(self, data: bytes) -> Position:
        return await self.add_entry_nowait(data)

    def _on_confirmed(self, confirmed: list[tuple[Position, bytes]]) -> None:
        for position, data in confirmed:
            self.layout.add_confirmed(position.ledger_id, len(data))
            self._cache.put(position, data)
        self._last_confirmed = confirmed[-1][0]
        self._indexes_confirmed(confirmed)
        self.entries_added_counter += len(confirmed)
        self._notify_entries()
        self._cursor_moved()

    def _on_ledger_closed(self, writer: WriteHandle) -> None:
        self.layout.set_counts(writer.ledger_id, writer.last_add_confirmed + 1, writer.length, _now_ms())
        self._reader.remember_closed_writer(writer)

    def _fence(self, error: ManagedLedgerError) -> None:
        """No more appends (another broker owns the topic, or a write failed); reads keep working."""
        self._appender.fence(error)

    def _notify_entries(self) -> None:
        event, self._entries_event = self._entries_event, asyncio.Event()
        event.set()

    async def terminate(self) -> Position:
        """Terminates the managed ledger: refuses appends from now on, lets in-flight ones complete, closes
        the current ledger and stores ``state: TERMINATED``. Returns the last entry's position. Idempotent
        (a second call returns the same position)."""
        async with self._terminate_lock:
            if self._terminate_stored:
                return self._last_confirmed
            if self._closing or self._lifecycle is not LedgerState.LEDGER_OPENED:
                raise ManagedLedgerClosedError(f"[{self.name}] managed ledger is {self.state.value}: cannot terminate")
            if self._appender.state is AppendState.FENCED:
                raise ManagedLedgerFencedError(f"[{self.name}] managed ledger is fenced: cannot terminate")
            self._terminated = True
            try:
                writer = await self._appender.close(
                    ManagedLedgerTerminatedError(f"[{self.name}] managed ledger was terminated"))
                if writer is not None:
                    self.layout.set_counts(writer.ledger_id, writer.last_add_confirmed + 1, writer.length, _now_ms())
                    self._reader.remember_closed_writer(writer)
                async with self._meta_lock:
                    await self._write_metadata(self.layout, None)
                self._terminate_stored = True
            except BaseException:
                # not stored: appends stay refused (the ledger is closed), a reopen sees the stored state
                log.warning("[%s] termination was not stored", self.name)
                raise
            log.info("[%s] terminated at %s", self.name, self._last_confirmed)
            self._notify_entries()
            return self._last_confirmed

    # ------------------------------------------------------------------------------------------ reading

    async def _read_positions(self, positions: list[Position]) -> list[Entry]:
        return await self._reader.read(positions)

    async def read_entry(self, position: Position) -> Entry:
        self._check_readable()
        if not self.layout.exists(position):
            raise InvalidCursorPositionError(f"[{self.name}] no entry at {position}")
        return (await self._read_positions([position]))[0]

    def _check_readable(self) -> None:
        if self.state in (LedgerState.CLOSED, LedgerState.DELETED):
            raise ManagedLedgerClosedError(f"[{self.name}] managed ledger is {self.state.value.lower()}")

    def _cursor_moved(self) -> None:
        """Evicts from the tail cache what every cursor has read."""
        cursors = self._all_cursors()
        if not cursors:
            self._cache.clear()
            return
        self._cache.evict_before(min(c.read_position for c in cursors))

    def _all_cursors(self) -> list[ManagedCursorImpl]:
        return [*self._cursors.values(), *self._readers]

    # ------------------------------------------------------------------------------------------ positions

    @property
    def last_confirmed_position(self) -> Position:
        return self._last_confirmed

    def first_position(self) -> Position:
        return self.layout.first_position()

    def next_position(self, position: Position) -> Position:
        return self.layout.next_position(position)

    def previous_position(self, position: Position) -> Position:
        return self.layout.previous_position(position)

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        return self.layout.entries_between(start_exclusive, end_inclusive)

    @property
    def number_of_entries(self) -> int:
        return self.layout.number_of_entries

    @property
    def total_size(self) -> int:
        return self.layout.total_size

    async def find_position_by_publish_time(self, timestamp_ms: int, publish_time_of) -> Position:
        """The first entry whose ``publish_time_of(data)`` is ``>= timestamp_ms``, by binary search over the
        retained entries (publish times are assumed non-decreasing, as appends are); the tail position (where
        the next entry will go) if every entry is older."""
        lo, hi = 0, self.layout.number_of_entries
        while lo < hi:
            mid = (lo + hi) // 2
            entry = await self.read_entry(self.layout.position_at(mid))
            if publish_time_of(entry.data) >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return self.layout.position_at(lo) if lo < self.layout.number_of_entries else self.layout.tail()

    # ------------------------------------------------------------------------------------------ cursors

    @property
    def cursors(self) -> dict[str, ManagedCursorImpl]:
        """The durable cursors by name (non-durable ones are the callers' own)."""
        return dict(self._cursors)

    async def open_cursor(self, name: str, *,
                          initial_position: InitialPosition = InitialPosition.LATEST) -> ManagedCursorImpl:
        """The durable cursor ``name``; created (and persisted) at ``initial_position`` if it is new."""
        self._check_readable()
        async with self._cursor_lock:
            existing = self._cursors.get(name)
            if existing is not None:
                return existing
            if initial_position is InitialPosition.EARLIEST:
                md = self.layout.previous_position(self.layout.first_position())
            else:
                md = self._last_confirmed
            cursor = ManagedCursorImpl(self, name, durable=True, mark_delete=md)
            try:
                try:
                    cursor._version = await self._store.create_cursor(self.name, name, cursor.snapshot())
                except NodeExistsError:  # left over from an earlier incarnation: adopt its state
                    current = await self._store.get_cursor(self.name, name)
                    if current is None:
                        raise ManagedLedgerMetadataError(f"[{self.name}][{name}] cursor node vanished") from None
                    info, version = await self._claim_cursor(name, current.value, current.version)
                    cursor = ManagedCursorImpl.from_info(self, name, info, version)
            except MetadataError as e:
                raise ManagedLedgerMetadataError(f"[{self.name}][{name}] cannot create the cursor: {e}") from e
            self._cursors[name] = cursor
            log.info("[%s][%s] cursor opened at %s", self.name, name, cursor.mark_delete_position)
            return cursor

    def new_non_durable_cursor(self, start: Position, *, name: str = "") -> ManagedCursorImpl:
        """An in-memory cursor whose reads start just after ``start`` (clamped to the last entry). It never
        holds data back from trimming and is not listed in ``cursors``; the managed ledger keeps only a weak
        reference, so it goes away with its last user (or with ``delete_cursor(name)``)."""
        self._check_readable()
        last = self.layout.previous_position(self.layout.tail())
        cursor = ManagedCursorImpl(self, name or f"reader-{uuid.uuid4().hex[:10]}", durable=False,
                                   mark_delete=min(start, last))
        self._readers.add(cursor)
        return cursor

    async def delete_cursor(self, name: str) -> None:
        """Removes the durable cursor ``name`` (its metadata too), else a live non-durable cursor of that name;
        CursorNotFoundError if there is neither. Its waiters get ManagedLedgerClosedError."""
        cursor = self._cursors.get(name)
        if cursor is not None:
            async with cursor._persist_lock:  # no write of it in flight, none after (a write would fence us)
                try:
                    await self._store.delete_cursor(self.name, name)
                except MetadataError as e:
                    raise ManagedLedgerMetadataError(f"[{self.name}][{name}] cannot delete the cursor: {e}") from e
                cursor.state = CursorState.DELETED
            self._cursors.pop(name, None)
            self._flusher.discard(cursor)
            self._trim_requested.set()
        else:
            cursor = next((c for c in self._readers if c.name == name), None)
            if cursor is None:
                raise CursorNotFoundError(f"[{self.name}] no cursor named {name!r}")
            self._readers.discard(cursor)
        cursor.state = CursorState.DELETED
        self._notify_entries()  # its waiters see the deletion

    def _schedule_cursor_flush(self, cursor: ManagedCursorImpl) -> None:
        self._flusher.schedule(cursor)

    # ------------------------------------------------------------------------------------------ trimming

    def set_retention(self, time_s: float, size_bytes: int) -> None:
        if (time_s, size_bytes) != (self.config.retention_time_s, self.config.retention_size_bytes):
            self.config = dataclasses.replace(self.config, retention_time_s=time_s, retention_size_bytes=size_bytes)
            log.info("[%s] retention: %s s, %s bytes", self.name, time_s, size_bytes)
            self._trim_requested.set()

    async def trim(self) -> int:
        """Deletes the ledgers every durable cursor has passed and retention no longer keeps (never the
        current one): metadata first (compare-and-set), then the ledgers themselves. Returns how many."""
        if self.state in (LedgerState.CLOSED, LedgerState.DELETED, LedgerState.FENCED, LedgerState.INITIALIZING):
            return 0
        async with self._trim_lock:
            durable = [c.mark_delete_position for c in self._cursors.values()]
            c = self.config
            async with self._meta_lock:
                ids = select_ledgers_to_trim(self.layout, slowest_mark_delete=min(durable) if durable else None,
                                             now_ms=_now_ms(), retention_time_s=c.retention_time_s,
                                             retention_size_bytes=c.retention_size_bytes)
                if not ids:
                    return 0
                new_layout = self.layout.copy()
                new_layout.remove(ids)
                writer = self._appender.writer
                await self._write_metadata(new_layout, writer.ledger_id if writer is not None else None)
                self.layout.remove(ids)
                self._reader.forget(ids)
                self._indexes_trimmed(ids)
                self._cache.evict_before(Position(self.layout.ledger_ids[0], 0))
            log.info("[%s] trimmed ledgers %s", self.name, ids)
            for ledger_id in ids:
                await self._delete_ledger_quietly(ledger_id)
            return len(ids)

    async def _housekeeping(self) -> None:
        """Time-based rollover, and trimming after rollovers and every ``trim_interval_s``."""
        last_trim_s = time.monotonic()
        while True:
            try:
                async with asyncio.timeout(self.config.housekeeping_interval_s):
                    await self._trim_requested.wait()
            except TimeoutError:
                pass
            requested = self._trim_requested.is_set()
            self._trim_requested.clear()
            self._appender.check_rollover()
            if requested or time.monotonic() - last_trim_s >= self.config.trim_interval_s:
                last_trim_s = time.monotonic()
                try:
                    await self.trim()
                except ManagedLedgerError as e:
                    log.warning("[%s] trim failed: %s", self.name, e)
                except Exception:  # a bug must not stop every later trim
                    log.exception("[%s] trim failed", self.name)

    # ------------------------------------------------------------------------------------------ stats

    def internal_stats(self) -> dict:
        current = self.layout.get(self.layout.last_ledger_id) if len(self.layout) else None
        return {
            "entriesAddedCounter": self.entries_added_counter,
            "numberOfEntries": self.layout.number_of_entries,
            "totalSize": self.layout.total_size,
            "currentLedgerEntries": current.entries if current else 0,
            "currentLedgerSize": current.size if current else 0,
            "lastLedgerCreatedTimestamp": _iso_ms(self._appender.ledger_created_ms),
            "waitingCursorsCount": sum(1 for c in self._all_cursors() if c.waiting),
            "pendingAddEntriesCount": self._appender.pending_count,
            "lastConfirmedEntry": str(self._last_confirmed),
            "state": self.state.value,
            "ledgers": [{"ledgerId": s.ledger_id, "entries": s.entries, "size": s.size, "offloaded": False}
                        for s in self.layout.stats()],
            "cursors": {c.name: c.internal_stats() for c in sorted(self._all_cursors(), key=lambda c: c.name)},
        }

    # ------------------------------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Waits for pending appends, closes the current ledger (recording its length unless fenced),
        persists every cursor, stops background work. Idempotent."""
        if self._closing or self._lifecycle is not LedgerState.LEDGER_OPENED:
            return
        self._closing = True
        try:
            await self._finish_writing(record=True)
            for cursor in list(self._cursors.values()):
                try:
                    await cursor.flush()
                except ManagedLedgerError as e:
                    log.warning("[%s][%s] cursor not persisted on close: %s", self.name, cursor.name, e)
        finally:
            await self._stop(LedgerState.CLOSED)

    async def delete(self) -> None:
        """Deletes every ledger, every cursor and the metadata. The object is unusable afterwards."""
        if self._lifecycle is LedgerState.DELETED:
            return
        self._closing = True
        try:
            await self._finish_writing(record=False)
            for ledger_id in self.layout.ledger_ids:
                await self._delete_ledger_quietly(ledger_id)
            await self._store.delete(self.name)
        except MetadataError as e:
            raise ManagedLedgerMetadataError(f"[{self.name}] cannot delete: {e}") from e
        finally:
            await self._stop(LedgerState.DELETED)
        log.info("[%s] deleted", self.name)

    async def _finish_writing(self, *, record: bool) -> None:
        writer = await self._appender.close()
        if writer is None:
            return
        self.layout.set_counts(writer.ledger_id, writer.last_add_confirmed + 1, writer.length, _now_ms())
        if record:
            try:
                async with self._meta_lock:
                    await self._write_metadata(self.layout, None)
            except ManagedLedgerError as e:
                log.warning("[%s] could not record the length of ledger %d: %s", self.name, writer.ledger_id, e)

    async def _stop(self, state: LedgerState) -> None:
        await self._appender.abort()
        tasks = [t for t in (self._flusher_task, self._housekeeping_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._lifecycle = state
        for cursor in self._all_cursors():
            if cursor.state is CursorState.OPEN:
                cursor.state = CursorState.CLOSED
        self._cache.clear()
        self._reader.clear()
        self._notify_entries()
        if self._on_closed is not None:
            self._on_closed(self)

    def __repr__(self) -> str:
        return f"ManagedLedgerImpl({self.name}, {self.state.value}, last confirmed {self._last_confirmed})"
