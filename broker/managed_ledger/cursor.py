"""The cursor implementation: a mark-delete position, individually deleted ranges, a read position.

Theory of operation. Everything at or before ``mark_delete_position`` is acknowledged; above it, a
:class:`~broker.managed_ledger.ranges.RangeSet` holds the individually acknowledged entries as open-closed
ranges ``(previous(p), p]``, so consecutive acknowledgements merge, across ledger boundaries too. Whenever the
first range starts where mark-delete ends (no existing entry between them) mark-delete jumps to its end.
The read position only moves forward by reads and by mark-delete overtaking it; ``seek``/``rewind``/
``reset`` move it explicitly. Reads skip deleted entries.

Batch-index acknowledgements (Pulsar's ``batchDeletedIndexes``). An entry that is a batch may be partly
acknowledged: the cursor keeps, per such entry above mark-delete, the bit set of its members still
unacknowledged (ANDed with every later partial acknowledgement, so bits only clear). The entry stays
undeleted - it is read and redelivered - until its set is empty, when it is deleted like an individually
acknowledged one; a set is dropped as soon as the entry is deleted or mark-delete passes it, and ``reset``
clears them all. They are persisted with the rest of the state, lowest positions first and capped (see
:func:`~broker.managed_ledger.ranges.batch_ack_sets_to_persist`), and restored with the cursor, so whoever
delivers the entry after a reload can tell the client which members to skip.

Persistence (durable cursors only). Each change bumps a sequence number. A change is written right away if
the last write is older than ``cursor_persist_interval_ms``; otherwise the managed ledger's flusher writes it
once the interval has passed. So a broker crash loses at most the changes of the last interval (plus a write
in flight), and an idle cursor costs no writes. Every write is a compare-and-set on the cursor node's
version; a lost race means another broker owns the topic now: the cursor and its managed ledger are fenced.
A write that fails for lack of ZooKeeper is logged and retried by the flusher (the state stays in memory).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from config_store import BadVersionError, MetadataError, NotFoundError
from config_store.managed_ledgers import ManagedCursorInfo

from .api import Entry, ManagedCursor, Position
from .errors import (InvalidCursorPositionError, ManagedLedgerClosedError, ManagedLedgerError,
                     ManagedLedgerFencedError, ManagedLedgerMetadataError)
from .ranges import RangeSet, ack_set_from_words, batch_ack_sets_to_persist

if TYPE_CHECKING:
    from .ledger import ManagedLedgerImpl

log = logging.getLogger(__name__)


class CursorState(enum.Enum):
    OPEN = "Open"
    FENCED = "Fenced"
    CLOSED = "Closed"
    DELETED = "Deleted"


class ManagedCursorImpl(ManagedCursor):
    """A cursor of one :class:`~broker.managed_ledger.ledger.ManagedLedgerImpl` (created by it, never
    directly). See the module docstring for what is guaranteed."""

    def __init__(self, ml: "ManagedLedgerImpl", name: str, *, durable: bool, mark_delete: Position,
                 deleted: Optional[RangeSet[Position]] = None, properties: Optional[dict[str, int]] = None,
                 batch_acks: Optional[Mapping[Position, int]] = None, version: int = -1) -> None:
        self.name = name
        self.durable = durable
        self._ml = ml
        self._md = mark_delete
        self._deleted: RangeSet[Position] = deleted if deleted is not None else RangeSet()
        self._batch: dict[Position, int] = {p: bits for p, bits in (batch_acks or {}).items()
                                            if bits and not self._deleted.contains(p)}
        self._properties: dict[str, int] = dict(properties or {})
        self._read = ml.layout.next_position(mark_delete)
        self._read_epoch = 0
        self._version = version
        self._seq = 0
        self._persisted_seq = 0
        self._last_persist_s = 0.0
        self._persist_lock = asyncio.Lock()
        self._inflight_write: "asyncio.Future[int] | None" = None
        self._read_lock = asyncio.Lock()
        self.state = CursorState.OPEN
        self.messages_consumed = 0
        self.pending_read_ops = 0
        self.waiting = 0
        self.last_active_ms = int(time.time() * 1000)
        self._advance_over_ranges()

    @classmethod
    def from_info(cls, ml: "ManagedLedgerImpl", name: str, info: ManagedCursorInfo,
                  version: int) -> "ManagedCursorImpl":
        """A durable cursor restored from its stored state (read at ``version``)."""
        deleted: RangeSet[Position] = RangeSet(
            [(Position(a, b), Position(c, d)) for a, b, c, d in info.individually_deleted])
        batch_acks = {Position(lid, eid): ack_set_from_words(words) for lid, eid, words in info.batch_deleted}
        return cls(ml, name, durable=True, mark_delete=Position(*info.mark_delete), deleted=deleted,
                   properties=info.properties, batch_acks=batch_acks, version=version)

    # -- positions ---------------------------------------------------------------------------------------

    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def read_position(self) -> Position:
        layout = self._ml.layout
        return layout.normalize(max(self._read, layout.next_position(self._md)))

    @property
    def properties(self) -> dict[str, int]:
        return dict(self._properties)

    def is_deleted(self, position: Position) -> bool:
        return position <= self._md or self._deleted.contains(position)

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        return self._deleted.ranges()

    def batch_ack_set(self, position: Position) -> Optional[int]:
        """The bit set of ``position``'s batch members still unacknowledged; None if no member was
        acknowledged individually (or the entry is deleted)."""
        return self._batch.get(position)

    def batch_ack_sets(self) -> dict[Position, int]:
        """Every partly acknowledged entry's set of members still unacknowledged, by position."""
        return dict(self._batch)

    def backlog_entries(self) -> int:
        layout = self._ml.layout
        after_md = layout.number_of_entries - layout.count_at_or_before(self._md)
        return after_md - sum(layout.entries_between(lo, hi) for lo, hi in self._deleted)

    # -- reading -----------------------------------------------------------------------------------------

    def _first_unread(self) -> Position:
        """The first position at or after the read position that is not deleted (maybe the tail)."""
        layout = self._ml.layout
        p = layout.normalize(max(self._read, layout.next_position(self._md)))
        for _ in range(len(self._deleted) + 1):
            r = self._deleted.range_containing(p)
            if r is None:
                break
            p = layout.next_position(r[1])
        return p

    def has_entries(self) -> bool:
        return self._ml.layout.exists(self._first_unread())

    async def read_entries(self, max_entries: int, *, max_bytes: Optional[int] = None) -> list[Entry]:
        """Reads up to ``max_entries`` existing, non-deleted entries from the read position, in order, and
        moves the read position past the last one returned (at least one entry when any is readable, even
        if it alone exceeds ``max_bytes``). Returns [] when caught up."""
        if max_entries < 1:
            return []
        async with self._read_lock:
            self._check_usable()
            layout = self._ml.layout
            epoch = self._read_epoch
            positions: list[Position] = []
            p = self._first_unread()
            while len(positions) < max_entries and layout.exists(p):
                r = self._deleted.range_containing(p)
                if r is not None:
                    p = layout.next_position(r[1])
                    continue
                positions.append(p)
                p = layout.next_position(p)
            if not positions:
                self._read = max(self._read, p)
                return []
            self.pending_read_ops += 1
            try:
                entries = await self._ml._read_positions(positions)
            finally:
                self.pending_read_ops -= 1
            if max_bytes is not None:
                total, kept = 0, 0
                for entry in entries:
                    total += len(entry.data)
                    if kept and total > max_bytes:
                        break
                    kept += 1
                entries = entries[:kept]
            if epoch == self._read_epoch:
                self._read = max(self._read, self._ml.layout.next_position(entries[-1].position))
            self.last_active_ms = int(time.time() * 1000)
            self._ml._cursor_moved()
            return entries

    async def wait_for_entries(self, timeout_s: Optional[float] = None) -> bool:
        """True as soon as an entry is readable at the read position; False when ``timeout_s`` passes first.
        Raises ManagedLedgerClosedError if the managed ledger or the cursor closes meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        self.waiting += 1
        try:
            while True:
                self._check_usable()
                if self.has_entries():
                    return True
                event = self._ml._entries_event
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return False
                try:
                    async with asyncio.timeout(remaining):
                        await event.wait()
                except TimeoutError:
                    self._check_usable()
                    return self.has_entries()
        finally:
            self.waiting -= 1

    def seek(self, position: Position) -> None:
        layout = self._ml.layout
        self._read = max(position, layout.next_position(self._md))
        self._read_epoch += 1

    def rewind(self) -> None:
        self._read = self._ml.layout.next_position(self._md)
        self._read_epoch += 1

    # -- acknowledging -----------------------------------------------------------------------------------

    async def mark_delete(self, position: Position, *, properties: Optional[dict[str, int]] = None) -> None:
        """Acknowledges everything up to and including ``position`` (an older position is a no-op, except
        that ``properties`` are still recorded). Persisted as the module docstring says."""
        self._check_usable()
        self._check_not_beyond_tail(position)
        if properties is not None:
            self._properties = dict(properties)
        if position > self._md:
            self._move_mark_delete(position)
        elif properties is None:
            return
        await self._changed()

    async def delete(self, positions: Sequence[Position]) -> None:
        """Acknowledges ``positions`` individually; positions already deleted are ignored, positions that do
        not exist raise InvalidCursorPositionError (nothing is changed then)."""
        self._check_usable()
        layout = self._ml.layout
        todo = sorted(p for p in set(positions) if not self.is_deleted(p))
        for p in todo:
            if not layout.exists(p):
                raise InvalidCursorPositionError(
                    f"[{self._ml.name}][{self.name}] cannot delete {p}: no such entry (last confirmed "
                    f"{self._ml.last_confirmed_position})")
        if not todo:
            return
        for p in todo:
            self._deleted.add(layout.previous_position(p), p)
            self._batch.pop(p, None)
        self.messages_consumed += len(todo)
        self._advance_over_ranges()
        await self._changed()

    async def delete_batch_indexes(self, ack_sets: Mapping[Position, int]) -> None:
        """Records batch-index acknowledgements: for each position the bit set of its batch members still
        unacknowledged (bit i = member i), ANDed with what is recorded. An entry left with no member is deleted
        as :meth:`delete` does. Positions already deleted, and positions that do not exist (a client's
        acknowledgement of garbage), change nothing. Persisted as the module docstring says."""
        self._check_usable()
        layout = self._ml.layout
        changed, emptied = False, []
        for p, bits in ack_sets.items():
            if bits < 0:
                raise ValueError(f"[{self._ml.name}][{self.name}] ack set of {p} is negative: {bits}")
            if self.is_deleted(p) or not layout.exists(p):
                continue
            current = self._batch.get(p)
            remaining = bits if current is None else current & bits
            if remaining == current:
                continue
            if remaining == 0:
                emptied.append(p)
            else:
                self._batch[p] = remaining
                changed = True
        if emptied:
            await self.delete(emptied)  # persists the ack sets changed above too
        elif changed:
            await self._changed()

    async def reset(self, position: Position) -> None:
        """Mark-delete to just before ``position``, no deleted ranges or ack sets, reads from ``position``;
        persisted now."""
        self._check_usable()
        self._check_not_beyond_tail(Position(position.ledger_id, position.entry_id - 1))
        layout = self._ml.layout
        self._md = layout.previous_position(position)
        self._deleted.clear()
        self._batch.clear()
        self._read = layout.normalize(position)
        self._read_epoch += 1
        self._seq += 1
        if self.durable:
            await self.flush()

    def _check_not_beyond_tail(self, position: Position) -> None:
        if position >= self._ml.layout.tail():
            raise InvalidCursorPositionError(
                f"[{self._ml.name}][{self.name}] position {position} is beyond the last confirmed entry "
                f"{self._ml.last_confirmed_position}")

    def _move_mark_delete(self, position: Position) -> None:
        layout = self._ml.layout
        newly = layout.entries_between(self._md, position)
        for lo, hi in self._deleted:
            if lo >= position:
                break
            newly -= layout.entries_between(max(lo, self._md), min(hi, position))
        self.messages_consumed += max(newly, 0)
        self._deleted.remove_at_or_below(position)
        self._md = position
        self._advance_over_ranges()

    def _advance_over_ranges(self) -> None:
        layout = self._ml.layout
        while (first := self._deleted.first()) is not None and layout.entries_between(self._md, first[0]) == 0:
            self._deleted.pop_first()
            self._md = max(self._md, first[1])
        if self._batch:
            for p in [p for p in self._batch if p <= self._md]:
                del self._batch[p]
        if self._read <= self._md:
            self._read = layout.next_position(self._md)

    # -- persistence -------------------------------------------------------------------------------------

    def snapshot(self) -> ManagedCursorInfo:
        return ManagedCursorInfo(
            mark_delete=(self._md.ledger_id, self._md.entry_id),
            individually_deleted=[(lo.ledger_id, lo.entry_id, hi.ledger_id, hi.entry_id) for lo, hi in self._deleted],
            properties=dict(self._properties), last_active_ms=self.last_active_ms,
            batch_deleted=[(p.ledger_id, p.entry_id, words) for p, words in batch_ack_sets_to_persist(self._batch)])

    @property
    def dirty(self) -> bool:
        return self._persisted_seq < self._seq

    async def _changed(self) -> None:
        self._seq += 1
        self.last_active_ms = int(time.time() * 1000)
        self._ml._cursor_moved()
        if self.durable:
            await self.persist_if_due()

    async def persist_if_due(self) -> None:
        """Writes the state if it changed and the last write is at least one interval old; otherwise asks the
        managed ledger's flusher to come back later."""
        async with self._persist_lock:
            if not self.dirty or self.state is not CursorState.OPEN:
                return
            interval_s = self._ml.config.cursor_persist_interval_ms / 1000
            if time.monotonic() - self._last_persist_s < interval_s:
                self._ml._schedule_cursor_flush(self)
                return
            await self._write_locked(raise_unavailable=False)

    async def flush(self) -> None:
        """Writes the state now if it changed (durable cursors). Raises ManagedLedgerFencedError if another
        broker wrote the cursor, ManagedLedgerMetadataError if ZooKeeper cannot be reached."""
        if not self.durable:
            return
        async with self._persist_lock:
            if self.dirty and self.state is CursorState.OPEN:
                await self._write_locked(raise_unavailable=True)

    async def _write_locked(self, *, raise_unavailable: bool) -> None:
        # A write whose caller was cancelled may still be in flight: its new version must be known before
        # the next compare-and-set, or this cursor would fence itself.
        previous = self._inflight_write
        if previous is not None and not previous.done():
            await asyncio.wait({previous})
        seq, info = self._seq, self.snapshot()
        self._last_persist_s = time.monotonic()
        write = asyncio.ensure_future(
            self._ml._store.write_cursor(self._ml.name, self.name, info, expected_version=self._version)
        )
        self._inflight_write = write
        write.add_done_callback(lambda task, seq=seq: self._adopt_write(task, seq))
        try:
            await asyncio.shield(write)
        except (BadVersionError, NotFoundError) as e:
            self.state = CursorState.FENCED
            error = ManagedLedgerFencedError(
                f"[{self._ml.name}][{self.name}] cursor state was changed or removed by someone else ({e}): "
                "another broker owns this topic now")
            self._ml._fence(error)
            raise error from e
        except MetadataError as e:
            log.warning("[%s][%s] could not persist the cursor (%s); will retry", self._ml.name, self.name, e)
            self._ml._schedule_cursor_flush(self)
            if raise_unavailable:
                raise ManagedLedgerMetadataError(f"[{self._ml.name}][{self.name}] could not persist: {e}") from e
            return
        self._adopt_write(write, seq)  # idempotent with the done-callback; explicit for the normal path

    def _adopt_write(self, task: "asyncio.Future[int]", seq: int) -> None:
        """Records a finished cursor write's new version, even when whoever awaited it was cancelled."""
        if task.cancelled() or task.exception() is not None:
            return
        self._version = task.result()
        self._persisted_seq = max(self._persisted_seq, seq)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self.state is CursorState.DELETED or self.state is CursorState.CLOSED:
            raise ManagedLedgerClosedError(f"[{self._ml.name}][{self.name}] cursor is {self.state.value.lower()}")
        self._ml._check_readable()

    def internal_stats(self) -> dict:
        return {
            "markDeletePosition": str(self._md),
            "readPosition": str(self.read_position),
            "waitingReadOp": self.waiting > 0,
            "pendingReadOps": self.pending_read_ops,
            "messagesConsumedCounter": self.messages_consumed,
            "cursorLedger": -1,
            "cursorLedgerLastEntry": -1,
            "individuallyDeletedMessages": "[" + ",".join(f"({lo}..{hi}]" for lo, hi in self._deleted) + "]",
            "lastLedgerSwitchTimestamp": "",
            "state": self.state.value,
            "active": True,
            "numberOfEntriesSinceFirstNotAckedMessage": self._ml.layout.entries_between(
                self._md, self._ml.last_confirmed_position),
            "totalNonContiguousDeletedMessagesRange": len(self._deleted),
            "properties": dict(self._properties),
            "durable": self.durable,
        }

    def __repr__(self) -> str:
        return f"ManagedCursorImpl({self._ml.name}/{self.name}, md={self._md}, read={self._read})"


class CursorFlusher:
    """Writes throttled cursor changes of one managed ledger once their interval has passed (one task)."""

    def __init__(self, name: str, interval_s: float) -> None:
        self._name = name
        self._interval_s = interval_s
        self._dirty: set[ManagedCursorImpl] = set()
        self._wakeup = asyncio.Event()

    def schedule(self, cursor: ManagedCursorImpl) -> None:
        self._dirty.add(cursor)
        self._wakeup.set()

    def discard(self, cursor: ManagedCursorImpl) -> None:
        self._dirty.discard(cursor)

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._dirty:
                delay_s = min(c._last_persist_s for c in self._dirty) + self._interval_s - time.monotonic()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                for cursor in list(self._dirty):
                    if time.monotonic() - cursor._last_persist_s < self._interval_s:
                        continue
                    self._dirty.discard(cursor)
                    try:
                        await cursor.persist_if_due()
                    except ManagedLedgerError as e:
                        log.warning("[%s][%s] cursor flush failed: %s", self._name, cursor.name, e)
                    except Exception:  # a bug must not stop every later flush
                        log.exception("[%s][%s] cursor flush failed", self._name, cursor.name)
