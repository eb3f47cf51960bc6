"""Key_Shared dispatch decisions (``broker/service/topics/dispatch/key_shared_decisions.py``), property-tested against their
specification: what is sent obeys the order rules and the consumers' room, and nothing is held without one
of the rules saying so (the half that makes a stall impossible). Also the replay set they consult.
The dispatcher running these decisions is property-tested in ``test_key_shared_liveness.py``."""

from __future__ import annotations

from typing import Optional

from hypothesis import given, strategies as st

from broker.managed_ledger.api import Position
from broker.service.topics.dispatch.shared import ReplaySet
from broker.service.topics.dispatch.key_shared_decisions import (Candidate, ConsumerView, plan_entries, restriction_limit,
                                                select_replay)

CONSUMERS = ["a", "b", "c"]
HASHES = list(range(6))


@st.composite
def views(draw):
    owners = draw(st.fixed_dictionaries({h: st.sampled_from(CONSUMERS + [None]) for h in HASHES}))
    rooms = draw(st.fixed_dictionaries({c: st.integers(-3, 6) for c in CONSUMERS}))
    limits = draw(st.fixed_dictionaries({c: st.none() | st.integers(0, 40) for c in CONSUMERS}))
    return ConsumerView(owner=owners.__getitem__, room=rooms.__getitem__, limit=limits.__getitem__)


positions = st.lists(st.integers(0, 40), unique=True).map(sorted)


@st.composite
def batches(draw):
    ps = draw(positions)
    return [Candidate(p, draw(st.sampled_from(HASHES)), draw(st.integers(1, 3))) for p in ps]


def reason_to_hold(view, cand, room_left: int, *, replayed: bool, earliest: Optional[int]) -> bool:
    c = view.owner(cand.key_hash)
    if c is None:
        return True
    if earliest is not None and (not replayed or earliest < cand.position):
        return True
    limit = view.limit(c)
    if limit is not None and cand.position >= limit:
        return True
    return room_left <= 0


@given(view=views(), batch=batches(), replayed=st.booleans(),
       waiting=st.dictionaries(st.sampled_from(HASHES), st.integers(0, 40)))
def test_plan_sends_by_the_rules_and_holds_only_for_a_reason(view, batch, replayed, waiting):
    plan = plan_entries(batch, view, replayed=replayed, waiting=waiting.get)
    sent = [i for idx in plan.sends.values() for i in idx]
    assert sorted(sent + plan.held) == list(range(len(batch)))
    assert plan.held == sorted(plan.held)
    used = {c: 0 for c in CONSUMERS}
    held_hashes: set[int] = set()
    sends = {i: c for c, idx in plan.sends.items() for i in idx}
    for i, cand in enumerate(batch):
        h = cand.key_hash
        if i in sends:
            c = sends[i]
            assert c == view.owner(h)
            assert h not in held_hashes, "an entry overtook an earlier one of its key"
            room_left = view.room(c) - used[c]
            assert not reason_to_hold(view, cand, room_left, replayed=replayed, earliest=waiting.get(h))
            used[c] += cand.messages
        else:
            c = view.owner(h)
            room_left = view.room(c) - used[c] if c is not None else 0
            if h not in held_hashes:  # the first held of its key must have a reason of its own
                assert reason_to_hold(view, cand, room_left, replayed=replayed, earliest=waiting.get(h))
            held_hashes.add(h)
    for c, idx in plan.sends.items():
        assert idx == sorted(idx)


@st.composite
def replay_sets(draw):
    ps = draw(positions)
    return [(p, draw(st.none() | st.sampled_from(HASHES))) for p in ps]


def deliverable(replay, view, chosen_before: dict) -> list[int]:
    """Positions of ``replay`` that could go now: the earliest of their hash, owned by a consumer with room
    left and not restricted from them."""
    seen: set[int] = set()
    out = []
    for p, h in replay:
        if h is None:
            out.append(p)
            continue
        if h in seen:
            continue
        seen.add(h)
        c = view.owner(h)
        if c is None:
            continue
        limit = view.limit(c)
        if (limit is None or p < limit) and view.room(c) - chosen_before.get(c, 0) > 0:
            out.append(p)
    return out


@given(view=views(), replay=replay_sets(), max_entries=st.integers(0, 8))
def test_replay_selection_skips_exactly_what_cannot_go(view, replay, max_entries):
    chosen = select_replay(iter(replay), max_entries, view)
    order = [p for p, _ in replay]
    assert chosen == [p for p in order if p in set(chosen)] and len(chosen) <= max_entries
    hashes = dict(replay)
    per_consumer: dict = {}
    blocked: set[int] = set()
    last = chosen[-1] if chosen else None
    for p, h in replay:
        if h is None:
            assert p in chosen or len(chosen) == max_entries
            continue
        c = view.owner(h)
        if p in chosen:
            assert h not in blocked, "a later entry of a key chosen while an earlier one stays"
            assert c is not None and (view.limit(c) is None or p < view.limit(c))
            assert view.room(c) - per_consumer.get(c, 0) > 0
            per_consumer[c] = per_consumer.get(c, 0) + 1
        else:
            if h not in blocked and (len(chosen) < max_entries or (last is not None and p < last)):
                room_left = view.room(c) - per_consumer.get(c, 0) if c is not None else 0
                assert c is None or room_left <= 0 or (view.limit(c) is not None and p >= view.limit(c)), \
                    f"{p} (hash {h}) could go but was skipped"
            blocked.add(h)
    assert all(hashes[p] is None or view.owner(hashes[p]) is not None for p in chosen)


@given(view=views(), replay=replay_sets(), max_entries=st.integers(1, 8))
def test_nothing_selected_means_nothing_in_the_replay_set_can_go(view, replay, max_entries):
    """The liveness lemma the dispatcher's *stuck* state rests on."""
    if not select_replay(iter(replay), max_entries, view):
        assert deliverable(replay, view, {}) == []
    else:
        assert deliverable(replay, view, {})


@given(st.lists(st.none() | st.integers(0, 9)))
def test_restriction_limit_is_the_earliest_join(joins):
    known = [j for j in joins if j is not None]
    assert restriction_limit(joins) == (min(known) if known else None)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 12), st.none() | st.sampled_from(HASHES))))
def test_replay_set_knows_the_earliest_position_of_each_hash(ops):
    replay = ReplaySet()
    model: dict[int, Optional[int]] = {}
    for add, entry_id, h in ops:
        pos = Position(1, entry_id)
        if add:
            replay.add(pos, h)
            model.setdefault(entry_id, h)
        else:
            replay.discard(pos)
            model.pop(entry_id, None)
    assert list(replay.items()) == [(Position(1, e), model[e]) for e in sorted(model)]
    for h in HASHES:
        same = [e for e, x in model.items() if x == h]
        assert replay.earliest(h) == (Position(1, min(same)) if same else None)
    replay.clear()
    assert len(replay) == 0 and all(replay.earliest(h) is None for h in HASHES)
