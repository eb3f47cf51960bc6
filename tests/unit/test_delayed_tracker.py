"""DelayedTracker (pure): examples, then random operation sequences against a naive model (hypothesis)."""

from __future__ import annotations

import sys
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.managed_ledger.api import Position
from broker.service.topics.delayed_tracker import BYTES_PER_HELD_ENTRY, DelayedTracker, wall_clock_ms


def P(entry: int, ledger: int = 1) -> Position:
    return Position(ledger, entry)


def test_holds_future_entries_in_deliver_time_order():
    t = DelayedTracker(max_entries=10)
    assert t.hold(P(0), 3000, now_ms=1000)
    assert t.hold(P(1), 2000, now_ms=1000)
    assert t.hold(P(2), 2000, now_ms=1000)
    assert len(t) == 3 and P(1) in t
    assert t.next_due_ms() == 2000
    assert t.positions() == [P(1), P(2), P(0)]  # ties in position order
    assert t.pop_due(1999) == []
    assert t.pop_due(2000) == [P(1), P(2)]
    assert t.next_due_ms() == 3000 and len(t) == 1
    assert t.pop_due(10_000) == [P(0)]
    assert t.next_due_ms() is None and len(t) == 0


def test_past_or_absent_deliver_time_is_delivered_at_once():
    t = DelayedTracker(max_entries=10)
    assert not t.hold(P(0), 0, now_ms=1000)  # no deliver time
    assert not t.hold(P(1), -5, now_ms=1000)
    assert not t.hold(P(2), 999, now_ms=1000)
    assert not t.hold(P(3), 1000, now_ms=1000)  # due means now >= deliver time
    assert len(t) == 0


def test_holding_twice_is_one_entry_and_a_late_read_releases_it():
    t = DelayedTracker(max_entries=10)
    assert t.hold(P(0), 2000, now_ms=1000)
    assert t.hold(P(0), 2000, now_ms=1500)  # read again (rewind, reload): still held, once
    assert len(t) == 1 and t.positions() == [P(0)]
    assert not t.hold(P(0), 2000, now_ms=2000)  # read again after its time: delivered by that read...
    assert len(t) == 0 and t.pop_due(5000) == []  # ...and never a second time from the tracker


def test_pop_due_is_limited():
    t = DelayedTracker(max_entries=10)
    for i in range(5):
        t.hold(P(i), 100 + i, now_ms=0)
    assert t.pop_due(1000, max_entries=2) == [P(0), P(1)]
    assert t.pop_due(1000) == [P(2), P(3), P(4)]


def test_discard_and_discard_up_to():
    t = DelayedTracker(max_entries=10)
    for i in range(6):
        t.hold(P(i), 1000 - i, now_ms=0)
    assert t.discard(P(3)) and not t.discard(P(3))
    assert t.discard_up_to(P(1)) == 2
    assert t.discard_up_to(P(1)) == 0
    assert t.positions() == [P(5), P(4), P(2)]
    assert t.next_due_ms() == 995
    t.clear()
    assert len(t) == 0 and t.next_due_ms() is None and t.discard_up_to(P(100)) == 0


def test_room_is_the_bound_and_the_tracker_never_drops():
    t = DelayedTracker(max_entries=3)
    for i in range(3):
        t.hold(P(i), 5000, now_ms=0)
    assert t.room == 0
    # The dispatcher reads no new entry when room is 0; a replayed one still ahead is held anyway.
    assert t.hold(P(9), 6000, now_ms=0) and len(t) == 4 and t.room == 0
    t.pop_due(5000)
    assert t.room == 2


def test_bad_bound_is_refused():
    with pytest.raises(ValueError):
        DelayedTracker(max_entries=0)


def test_wall_clock_is_epoch_ms():
    assert abs(wall_clock_ms() - __import__("time").time() * 1000) < 1000


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="sizes are CPython's")
def test_documented_bytes_per_entry_holds():
    n = 20_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        t = DelayedTracker(max_entries=n)
        for i in range(n):  # a held entry's Position (big ids) outlives the read that made it: counted too
            t.hold(Position(10**6, 10**6 + i), 10**12 + (i * 7919) % 5000, now_ms=0)  # times out of order
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(t) == n
    assert used / n <= BYTES_PER_HELD_ENTRY, used / n


# ------------------------------------------------------------------------------------------ model check

positions = st.builds(P, st.integers(0, 30), st.integers(1, 3))
times = st.integers(-5, 60)
ops = st.lists(st.one_of(
    st.tuples(st.just("hold"), positions, times),
    st.tuples(st.just("pop"), st.integers(0, 60), st.one_of(st.none(), st.integers(0, 5))),
    st.tuples(st.just("discard"), positions),
    st.tuples(st.just("up_to"), positions),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_matches_a_naive_model(script):
    t = DelayedTracker(max_entries=1000)
    model: dict[Position, int] = {}
    now = 0
    for op in script:
        if op[0] == "hold":
            _, pos, at = op
            held = t.hold(pos, at, now)
            if at <= now:
                assert not held
                model.pop(pos, None)
            else:
                assert held
                model.setdefault(pos, at)
        elif op[0] == "pop":
            _, now_ms, limit = op
            now = max(now, now_ms)
            due = sorted((at, pos) for pos, at in model.items() if at <= now)
            if limit is not None:
                due = due[:limit]
            assert t.pop_due(now, limit) == [pos for _, pos in due]
            for _, pos in due:
                del model[pos]
        elif op[0] == "discard":
            assert t.discard(op[1]) == (model.pop(op[1], None) is not None)
        else:
            gone = [p for p in model if p <= op[1]]
            assert t.discard_up_to(op[1]) == len(gone)
            for p in gone:
                del model[p]
        assert len(t) == len(model)
        assert t.positions() == [pos for _, pos in sorted((at, pos) for pos, at in model.items())]
        assert t.next_due_ms() == (min(model.values()) if model else None)
        assert all(p in t for p in model)
