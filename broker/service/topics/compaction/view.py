"""The compacted view of a topic: what a ``read_compacted`` consumer reads (Pulsar's ``CompactedTopicImpl``).

For positions up to the *horizon* (the last position the latest compaction covered) the consumer gets the
compacted ledger's entries (each carries its original position, so message ids are the original ones);
after the horizon it reads the topic itself through its cursor.

Progress through the compacted ledger is kept by the dispatcher in a :class:`CompactedReadState` (not in
the cursor: the original ledgers of those positions may be trimmed already, and the cursor only moves
over positions that exist). It starts from the cursor each time the dispatcher rewinds (its ``generation``
changes): from the cursor's read position, or, when the cursor has passed no retained entry yet and its
mark-delete is "before the first entry" (a subscription or reader from the earliest), from the very first
compacted entry, since the ledgers below the first retained one may have been trimmed once compaction
passed them. Once the compacted entries up to the horizon are exhausted the cursor is moved just past the
horizon and the state is spent until the next rewind.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from broker.managed_ledger.api import Entry, ManagedCursor, ManagedLedger, Position

from .logic import EARLIEST, decode_record, first_at_or_after

if TYPE_CHECKING:
    from bookie.client import ReadHandle

log = logging.getLogger("broker.service.topics.compaction.compactor")


@dataclass(frozen=True)
class CompactedLedger:
    """A finished compacted ledger: its id, the horizon it covers, the original position of every record
    (ascending) and its size in bytes."""

    ledger_id: int
    horizon: Position
    positions: tuple[Position, ...]
    size_bytes: int
    handle: "ReadHandle"

    async def read(self, first: int, last: int) -> list[Entry]:
        """Records ``first..last`` (indexes, inclusive) as entries at their original positions."""
        return [decode_record(e.payload) for e in await self.handle.read(first, last)]

    def internal_stats(self) -> dict:
        """Pulsar's internal-stats ``compactedLedger``."""
        return {"ledgerId": self.ledger_id, "entries": len(self.positions), "size": self.size_bytes,
                "offloaded": False}


@dataclass
class CompactedReadState:
    """A dispatcher's progress through the compacted ledger (see the module docstring)."""

    generation: int = -1
    next_position: Optional[Position] = None  # None: spent (past the horizon) for this generation


def _start(ml: ManagedLedger, cursor: ManagedCursor) -> Position:
    read = cursor.read_position
    md = cursor.mark_delete_position
    if read <= ml.first_position():
        return EARLIEST if md.entry_id < 0 else Position(md.ledger_id, md.entry_id + 1)
    return read


async def read_compacted(view: Optional[CompactedLedger], ml: ManagedLedger, cursor: ManagedCursor,
                         state: CompactedReadState, generation: int, max_entries: int) -> list[Entry]:
    """Up to ``max_entries`` compacted entries for the cursor; [] when the cursor is past the horizon (read
    the topic then). Entries the cursor has acknowledged are the caller's to filter."""
    if view is None:
        return []
    if state.generation != generation:
        state.generation = generation
        state.next_position = _start(ml, cursor)
    lower = state.next_position
    if lower is None or lower > view.horizon:
        return []
    i = first_at_or_after(view.positions, lower)
    if i >= len(view.positions):
        entries: list[Entry] = []
    else:
        last = min(i + max(max_entries, 1), len(view.positions)) - 1
        entries = await view.read(i, last)
    if entries:
        p = entries[-1].position
        state.next_position = Position(p.ledger_id, p.entry_id + 1)
    if not entries or state.next_position > view.horizon or \
            first_at_or_after(view.positions, state.next_position) >= len(view.positions):
        state.next_position = None
        if cursor.read_position <= view.horizon:
            cursor.seek(ml.next_position(view.horizon))
    return entries
