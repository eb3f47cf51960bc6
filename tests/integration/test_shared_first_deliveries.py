"""pulsar-client 3.13 Shared consumers on their first deliveries, many topics at once: each message exactly once
(and, to a single consumer, in order) while subscriptions are created at Earliest on topics that already hold
messages and producers keep publishing; and skip / expire while messages are out, unacknowledged.

A duplicate would show twice: in what the consumers received, and in the subscription's ``msgOutCounter``
(what the broker sent), which must equal the number of messages once the backlog is acknowledged.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pulsar
import pytest

from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

TOPICS = 40
BEFORE = 5  # stored before the consumers subscribe
AFTER = 5  # published by another producer while they subscribe
RECEIVE_MS = 10_000


def subscription_stats(broker, topic: str) -> dict:
    return broker.stats(topic)["subscriptions"]["s"]


def one_topic(broker, producer_client, consumer_client, index: int) -> list[str]:
    """The reported scenario on a fresh topic with ``1 + index % 3`` Shared consumers; returns what went wrong."""
    topic = unique_topic("first-deliveries")
    expected = [f"hello-{i}" for i in range(BEFORE + AFTER)]
    producer = producer_client.create_producer(topic, batching_enabled=False)
    for text in expected[:BEFORE]:
        producer.send(text.encode())
    received: dict[str, list[str]] = collections.defaultdict(list)
    lock = threading.Lock()

    def listener(consumer, msg) -> None:
        with lock:
            received[consumer.consumer_name()].append(msg.data().decode())
        consumer.acknowledge(msg)

    publisher = threading.Thread(target=lambda: [producer.send(t.encode()) for t in expected[BEFORE:]])
    publisher.start()  # publishing while the consumers subscribe
    consumers = [consumer_client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                           initial_position=pulsar.InitialPosition.Earliest,
                                           consumer_name=f"c{k}", message_listener=listener)
                 for k in range(1 + index % 3)]
    publisher.join()
    problems = []
    try:
        wait_for(lambda: sum(map(len, received.values())) >= len(expected)
                 and subscription_stats(broker, topic)["msgBacklog"] == 0, 30,
                 what=f"{topic}: every message received and acknowledged")
    except AssertionError as e:
        problems.append(str(e))
    with lock:
        got = {name: list(texts) for name, texts in received.items()}
    everything = sorted(t for texts in got.values() for t in texts)
    if everything != sorted(expected):
        problems.append(f"{topic}: received {got}, expected each of {expected} once")
    if len(consumers) == 1 and got.get("c0") != expected:
        problems.append(f"{topic}: one consumer received {got.get('c0')}, expected {expected} in order")
    sent = subscription_stats(broker, topic)["msgOutCounter"]
    if sent != len(expected):
        problems.append(f"{topic}: the broker sent {sent} messages for {len(expected)}")
    for c in consumers:
        c.close()
    producer.close()
    return problems


def test_shared_consumers_at_earliest_get_every_message_once_while_publishing(broker, new_client):
    producers, consumers = new_client(), new_client()  # two connections, as two applications
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: one_topic(broker, producers, consumers, i), range(TOPICS)))
    problems = [p for r in results for p in r]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive])
def test_skip_and_expire_leave_unacknowledged_messages_with_their_consumer(broker, client, sub_type):
    topic = unique_topic("skip-unacked")
    consumer = client.subscribe(topic, "s", consumer_type=sub_type, initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode())
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(5)] == [f"m{i}".encode() for i in range(5)]
    t = broker.topic(topic)
    assert broker.run(t.skip, "s", 2) == 2  # m0, m1 acknowledged; m2..m4 stay out, unacknowledged
    for i in range(5, 8):
        producer.send(f"m{i}".encode())
    later = [consumer.receive(RECEIVE_MS) for _ in range(3)]
    assert [m.data() for m in later] == [b"m5", b"m6", b"m7"]
    # Expiring "older than 0 s" keeps a message published in the current millisecond (as Pulsar: expired only
    # when published before now - ttl, in whole ms), so let the clock pass the millisecond m7 was published in.
    wait_for(lambda: int(time.time() * 1000) > later[-1].publish_timestamp(), 5, what="the clock past m7's ms")
    assert broker.run(t.expire, "s", 0) == 6
    producer.send(b"m8")
    assert consumer.receive(RECEIVE_MS).data() == b"m8"
    stats = subscription_stats(broker, topic)
    assert stats["msgOutCounter"] == 9 and stats["msgBacklog"] == 1
