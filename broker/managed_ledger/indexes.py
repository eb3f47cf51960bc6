"""The broker entry index of a managed ledger: assigning it, recovering it on open, finding entries by it.

:class:`BrokerEntryIndexes` is a part of ``ManagedLedgerImpl`` (which inherits it, as it inherits
``LedgerOpening``), not a class of its own. The counter itself is the pure
:class:`~broker.managed_ledger.interceptor.BrokerEntryMetadataInterceptor` (``self._bem``, None when the
managed ledger adds no broker entry metadata).

Theory of operation
-------------------
* **Assigning.** ``add_entry_nowait`` prefixes each entry with its broker entry metadata before handing it
  to the append pipeline, so indexes follow append order, which is storage order. Appends that fail
  without reaching a ledger (no ledger could be created) give their indexes back (``_indexes_unsent``).
  Any other write failure fences the managed ledger: the owner reopens it, which re-derives the index from
  what was stored. So the stored indexes have no gaps and no repeats.
* **Recovering** (``_recover_index``, while opening): the index goes on after the one stored in the last
  entry of the last non-empty ledger. If that entry has none (written before indexes were turned on), the
  last entries of earlier ledgers are read until one has; if none has, indexes start at 0. So a topic
  written before indexes existed numbers its new messages from 0, and its older entries have no index
  (:meth:`find_position_by_index` treats them as lying before index 0). Turning the index off and on again
  inside one ledger can repeat indexes (only ledger ends are looked at); Magnetar has it on by default.
* **Finding** (:meth:`find_position_by_index`): bisection over the ledgers by the index of their last
  entry, then over the entries of the one ledger, reading one entry per step; the first and last stored
  index of each ledger are cached once read (closed ledgers never change; the open one is kept current
  from confirmed appends). ``log2(ledgers) + log2(entries per ledger)`` reads at most, usually fewer.
"""

from __future__ import annotations

import logging
from typing import Optional

from .api import Position
from .errors import IndexBeyondEndError, IndexNotEnabledError, IndexTrimmedError
from .interceptor import entry_base_index, stored_index

__all__ = ["BrokerEntryIndexes"]

log = logging.getLogger("broker.managed_ledger.ledger")

_NO_INDEX = -1  # how an entry without an index (written before indexes were on) compares: before index 0


class BrokerEntryIndexes:
    """Index bookkeeping for :class:`broker.managed_ledger.ledger.ManagedLedgerImpl` (see the module
    docstring). Expects ``self._bem``, ``self.layout``, ``self._read_positions``, ``self.name``."""

    def _init_indexes(self) -> None:
        self._confirmed_next_index = 0  # one past the index of the last confirmed entry
        self._index_bounds: dict[int, list[Optional[int]]] = {}  # ledger id -> [first entry's, last entry's]

    # -- the API the broker (Kafka listener, stats) uses ------------------------------------------------------

    @property
    def next_index(self) -> int:
        """The index the next appended message gets (read it just before ``add_entry_nowait`` to learn the
        index of that entry's first message, its base offset). IndexNotEnabledError if indexes are off."""
        if self._bem is None or not self._bem.index:
            raise IndexNotEnabledError(f"[{self.name}] this managed ledger adds no broker entry index")
        return self._bem.next_index

    @property
    def index_enabled(self) -> bool:
        return self._bem is not None and self._bem.index

    @property
    def last_confirmed_index(self) -> int:
        """The index of the last durable message (-1 when none has an index yet)."""
        return self._confirmed_next_index - 1

    async def first_index(self) -> int:
        """The index of the first retained message that has one (Kafka's log start offset); when no retained
        entry has an index, the one the first entry confirmed from now on will have (one past the last
        confirmed), not ``next_index``: entries in flight get their indexes from there, and answering past
        them made a consumer asking for the earliest offset of a topic being written skip them, or be told
        its offset is out of range."""
        self.next_index  # IndexNotEnabledError when indexes are off
        first_to_come = self._confirmed_next_index
        for stats in self.layout.stats():
            if stats.entries <= 0:
                continue
            entry = (await self._read_positions([Position(stats.ledger_id, 0)]))[0]
            base = entry_base_index(entry.data)
            if base is not None:
                return base
            last = await self._ledger_last_index(stats.ledger_id, stats.entries)
            if last != _NO_INDEX:  # indexes start inside this ledger: find where
                position = await self._first_entry_at_or_above(stats.ledger_id, stats.entries, 0)
                return entry_base_index((await self._read_positions([position]))[0].data)
        return first_to_come

    async def find_position_by_index(self, index: int) -> Position:
        """The position of the entry holding message ``index``: the first entry whose stored index (that of
        its last message) is ``>= index``.

        ``index`` at or after the last confirmed message but not beyond ``next_index`` (written but not yet
        durable, or the next message to come) gives the tail: the position after the last confirmed entry,
        where a cursor waits for it. Raises IndexBeyondEndError when ``index > next_index``, IndexTrimmedError
        when it is negative or below the first retained message (both are IndexOutOfRangeError, carrying
        ``first_index`` and ``next_index``), IndexNotEnabledError when indexes are off,
        ManagedLedgerReadError when an entry cannot be read.
        """
        next_index = self.next_index
        if index > next_index:
            raise IndexBeyondEndError(f"[{self.name}] index {index} is beyond the end (next index {next_index})",
                                      index=index, first_index=-1, next_index=next_index)
        if index < 0:
            raise IndexTrimmedError(f"[{self.name}] index {index} is negative", index=index, first_index=-1,
                                    next_index=next_index)
        if index >= self._confirmed_next_index:
            return self.layout.tail()
        ledgers = [s for s in self.layout.stats() if s.entries > 0]
        lo, hi = 0, len(ledgers)
        while lo < hi:  # first ledger whose last entry's index >= index
            mid = (lo + hi) // 2
            if await self._ledger_last_index(ledgers[mid].ledger_id, ledgers[mid].entries) >= index:
                hi = mid
            else:
                lo = mid + 1
        if lo == len(ledgers):
            return self.layout.tail()
        stats = ledgers[lo]
        position = await self._first_entry_at_or_above(stats.ledger_id, stats.entries, index)
        if position == self.layout.first_position():
            data = (await self._read_positions([position]))[0].data
            base = entry_base_index(data)
            if base is not None and index < base:
                raise IndexTrimmedError(f"[{self.name}] index {index} was trimmed: the first retained is {base}",
                                        index=index, first_index=base, next_index=next_index)
        return position

    # -- bookkeeping --------------------------------------------------------------------------------------------

    async def _index_at(self, position: Position) -> int:
        data = (await self._read_positions([position]))[0].data
        index = stored_index(data)
        return _NO_INDEX if index is None else index

    async def _ledger_last_index(self, ledger_id: int, entries: int) -> int:
        """The stored index of the ledger's last entry (of ``entries``); cached: a closed ledger never changes,
        the open one's is kept current by ``_indexes_confirmed`` (indexes only grow, hence ``max``)."""
        bounds = self._index_bounds.setdefault(ledger_id, [None, None])
        if bounds[1] is None:
            index = await self._index_at(Position(ledger_id, entries - 1))
            bounds[1] = index if bounds[1] is None else max(bounds[1], index)
        return bounds[1]

    async def _first_entry_at_or_above(self, ledger_id: int, entries: int, index: int) -> Position:
        """The first entry of the ledger whose stored index is ``>= index`` (its last entry's is)."""
        bounds = self._index_bounds.setdefault(ledger_id, [None, None])
        if bounds[0] is None:
            bounds[0] = await self._index_at(Position(ledger_id, 0))
        if bounds[0] >= index:
            return Position(ledger_id, 0)
        lo, hi = 1, entries - 1  # entry 0 is below, the last entry is at or above
        while lo < hi:
            mid = (lo + hi) // 2
            if await self._index_at(Position(ledger_id, mid)) >= index:
                hi = mid
            else:
                lo = mid + 1
        return Position(ledger_id, lo)

    def _indexes_confirmed(self, confirmed: list[tuple[Position, bytes]]) -> None:
        """Appends confirmed (in order): the open ledger's bounds and the confirmed end follow them."""
        if self._bem is None or not self._bem.index:
            return
        previous = None
        for i, (position, data) in enumerate(confirmed):
            if position.ledger_id != previous or i == len(confirmed) - 1 \
                    or confirmed[i + 1][0].ledger_id != position.ledger_id:
                index = stored_index(data)
                if index is None:
                    continue
                bounds = self._index_bounds.setdefault(position.ledger_id, [None, None])
                if position.entry_id == 0:
                    bounds[0] = index
                bounds[1] = index
                self._confirmed_next_index = max(self._confirmed_next_index, index + 1)
            previous = position.ledger_id

    def _indexes_unsent(self, tags: list) -> None:
        """Appends that never reached a ledger failed: their indexes are given out again."""
        if self._bem is not None and tags and tags[0] is not None:
            self._bem.rollback(tags[0])

    def _indexes_trimmed(self, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            self._index_bounds.pop(ledger_id, None)

    async def _recover_index(self) -> None:
        """Sets the counter after the last stored index (see the module docstring); called while opening."""
        if self._bem is None or not self._bem.index:
            return
        for stats in reversed(self.layout.stats()):
            if stats.entries <= 0:
                continue
            last = await self._ledger_last_index(stats.ledger_id, stats.entries)
            if last != _NO_INDEX:
                self._bem.next_index = self._confirmed_next_index = last + 1
                log.info("[%s] broker entry index recovered: next index %d (ledger %d)", self.name, last + 1,
                         stats.ledger_id)
                return
        self._bem.next_index = self._confirmed_next_index = 0
