"""Topic termination through pulsar-client: the last message id, producers refused with TopicTerminated,
REACHED_END_OF_TOPIC to consumers and readers once everything is consumed, and (real storage) the
terminated state surviving a reload of the topic by a new broker."""

from __future__ import annotations

import contextlib

import pulsar
import pytest

from broker.service import ServiceConfig

from broker.managed_ledger.api import Position
from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

RECEIVE_MS = 5000


def _terminate(broker, topic: str) -> Position:
    async def go():
        t = await broker.service.get_topic(topic, create=False)
        assert t is not None
        return await t.terminate()
    return broker.run(go)


def _consumers(broker, topic: str, sub: str):
    return broker.call(lambda: list(broker.service.topics()[topic].subscriptions[sub].consumers))


def _end_sent(broker, topic: str) -> int:
    """REACHED_END_OF_TOPIC commands the topic's dispatchers sent. (pulsar-client 3.13's C++ core does not
    know the command: it logs "Received invalid message from server" and reconnects, so per-consumer flags
    flap; the dispatcher's counter does not.)"""
    subs = broker.call(lambda: list(broker.service.topics()[topic].subscriptions.values()))
    return sum(s.dispatcher.end_of_topic_sent for s in subs if s.dispatcher is not None)


def _produce(client, topic: str, n: int = 10):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    return producer, ids


def test_terminate_returns_last_id_and_refuses_producers(broker, client):
    topic = unique_topic("term")
    producer, ids = _produce(client, topic)
    last = _terminate(broker, topic)
    assert (last.ledger_id, last.entry_id) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert _terminate(broker, topic) == last  # idempotent
    with pytest.raises(Exception) as info:
        producer.send(b"after")
    assert "Terminated" in type(info.value).__name__
    with pytest.raises(Exception) as info:
        client.create_producer(topic)
    assert "Terminated" in type(info.value).__name__


NOTIFY = {"config": ServiceConfig(notify_end_of_topic=True)}


@pytest.mark.parametrize("broker", [NOTIFY], indirect=True)
def test_consumer_reaches_end_of_terminated_topic(broker, client):
    topic = unique_topic("term")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    _produce(client, topic)
    _terminate(broker, topic)
    got = []
    for _ in range(10):
        msg = consumer.receive(RECEIVE_MS)
        got.append(msg.data())
        assert _end_sent(broker, topic) == 0  # not before everything is acknowledged
        consumer.acknowledge(msg)
    assert got == [f"m{i}".encode() for i in range(10)]
    wait_for(lambda: _end_sent(broker, topic) >= 1, 10, what="REACHED_END_OF_TOPIC sent")
    with pytest.raises(Exception):
        consumer.receive(500)


@pytest.mark.parametrize("broker", [NOTIFY], indirect=True)
def test_subscribing_to_terminated_consumed_topic_reaches_end_at_once(broker, client):
    topic = unique_topic("term")
    _produce(client, topic, 3)
    _terminate(broker, topic)
    consumer = client.subscribe(topic, "late")  # Latest: nothing to read
    wait_for(lambda: _end_sent(broker, topic) >= 1, 10, what="REACHED_END_OF_TOPIC sent to a late subscriber")
    # pulsar-client 3.13 drops the connection on REACHED_END_OF_TOPIC (docs/architecture.md, departures), so
    # the close may find the consumer between reconnections
    with contextlib.suppress(pulsar.NotConnected):
        consumer.close()


def test_reader_reads_all_and_reaches_end(broker, client):
    topic = unique_topic("term")
    _produce(client, topic)
    _terminate(broker, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(RECEIVE_MS).data() for _ in range(10)]
    assert got == [f"m{i}".encode() for i in range(10)]
    assert not reader.has_message_available()


# The in-memory test double keeps termination in the object only: this is about real storage.
@pytest.mark.parametrize("storage", ["bookies"])
def test_terminated_state_survives_reload(broker, client, new_client):
    topic = unique_topic("term")
    producer, ids = _produce(client, topic)
    last = _terminate(broker, topic)
    producer.close()
    broker.restart_service()
    again = _terminate(broker, topic)
    assert again == last
    with pytest.raises(Exception) as info:
        new_client().create_producer(topic)
    assert "Terminated" in type(info.value).__name__
    stats = broker.run(lambda: _internal_stats(broker, topic))
    assert stats["state"] == "Terminated"


async def _internal_stats(broker, topic):
    t = await broker.service.get_topic(topic, create=False)
    return t.internal_stats()
