"""Seek (by message id and by publish time), readers (earliest, latest, a given id, inclusive),
``has_message_available`` / GET_LAST_MESSAGE_ID, with pulsar-client."""

from __future__ import annotations

import time

import pulsar
import pytest

from broker.service import ServiceConfig
from magnetar.protocol import pb
from tests.integration.test_broker_protocol import RawConnection
from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

RECEIVE_MS = 5000
NEW = [b"new0", b"new1", b"new2"]
MEMORY_ONLY = pytest.mark.parametrize("storage", ["memory"])
SHORT_GRACE = {"config": ServiceConfig(stats_update_interval_s=1.0, reader_seek_reconnect_grace_s=2.0)}


def publish(client, topic, n, *, batching=False, prefix="m"):
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=20)
    ids = []
    for i in range(n):
        if batching:
            producer.send_async(f"{prefix}{i}".encode(), lambda res, mid: ids.append(mid))
        else:
            ids.append(producer.send(f"{prefix}{i}".encode()))
    producer.flush()
    wait_for(lambda: len(ids) == n, 10, what="all sends acknowledged")
    producer.close()
    return sorted(ids)


def test_seek_by_message_id_rewinds_a_durable_subscription(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    ids = publish(client, topic, 10)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    consumer.seek(ids[4])  # pulsar-client's seek is exclusive of the id unless start_message_id_inclusive
    again = [consumer.receive(RECEIVE_MS) for _ in range(5)]
    assert [m.data() for m in again] == [f"m{i}".encode() for i in range(5, 10)]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)


def test_seek_inclusive_redelivers_the_id_itself(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", start_message_id_inclusive=True)
    ids = publish(client, topic, 5)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    consumer.seek(ids[2])
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(3)] == [b"m2", b"m3", b"m4"]


def test_seek_to_earliest_and_latest(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    publish(client, topic, 5)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(RECEIVE_MS).data() == b"m0"
    consumer.seek(pulsar.MessageId.latest)
    publish(client, topic, 1, prefix="new")
    assert consumer.receive(RECEIVE_MS).data() == b"new0"


def next_ms() -> int:
    """A millisecond after every message published so far (publish times are in ms)."""
    last_ms = int(time.time() * 1000)
    boundary_ms = wait_for(lambda: (now := int(time.time() * 1000)) > last_ms and now, 5, what="a later ms")
    wait_for(lambda: int(time.time() * 1000) > boundary_ms, 5, what="a ms after the boundary")
    return boundary_ms


def publish_old_and_new(client, topic):
    """Three "old" messages, then three "new" ones; returns (old ids, new ids, a time between them)."""
    old = publish(client, topic, 3, prefix="old")
    boundary_ms = next_ms()
    return old, publish(client, topic, 3, prefix="new"), boundary_ms


def read(reader, n):
    return [reader.read_next(RECEIVE_MS).data() for _ in range(n)]


def assert_nothing_more(reader_or_consumer):
    with pytest.raises(pulsar.Timeout):
        (getattr(reader_or_consumer, "read_next", None) or reader_or_consumer.receive)(300)


def test_seek_by_publish_time(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    _, _, boundary_ms = publish_old_and_new(client, topic)
    for _ in range(6):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    consumer.seek(boundary_ms)
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(3)] == NEW
    assert_nothing_more(consumer)


def test_seek_by_publish_time_then_by_id_on_a_durable_subscription(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    old, _, boundary_ms = publish_old_and_new(client, topic)
    consumer.seek(boundary_ms)
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(3)] == NEW
    consumer.seek(old[0])
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(5)] == [b"old1", b"old2", *NEW]
    consumer.seek(next_ms())  # after the last message: only what is published later
    assert_nothing_more(consumer)
    publish(client, topic, 1, prefix="later")
    assert consumer.receive(RECEIVE_MS).data() == b"later0"


# A reader (non-durable subscription) seeking by publish time: the broker disconnects it for the reset, and
# pulsar-client resubscribes *without* a start message id, so the reset position must outlive the
# disconnection on the broker (as Pulsar keeps the reset non-durable cursor for the reconnecting reader).

@pytest.mark.parametrize("start", ["latest", "earliest"])
def test_reader_seek_by_publish_time(broker, client, start):
    topic = unique_topic()
    _, _, boundary_ms = publish_old_and_new(client, topic)
    reader = client.create_reader(topic, getattr(pulsar.MessageId, start))
    if start == "earliest":
        assert read(reader, 4) == [b"old0", b"old1", b"old2", b"new0"]
    reader.seek(boundary_ms)
    assert reader.has_message_available()
    assert read(reader, 3) == NEW
    assert not reader.has_message_available()
    assert_nothing_more(reader)
    reader.seek(0)  # before everything: from the first message
    assert read(reader, 6) == [b"old0", b"old1", b"old2", *NEW]
    reader.close()
    wait_for(lambda: not broker.stats(topic)["subscriptions"], 10, what="the reader subscription removed on close")


def test_reader_seek_by_id_then_by_publish_time_then_by_id(broker, client):
    topic = unique_topic()
    old, new, boundary_ms = publish_old_and_new(client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    reader.seek(old[0])
    assert read(reader, 2) == [b"old1", b"old2"]
    reader.seek(boundary_ms)
    assert read(reader, 3) == NEW
    assert_nothing_more(reader)
    reader.seek(old[1])  # a message-id seek after the timestamp seek still goes where it says
    assert read(reader, 4) == [b"old2", *NEW]
    reader.seek(new[0])
    assert read(reader, 2) == [b"new1", b"new2"]
    assert_nothing_more(reader)


def test_reader_seek_by_publish_time_after_the_last_message(broker, client):
    topic = unique_topic()
    publish_old_and_new(client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert read(reader, 1) == [b"old0"]
    reader.seek(next_ms())
    assert not reader.has_message_available()
    assert_nothing_more(reader)
    publish(client, topic, 2, prefix="later")
    assert read(reader, 2) == [b"later0", b"later1"]


@pytest.mark.parametrize("batching", [False, True])
def test_reader_from_earliest_latest_and_an_id(broker, client, batching):
    topic = unique_topic()
    ids = publish(client, topic, 10, batching=batching)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(10)] == [f"m{i}".encode() for i in range(10)]
    assert not reader.has_message_available()
    reader.close()

    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    publish(client, topic, 1, prefix="after")
    assert latest.read_next(RECEIVE_MS).data() == b"after0"
    latest.close()

    exclusive = client.create_reader(topic, ids[3])
    assert exclusive.read_next(RECEIVE_MS).data() == b"m4"
    exclusive.close()
    inclusive = client.create_reader(topic, ids[3], start_message_id_inclusive=True)
    assert inclusive.read_next(RECEIVE_MS).data() == b"m3"
    inclusive.close()
    wait_for(lambda: not broker.stats(topic)["subscriptions"], 10, what="reader subscriptions removed on close")


def test_reader_from_serialized_id_and_seek(broker, client):
    topic = unique_topic()
    ids = publish(client, topic, 6)
    start = pulsar.MessageId.deserialize(ids[1].serialize())
    reader = client.create_reader(topic, start)
    assert reader.read_next(RECEIVE_MS).data() == b"m2"
    reader.seek(ids[0])
    assert reader.read_next(RECEIVE_MS).data() == b"m1"


def test_has_message_available_on_empty_topic_and_last_message_id(broker, client):
    topic = unique_topic()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    consumer = client.subscribe(topic, "s")
    ids = publish(client, topic, 3, batching=True)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert reader.has_message_available()


# The same at the frame level, as pulsar-client does it (seen on the wire): SEEK by publish time; the broker
# sends CLOSE_CONSUMER, then SUCCESS; the client resubscribes non-durable with no start message id.

def raw_reader(conn: RawConnection, topic: str, name: str, *, request_id: int, start: bool) -> None:
    cmd = pb.CommandSubscribe(topic=topic, subscription=name, subType=pb.CommandSubscribe.Exclusive,
                              consumer_id=1, request_id=request_id, durable=False,
                              initialPosition=pb.CommandSubscribe.Latest)
    if start:  # MessageId.latest, as create_reader(topic, MessageId.latest) sends it
        cmd.start_message_id.CopyFrom(pb.MessageIdData(ledgerId=(1 << 63) - 1, entryId=(1 << 63) - 1))
    conn.send(cmd)
    assert conn.recv_type(pb.BaseCommand.SUCCESS).command.success.request_id == request_id


def raw_seek_by_time(conn: RawConnection, timestamp_ms: int) -> None:
    conn.send(pb.CommandSeek(consumer_id=1, request_id=20, message_publish_time=timestamp_ms))
    first = conn.recv()
    assert first is not None and first.command.type == pb.BaseCommand.CLOSE_CONSUMER  # before the answer
    answer = conn.recv_type(pb.BaseCommand.SUCCESS).command.success
    assert answer.request_id == 20


@MEMORY_ONLY
@pytest.mark.parametrize("broker", [SHORT_GRACE], indirect=True)
def test_a_reader_resubscribing_without_a_start_id_after_a_seek_finds_the_reset_position(broker, client):
    topic = unique_topic()
    _, new, boundary_ms = publish_old_and_new(client, topic)
    conn = RawConnection(broker.url)
    try:
        conn.connect()
        raw_reader(conn, topic, "rdr", request_id=10, start=True)
        raw_seek_by_time(conn, boundary_ms)
        raw_reader(conn, topic, "rdr", request_id=11, start=False)
        conn.send(pb.CommandFlow(consumer_id=1, messagePermits=10))
        got = conn.recv_type(pb.BaseCommand.MESSAGE).command.message.message_id
        assert (got.ledgerId, got.entryId) == (new[0].ledger_id(), new[0].entry_id())
        conn.send(pb.CommandCloseConsumer(consumer_id=1, request_id=12))
        wait_for(lambda: not broker.stats(topic)["subscriptions"], 10, what="the reader subscription removed")
    finally:
        conn.close()


@MEMORY_ONLY
@pytest.mark.parametrize("broker", [SHORT_GRACE], indirect=True)
def test_a_reader_that_does_not_come_back_after_a_seek_is_removed_after_the_grace(broker, client):
    topic = unique_topic()
    _, _, boundary_ms = publish_old_and_new(client, topic)
    conn = RawConnection(broker.url)
    try:
        conn.connect()
        raw_reader(conn, topic, "gone", request_id=10, start=True)
        raw_seek_by_time(conn, boundary_ms)
        assert list(broker.stats(topic)["subscriptions"]) == ["gone"]  # kept for the reconnection
        wait_for(lambda: not broker.stats(topic)["subscriptions"], 10, what="the unclaimed reader removed")
    finally:
        conn.close()
