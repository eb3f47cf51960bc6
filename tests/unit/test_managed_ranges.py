"""RangeSet and LedgerLayout (pure) against naive models, with hypothesis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.managed_ledger.api import Position
from broker.managed_ledger.layout import LedgerLayout, LedgerStats, select_ledgers_to_trim
from broker.managed_ledger.ranges import RangeSet

# A managed ledger's shape: ledger ids ascending (with gaps), some ledgers empty.
layouts = st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=6).flatmap(
    lambda counts: st.lists(st.integers(min_value=1, max_value=3), min_size=len(counts), max_size=len(counts)).map(
        lambda gaps: _make_layout(counts, gaps)))


def _make_layout(counts: list[int], gaps: list[int]) -> LedgerLayout:
    layout, ledger_id = LedgerLayout(), 0
    for count, gap in zip(counts, gaps):
        ledger_id += gap
        layout.append(LedgerStats(ledger_id, count, count * 10))
    return layout


def universe(layout: LedgerLayout) -> list[Position]:
    return [Position(s.ledger_id, e) for s in layout.stats() for e in range(s.entries)]


def check_invariants(rs: RangeSet) -> None:
    ranges = rs.ranges()
    assert all(lo < hi for lo, hi in ranges)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges  # sorted and not touching


def maximal_runs(layout: LedgerLayout, points: set[Position]) -> list[tuple[Position, Position]]:
    """The canonical ranges of ``points``: each maximal run of consecutive existing positions."""
    runs, start, prev = [], None, None
    for p in universe(layout):
        if p in points:
            if start is None:
                start = p
            prev = p
        elif start is not None:
            runs.append((layout.previous_position(start), prev))
            start = None
    if start is not None:
        runs.append((layout.previous_position(start), prev))
    return runs


@settings(max_examples=300, deadline=None)
@given(data=st.data(), layout=layouts)
def test_rangeset_matches_a_set_of_positions(data, layout: LedgerLayout) -> None:
    points = universe(layout)
    if not points:
        return
    rs: RangeSet[Position] = RangeSet()
    model: set[Position] = set()
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["one", "span", "cut"]), st.sampled_from(points),
                                       st.sampled_from(points)), max_size=40))
    for op, a, b in ops:
        if op == "one":
            rs.add(layout.previous_position(a), a)
            model.add(a)
        elif op == "span":
            a, b = min(a, b), max(a, b)
            rs.add(layout.previous_position(a), b)
            model.update(p for p in points if a <= p <= b)
        else:
            rs.remove_at_or_below(a)
            model = {p for p in model if p > a}
        check_invariants(rs)
        assert {p for p in points if rs.contains(p)} == model
        assert rs.ranges() == maximal_runs(layout, model)
        assert sum(layout.entries_between(lo, hi) for lo, hi in rs) == len(model)


def test_rangeset_merges_across_ledger_boundary() -> None:
    layout = LedgerLayout([LedgerStats(1, 3), LedgerStats(2, 0), LedgerStats(5, 2)])
    rs: RangeSet[Position] = RangeSet()
    for p in [Position(1, 2), Position(5, 0), Position(1, 1)]:
        rs.add(layout.previous_position(p), p)
    assert rs.ranges() == [(Position(1, 0), Position(5, 0))]
    assert rs.range_containing(Position(1, 2)) == (Position(1, 0), Position(5, 0))
    assert not rs.contains(Position(1, 0)) and not rs.contains(Position(5, 1))


@settings(max_examples=200, deadline=None)
@given(layout=layouts, data=st.data())
def test_layout_arithmetic_matches_enumeration(layout: LedgerLayout, data) -> None:
    points = universe(layout)
    ids = layout.ledger_ids
    probe = data.draw(st.tuples(st.integers(min_value=0, max_value=ids[-1] + 1), st.integers(-1, 7)))
    p = Position(*probe)
    after = [q for q in points if q >= p]
    expected_norm = after[0] if after else max(p, Position(ids[-1], 0))
    assert layout.normalize(p) == Position(expected_norm.ledger_id, max(expected_norm.entry_id, 0))
    strictly_after = [q for q in points if q > p]
    assert layout.next_position(p) == (strictly_after[0] if strictly_after else layout.normalize(
        Position(p.ledger_id, p.entry_id + 1)))
    before = [q for q in points if q < p]
    if before:
        assert layout.previous_position(p) == before[-1]
    assert layout.count_at_or_before(p) == sum(1 for q in points if q <= p)
    q = Position(*data.draw(st.tuples(st.integers(min_value=0, max_value=ids[-1] + 1), st.integers(-1, 7))))
    assert layout.entries_between(p, q) == sum(1 for x in points if p < x <= q)
    assert layout.number_of_entries == len(points)
    for i, x in enumerate(points):
        assert layout.position_at(i) == x
    assert layout.last_position() == (points[-1] if points else None)


def test_trim_selection_follows_slowest_cursor_and_retention() -> None:
    layout = LedgerLayout([LedgerStats(1, 10, 100, 1_000), LedgerStats(2, 10, 100, 2_000),
                           LedgerStats(3, 10, 100, 3_000), LedgerStats(4, 5, 50, 0)])
    now = 10_000
    sel = lambda md, t=0, s=0: select_ledgers_to_trim(  # noqa: E731
        layout, slowest_mark_delete=md, now_ms=now, retention_time_s=t, retention_size_bytes=s)
    assert sel(Position(2, 8)) == [1]  # ledger 2 not fully consumed
    assert sel(Position(2, 9)) == [1, 2]
    assert sel(Position(4, 3)) == [1, 2, 3]  # never the current ledger
    assert sel(None) == [1, 2, 3]  # no durable cursor: everything but the current ledger
    assert sel(Position(4, 3), t=-1, s=-1) == []  # infinite retention
    assert sel(Position(4, 3), t=8.5, s=-1) == [1]  # only ledger 1 closed more than 8.5 s ago
    assert sel(Position(4, 3), t=-1, s=200) == [1, 2]  # 350 bytes; keep at most 200
    assert sel(Position(0, -1)) == []
