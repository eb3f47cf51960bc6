"""Pure parts of the broker service: hand-rolled frame encoders, entry peeks, ack sets, Key_Shared hashing."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from broker.service.session import wire
from broker.service.topics.entries import (ack_set_to_int, entry_info, full_ack_set, int_to_ack_set, peek_metadata,
                                    publish_time_of, sticky_key)
from broker.service.topics.dispatch.key_ranges import (RANGE_SIZE, AutoSplitSelector, SelectorError, StickySelector, key_hash,
                                       murmur3_32)
from magnetar.protocol import encode_command, encode_entry, join_batch, pb, wrap
from magnetar.protocol.compression import compress

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@given(consumer_id=U64, ledger=st.integers(-1, (1 << 63) - 1), entry=st.integers(-1, (1 << 63) - 1),
       size=st.integers(0, 1 << 30), redeliveries=st.integers(0, 1 << 31), ack_set=st.lists(I64, max_size=4),
       epoch=st.none() | U64)
def test_message_header_matches_protobuf(consumer_id, ledger, entry, size, redeliveries, ack_set, epoch):
    cmd = pb.CommandMessage(consumer_id=consumer_id,
                            message_id=pb.MessageIdData(ledgerId=ledger % (1 << 64), entryId=entry % (1 << 64)),
                            ack_set=ack_set)
    if redeliveries:
        cmd.redelivery_count = redeliveries
    if epoch is not None:
        cmd.consumer_epoch = epoch
    body = wrap(cmd).SerializeToString()
    expected = (4 + len(body) + size).to_bytes(4, "big") + len(body).to_bytes(4, "big") + body
    assert wire.message_frame_header(consumer_id, ledger, entry, size, redelivery_count=redeliveries,
                                     ack_set=ack_set, consumer_epoch=epoch) == expected


@given(producer_id=U64, seq=U64, ledger=U64, entry=U64, highest=st.none() | U64)
def test_send_receipt_matches_protobuf(producer_id, seq, ledger, entry, highest):
    receipt = pb.CommandSendReceipt(producer_id=producer_id, sequence_id=seq,
                                    message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry))
    if highest is not None:
        receipt.highest_sequence_id = highest
    assert wire.send_receipt_frame(producer_id, seq, ledger, entry, highest_sequence_id=highest) == \
        encode_command(wrap(receipt))


@given(bits=st.integers(min_value=0, max_value=(1 << 300) - 1))
def test_ack_sets_round_trip(bits):
    assert ack_set_to_int(int_to_ack_set(bits)) == bits
    assert all(-(1 << 63) <= w < (1 << 63) for w in int_to_ack_set(bits))


def test_ack_set_is_java_bitset_layout():
    # BitSet of 70 members, all set: word 0 = -1 (64 bits), word 1 = 0b111111.
    assert int_to_ack_set(full_ack_set(70)) == [-1, 63]
    assert ack_set_to_int([-2]) == full_ack_set(64) & ~1


def _entry(md: pb.MessageMetadata, payload: bytes) -> bytes:
    return encode_entry(md, payload)


def test_entry_peeks():
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1234, partition_key="k1")
    entry = _entry(md, b"x")
    assert peek_metadata(entry).partition_key == "k1"
    assert entry_info(entry).num_messages == 1 and not entry_info(entry).marker
    assert publish_time_of(entry) == 1234
    assert sticky_key(entry) == b"k1"
    marker = _entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, marker_type=10), b"")
    assert entry_info(marker).marker
    assert entry_info(b"garbage").num_messages == 1 and publish_time_of(b"") == 0
    ordering = _entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, partition_key="a",
                                         ordering_key=b"ord"), b"x")
    assert sticky_key(ordering) == b"ord"
    assert sticky_key(_entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"x")) == \
        b"NONE_KEY"


@pytest.mark.parametrize("codec", [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_sticky_key_of_a_batch_is_its_first_members(codec):
    batch = join_batch([(pb.SingleMessageMetadata(partition_key="first"), b"a"),
                        (pb.SingleMessageMetadata(partition_key="second"), b"b")])
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=2,
                            compression=codec, uncompressed_size=len(batch))
    entry = _entry(md, compress(codec, batch) if codec != pb.NONE else batch)
    assert entry_info(entry).num_messages == 2
    assert sticky_key(entry) == b"first"


def test_murmur3_known_values():
    # Reference values of MurmurHash3_x86_32 with seed 0.
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert all(0 <= key_hash(f"k{i}".encode()) < RANGE_SIZE for i in range(1000))


def test_auto_split_covers_every_hash_and_moves_few_keys():
    sel: AutoSplitSelector[str] = AutoSplitSelector()
    assert sel.select(5) is None
    sel.add("a", "a")
    sel.add("b", "b")
    before = {h: sel.select(h) for h in range(0, RANGE_SIZE, 7)}
    assert set(before.values()) == {"a", "b"}
    share = sum(1 for v in before.values() if v == "a") / len(before)
    assert 0.25 < share < 0.75
    sel.add("c", "c")
    after = {h: sel.select(h) for h in before}
    moved = [h for h in before if before[h] != after[h]]
    assert all(after[h] == "c" for h in moved)  # only keys taken over by the newcomer move
    sel.remove("c")
    assert {h: sel.select(h) for h in before} == before


def test_sticky_selector_ranges():
    sel: StickySelector[str] = StickySelector()
    sel.add("a", [(0, 100), (200, 300)])
    with pytest.raises(SelectorError):
        sel.add("b", [(50, 60)])
    with pytest.raises(SelectorError):
        sel.add("b", [(0, RANGE_SIZE)])
    sel.add("b", [(101, 199)])
    assert (sel.select(150), sel.select(250), sel.select(400)) == ("b", "a", None)
    sel.remove("a")
    assert sel.select(250) is None and sel.ranges("b") == [(101, 199)]


def test_foreign_errors_keep_their_protocol_code():
    from broker.service.errors import PersistenceError, ServiceNotReadyError, map_error
    from magnetar.errors import MagnetarError

    class Elsewhere(MagnetarError):
        server_error = pb.ServiceNotReady
        http_status = 503
        retriable = True

    mapped = map_error(Elsewhere("bundle being unloaded"))
    assert (mapped.server_error, mapped.http_status, mapped.retriable) == (pb.ServiceNotReady, 503, True)
    assert isinstance(map_error(TimeoutError("slow")), ServiceNotReadyError)
    from broker.managed_ledger.errors import ManagedLedgerFencedError, ManagedLedgerWriteError
    assert isinstance(map_error(ManagedLedgerFencedError("x")), ServiceNotReadyError)
    assert isinstance(map_error(ManagedLedgerWriteError("x")), PersistenceError)
    assert map_error(ValueError("bug")).server_error == pb.UnknownError
