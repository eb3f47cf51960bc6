"""Auto-recovery's pure parts: fragments of a ledger, the slot swap, the stored record, the throttle."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from bookie.autorecovery.model import (REASON_CORRUPT, REASON_LOST, Fragment, Throttle, UnderReplicatedLedger,
                                       fragment_entries, fragments_of, replace_in_segment, repairable_now, segments,
                                       still_pending)
from config_store import InvalidMetadataError, LedgerMetadata, LedgerState


def ledger(ensembles, *, last=9, state=LedgerState.CLOSED, e=3, qw=2, qa=2) -> LedgerMetadata:
    return LedgerMetadata(ledger_id=7, ensemble_size=e, write_quorum_size=qw, ack_quorum_size=qa,
                          ensembles=ensembles, state=state, last_entry_id=last)


def test_segments_end_where_the_next_begins_and_at_the_last_entry_of_a_closed_ledger() -> None:
    md = ledger([(0, ["a", "b", "c"]), (5, ["a", "d", "c"])], last=9)
    assert [(f, l) for f, l, _ in segments(md)] == [(0, 4), (5, 9)]
    open_md = ledger([(0, ["a", "b", "c"])], state=LedgerState.OPEN, last=-1)
    assert segments(open_md)[0][1] == -2  # unknown end: not final


def test_fragment_entries_follow_round_robin_striping() -> None:
    md = ledger([(0, ["a", "b", "c"])], last=5)
    # write set of e: ensemble[e % 3], ensemble[(e + 1) % 3]
    assert fragment_entries(md, Fragment(0, "a")) == [0, 2, 3, 5]
    assert fragment_entries(md, Fragment(0, "b")) == [0, 1, 3, 4]
    assert fragment_entries(md, Fragment(0, "c")) == [1, 2, 4, 5]
    assert fragment_entries(md, Fragment(0, "z")) == []
    assert fragment_entries(md, Fragment(3, "a")) == []  # no segment starts there


def test_fragments_of_lists_every_segment_naming_a_lost_bookie() -> None:
    md = ledger([(0, ["a", "b", "c"]), (5, ["a", "d", "c"])])
    assert fragments_of(md, {"b", "c"}) == [Fragment(0, "b"), Fragment(0, "c"), Fragment(5, "c")]
    assert [f.reason for f in fragments_of(md, {"a": REASON_CORRUPT})] == [REASON_CORRUPT, REASON_CORRUPT]


def test_replace_in_segment_swaps_one_slot_of_one_segment() -> None:
    md = ledger([(0, ["a", "b", "c"]), (5, ["a", "b", "d"])])
    new = replace_in_segment(md, 0, "b", "e")
    assert new.ensembles == [(0, ["a", "e", "c"]), (5, ["a", "b", "d"])]
    assert still_pending(md, Fragment(0, "b")) and not still_pending(new, Fragment(0, "b"))
    with pytest.raises(InvalidMetadataError):
        replace_in_segment(md, 0, "b", "c")  # already a member
    with pytest.raises(InvalidMetadataError):
        replace_in_segment(md, 5, "c", "e")  # not in that segment


@given(st.integers(1, 5), st.data())
def test_a_swap_moves_only_the_entries_of_the_replaced_fragment(e: int, data) -> None:
    qw = data.draw(st.integers(1, e))
    last = data.draw(st.integers(-1, 40))
    bookies = [f"b{i}" for i in range(e)]
    md = ledger([(0, bookies)], last=last, e=e, qw=qw, qa=1)
    victim = data.draw(st.sampled_from(bookies))
    moved = fragment_entries(md, Fragment(0, victim))
    new = replace_in_segment(md, 0, victim, "fresh")
    for entry in range(last + 1):
        before, after = md.write_set(entry), new.write_set(entry)
        if entry in moved:
            assert after == [("fresh" if b == victim else b) for b in before]
        else:
            assert after == before and victim not in before
    assert fragment_entries(new, Fragment(0, "fresh")) == moved


def test_only_closed_ledgers_are_repaired() -> None:
    assert repairable_now(ledger([(0, ["a", "b", "c"])]))
    for state in (LedgerState.OPEN, LedgerState.IN_RECOVERY):
        assert not repairable_now(ledger([(0, ["a", "b", "c"])], state=state, last=-1))


def test_record_merge_is_idempotent_and_round_trips() -> None:
    record = UnderReplicatedLedger(3, (), 1000).with_fragments([Fragment(0, "a"), Fragment(5, "b", REASON_CORRUPT)])
    assert record.with_fragments([Fragment(0, "a", REASON_CORRUPT)]) == record  # same key: kept as it was
    assert UnderReplicatedLedger.from_json(record.to_json()) == record
    assert record.without((0, "a")).fragments == (Fragment(5, "b", REASON_CORRUPT),)
    assert record.fragments[0].reason == REASON_LOST
    with pytest.raises(InvalidMetadataError):
        UnderReplicatedLedger.from_json(b'{"ledgerId": 1}')


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throttle_lets_a_second_of_work_through_then_paces_it() -> None:
    clock = Clock()
    t = Throttle(entries_per_s=100, bytes_per_s=1000, clock=clock)
    assert t.delay_for(50, 500) == 0.0
    assert t.delay_for(50, 500) == 0.0
    assert t.delay_for(10, 0) == pytest.approx(0.1)  # entries are the limit
    clock.now += 0.1
    assert t.delay_for(0, 500) == pytest.approx(0.4)  # bytes: 100 came back in 0.1 s, 400 short
    unlimited = Throttle(entries_per_s=0, bytes_per_s=0, clock=clock)
    assert unlimited.delay_for(10**9, 10**12) == 0.0
    with pytest.raises(ValueError):
        Throttle(entries_per_s=-1, bytes_per_s=0)


# -- Pulsar's checksum inside stored entries ----------------------------------------------------------------

from magnetar.protocol import pulsar_api_pb2 as pb  # noqa: E402
from magnetar.protocol.frames import encode_entry  # noqa: E402

from bookie.autorecovery.pulsar_check import pulsar_entry_intact  # noqa: E402


def _pulsar_entry(payload: bytes, *, bem: bool) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    return encode_entry(md, payload, broker_entry_metadata=pb.BrokerEntryMetadata(index=3) if bem else None)


@given(st.binary(max_size=300), st.booleans(), st.data())
def test_a_flipped_byte_after_the_checksum_is_caught(payload: bytes, bem: bool, data) -> None:
    entry = _pulsar_entry(payload, bem=bem)
    assert pulsar_entry_intact(entry) is True
    start = entry.index(b"\x0e\x01") + 6
    at = data.draw(st.integers(start, len(entry) - 1))
    bad = bytearray(entry)
    bad[at] ^= data.draw(st.integers(1, 255))
    assert pulsar_entry_intact(bytes(bad)) is False


def test_entries_without_pulsars_magic_are_not_judged() -> None:
    assert pulsar_entry_intact(b"") is None
    assert pulsar_entry_intact(b"plain ledger entry bytes") is None
