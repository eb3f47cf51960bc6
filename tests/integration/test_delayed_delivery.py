"""Delayed delivery with pulsar-client (``deliver_after`` / ``deliver_at``), as Pulsar does it: Shared and
Key_Shared subscriptions hold a message until its time while later messages flow; Exclusive and Failover
get it at once; held messages survive a topic reload or broker restart (read again, held again) and show
as ``msgDelayed`` in the subscription's stats."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pulsar
import pytest

from broker.service import ServiceConfig
from tests.kit.broker_thread import broker, new_client, storage, unique_topic  # noqa: F401
from tests.kit.wait import wait_for

RECEIVE_MS = 10_000
LATE_MS = 1_500  # how late a due message may arrive on a loaded 2-core machine
EARLY_MS = 5  # clock reads rounded to ms on both sides
SHARED_TYPES = [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared]
MEMORY_ONLY = pytest.mark.parametrize("storage", ["memory"])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def client(new_client):
    return new_client(logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def sub_stats(broker, topic: str, sub: str = "s") -> dict:
    return broker.stats(topic)["subscriptions"][sub]


def receive_due(consumer, delay_ms: int, *, before_ms: int, sent_ms: int) -> pulsar.Message:
    """Receives a message sent with ``deliver_after=delay_ms`` between ``before_ms`` and ``sent_ms`` (the client
    set its deliver time in between): not before that time, and not much after it."""
    m = consumer.receive(RECEIVE_MS)
    arrived = now_ms()
    assert arrived >= before_ms + delay_ms - EARLY_MS, f"{m.data()!r} {before_ms + delay_ms - arrived} ms early"
    assert arrived <= sent_ms + delay_ms + LATE_MS, f"{m.data()!r} arrived {arrived - sent_ms - delay_ms} ms late"
    return m


@pytest.mark.parametrize("sub_type", SHARED_TYPES)
def test_shared_holds_a_delayed_message_until_its_time_while_later_ones_flow(broker, client, sub_type):
    topic = unique_topic("delayed")
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(topic)
    before = now_ms()
    producer.send(b"later", deliver_after=timedelta(seconds=2))
    sent = now_ms()
    producer.send(b"now")
    first = consumer.receive(RECEIVE_MS)
    assert first.data() == b"now" and now_ms() < before + 2000
    consumer.acknowledge(first)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    later = receive_due(consumer, 2000, before_ms=before, sent_ms=sent)
    assert later.data() == b"later" and later.redelivery_count() == 0
    consumer.acknowledge(later)
    wait_for(lambda: sub_stats(broker, topic)["msgBacklog"] == 0, 10, what="both acknowledged")
    assert sub_stats(broker, topic)["msgDelayed"] == 0


@MEMORY_ONLY
@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover])
def test_exclusive_and_failover_get_a_delayed_message_at_once(broker, client, sub_type):
    topic = unique_topic("delayed-excl")
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(topic)
    before = now_ms()
    producer.send(b"hour", deliver_after=timedelta(hours=1))
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"hour" and now_ms() - before < 5000
    assert sub_stats(broker, topic)["msgDelayed"] == 0


def test_delayed_messages_come_out_in_deliver_time_order(broker, client):
    topic = unique_topic("delayed-order")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    delays_ms = [400 * (i + 1) for i in range(5)]
    random.Random(7).shuffle(delays_ms)
    due = {}
    first_sent = now_ms()
    for d in delays_ms:
        due[str(d).encode()] = now_ms() + d  # the client computes deliver_at after this clock read
        producer.send(str(d).encode(), deliver_after=timedelta(milliseconds=d))
    wait_for(lambda: sub_stats(broker, topic)["msgDelayed"] == 5, 10, what="all five held")
    got = []
    for _ in delays_ms:
        m = consumer.receive(RECEIVE_MS)
        arrived = now_ms()
        assert arrived >= due[m.data()] - EARLY_MS, (m.data(), due[m.data()] - arrived)
        got.append(int(m.data()))
        consumer.acknowledge(m)
    assert got == sorted(delays_ms), f"sent in order {delays_ms}, starting at {first_sent}"


@pytest.mark.parametrize("reload", ["unload", "restart"])
def test_held_messages_survive_a_topic_reload(broker, new_client, reload):
    topic = unique_topic("delayed-reload")
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    c1 = new_client(logger=quiet)
    consumer = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = c1.create_producer(topic)
    before = now_ms()
    producer.send(b"held-1", deliver_after=timedelta(seconds=4))
    producer.send(b"held-2", deliver_after=timedelta(seconds=4, milliseconds=200))
    sent = now_ms()
    wait_for(lambda: sub_stats(broker, topic)["msgDelayed"] == 2, 10, what="both held before the reload")
    if reload == "unload":
        assert broker.run(broker.service.unload_topic, topic) is True
    else:
        c1.close()
        broker.restart_service()  # a new port: a new client subscribes again
        consumer = new_client(logger=quiet).subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    wait_for(lambda: sub_stats(broker, topic)["msgDelayed"] == 2, 3, what="read and held again after the reload")
    assert now_ms() < before + 4000, "the reload took too long to observe the held state"
    got = [receive_due(consumer, 4000, before_ms=before, sent_ms=sent)]
    got.append(receive_due(consumer, 4200, before_ms=before, sent_ms=sent))
    assert [m.data() for m in got] == [b"held-1", b"held-2"]
    for m in got:
        consumer.acknowledge(m)
    wait_for(lambda: sub_stats(broker, topic)["msgBacklog"] == 0, 10, what="both acknowledged")


@MEMORY_ONLY
def test_msg_delayed_in_stats_and_held_messages_are_not_unacked(broker, client):
    topic = unique_topic("delayed-stats")
    shared = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    exclusive = client.subscribe(topic, "x", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"d{i}".encode(), deliver_after=timedelta(minutes=10))
    producer.send(b"now")
    assert shared.receive(RECEIVE_MS).data() == b"now"
    wait_for(lambda: sub_stats(broker, topic)["msgDelayed"] == 3, 10, what="three held")
    s = sub_stats(broker, topic)
    assert s["msgBacklog"] == 4 and s["msgBacklogNoDelayed"] == 1
    assert s["unackedMessages"] == 1 and s["consumers"][0]["unackedMessages"] == 1
    assert s["msgOutCounter"] == 1
    assert sub_stats(broker, topic, "x")["msgDelayed"] == 0
    assert [exclusive.receive(RECEIVE_MS).data() for _ in range(4)] == [b"d0", b"d1", b"d2", b"now"]
    # One timer, for the earliest held deliver time; closing the dispatcher (unload) cancels it.
    dispatcher = broker.call(lambda: broker.service.topics()[topic].subscriptions["s"].dispatcher)
    due_ms = broker.call(lambda: dispatcher.delayed.next_due_ms())
    assert due_ms is not None and broker.call(lambda: dispatcher.delayed_timer_due_ms) == due_ms
    assert broker.run(broker.service.unload_topic, topic) is True
    assert broker.call(lambda: dispatcher.delayed_timer_due_ms is None and len(dispatcher.delayed) == 0)


@MEMORY_ONLY
def test_deliver_at_in_the_past_is_delivered_at_once(broker, client):
    topic = unique_topic("delayed-past")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    before = now_ms()
    producer.send(b"overdue", deliver_at=before - 60_000)
    producer.send(b"future", deliver_at=before + 60_000)
    producer.send(b"plain")
    got = [consumer.receive(RECEIVE_MS).data() for _ in range(2)]
    assert got == [b"overdue", b"plain"] and now_ms() - before < 5000
    wait_for(lambda: sub_stats(broker, topic)["msgDelayed"] == 1, 10, what="only the future one held")


@MEMORY_ONLY
@pytest.mark.parametrize("broker", [{"config": ServiceConfig(stats_update_interval_s=1.0,
                                                             delayed_delivery_enabled=False)}], indirect=True)
def test_disabled_delivers_at_once(broker, client):
    topic = unique_topic("delayed-off")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send(b"hour", deliver_after=timedelta(hours=1))
    assert consumer.receive(RECEIVE_MS).data() == b"hour"
    assert sub_stats(broker, topic)["msgDelayed"] == 0


@MEMORY_ONLY
@pytest.mark.parametrize("broker", [{"config": ServiceConfig(stats_update_interval_s=1.0,
                                                             delayed_delivery_max_held_entries=2)}], indirect=True)
def test_a_full_tracker_stops_reading_until_held_messages_come_due(broker, client):
    topic = unique_topic("delayed-full")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    before = now_ms()
    producer.send(b"d0", deliver_after=timedelta(milliseconds=1500))
    producer.send(b"d1", deliver_after=timedelta(milliseconds=1500))
    sent = now_ms()
    producer.send(b"plain")  # behind a full tracker: waits (the documented price of the bound)
    wait_for(lambda: sub_stats(broker, topic)["msgDelayed"] == 2, 10, what="the tracker full")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    got = [receive_due(consumer, 1500, before_ms=before, sent_ms=sent) for _ in range(3)]
    assert [m.data() for m in got] == [b"d0", b"d1", b"plain"]
