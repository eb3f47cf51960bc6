"""Topic termination through pulsar-client and Magnetar's own client: the last message id, producers refused
with TopicTerminated, REACHED_END_OF_TOPIC once everything is consumed, and (real storage) the terminated
state surviving a reload of the topic by a new broker.

REACHED_END_OF_TOPIC goes only to clients that handle it (``broker/service/consumer.py``): pulsar-client's
C++ core has no case for the command and drops its connection on it ("Received invalid message from
server"), so its consumers must be left to wait at the end, connected. The end is "reached" when the broker
decides so (``Consumer.reached_end_of_topic``); a request answered on the same connection afterwards proves
the client read whatever the broker wrote before, so no test needs to wait for something not to happen.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import pulsar
import pytest

from broker.managed_ledger.api import Position
from magnetar.protocol.client import Client, InitialPosition, SubscriptionType, TopicTerminatedError
from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for, wait_for_async

RECEIVE_MS = 5000
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


class ClientLog(logging.Handler):
    """pulsar-client's log lines from INFO up (its C++ core logs through the Python logger it is given)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"tests.pulsar-client.{uuid.uuid4().hex[:8]}")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def having(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]


def _terminate(broker, topic: str) -> Position:
    async def go():
        t = await broker.service.get_topic(topic, create=False)
        assert t is not None
        return await t.terminate()
    return broker.run(go)


def _consumers(broker, topic: str, sub: str):
    return broker.call(lambda: list(broker.service.topics()[topic].subscriptions[sub].consumers))


def _dispatchers(broker, topic: str) -> dict:
    subs = broker.call(lambda: dict(broker.service.topics()[topic].subscriptions))
    return {name: s.dispatcher for name, s in subs.items() if s.dispatcher is not None}


def _end_counts(broker, topic: str) -> tuple[int, int]:
    """(consumers found at the end of the terminated topic, REACHED_END_OF_TOPIC commands sent)."""
    ds = _dispatchers(broker, topic).values()
    return sum(d.end_of_topic_reached for d in ds), sum(d.end_of_topic_sent for d in ds)


def _at_end(broker, consumer) -> bool:
    return broker.call(lambda: consumer.reached_end_of_topic)


def _still_attached(broker, consumer) -> bool:
    """The broker-side consumer was never replaced: not closed, its connection still open."""
    return broker.call(lambda: not consumer.closed and consumer.connection in broker.service.connections)


def _produce(client, topic: str, n: int = 10):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    return producer, ids


def test_terminate_returns_last_id_and_refuses_producers(broker, new_client):
    client = new_client(logger=QUIET)
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


def test_pulsar_client_consumer_waits_at_end_connected(broker, new_client):
    """Regression: REACHED_END_OF_TOPIC made pulsar-client 3.13 log "Received invalid message from server",
    drop the connection and resubscribe every 100 ms (pulsar-client-cpp lib/ClientConnection.cc has no case
    for it). It is not sent to that client any more: the consumer stays subscribed on the same connection."""
    log = ClientLog()
    client = new_client(logger=log.logger)
    topic = unique_topic("term")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    _produce(client, topic)
    (ours,) = _consumers(broker, topic, "s")
    _terminate(broker, topic)
    got = []
    for _ in range(10):
        msg = consumer.receive(RECEIVE_MS)
        got.append(msg.data())
        assert not _at_end(broker, ours)  # not before everything is acknowledged
        consumer.acknowledge(msg)
    assert got == [f"m{i}".encode() for i in range(10)]
    wait_for(lambda: _at_end(broker, ours), 10, what="the broker finding the consumer at the end")
    # answered on the consumer's connection after the broker's decision: had REACHED_END_OF_TOPIC been
    # written, the client would have read it, and dropped this connection, before this answer
    consumer.get_last_message_id()
    assert consumer.is_connected()
    assert _consumers(broker, topic, "s") == [ours] and _still_attached(broker, ours)
    assert _end_counts(broker, topic) == (1, 0)  # reached once, not sent to the C++ core
    assert log.having("invalid message") == []
    assert log.having("Schedule reconnection") == []
    with pytest.raises(pulsar.Timeout):
        consumer.receive(200)  # what pulsar-client shows of the end: nothing more to receive
    consumer.close()


def test_late_pulsar_client_subscriber_stays_connected(broker, new_client):
    client = new_client(logger=QUIET)
    topic = unique_topic("term")
    _produce(client, topic, 3)
    _terminate(broker, topic)
    consumer = client.subscribe(topic, "late")  # Latest: nothing to read
    (ours,) = _consumers(broker, topic, "late")
    wait_for(lambda: _at_end(broker, ours), 10, what="a late subscriber found at the end at once")
    consumer.get_last_message_id()  # a round trip on its connection (see above)
    assert consumer.is_connected()
    assert _consumers(broker, topic, "late") == [ours] and _still_attached(broker, ours)
    consumer.close()  # (it used to find the consumer between reconnections: NotConnected)


def test_reader_reads_all_and_reaches_end(broker, new_client):
    client = new_client(logger=QUIET)
    topic = unique_topic("term")
    _produce(client, topic)
    _terminate(broker, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(RECEIVE_MS).data() for _ in range(10)]
    assert got == [f"m{i}".encode() for i in range(10)]
    # a reader acknowledges nothing, so its subscription keeps a backlog: only has_message_available tells
    assert not reader.has_message_available()
    assert reader.is_connected()
    reader.close()


async def test_clients_that_handle_it_are_told_once_per_consumer(broker):
    """Magnetar's own client handles REACHED_END_OF_TOPIC like the Java client: each consumer is told once,
    none reconnects, and ``receive`` then raises TopicTerminatedError instead of waiting."""
    topic = unique_topic("term")
    async with Client(broker.url, operation_timeout_s=10, backoff_initial_s=0.05, backoff_max_s=0.5) as ours:
        producer = await ours.create_producer(topic)
        await asyncio.gather(*[await producer.send(f"m{i}".encode()) for i in range(10)])
        reading = await ours.subscribe(topic, "reading", initial_position=InitialPosition.EARLIEST)
        await asyncio.to_thread(_terminate, broker, topic)
        got = []
        for _ in range(10):
            msg = await reading.receive(timeout_s=RECEIVE_MS / 1000)
            got.append(msg.payload)
            reading.ack(msg)
        assert got == [f"m{i}".encode() for i in range(10)]
        # two consumers of one Shared subscription joining after the end: each is told once
        shared = [await ours.subscribe(topic, "shared", subscription_type=SubscriptionType.SHARED)
                  for _ in range(2)]
        consumers = [reading, *shared]
        for c in consumers:
            await wait_for_async(lambda c=c: c.reached_end_of_topic, 10, what=f"{c} told of the end")
            with pytest.raises(TopicTerminatedError):
                await c.receive(timeout_s=RECEIVE_MS / 1000)
            assert c.is_connected and c.reconnections == 0
        server_side = _consumers(broker, topic, "reading") + _consumers(broker, topic, "shared")
        assert len(server_side) == 3 and all(_still_attached(broker, c) for c in server_side)
        assert _end_counts(broker, topic) == (3, 3)
        # more idle rounds (a dispatcher checks on each) tell nobody again
        for d in _dispatchers(broker, topic).values():
            broker.call(d._check_end_of_topic)
        assert _end_counts(broker, topic) == (3, 3)


# The in-memory test double keeps termination in the object only: this is about real storage.
@pytest.mark.parametrize("storage", ["bookies"])
def test_terminated_state_survives_reload(broker, new_client):
    client = new_client(logger=QUIET)
    topic = unique_topic("term")
    producer, ids = _produce(client, topic)
    last = _terminate(broker, topic)
    producer.close()
    broker.restart_service()
    again = _terminate(broker, topic)
    assert again == last
    with pytest.raises(Exception) as info:
        new_client(logger=QUIET).create_producer(topic)
    assert "Terminated" in type(info.value).__name__
    stats = broker.run(lambda: _internal_stats(broker, topic))
    assert stats["state"] == "Terminated"


async def _internal_stats(broker, topic):
    t = await broker.service.get_topic(topic, create=False)
    return t.internal_stats()
