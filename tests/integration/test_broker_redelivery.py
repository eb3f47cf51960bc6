"""Redelivery with pulsar-client: negative acks, ack timeouts, redelivery counts, dead-letter topics,
consumers leaving with unacknowledged messages."""

from __future__ import annotations

import pulsar
import pytest

from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

RECEIVE_MS = 5000


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_negative_ack_redelivers_with_increasing_count(broker, client, sub_type):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", consumer_type=sub_type, negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode(), partition_key="k")
    first = [consumer.receive(RECEIVE_MS) for _ in range(3)]
    assert [m.redelivery_count() for m in first] == [0, 0, 0]
    consumer.acknowledge(first[0])
    consumer.acknowledge(first[2])
    consumer.negative_acknowledge(first[1])
    again = consumer.receive(RECEIVE_MS)
    assert again.data() == b"m1" and again.redelivery_count() == 1
    consumer.negative_acknowledge(again)
    third = consumer.receive(RECEIVE_MS)
    assert third.data() == b"m1" and third.redelivery_count() == 2
    consumer.acknowledge(third)
    wait_for(lambda: broker.stats(topic)["subscriptions"]["s"]["msgBacklog"] == 0, 10, what="all acked")
    assert broker.stats(topic)["subscriptions"]["s"]["msgRateRedeliver"] >= 0


def test_ack_timeout_redelivers(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                unacked_messages_timeout_ms=10_000)  # pulsar-client's minimum
    producer = client.create_producer(topic)
    producer.send(b"late")
    m = consumer.receive(RECEIVE_MS)
    assert m.redelivery_count() == 0
    again = consumer.receive(25_000)  # not acknowledged in time
    assert again.data() == b"late" and again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_exclusive_nack_redelivers_everything_unacked_in_order(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    msgs = [consumer.receive(RECEIVE_MS) for _ in range(5)]
    consumer.acknowledge(msgs[0])
    consumer.negative_acknowledge(msgs[3])
    # pulsar-client asks for a full redelivery on non-shared subscriptions; order is kept.
    seen = []
    while len(seen) < 4:
        m = consumer.receive(RECEIVE_MS)
        if m.data() not in seen:
            seen.append(m.data())
        consumer.acknowledge(m)
    assert seen == [b"m1", b"m2", b"m3", b"m4"]


def test_dead_letter_topic_after_max_redeliveries(broker, new_client):
    topic = unique_topic()
    dlq = topic + "-DLQ"
    c = new_client()
    consumer = c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100,
                           dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2,
                                                                              dead_letter_topic=dlq,
                                                                              initial_subscription_name="dlq-sub"))
    producer = c.create_producer(topic)
    producer.send(b"poison", properties={"p": "1"})
    producer.send(b"fine")
    counts = []
    while True:
        m = consumer.receive(RECEIVE_MS)
        if m.data() == b"fine":
            consumer.acknowledge(m)
            continue
        counts.append(m.redelivery_count())
        consumer.negative_acknowledge(m)
        if m.redelivery_count() >= 2:
            break
    assert counts == [0, 1, 2]
    wait_for(lambda: broker.stats(dlq)["subscriptions"]["dlq-sub"]["msgBacklog"] == 1, 10,
             what="the dead-letter producer created its subscription and stored the message")
    dlq_consumer = c.subscribe(dlq, "dlq-sub")
    dead = dlq_consumer.receive(RECEIVE_MS)
    assert dead.data() == b"poison" and dead.properties()["p"] == "1"
    dlq_consumer.acknowledge(dead)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)
    wait_for(lambda: broker.stats(topic)["subscriptions"]["s"]["msgBacklog"] == 0, 10,
             what="the poison message acknowledged once dead-lettered")


def test_shared_consumer_leaving_hands_its_unacked_messages_over(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    s1 = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=100)
    producer = c1.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = [s1.receive(RECEIVE_MS) for _ in range(10)]
    for m in got[:4]:
        s1.acknowledge(m)
    s2 = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    wait_for(lambda: broker.stats(topic)["subscriptions"]["s"]["msgBacklog"] == 6, 10, what="4 acked")
    s1.close()
    rest = sorted(s2.receive(RECEIVE_MS).data() for _ in range(6))
    assert rest == sorted(f"m{i}".encode() for i in range(4, 10))


def test_redelivery_counts_in_stats_and_unacked(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    [consumer.receive(RECEIVE_MS) for _ in range(5)]
    stats = broker.stats(topic)["subscriptions"]["s"]
    assert stats["unackedMessages"] == 5 and stats["type"] == "Shared"
    assert stats["consumers"][0]["unackedMessages"] == 5
    consumer.redeliver_unacknowledged_messages()
    again = sorted(consumer.receive(RECEIVE_MS).redelivery_count() for _ in range(5))
    assert again == [1] * 5
