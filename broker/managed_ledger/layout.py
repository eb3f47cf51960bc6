"""Position arithmetic over a managed ledger's list of ledgers (pure: no asyncio, no I/O).

A managed ledger's *existing* positions are ``(ledger_id, entry_id)`` for every ledger in the list and
``0 <= entry_id < entries(ledger)``; for the last (current) ledger ``entries`` counts confirmed entries
only. Ledgers may be empty; ledgers trimmed from the front are simply gone. Every function here answers in
terms of existing positions, so callers never have to care about ledger boundaries, empty ledgers or
trimmed ledgers:

* :meth:`LedgerLayout.normalize` - the first existing position at or after ``p``, else the *tail* (the
  position the next entry will get: ``max(p, (last_ledger, 0))`` when nothing exists at or after ``p``);
* :meth:`LedgerLayout.next_position` / :meth:`LedgerLayout.previous_position`;
* :meth:`LedgerLayout.entries_between` - how many existing positions lie in ``(a, b]`` (O(log n) with prefix
  sums kept over every ledger but the last, whose count changes on every add).

:func:`select_ledgers_to_trim` decides what trimming may delete (Pulsar's rules, see its docstring).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Optional

from .api import Position


@dataclass
class LedgerStats:
    """What the managed ledger knows of one ledger: confirmed entries, their bytes, and close time (ms)."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp_ms: int = 0


class LedgerLayout:
    """The ordered ledgers of one managed ledger and the position arithmetic over them."""

    def __init__(self, ledgers: Iterable[LedgerStats] = ()) -> None:
        self._ids: list[int] = []
        self._stats: dict[int, LedgerStats] = {}
        self._prefix: list[int] = []  # _prefix[k] = entries in ledgers _ids[:k]
        for stats in ledgers:
            self.append(stats)

    # -- structure --------------------------------------------------------------------------------------

    def append(self, stats: LedgerStats) -> None:
        if self._ids and stats.ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger {stats.ledger_id} is not after the last ledger {self._ids[-1]}")
        self._ids.append(stats.ledger_id)
        self._stats[stats.ledger_id] = stats
        self._reindex()

    def remove(self, ledger_ids: Iterable[int]) -> None:
        gone = set(ledger_ids)
        self._ids = [i for i in self._ids if i not in gone]
        for i in gone:
            self._stats.pop(i, None)
        self._reindex()

    def set_counts(self, ledger_id: int, entries: int, size: int, timestamp_ms: Optional[int] = None) -> None:
        stats = self._stats[ledger_id]
        stats.entries, stats.size = entries, size
        if timestamp_ms is not None:
            stats.timestamp_ms = timestamp_ms
        if ledger_id != self._ids[-1]:
            self._reindex()

    def add_confirmed(self, ledger_id: int, size: int) -> None:
        """One more confirmed entry in the last ledger (the cheap path of every add)."""
        stats = self._stats[ledger_id]
        if ledger_id != self._ids[-1]:
            raise ValueError(f"ledger {ledger_id} is not the current ledger {self._ids[-1]}")
        stats.entries += 1
        stats.size += size

    def _reindex(self) -> None:
        prefix, total = [], 0
        for i in self._ids:
            prefix.append(total)
            total += self._stats[i].entries
        self._prefix = prefix

    def copy(self) -> "LedgerLayout":
        return LedgerLayout(LedgerStats(s.ledger_id, s.entries, s.size, s.timestamp_ms) for s in self.stats())

    # -- facts ------------------------------------------------------------------------------------------

    @property
    def ledger_ids(self) -> list[int]:
        return list(self._ids)

    @property
    def last_ledger_id(self) -> Optional[int]:
        return self._ids[-1] if self._ids else None

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._stats

    def __len__(self) -> int:
        return len(self._ids)

    def stats(self) -> list[LedgerStats]:
        return [self._stats[i] for i in self._ids]

    def get(self, ledger_id: int) -> Optional[LedgerStats]:
        return self._stats.get(ledger_id)

    def entries_of(self, ledger_id: int) -> int:
        stats = self._stats.get(ledger_id)
        return stats.entries if stats is not None else 0

    @property
    def number_of_entries(self) -> int:
        return self._prefix[-1] + self._stats[self._ids[-1]].entries if self._ids else 0

    @property
    def total_size(self) -> int:
        return sum(s.size for s in self._stats.values())

    def exists(self, p: Position) -> bool:
        stats = self._stats.get(p.ledger_id)
        return stats is not None and 0 <= p.entry_id < stats.entries

    # -- arithmetic -------------------------------------------------------------------------------------

    def tail(self) -> Position:
        """The position the next appended entry of the last ledger gets."""
        if not self._ids:
            return Position(0, 0)
        last = self._ids[-1]
        return Position(last, self._stats[last].entries)

    def normalize(self, p: Position) -> Position:
        """The first existing position ``>= p``; if none, ``max(p, (last ledger, 0))``."""
        k = bisect.bisect_left(self._ids, p.ledger_id)
        for ledger_id in self._ids[k:]:
            start = max(p.entry_id, 0) if ledger_id == p.ledger_id else 0
            if start < self._stats[ledger_id].entries:
                return Position(ledger_id, start)
        if self._ids and p < Position(self._ids[-1], 0):
            return Position(self._ids[-1], 0)
        return Position(p.ledger_id, max(p.entry_id, 0))

    def next_position(self, p: Position) -> Position:
        """The existing position right after ``p`` (or the tail when ``p`` is at or past the last one)."""
        return self.normalize(Position(p.ledger_id, p.entry_id + 1))

    def previous_position(self, p: Position) -> Position:
        """The last existing position before ``p``; ``(first ledger, -1)`` if there is none."""
        k = bisect.bisect_right(self._ids, p.ledger_id)
        for ledger_id in reversed(self._ids[:k]):
            entries = self._stats[ledger_id].entries
            candidate = min(p.entry_id - 1, entries - 1) if ledger_id == p.ledger_id else entries - 1
            if candidate >= 0:
                return Position(ledger_id, candidate)
        if self._ids and self._ids[0] <= p.ledger_id:
            return Position(self._ids[0], -1)
        return Position(p.ledger_id, min(p.entry_id - 1, -1))

    def first_position(self) -> Position:
        """The first existing position (the tail when the managed ledger holds no entry)."""
        return self.normalize(Position(self._ids[0], 0)) if self._ids else Position(0, 0)

    def last_position(self) -> Optional[Position]:
        """The last existing position, None if there is none."""
        for ledger_id in reversed(self._ids):
            entries = self._stats[ledger_id].entries
            if entries:
                return Position(ledger_id, entries - 1)
        return None

    def count_at_or_before(self, p: Position) -> int:
        """How many existing positions are ``<= p``."""
        k = bisect.bisect_left(self._ids, p.ledger_id)
        if k == len(self._ids):
            return self.number_of_entries
        base = self._prefix[k]
        if self._ids[k] == p.ledger_id:
            base += min(max(p.entry_id + 1, 0), self._stats[p.ledger_id].entries)
        return base

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        """How many existing positions lie in ``(start_exclusive, end_inclusive]`` (0 if the range is empty)."""
        if end_inclusive <= start_exclusive:
            return 0
        return self.count_at_or_before(end_inclusive) - self.count_at_or_before(start_exclusive)

    def position_at(self, index: int) -> Position:
        """The existing position with ``index`` existing positions before it (0-based)."""
        if not 0 <= index < self.number_of_entries:
            raise IndexError(f"entry index {index} out of range 0..{self.number_of_entries - 1}")
        j = bisect.bisect_right(self._prefix, index) - 1
        return Position(self._ids[j], index - self._prefix[j])


def select_ledgers_to_trim(layout: LedgerLayout, *, slowest_mark_delete: Optional[Position], now_ms: int,
                           retention_time_s: float, retention_size_bytes: int) -> list[int]:
    """The ledgers trimming may delete, oldest first (Pulsar's rules).

    A ledger is a candidate when every entry in it is at or before ``slowest_mark_delete`` (the slowest
    durable cursor; None when there is no durable cursor: then everything is consumed). The last (current)
    ledger is never a candidate. Walking candidates oldest first, one is deleted when its retention time has
    expired (``retention_time_s >= 0`` and it was closed at least that long ago) *or* the managed ledger is
    over its size quota without the ledgers already chosen (``retention_size_bytes >= 0`` and the remaining
    size exceeds it); the walk stops at the first ledger retention keeps. ``-1`` means no limit of that kind,
    so ``(-1, -1)`` retains consumed data forever and ``(0, 0)`` deletes it as soon as it is consumed.
    """
    chosen: list[int] = []
    if len(layout) < 2:
        return chosen
    remaining = layout.total_size
    for stats in layout.stats()[:-1]:
        if slowest_mark_delete is not None:
            consumed = (stats.ledger_id < slowest_mark_delete.ledger_id
                        or (stats.ledger_id == slowest_mark_delete.ledger_id
                            and slowest_mark_delete.entry_id >= stats.entries - 1))
            if not consumed:
                break
        expired = retention_time_s >= 0 and now_ms - stats.timestamp_ms >= retention_time_s * 1000
        over_quota = retention_size_bytes >= 0 and remaining > retention_size_bytes
        if not (expired or over_quota):
            break
        chosen.append(stats.ledger_id)
        remaining -= stats.size
    return chosen
