"""Cursor logic (mark-delete, individual deletes, backlog, reads that skip deleted entries) against a naive
model, on a fake in-memory ledger: no bookies, no ZooKeeper (non-durable cursors never persist)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.managed_ledger import InvalidCursorPositionError, ManagedLedgerConfig
from broker.managed_ledger.api import Entry, Position
from broker.managed_ledger.cache import EntryCache
from broker.managed_ledger.cursor import ManagedCursorImpl
from broker.managed_ledger.layout import LedgerLayout, LedgerStats


class FakeLedger:
    """Just what a cursor uses of ManagedLedgerImpl."""

    name = "fake"

    def __init__(self, counts: list[int]) -> None:
        self.layout = LedgerLayout(LedgerStats(10 * (i + 1), c) for i, c in enumerate(counts))
        self.config = ManagedLedgerConfig()
        self._entries_event = asyncio.Event()
        self.reads: list[list[Position]] = []

    @property
    def last_confirmed_position(self) -> Position:
        return self.layout.last_position() or Position(self.layout.last_ledger_id, -1)

    async def _read_positions(self, positions: list[Position]) -> list[Entry]:
        self.reads.append(positions)
        return [Entry(p, str(p).encode()) for p in positions]

    def _check_readable(self) -> None:
        pass

    def _cursor_moved(self) -> None:
        pass


def universe(layout: LedgerLayout) -> list[Position]:
    return [Position(s.ledger_id, e) for s in layout.stats() for e in range(s.entries)]


ops = st.lists(st.tuples(st.sampled_from(["delete", "delete", "mark", "read", "rewind"]),
                         st.lists(st.integers(0, 10**6), min_size=1, max_size=4)), max_size=25)


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(0, 5), min_size=1, max_size=5), script=ops)
def test_cursor_matches_a_set_of_acknowledged_positions(counts: list[int], script) -> None:
    asyncio.run(_scenario(counts, script))


async def _scenario(counts: list[int], script) -> None:
    ml = FakeLedger(counts)
    points = universe(ml.layout)
    start = Position(ml.layout.ledger_ids[0], -1)
    cursor = ManagedCursorImpl(ml, "c", durable=False, mark_delete=start)
    acked: set[Position] = set()
    delivered: list[Position] = []
    for op, picks in script:
        chosen = [points[i % len(points)] for i in picks] if points else []
        if op == "delete" and chosen:
            await cursor.delete(chosen)
            acked.update(chosen)
        elif op == "mark" and chosen:
            await cursor.mark_delete(chosen[0])
            acked.update(p for p in points if p <= chosen[0])
        elif op == "read":
            delivered.extend(e.position for e in await cursor.read_entries(picks[0] % 4 + 1))
        elif op == "rewind":
            cursor.rewind()
            delivered.clear()
        prefix = 0
        while prefix < len(points) and points[prefix] in acked:
            prefix += 1
        assert ml.layout.count_at_or_before(cursor.mark_delete_position) == prefix
        assert {p for p in points if cursor.is_deleted(p)} == acked
        assert cursor.backlog_entries() == len(points) - len(acked)
        assert all(lo > cursor.mark_delete_position for lo, _ in cursor.individually_deleted_ranges())
    # whatever was read since the last rewind came in order, skipped what was acknowledged then
    assert delivered == sorted(delivered)
    cursor.rewind()
    rest = []
    while batch := await cursor.read_entries(3):
        rest.extend(e.position for e in batch)
    assert rest == [p for p in points if p not in acked]
    assert not cursor.has_entries()


async def test_read_respects_max_bytes_and_seek() -> None:
    ml = FakeLedger([3, 0, 4])
    cursor = ManagedCursorImpl(ml, "c", durable=False, mark_delete=Position(10, -1))
    got = await cursor.read_entries(10, max_bytes=10)  # each entry is 4-5 bytes: two fit
    assert [e.position for e in got] == [Position(10, 0), Position(10, 1)]
    cursor.seek(Position(20, 0))  # an empty ledger: reading goes on in the next one
    assert (await cursor.read_entries(1))[0].position == Position(30, 0)
    cursor.seek(Position(10, -5))  # never before mark-delete's successor
    assert cursor.read_position == Position(10, 0)
    with pytest.raises(InvalidCursorPositionError):
        await cursor.mark_delete(Position(30, 4))
    with pytest.raises(InvalidCursorPositionError):
        await cursor.delete([Position(20, 0)])
    await cursor.mark_delete(Position(10, 2))  # the end of ledger 10: ledger 20 is empty
    await cursor.delete([Position(30, 0)])
    assert cursor.mark_delete_position == Position(30, 0)
    assert cursor.backlog_entries() == 3


def test_entry_cache_is_bounded_and_evicts_what_was_read() -> None:
    cache = EntryCache(max_bytes=100)
    for i in range(10):
        cache.put(Position(1, i), bytes(30))
    assert cache.size_bytes <= 100 and len(cache) == 3
    assert cache.get(Position(1, 9)) is not None and cache.get(Position(1, 0)) is None
    cache.evict_before(Position(1, 9))
    assert len(cache) == 1 and cache.size_bytes == 30
    cache.put(Position(1, 10), bytes(101))  # larger than the whole cache: not kept
    assert len(cache) == 1


def test_cursor_state_survives_a_restore_from_its_snapshot() -> None:
    async def scenario() -> None:
        ml = FakeLedger([4, 4])
        cursor = ManagedCursorImpl(ml, "c", durable=False, mark_delete=Position(10, -1))
        await cursor.delete([Position(10, 0), Position(10, 2), Position(20, 1), Position(20, 2)])
        await cursor.mark_delete(Position(10, 0), properties={"k": 7})
        restored = ManagedCursorImpl.from_info(ml, "c", cursor.snapshot(), version=3)
        assert restored.mark_delete_position == cursor.mark_delete_position == Position(10, 0)
        assert restored.individually_deleted_ranges() == cursor.individually_deleted_ranges()
        assert restored.properties == {"k": 7} and restored.backlog_entries() == cursor.backlog_entries() == 4
        assert [e.position for e in await restored.read_entries(10)] == [
            Position(10, 1), Position(10, 3), Position(20, 0), Position(20, 3)]

    asyncio.run(scenario())
