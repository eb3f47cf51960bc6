"""An in-memory managed ledger: a TEST DOUBLE of ``broker/managed_ledger/api.py`` for unit tests of the
broker service. Never used in production code.

It follows the interface's documented semantics (positions ``(ledger_id, entry_id)``, ledgers rolled over
every ``entries_per_ledger`` entries, cursors = mark-delete position + individually deleted positions,
durable cursors surviving a close/re-open of the same factory) and adds fault injection:
``fail_next_adds(n, exc)`` makes the next ``n`` appends fail; ``read_delay`` (an async callable) keeps every
read in flight until it returns, its positions already chosen, as a bookie round trip does (reads complete
without yielding otherwise, so no event could land in the middle of one). ``watch_list`` tells of ledgers
created and deleted through this factory (a real one watches ZooKeeper, so it also sees other brokers' changes).
"""

from __future__ import annotations

import asyncio
import bisect
import time
from typing import Awaitable, Callable, Optional, Sequence

from broker.managed_ledger.api import (Entry, InitialPosition, ManagedCursor, ManagedLedger, ManagedLedgerError,
                                       ManagedLedgerFactory, Position)
from broker.managed_ledger.interceptor import BrokerEntryMetadataInterceptor


class MemoryLedgerClosedError(ManagedLedgerError):
    pass


class MemoryCursor(ManagedCursor):
    def __init__(self, ml: "MemoryManagedLedger", name: str, mark_delete: Position, *, durable: bool) -> None:
        self.name = name
        self.durable = durable
        self._ml = ml
        self._md = mark_delete
        self._read = ml.next_position(mark_delete)
        self._deleted: set[Position] = set()
        self.properties: dict[str, int] = {}
        self.flushes = 0
        self._epoch = 0  # bumped by every explicit move of the read position
        self._read_lock = asyncio.Lock()

    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def read_position(self) -> Position:
        return self._read

    async def read_entries(self, max_entries: int, *, max_bytes: Optional[int] = None) -> list[Entry]:
        ml = self._ml
        if ml.read_delay is None:
            return self._read_now(max_entries, max_bytes)
        async with self._read_lock:  # as the real cursor: one read at a time, positions chosen first
            epoch = self._epoch
            start = self._read
            out = self._read_now(max_entries, max_bytes)
            after, self._read = self._read, start
            if out:
                await ml.read_delay()
            if epoch == self._epoch:  # not rewound meanwhile
                self._read = max(self._read, after)
            return out

    def _read_now(self, max_entries: int, max_bytes: Optional[int]) -> list[Entry]:
        ml = self._ml
        out: list[Entry] = []
        size = 0
        i = ml._index_at_or_after(self._read)
        while i < len(ml._positions) and len(out) < max_entries:
            pos = ml._positions[i]
            i += 1
            if self.is_deleted(pos):
                self._read = ml.next_position(pos)
                continue
            data = ml._data[pos]
            if max_bytes is not None and out and size + len(data) > max_bytes:
                break
            out.append(Entry(pos, data))
            size += len(data)
            self._read = ml.next_position(pos)
        return out

    def _readable(self) -> bool:
        ml = self._ml
        i = ml._index_at_or_after(self._read)
        while i < len(ml._positions):
            if not self.is_deleted(ml._positions[i]):
                return True
            i += 1
        return False

    async def wait_for_entries(self, timeout_s: Optional[float] = None) -> bool:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while not self._readable():
            if self._ml._closed:
                return False
            fut = loop.create_future()
            self._ml._waiters.append(fut)
            try:
                if deadline is None:
                    await fut
                else:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return False
                    await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                return False
        return True

    async def mark_delete(self, position: Position, *, properties: Optional[dict[str, int]] = None) -> None:
        if position > self._ml.last_confirmed_position:
            raise ManagedLedgerError(f"mark-delete {position} beyond the last entry")
        if properties is not None:
            self.properties = dict(properties)
        if position <= self._md:
            return
        self._md = position
        self._deleted = {p for p in self._deleted if p > position}
        self._advance()

    async def delete(self, positions: Sequence[Position]) -> None:
        for p in positions:
            if p > self._md:
                self._deleted.add(p)
        self._advance()

    def _advance(self) -> None:
        ml = self._ml
        while True:
            nxt = ml.next_position(self._md)
            if nxt in self._deleted:
                self._deleted.discard(nxt)
                self._md = nxt
            else:
                break
        if self._read <= self._md:
            self._read = ml.next_position(self._md)

    def is_deleted(self, position: Position) -> bool:
        return position <= self._md or position in self._deleted

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        ranges: list[tuple[Position, Position]] = []
        for p in sorted(self._deleted):
            prev = self._ml.previous_position(p)
            if ranges and ranges[-1][1] == prev:
                ranges[-1] = (ranges[-1][0], p)
            else:
                ranges.append((prev, p))
        return ranges

    def seek(self, position: Position) -> None:
        self._read = position
        self._epoch += 1

    def rewind(self) -> None:
        self._read = self._ml.next_position(self._md)
        self._epoch += 1

    async def reset(self, position: Position) -> None:
        self._md = self._ml.previous_position(position)
        self._deleted.clear()
        self._read = position
        self._epoch += 1

    def backlog_entries(self) -> int:
        ml = self._ml
        i = ml._index_at_or_after(ml.next_position(self._md))
        return sum(1 for p in ml._positions[i:] if p not in self._deleted)

    async def flush(self) -> None:
        self.flushes += 1


class MemoryManagedLedger(ManagedLedger):
    def __init__(self, factory: "MemoryManagedLedgerFactory", name: str, *, entries_per_ledger: int) -> None:
        self.name = name
        self._factory = factory
        self._entries_per_ledger = entries_per_ledger
        self._positions: list[Position] = []
        self._data: dict[Position, bytes] = {}
        self._ledger = factory._next_ledger_id()
        self._ledger_entries = 0
        self._cursors: dict[str, MemoryCursor] = {}
        self._waiters: list[asyncio.Future] = []
        self._closed = False
        self._fail_adds: list[BaseException] = []
        self._held: Optional[list[tuple[bytes, asyncio.Future]]] = None
        self.entries_added = 0
        # broker entry metadata as a broker's managed ledger adds it (BrokerConfig's default: timestamp, index)
        self._bem = (BrokerEntryMetadataInterceptor(timestamp=True, index=True) if factory.broker_entry_metadata
                     else None)
        # Fault injection: when set, every read awaits it once its positions are chosen (a bookie round trip),
        # so events can land while a read is in flight, as with the real managed ledger.
        self.read_delay: Optional[Callable[[], Awaitable[None]]] = None

    # -- fault injection ------------------------------------------------------------------------------
    def fail_next_adds(self, n: int, exc: BaseException | None = None) -> None:
        self._fail_adds.extend([exc or ManagedLedgerError(f"[{self.name}] injected add failure")] * n)

    def hold_adds(self) -> None:
        """Appends stay pending (not stored, futures unresolved) until :meth:`release_adds`."""
        if self._held is None:
            self._held = []

    def release_adds(self) -> int:
        held, self._held = self._held or [], None
        for data, fut in held:
            self._append(data, fut)
        return len(held)

    @property
    def held_adds(self) -> int:
        return len(self._held or [])

    # -- positions ------------------------------------------------------------------------------------
    def _index_at_or_after(self, position: Position) -> int:
        return bisect.bisect_left(self._positions, position)

    def previous_position(self, position: Position) -> Position:
        i = bisect.bisect_left(self._positions, position)
        if i == 0:
            first = self._positions[0] if self._positions else Position(self._ledger, 0)
            return Position(first.ledger_id, first.entry_id - 1)
        return self._positions[i - 1]

    def next_position(self, position: Position) -> Position:
        i = bisect.bisect_right(self._positions, position)
        if i < len(self._positions):
            return self._positions[i]
        if position.ledger_id < self._ledger:
            return Position(self._ledger, self._ledger_entries)
        return Position(position.ledger_id, position.entry_id + 1)

    def first_position(self) -> Position:
        return self._positions[0] if self._positions else Position(self._ledger, 0)

    @property
    def last_confirmed_position(self) -> Position:
        return self._positions[-1] if self._positions else Position(self._ledger, -1)

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        return max(0, bisect.bisect_right(self._positions, end_inclusive)
                   - bisect.bisect_right(self._positions, start_exclusive))

    # -- writes ---------------------------------------------------------------------------------------
    def add_entry_nowait(self, data: bytes, *, num_messages: Optional[int] = None,
                         on_done: Optional[Callable[[asyncio.Future], None]] = None) -> asyncio.Future:
        fut = self._add(data, num_messages)
        if on_done is not None:
            if fut.done():
                on_done(fut)  # failed (or stored) at once: told at once, as the bookie-backed ledger tells
            else:
                fut.add_done_callback(on_done)  # as the contract allows: no later than the done callbacks
        return fut

    def _add(self, data: bytes, num_messages: Optional[int]) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(MemoryLedgerClosedError(f"[{self.name}] closed"))
            return fut
        if self._fail_adds:
            fut.set_exception(self._fail_adds.pop(0))
            return fut
        if self._bem is not None:
            data, _ = self._bem.intercept(bytes(data), int(time.time() * 1000), num_messages)
        if self._held is not None:
            self._held.append((bytes(data), fut))
            return fut
        self._append(data, fut)
        return fut

    @property
    def next_index(self) -> int:
        if self._bem is None:
            return super().next_index
        return self._bem.next_index

    def _append(self, data: bytes, fut: asyncio.Future) -> None:
        if self._ledger_entries >= self._entries_per_ledger:
            self._ledger = self._factory._next_ledger_id()
            self._ledger_entries = 0
        pos = Position(self._ledger, self._ledger_entries)
        self._ledger_entries += 1
        self._positions.append(pos)
        self._data[pos] = bytes(data)
        self.entries_added += 1
        if not fut.done():
            fut.set_result(pos)
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def add_entry(self, data: bytes) -> Position:
        return await self.add_entry_nowait(data)

    # -- cursors --------------------------------------------------------------------------------------
    async def open_cursor(self, name: str, *,
                          initial_position: InitialPosition = InitialPosition.LATEST) -> ManagedCursor:
        cursor = self._cursors.get(name)
        if cursor is None:
            saved = self._factory._saved_cursors.get((self.name, name))
            if saved is not None:
                md, deleted, props = saved
                cursor = MemoryCursor(self, name, md, durable=True)
                cursor._deleted = set(deleted)
                cursor.properties = dict(props)
                cursor._advance()
            else:
                if initial_position is InitialPosition.EARLIEST:
                    start = self.previous_position(self.first_position())
                else:
                    start = self.last_confirmed_position
                cursor = MemoryCursor(self, name, start, durable=True)
            self._cursors[name] = cursor
        return cursor

    def new_non_durable_cursor(self, start: Position, *, name: str = "") -> ManagedCursor:
        return MemoryCursor(self, name, start, durable=False)

    async def delete_cursor(self, name: str) -> None:
        self._cursors.pop(name, None)
        self._factory._saved_cursors.pop((self.name, name), None)

    @property
    def cursors(self) -> dict[str, ManagedCursor]:
        return dict(self._cursors)

    async def read_entry(self, position: Position) -> Entry:
        if self.read_delay is not None:
            await self.read_delay()
        try:
            return Entry(position, self._data[position])
        except KeyError:
            raise ManagedLedgerError(f"[{self.name}] no entry at {position}") from None

    async def find_position_by_publish_time(self, timestamp_ms: int, publish_time_of) -> Position:
        for pos in self._positions:
            if publish_time_of(self._data[pos]) >= timestamp_ms:
                return pos
        return self.next_position(self.last_confirmed_position)

    @property
    def number_of_entries(self) -> int:
        return len(self._positions)

    @property
    def total_size(self) -> int:
        return sum(len(d) for d in self._data.values())

    def internal_stats(self) -> dict:
        return {
            "entriesAddedCounter": self.entries_added,
            "numberOfEntries": self.number_of_entries,
            "totalSize": self.total_size,
            "lastConfirmedEntry": str(self.last_confirmed_position),
            "state": "Closed" if self._closed else "LedgerOpened",
            "ledgers": [],
            "cursors": {n: {"markDeletePosition": str(c.mark_delete_position),
                            "readPosition": str(c.read_position)} for n, c in self._cursors.items()},
        }

    async def trim(self) -> int:
        return 0

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name, c in self._cursors.items():
            self._factory._saved_cursors[(self.name, name)] = (c._md, set(c._deleted), dict(c.properties))
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._factory._open.pop(self.name, None)

    async def delete(self) -> None:
        await self.close()
        self._factory._stored.pop(self.name, None)
        self._factory._stored_changed()
        for key in [k for k in self._factory._saved_cursors if k[0] == self.name]:
            del self._factory._saved_cursors[key]


class MemoryManagedLedgerFactory(ManagedLedgerFactory):
    """Keeps every ledger's entries across close/re-open (as storage would); ``open`` after ``close``
    returns a new object over the same entries and durable cursors, in a new current ledger."""

    def __init__(self, *, entries_per_ledger: int = 1_000_000, broker_entry_metadata: bool = True) -> None:
        self.entries_per_ledger = entries_per_ledger
        self.broker_entry_metadata = broker_entry_metadata
        self._open: dict[str, MemoryManagedLedger] = {}
        self._stored: dict[str, MemoryManagedLedger] = {}
        self._saved_cursors: dict[tuple[str, str], tuple] = {}
        self._ledger_ids = 0
        self.on_open: Callable[[MemoryManagedLedger], None] | None = None
        self._list_watches: set[_MemoryListWatch] = set()

    def _next_ledger_id(self) -> int:
        self._ledger_ids += 1
        return self._ledger_ids

    async def open(self, name: str, *, config: "object | None" = None) -> ManagedLedger:
        ml = self._open.get(name)
        if ml is not None:
            return ml
        ml = MemoryManagedLedger(self, name, entries_per_ledger=self.entries_per_ledger)
        old = self._stored.get(name)
        if old is not None:
            ml._positions = list(old._positions)
            ml._data = dict(old._data)
            ml.entries_added = old.entries_added
            if ml._bem is not None and old._bem is not None:
                ml._bem.next_index = old._bem.next_index
        for (ml_name, cursor_name), (md, deleted, props) in list(self._saved_cursors.items()):
            if ml_name == name:  # durable cursors come back with their ledger, as a real recovery does
                cursor = MemoryCursor(ml, cursor_name, md, durable=True)
                cursor._deleted = set(deleted)
                cursor.properties = dict(props)
                cursor._advance()
                ml._cursors[cursor_name] = cursor
        self._open[name] = ml
        created = name not in self._stored
        self._stored[name] = ml
        if created:
            self._stored_changed()
        if self.on_open:
            self.on_open(ml)
        return ml

    async def exists(self, name: str) -> bool:
        return name in self._stored

    async def delete(self, name: str) -> None:
        ml = self._stored.get(name)
        if ml is not None:
            await ml.delete()

    async def list(self, prefix: str) -> list[str]:
        prefix = prefix.rstrip("/") + "/"
        return sorted(n for n in self._stored if n.startswith(prefix))

    watches_list = True

    def watch_list(self, prefix: str, callback: Callable[[list[str]], object]) -> "_MemoryListWatch":
        watch = _MemoryListWatch(self, prefix.rstrip("/") + "/", callback)
        self._list_watches.add(watch)
        asyncio.get_running_loop().call_soon(watch.deliver)  # like a store watch: first delivery on the loop
        return watch

    def _stored_changed(self) -> None:
        loop = asyncio.get_running_loop()
        for watch in list(self._list_watches):
            loop.call_soon(watch.deliver)

    async def close(self) -> None:
        for ml in list(self._open.values()):
            await ml.close()


class _MemoryListWatch:
    def __init__(self, factory: MemoryManagedLedgerFactory, prefix: str,
                 callback: Callable[[list[str]], object]) -> None:
        self._factory = factory
        self._prefix = prefix
        self._callback = callback
        self._last: list[str] | None = None

    def cancel(self) -> None:
        self._factory._list_watches.discard(self)

    def deliver(self) -> None:
        if self not in self._factory._list_watches:
            return
        names = sorted(n for n in self._factory._stored if n.startswith(self._prefix))
        if names != self._last:
            self._last = names
            self._callback(names)
