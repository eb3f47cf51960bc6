"""Seek (by message id and by publish time), readers (earliest, latest, a given id, inclusive),
``has_message_available`` / GET_LAST_MESSAGE_ID, with pulsar-client."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

RECEIVE_MS = 5000


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


def test_seek_by_publish_time(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    publish(client, topic, 3, prefix="old")
    # Publish times are in ms: the boundary must be a millisecond after the old ones and before the new ones.
    last_old_ms = int(time.time() * 1000)
    boundary_ms = wait_for(lambda: (now := int(time.time() * 1000)) > last_old_ms and now, 5, what="a later ms")
    wait_for(lambda: int(time.time() * 1000) > boundary_ms, 5, what="a ms after the boundary")
    publish(client, topic, 3, prefix="new")
    for _ in range(6):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    consumer.seek(boundary_ms)
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(3)] == [b"new0", b"new1", b"new2"]


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
