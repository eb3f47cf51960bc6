"""Namespace rate limits with pulsar-client, as a Pulsar user meets them: a producer over the publish rate
is slowed (its connection is not read for a while), never refused, and runs at full speed again once the
limit is removed; a consumer of a backlog receives no faster than its subscription's dispatch rate; the
topic's dispatch rate bounds its subscriptions together. Policy changes reach loaded topics at once."""

from __future__ import annotations

import threading
import time

import pulsar
import pytest

from config_store import DispatchRate, Policies, PublishRate
from tests.kit.broker_thread import broker, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

pytestmark = pytest.mark.parametrize("storage", ["memory"])

CLUSTER = "test"  # BrokerThread's cluster name: Pulsar keeps each rate per cluster
N = 1000
RECEIVE_MS = 10_000


@pytest.fixture
def client(new_client):
    return new_client(logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), operation_timeout_seconds=30)


def set_rates(broker, **rates) -> None:
    broker.set_policies("public/default", Policies(replication_clusters=[CLUSTER], **rates))


def wait_applied(broker, topic: str, check) -> None:
    """Policies reach a loaded topic through the store's watch: wait until its limits say so."""
    wait_for(lambda: check(broker.call(lambda: broker.service.topics()[topic].rate_limits)), 10,
             what="the rate limits applied to the topic")


def send_all(producer, n: int, timeout_s: float = 30.0) -> float:
    """Sends ``n`` messages as fast as send_async takes them; returns the seconds until every receipt."""
    done = threading.Event()
    errors = []
    left = [n]
    lock = threading.Lock()

    def sent(result, _msg_id) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    started = time.monotonic()
    for i in range(n):
        producer.send_async(b"m-%d" % i, sent)
    assert done.wait(timeout_s), f"{left[0]} receipts missing"
    assert errors == []
    return time.monotonic() - started


def receive_all(consumer, n: int) -> None:
    for _ in range(n):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))


def test_publish_rate_slows_producers_and_lifting_it_restores_full_speed(broker, client):
    topic = unique_topic("publish-rate")
    client.subscribe(topic, "keep").close()  # a durable subscription: every message stays in the backlog
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * N,
                                      block_if_queue_full=True)
    set_rates(broker, publish_max_message_rate={CLUSTER: PublishRate(msgs_per_s=200)})
    wait_applied(broker, topic, lambda limits: limits.publish is not None)

    elapsed = send_all(producer, N)
    assert elapsed >= 3.0, f"1000 messages at 200 msg/s took only {elapsed:.2f}s"
    stats = broker.stats(topic)
    assert stats["msgInCounter"] == N and stats["subscriptions"]["keep"]["msgBacklog"] == N  # none refused

    set_rates(broker)  # what DELETE .../publishRate leaves
    wait_applied(broker, topic, lambda limits: limits.publish is None and not limits.publish_throttled)
    elapsed = send_all(producer, N)
    assert elapsed < 3.0, f"unlimited again, yet 1000 messages took {elapsed:.2f}s"
    assert broker.stats(topic)["subscriptions"]["keep"]["msgBacklog"] == 2 * N


def test_subscription_dispatch_rate_paces_a_backlog(broker, client):
    topic = unique_topic("sub-dispatch-rate")
    client.subscribe(topic, "slow").close()
    send_all(client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * N), N)
    set_rates(broker, subscription_dispatch_rate={CLUSTER: DispatchRate(msgs_per_period=200)})
    wait_applied(broker, topic, lambda limits: limits._subscription_rate is not None)

    consumer = client.subscribe(topic, "slow", receiver_queue_size=N)
    started = time.monotonic()
    receive_all(consumer, N)
    elapsed = time.monotonic() - started
    assert elapsed >= 3.0, f"a 1000-message backlog at 200 msg/s arrived in {elapsed:.2f}s"


def test_topic_dispatch_rate_bounds_its_subscriptions_together(broker, client):
    topic = unique_topic("topic-dispatch-rate")
    for name in ("a", "b"):
        client.subscribe(topic, name).close()
    send_all(client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * N), N)
    set_rates(broker, topic_dispatch_rate={CLUSTER: DispatchRate(msgs_per_period=400)})
    wait_applied(broker, topic, lambda limits: limits.topic_dispatch is not None)

    consumers = [client.subscribe(topic, name, receiver_queue_size=N) for name in ("a", "b")]
    started = time.monotonic()
    for consumer in consumers:
        receive_all(consumer, N)
    elapsed = time.monotonic() - started
    assert elapsed >= 3.0, f"2 x 1000 messages under a topic limit of 400 msg/s arrived in {elapsed:.2f}s"


def test_lifting_a_dispatch_rate_wakes_the_throttled_dispatcher_at_once(broker, client):
    topic = unique_topic("lift-dispatch-rate")
    client.subscribe(topic, "s").close()
    send_all(client.create_producer(topic, batching_enabled=False, max_pending_messages=2 * N), N)
    set_rates(broker, subscription_dispatch_rate={CLUSTER: DispatchRate(msgs_per_period=10, period_s=60)})
    wait_applied(broker, topic, lambda limits: limits._subscription_rate is not None)

    consumer = client.subscribe(topic, "s", receiver_queue_size=N)
    receive_all(consumer, 10)  # the burst of one period; the next would come in a minute
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    set_rates(broker)
    started = time.monotonic()
    receive_all(consumer, N - 10)
    assert time.monotonic() - started < 10.0
