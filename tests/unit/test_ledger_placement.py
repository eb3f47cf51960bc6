"""Quorum arithmetic and placement of the ledger client (pure logic)."""

import random

from hypothesis import given, strategies as st

from bookie.client import placement


def test_write_set_stripes_round_robin() -> None:
    ensemble = ["a", "b", "c"]
    assert [placement.write_set(ensemble, 2, e) for e in range(4)] == [["a", "b"], ["b", "c"], ["c", "a"], ["a", "b"]]


@given(st.integers(1, 7).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, e))), st.integers(0, 10_000))
def test_write_set_has_qw_distinct_members(sizes, entry_id) -> None:
    e, qw = sizes
    ensemble = [f"b{i}" for i in range(e)]
    ws = placement.write_set(ensemble, qw, entry_id)
    assert len(ws) == qw == len(set(ws))
    assert ws[0] == ensemble[entry_id % e]


def test_replace_keeps_slot_and_avoids_members_and_excluded() -> None:
    rng = random.Random(7)
    new = placement.replace_bookies(["a", "b", "c"], {"b"}, ["a", "b", "c", "d", "e"], exclude={"d"}, rng=rng)
    assert new == ["a", "e", "c"]
    assert placement.replace_bookies(["a", "b", "c"], {"b"}, ["a", "b", "c"]) is None


def test_choose_ensemble_needs_enough_bookies() -> None:
    assert placement.choose_ensemble(["a", "b"], 3) is None
    assert sorted(placement.choose_ensemble(["a", "b", "c"], 3)) == ["a", "b", "c"]


def test_fencing_coverage_3_2_2() -> None:
    ens = ["a", "b", "c"]
    # Qw - Qa + 1 = 1 answer per write set: any two bookies cover {ab, bc, ca}; one does not.
    assert placement.fencing_covers_every_write_set(ens, 2, 2, {"a", "b"})
    assert not placement.fencing_covers_every_write_set(ens, 2, 2, {"a"})


def test_fencing_coverage_3_3_2_needs_two_per_write_set() -> None:
    ens = ["a", "b", "c"]
    assert not placement.fencing_covers_every_write_set(ens, 3, 2, {"a"})
    assert placement.fencing_covers_every_write_set(ens, 3, 2, {"a", "b"})


@given(st.integers(1, 5).flatmap(lambda qw: st.tuples(st.just(qw), st.integers(1, qw))), st.integers(0, 5))
def test_absence_rule_matches_quorum_intersection(quorums, denials) -> None:
    qw, qa = quorums
    denials = min(denials, qw)
    # If `denials` bookies lack the entry, at most qw - denials hold it; it was acked only if that >= qa.
    could_have_been_acked = qw - denials >= qa
    assert placement.entry_absent_for_sure(qw, qa, denials) == (not could_have_been_acked)
