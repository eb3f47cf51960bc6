"""The protocol client's pure parts: receipt bookkeeping, acks, backoff, URLs, batches, metadata, errors."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, MessageId, ProtocolError, compress, encode_single_message, join_batch, pb
from magnetar.protocol.client import (
    AckTracker,
    Backoff,
    BatchBuilder,
    PendingSends,
    ReceiptOutcome,
    ServiceUrl,
    error_from_server,
    message_metadata,
    parse_service_url,
    unpack_entry,
)
from magnetar.protocol.client import errors
from magnetar.protocol.client.commands import ack_command, connect_command, encode_send, encode_send_raw
from magnetar.protocol.client.send_queue import PendingSend


def pending(seq: int, n: int = 1) -> PendingSend:
    return PendingSend(seq, seq + n - 1, n, [b"frame"], object(), 0.0)


# --------------------------------------------------------------------------------------------------------
# Receipts
# --------------------------------------------------------------------------------------------------------


def test_receipts_match_the_head_only() -> None:
    q = PendingSends(max_sends=3)
    assert q.on_receipt(0) == (ReceiptOutcome.NO_PENDING, None)
    for seq in (0, 1, 5):
        q.append(pending(seq))
    assert not q.has_room()
    assert q.on_receipt(1) == (ReceiptOutcome.OUT_OF_ORDER, None)
    outcome, send = q.on_receipt(0)
    assert outcome is ReceiptOutcome.MATCHED and send.sequence_id == 0 and q.has_room()
    assert q.on_receipt(0) == (ReceiptOutcome.STALE, None)
    assert q.on_receipt(1)[0] is ReceiptOutcome.MATCHED
    assert q.on_receipt(5)[0] is ReceiptOutcome.MATCHED and len(q) == 0 and q.messages == 0


def test_sends_must_be_queued_in_order() -> None:
    q = PendingSends(max_sends=10)
    q.append(pending(10, n=5))
    assert q.last_sequence_id == 14
    with pytest.raises(ValueError):
        q.append(pending(14))
    q.append(pending(15))
    assert q.messages == 6


def test_remove_expired_and_drain() -> None:
    q = PendingSends(max_sends=10)
    for seq in range(4):
        q.append(PendingSend(seq, seq, 1, [b""], None, float(seq)))
    assert q.remove(2).sequence_id == 2 and q.remove(2) is None
    assert [s.sequence_id for s in q] == [0, 1, 3]
    assert not q.expired(0.5, 1.0) and q.expired(1.0, 1.0)
    assert [s.sequence_id for s in q.drain()] == [0, 1, 3] and len(q) == 0 and not q.expired(9, 1)


@given(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=30), st.randoms())
def test_in_order_receipts_complete_every_send_exactly_once(sizes, rnd) -> None:
    """Whatever receipts a broker repeats (duplicates, stale ones), each send completes once, in order."""
    q = PendingSends(max_sends=100)
    seq = 0
    for n in sizes:
        q.append(pending(seq, n))
        seq += n
    order = [s.sequence_id for s in q]
    completed = []
    for expected in order:
        for _ in range(rnd.randint(0, 2)):  # stale repeats of earlier receipts
            if completed:
                assert q.on_receipt(rnd.choice(completed))[0] is ReceiptOutcome.STALE
        outcome, send = q.on_receipt(expected)
        assert outcome is ReceiptOutcome.MATCHED
        completed.append(send.sequence_id)
    assert completed == order and q.messages == 0


# --------------------------------------------------------------------------------------------------------
# Acks
# --------------------------------------------------------------------------------------------------------


def test_batch_is_acknowledged_once_every_message_is() -> None:
    t = AckTracker()
    ids = [MessageId(3, 7, -1, i, 3) for i in range(3)]
    assert not t.ack(ids[2]) and not t.ack(ids[0]) and t.open_batches == 1
    assert t.take() == ([], None)
    assert t.ack(ids[1]) and t.open_batches == 0
    assert t.take() == ([MessageId(3, 7)], None)
    assert t.ack(MessageId(3, 8)) and t.take() == ([MessageId(3, 8)], None)


def test_cumulative_ack_positions() -> None:
    t = AckTracker()
    assert t.ack_cumulative(MessageId(1, 5, -1, 0, 4))  # inside a batch: up to the previous entry
    assert t.take() == ([], MessageId(1, 4))
    assert not t.ack_cumulative(MessageId(1, 4))  # not beyond what was sent
    assert t.ack_cumulative(MessageId(1, 5, -1, 3, 4))  # last of the batch: the entry itself
    t.ack(MessageId(1, 2))
    t.ack(MessageId(1, 9))
    individual, cumulative = t.take()
    assert cumulative == MessageId(1, 5) and individual == [MessageId(1, 9)]
    t.reset_position()
    assert t.ack_cumulative(MessageId(1, 1))


def test_ack_grouping_threshold_and_restore() -> None:
    t = AckTracker(max_pending=3)
    for i in range(3):
        t.ack(MessageId(1, i))
    assert t.should_flush and t.pending == 3
    individual, cumulative = t.take()
    t.restore(individual, cumulative)
    assert t.take() == ([MessageId(1, 0), MessageId(1, 1), MessageId(1, 2)], None)


# --------------------------------------------------------------------------------------------------------
# Backoff and URLs
# --------------------------------------------------------------------------------------------------------


def test_backoff_doubles_caps_jitters_and_resets() -> None:
    b = Backoff(initial_s=0.1, max_s=1.0, jitter=0.0)
    assert [round(b.next_delay_s(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next_delay_s() == 0.1
    jittery = Backoff(initial_s=1.0, max_s=1.0, jitter=0.5, rand=random.Random(1).random)
    delays = [jittery.next_delay_s() for _ in range(100)]
    assert all(0.5 <= d <= 1.0 for d in delays) and len(set(delays)) > 50
    with pytest.raises(ValueError):
        Backoff(initial_s=0)


def test_service_urls() -> None:
    url = parse_service_url("pulsar://a:1,b, [::1]:7/")
    assert url == ServiceUrl("pulsar", (("a", 1), ("b", 6650), ("::1", 7)))
    assert str(url) == "pulsar://a:1,b:6650,[::1]:7" and not url.tls and url.host_port == "a:1"
    assert str(url.single(1)) == "pulsar://b:6650"
    tls = parse_service_url("pulsar+ssl://proxy")
    assert tls.tls and tls.hosts == (("proxy", 6651),)
    for bad in ("http://x:8080", "x:6650", "pulsar://", "pulsar://a:notaport"):
        with pytest.raises(errors.InvalidServiceUrlError):
            parse_service_url(bad)


# --------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------


def test_server_errors_map_to_types_with_policy() -> None:
    err = error_from_server(pb.ServiceNotReady, "loading", context="PRODUCER")
    assert isinstance(err, errors.ServiceNotReadyError) and err.retriable
    assert str(err) == "PRODUCER: ServiceNotReady: loading" and err.code_name == "ServiceNotReady"
    assert not error_from_server(pb.ProducerFenced, "").retriable
    assert isinstance(error_from_server(pb.ProducerBlockedQuotaExceededException, "q"),
                      errors.ProducerBlockedQuotaExceededError)
    unknown = error_from_server(999, "?")
    assert type(unknown) is errors.ServerError and unknown.code == 999 and "ServerError(999)" in str(unknown)
    for code in pb.ServerError.values():
        mapped = error_from_server(code, "m")
        assert mapped.code == code and isinstance(mapped, errors.ClientError)


# --------------------------------------------------------------------------------------------------------
# Commands, metadata and batches
# --------------------------------------------------------------------------------------------------------


def test_connect_command_matches_what_pulsar_client_sends() -> None:
    cmd = connect_command(auth_method_name=None, proxy_to_broker_url="broker:6650")
    assert cmd.connect.protocol_version == 20 and cmd.connect.auth_method_name == "none"
    assert cmd.connect.proxy_to_broker_url == "broker:6650"
    assert not cmd.connect.HasField("auth_data")


def test_message_metadata() -> None:
    md = message_metadata(producer_name="p", sequence_id=3, publish_time_ms=10, key="k", properties={"a": "b"},
                          event_time_ms=5, ordering_key=b"o", replicate_to=["eu"], deliver_at_time_ms=99)
    assert (md.producer_name, md.sequence_id, md.publish_time, md.partition_key) == ("p", 3, 10, "k")
    assert [(kv.key, kv.value) for kv in md.properties] == [("a", "b")]
    assert md.event_time == 5 and md.ordering_key == b"o" and list(md.replicate_to) == ["eu"]
    assert md.deliver_at_time == 99 and not md.HasField("num_messages_in_batch")
    plain = message_metadata(producer_name="p", sequence_id=0)
    assert plain.publish_time > 1_600_000_000_000 and not plain.HasField("event_time")


def test_send_frames_decode_back() -> None:
    md = message_metadata(producer_name="p", sequence_id=7, publish_time_ms=1)
    decoded = FrameDecoder().feed(encode_send(3, 7, md, b"payload"))[0]
    assert decoded.command.send.producer_id == 3 and decoded.command.send.sequence_id == 7
    assert not decoded.command.send.HasField("num_messages")  # as pulsar-client: left out for one message
    assert decoded.metadata == md and decoded.payload == b"payload" and decoded.checksum_ok
    batch = FrameDecoder().feed(encode_send(3, 7, md, b"x", num_messages=5, highest_sequence_id=11))[0]
    assert batch.command.send.num_messages == 5 and batch.command.send.highest_sequence_id == 11
    raw = FrameDecoder().feed(b"".join(encode_send_raw(3, 8, decoded.entry, num_messages=2)))[0]
    assert raw.entry == decoded.entry and raw.command.send.sequence_id == 8


def test_ack_command() -> None:
    cmd = ack_command(4, [MessageId(1, 2), MessageId(1, 3)], validation_error=pb.CommandAck.ChecksumMismatch)
    assert cmd.ack.consumer_id == 4 and [m.entryId for m in cmd.ack.message_id] == [2, 3]
    assert cmd.ack.ack_type == pb.CommandAck.Individual and cmd.ack.validation_error == 2
    assert ack_command(4, [MessageId(1, 2)], cumulative=True).ack.ack_type == pb.CommandAck.Cumulative


def test_batch_builder_limits_and_layout() -> None:
    b = BatchBuilder(max_messages=3, max_bytes=10_000)
    assert not b.add(b"a", sequence_id=5, key="k", properties={"x": "y"}, event_time_ms=9)
    assert not b.add(b"bb")
    assert b.add(b"ccc") and b.full
    built = b.build(producer_name="p", sequence_id=5, publish_time_ms=77)
    assert len(b) == 0 and b.size_bytes == 0
    assert built.num_messages == 3 and (built.sequence_id, built.highest_sequence_id) == (5, 7)
    assert built.metadata.num_messages_in_batch == 3 and built.metadata.publish_time == 77
    messages, skipped = unpack_entry(pb.MessageIdData(ledgerId=1, entryId=2), built.metadata, built.payload)
    assert skipped == 0 and [m.payload for m in messages] == [b"a", b"bb", b"ccc"]
    assert messages[0].key == "k" and messages[0].properties == {"x": "y"} and messages[0].event_time_ms == 9
    assert messages[2].message_id == MessageId(1, 2, -1, 2, 3) and messages[1].sequence_id == 6
    with pytest.raises(ValueError):
        b.build(producer_name="p", sequence_id=0)
    small = BatchBuilder(max_bytes=100)
    assert small.fits(500)  # an empty batch takes anything
    small.add(b"x" * 50)
    assert not small.fits(60) and small.fits(10)


def test_batch_builder_compresses() -> None:
    b = BatchBuilder(compression=pb.ZLIB)
    for _ in range(50):
        b.add_encoded(encode_single_message(pb.SingleMessageMetadata(), b"z" * 100))
    built = b.build(producer_name="p", sequence_id=0)
    assert built.metadata.compression == pb.ZLIB and built.metadata.uncompressed_size > len(built.payload)
    messages, _ = unpack_entry(pb.MessageIdData(ledgerId=1, entryId=0), built.metadata, built.payload)
    assert len(messages) == 50 and messages[49].payload == b"z" * 100


def test_unpack_whole_keeps_the_entry_as_one_message_standing_for_its_batch() -> None:
    b = BatchBuilder(compression=pb.LZ4)
    for i in range(4):
        b.add(f"m{i}".encode() * 30)
    built = b.build(producer_name="p", sequence_id=0)
    mid = pb.MessageIdData(ledgerId=3, entryId=8)
    [msg], skipped = unpack_entry(mid, built.metadata, built.payload, partition=1, whole=True,
                                  ack_set=[0b0001])  # an ack set is not applied to a whole entry
    assert skipped == 0 and msg.num_messages == 4 and msg.payload == built.payload  # as stored: compressed
    assert msg.message_id == MessageId(3, 8, 1) and msg.message_id.batch_index == -1
    marker = message_metadata(producer_name="p", sequence_id=0)
    marker.marker_type = 10
    assert unpack_entry(mid, marker, b"", whole=True) == ([], 1)  # markers are never handed over
    [single], _ = unpack_entry(mid, message_metadata(producer_name="p", sequence_id=1), b"v", whole=True)
    assert single.num_messages == 1 and single.payload == b"v"


def test_unpack_single_markers_ack_sets_and_compacted() -> None:
    mid = pb.MessageIdData(ledgerId=4, entryId=5)
    md = message_metadata(producer_name="p", sequence_id=9, key="k", properties={"a": "1"})
    md.replicated_from = "us-east"
    [msg], skipped = unpack_entry(mid, md, b"v", redelivery_count=2, partition=3, topic="t")
    assert msg.message_id == MessageId(4, 5, 3) and msg.redelivery_count == 2 and msg.topic == "t"
    assert msg.key == "k" and msg.properties == {"a": "1"} and msg.sequence_id == 9
    assert msg.replicated_from == "us-east" and msg.producer_name == "p" and msg.single_metadata is None

    marker = message_metadata(producer_name="p", sequence_id=0)
    marker.marker_type = pb.REPLICATED_SUBSCRIPTION_SNAPSHOT
    assert unpack_entry(mid, marker, b"snapshot") == ([], 1)

    items = [(pb.SingleMessageMetadata(compacted_out=(i == 1)), f"m{i}".encode()) for i in range(4)]
    batch = message_metadata(producer_name="p", sequence_id=0)
    batch.num_messages_in_batch = 4
    messages, skipped = unpack_entry(mid, batch, join_batch(items), ack_set=[0b1101])
    # ack set: bit set = still unacknowledged; bit 1 clear (acked) and item 1 compacted anyway
    assert [m.payload for m in messages] == [b"m0", b"m2", b"m3"] and skipped == 1
    messages, skipped = unpack_entry(mid, batch, join_batch(items), ack_set=[0b0001])
    assert [m.payload for m in messages] == [b"m0"] and skipped == 3


def test_unpack_rejects_corrupt_batches_and_compression() -> None:
    mid = pb.MessageIdData(ledgerId=1, entryId=0)
    md = message_metadata(producer_name="p", sequence_id=0)
    md.num_messages_in_batch = 3
    with pytest.raises(ProtocolError):
        unpack_entry(mid, md, join_batch([(pb.SingleMessageMetadata(), b"only one")]))
    md = message_metadata(producer_name="p", sequence_id=0)
    md.compression = pb.ZLIB
    md.uncompressed_size = 10
    with pytest.raises(ProtocolError):
        unpack_entry(mid, md, b"not zlib")
    md.uncompressed_size = 5
    [msg], _ = unpack_entry(mid, md, compress(pb.ZLIB, b"hello"))
    assert msg.payload == b"hello"
