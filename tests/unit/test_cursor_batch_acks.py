"""Batch-index ack sets of a cursor: the word encoding, the persisted cap, the stored record
(``ManagedCursorInfo.batch_deleted``) and the cursor's bookkeeping, against naive models. No I/O."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.managed_ledger.api import Position
from broker.managed_ledger.cursor import ManagedCursorImpl
from broker.managed_ledger.ranges import (BATCH_ACK_SETS_PERSISTED_MAX, BATCH_ACK_WORDS_PERSISTED_MAX,
                                          ack_set_from_words, ack_set_to_words, batch_ack_sets_to_persist)
from broker.service.topics.entries import ack_set_to_int, int_to_ack_set
from config_store import InvalidMetadataError
from config_store.managed_ledgers import ManagedCursorInfo
from tests.unit.test_managed_cursor import FakeLedger

bit_sets = st.integers(min_value=0, max_value=2**300)


# ------------------------------------------------------------------------------------------ encoding


@settings(max_examples=300)
@given(bits=bit_sets)
def test_words_round_trip_and_match_the_wire_encoding(bits: int) -> None:
    words = ack_set_to_words(bits)
    assert ack_set_from_words(words) == bits
    assert all(-2**63 <= w < 2**63 for w in words)
    assert not words or words[-1] != 0  # no trailing zero words, as BitSet.toLongArray
    assert list(words) == int_to_ack_set(bits) and ack_set_to_int(words) == bits  # what MESSAGE/ACK carry


def test_known_words() -> None:
    assert ack_set_to_words(0) == ()
    assert ack_set_to_words(0b1111100000) == (0x3E0,)  # members 5..9 of a batch of 10 left
    assert ack_set_to_words(1 << 63) == (-2**63,)  # bit 63 is the sign bit of the first word
    assert ack_set_to_words(1 << 64) == (0, 1)
    assert ack_set_from_words([-1]) == 2**64 - 1 and ack_set_from_words([2**64 - 1]) == 2**64 - 1
    with pytest.raises(ValueError):
        ack_set_to_words(-1)


# ------------------------------------------------------------------------------------------ the cap


def test_cap_keeps_the_lowest_positions_and_bounds_entries_and_words() -> None:
    sets = {Position(5, i): 0b10 for i in range(2000, -1, -1)}
    kept = batch_ack_sets_to_persist(sets)
    assert len(kept) == BATCH_ACK_SETS_PERSISTED_MAX
    assert [p for p, _ in kept] == [Position(5, i) for i in range(BATCH_ACK_SETS_PERSISTED_MAX)]
    assert all(words == (2,) for _, words in kept)
    # big batches: the word budget binds first, and the result is a prefix (no holes)
    wide = {Position(1, i): (1 << 64 * 40) - 1 for i in range(1000)}  # 40 words each
    kept = batch_ack_sets_to_persist(wide)
    assert len(kept) == BATCH_ACK_WORDS_PERSISTED_MAX // 40
    assert [p for p, _ in kept] == [Position(1, i) for i in range(len(kept))]
    assert batch_ack_sets_to_persist({Position(1, 1): 0, Position(1, 2): 1}) == [(Position(1, 2), (1,))]
    assert batch_ack_sets_to_persist(wide, entries_max=3, words_max=10**6) == [
        (Position(1, i), ack_set_to_words(wide[Position(1, i)])) for i in range(3)]


def test_cap_keeps_the_stored_cursor_node_well_under_a_megabyte() -> None:
    worst = {Position(2**40 + i, 2**40 + i): (1 << 64 * 16) - 1 for i in range(5000)}  # 1000-message batches
    info = ManagedCursorInfo((1, 0), batch_deleted=[
        (p.ledger_id, p.entry_id, words) for p, words in batch_ack_sets_to_persist(worst)])
    assert len(info.batch_deleted) == BATCH_ACK_SETS_PERSISTED_MAX
    assert len(info.to_json()) < 512 * 1024


# ------------------------------------------------------------------------------------------ the record


@st.composite
def infos_with_batches(draw) -> ManagedCursorInfo:
    md = (draw(st.integers(0, 20)), draw(st.integers(-1, 20)))
    above = sorted(set(draw(st.lists(st.tuples(st.integers(md[0], 30), st.integers(0, 30)), max_size=6))))
    above = [p for p in above if p > md]
    batch = [(lid, eid, ack_set_to_words(draw(st.integers(1, 2**200)))) for lid, eid in above]
    return ManagedCursorInfo(md, [], {"p": 1}, 5, batch)


@settings(max_examples=200)
@given(info=infos_with_batches())
def test_record_round_trips(info: ManagedCursorInfo) -> None:
    assert ManagedCursorInfo.from_json(info.to_json()) == info


def test_record_field_is_documented_and_left_out_when_empty() -> None:
    info = ManagedCursorInfo((7, 3), [(7, 4, 7, 6)], {}, 9, [(7, 8, (0x3E0,)), (7, 9, (-1, 1))])
    assert json.loads(info.to_json())["batchDeletedIndexes"] == [[7, 8, [992]], [7, 9, [-1, 1]]]
    plain = ManagedCursorInfo((7, 3), [(7, 4, 7, 6)], {}, 9)
    assert "batchDeletedIndexes" not in json.loads(plain.to_json())
    # a record written before the field existed reads as before
    old = b'{"version":1,"markDelete":{"ledgerId":7,"entryId":3},"individuallyDeleted":[],"properties":{}}'
    assert ManagedCursorInfo.from_json(old).batch_deleted == []


@pytest.mark.parametrize("batch", [
    [[7, 3, [1]]],  # at mark-delete
    [[7, 2, [1]]],  # below it
    [[7, 8, [0]]],  # no member left: that entry is deleted, not partly acknowledged
    [[7, 8, []]],
    [[7, 8, [2**63]]],  # not an int64
    [[7, 8, [1.5]]],
    [[7, 8, [True]]],
    [[7, 9, [1]], [7, 8, [1]]],  # unsorted
    [[7, 8, [1]], [7, 8, [2]]],  # repeated
    [[7, 8]], [[7, 8, 1]], [7],
])
def test_corrupt_batch_deleted_indexes_rejected(batch) -> None:
    data = json.dumps({"version": 1, "markDelete": {"ledgerId": 7, "entryId": 3},
                       "batchDeletedIndexes": batch}).encode()
    with pytest.raises(InvalidMetadataError):
        ManagedCursorInfo.from_json(data)


# ------------------------------------------------------------------------------------------ the cursor


async def test_partial_acks_are_anded_and_an_emptied_set_deletes_the_entry() -> None:
    ml = FakeLedger([4, 4])
    cursor = ManagedCursorImpl(ml, "c", durable=False, mark_delete=Position(10, -1))
    p = Position(10, 1)
    await cursor.delete_batch_indexes({p: 0b1110})
    await cursor.delete_batch_indexes({p: 0b1011, Position(10, 9): 1, Position(99, 0): 1})  # no such entries
    assert cursor.batch_ack_sets() == {p: 0b1010}
    assert not cursor.is_deleted(p)
    await cursor.delete_batch_indexes({p: 0b0101})
    assert cursor.is_deleted(p) and cursor.batch_ack_sets() == {}
    await cursor.delete_batch_indexes({p: 0b1})  # already deleted: nothing changes
    assert cursor.batch_ack_sets() == {}
    with pytest.raises(ValueError):
        await cursor.delete_batch_indexes({Position(10, 2): -1})


async def test_sets_go_when_the_entry_is_deleted_passed_or_reset() -> None:
    ml = FakeLedger([4, 4])
    cursor = ManagedCursorImpl(ml, "c", durable=False, mark_delete=Position(10, -1))
    await cursor.delete_batch_indexes({Position(10, 1): 2, Position(10, 3): 2, Position(20, 0): 2, Position(20, 2): 6})
    await cursor.delete([Position(10, 3)])
    assert set(cursor.batch_ack_sets()) == {Position(10, 1), Position(20, 0), Position(20, 2)}
    await cursor.mark_delete(Position(10, 2))  # passes (10,1) and, with (10,3) deleted, reaches the ledger end
    assert cursor.mark_delete_position == Position(10, 3)
    assert set(cursor.batch_ack_sets()) == {Position(20, 0), Position(20, 2)}
    await cursor.delete([Position(10, 3)])
    await cursor.reset(Position(20, 1))
    assert cursor.batch_ack_sets() == {}


async def test_snapshot_and_restore_carry_the_sets_capped() -> None:
    ml = FakeLedger([4, BATCH_ACK_SETS_PERSISTED_MAX + 10])
    cursor = ManagedCursorImpl(ml, "c", durable=False, mark_delete=Position(10, 0))
    sets = {Position(20, i): (1 << 70) | i | 1 for i in range(BATCH_ACK_SETS_PERSISTED_MAX + 10)}
    sets[Position(10, 2)] = 0b100
    await cursor.delete_batch_indexes(sets)
    await cursor.delete([Position(10, 1)])
    info = cursor.snapshot()
    assert len(info.batch_deleted) == BATCH_ACK_SETS_PERSISTED_MAX
    assert info.batch_deleted[0] == (10, 2, (0b100,))
    restored = ManagedCursorImpl.from_info(ml, "c", info, version=0)
    assert restored.mark_delete_position == Position(10, 1)
    expected = {p: bits for p, bits in sorted(sets.items())[:BATCH_ACK_SETS_PERSISTED_MAX]}
    assert restored.batch_ack_sets() == expected
    assert restored.batch_ack_set(Position(10, 2)) == 0b100 and restored.batch_ack_set(Position(10, 3)) is None
    # entries read after the restore include the partly acknowledged ones (their members are still due)
    assert [e.position for e in await restored.read_entries(2)] == [Position(10, 2), Position(10, 3)]


ack_scripts = st.lists(st.tuples(st.sampled_from(["batch", "batch", "batch", "delete", "mark"]),
                                 st.integers(0, 11), st.integers(0, 255)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(script=ack_scripts)
def test_cursor_sets_match_a_model(script) -> None:
    async def scenario() -> None:
        ml = FakeLedger([5, 0, 7])
        points = [Position(10, e) for e in range(5)] + [Position(30, e) for e in range(7)]
        cursor = ManagedCursorImpl(ml, "c", durable=False, mark_delete=Position(10, -1))
        model: dict[Position, int] = {}
        deleted: set[Position] = set()
        for op, i, bits in script:
            p = points[i]
            if op == "batch":
                await cursor.delete_batch_indexes({p: bits})
                if p not in deleted:
                    left = model.get(p, bits) & bits
                    if left:
                        model[p] = left
                    else:
                        model.pop(p, None)
                        deleted.add(p)
            elif op == "delete":
                await cursor.delete([p])
                deleted.add(p)
                model.pop(p, None)
            else:
                await cursor.mark_delete(p)
                deleted.update(q for q in points if q <= p)
                model = {q: b for q, b in model.items() if q > p}
            assert cursor.batch_ack_sets() == model
            assert {q for q in points if cursor.is_deleted(q)} == deleted
            restored = ManagedCursorImpl.from_info(ml, "c", cursor.snapshot(), version=0)
            assert restored.batch_ack_sets() == model
            assert restored.mark_delete_position == cursor.mark_delete_position

    asyncio.run(scenario())
