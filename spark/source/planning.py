"""How a read becomes Spark partitions (pure): one or more per ledger, never one spanning two ledgers.

A topic's data is its managed ledger's ledgers, in ascending id order. Each ledger with entries in the read
range becomes at least one :class:`Split` (so a read has at least as many Spark partitions as ledgers with
data); a ledger with more than ``max_entries_per_split`` entries in range is cut into consecutive entry
ranges. A split names everything an executor needs to read it: the region's ZooKeeper (for the ledger's
metadata and the bookies' addresses), the ledger and an inclusive entry range that was confirmed when the
split was planned, so reading it twice gives the same rows.

Ledgers still open are read up to their last add confirmed (LAC) as the bookies report it: an entry is
readable once its writer knew it durable on an ack quorum, which the bookies learn from the next add or,
when no add follows, from the writer's explicit LAC (sent ``explicit_lac_interval_ms``, 100 ms by default,
after adds stop: :mod:`bookie.client.write_handle`). So the newest entry of an idle open ledger is read too,
at most about two intervals after it was acknowledged to its producer.
Streaming offsets never move past a ledger that is not closed (:func:`latest_position`), so the entries it
still confirms are read in a later micro-batch rather than skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from .offsets import EARLIEST, Position

__all__ = ["LedgerExtent", "Split", "latest_position", "plan_topic"]


@dataclass(frozen=True)
class LedgerExtent:
    """A ledger of a topic: its id, its last readable entry (-1: none) and whether it is closed."""

    ledger_id: int
    last_entry_id: int
    closed: bool = True


@dataclass(frozen=True)
class Split:
    """One Spark partition's work: entries ``first_entry_id..last_entry_id`` (inclusive) of one ledger."""

    region: str
    metadata_url: str
    topic: str
    partition: int
    ledger_id: int
    first_entry_id: int
    last_entry_id: int

    @property
    def entries(self) -> int:
        return self.last_entry_id - self.first_entry_id + 1


def _ranges(extents: Iterable[LedgerExtent], start: Position, end: Optional[Position]):
    for ext in extents:
        first, last = 0, ext.last_entry_id
        if ext.ledger_id < start.ledger_id:
            continue
        if ext.ledger_id == start.ledger_id:
            first = max(first, start.entry_id)
        if end is not None:
            if ext.ledger_id > end.ledger_id:
                continue
            if ext.ledger_id == end.ledger_id:
                last = min(last, end.entry_id - 1)
        if first <= last:
            yield ext.ledger_id, first, last


def plan_topic(region: str, metadata_url: str, topic: str, partition: int, extents: Sequence[LedgerExtent], *,
               start: Position = EARLIEST, end: Optional[Position] = None,
               max_entries_per_split: int) -> list[Split]:
    """The splits reading ``topic``'s entries in ``[start, end)`` (``end`` None: everything readable)."""
    if max_entries_per_split < 1:
        raise ValueError(f"max_entries_per_split must be positive, got {max_entries_per_split}")
    splits = []
    for ledger_id, first, last in _ranges(sorted(extents, key=lambda e: e.ledger_id), start, end):
        for lo in range(first, last + 1, max_entries_per_split):
            hi = min(last, lo + max_entries_per_split - 1)
            splits.append(Split(region, metadata_url, topic, partition, ledger_id, lo, hi))
    return splits


def latest_position(extents: Sequence[LedgerExtent], floor: Position = EARLIEST) -> Position:
    """The end offset (exclusive) of everything readable, stopping at the first ledger that is not closed.

    Never below ``floor`` (the previous offset): a LAC the bookies report lower after a restart must not make
    a stream read entries twice.
    """
    latest = floor
    for ext in sorted(extents, key=lambda e: e.ledger_id):
        if ext.last_entry_id >= 0:
            latest = max(latest, Position(ext.ledger_id, ext.last_entry_id + 1))
        if not ext.closed:
            break
    return latest
