"""Topic-level rate limits and broker defaults on a broker process with real bookies, as a Pulsar user meets them
through REST, ``magnetar admin`` and pulsar-client: a topic's publish rate slows a producer below its namespace's
(a partitioned topic's rate covering its partitions) and removing it restores the namespace's; a broker-wide
default dispatch rate paces a consumer when nothing else is set, a topic's rate beats its namespace's, which
beats the broker's; throttling is counted in stats and ``/metrics``; bad bodies are 400 and change nothing.

Rates are measured over measured windows: the time ``n`` more receipts (or messages) take. A policy reaches a
loaded topic through a ZooKeeper watch, so a check waits, with a deadline, until a window shows the new rate.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from magnetar.admin_cli import admin_app
from tests.integration.test_compaction import rest
from tests.kit.brokers import BrokerHandle, start_brokers
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
RECEIVE_MS = 10_000
PAYLOAD = b"x" * 100
NS = "public/default"


@pytest.fixture
def broker(request, tmp_path, zk_connect, bookie_factory) -> BrokerHandle:
    """One broker process on two bookies; ``indirect`` parametrization passes broker.toml overrides."""
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect, **getattr(request, "param", {}))
    return b


@pytest.fixture
def client(broker):
    c = pulsar.Client(broker.pulsar_url, logger=QUIET, operation_timeout_seconds=30)
    yield c
    c.close()


def admin(broker: BrokerHandle, *args: str) -> str:
    """``magnetar admin ARGS --url <broker>``; returns its output (the command must succeed)."""
    result = CliRunner().invoke(admin_app, [*args, "--url", broker.http_url])
    assert result.exit_code == 0, result.output
    return result.output


def metric(broker: BrokerHandle, name: str, **labels: str) -> float:
    """The value of one series of the broker's ``/metrics`` (KeyError when absent)."""
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(f"{name}{labels} not in /metrics")


class Publisher:
    """Publishes from a thread as fast as the broker takes it (a full queue blocks ``send_async``) and counts
    the receipts, so a publish rate is what the producer sees."""

    def __init__(self, producer) -> None:
        self._producer = producer
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._acked = 0
        self.errors: list[Any] = []
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._thread.start()

    def _sent(self, result, _msg_id) -> None:
        with self._lock:
            if result == pulsar.Result.Ok:
                self._acked += 1
            else:
                self.errors.append(result)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.send_async(PAYLOAD, self._sent)

    def acked(self) -> int:
        with self._lock:
            return self._acked

    def rate_over(self, n: int) -> float:
        """Receipts per second over the window in which ``n`` more receipts arrive."""
        first, started = self.acked(), time.monotonic()
        wait_for(lambda: self.acked() >= first + n, 60, interval_s=0.005, what=f"{n} more receipts")
        return (self.acked() - first) / (time.monotonic() - started)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._producer.flush()
        assert self.errors == []


def receive_rate(consumer, n: int) -> float:
    """Messages per second over the window in which the consumer receives (and acknowledges) ``n`` more."""
    started = time.monotonic()
    for _ in range(n):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    return n / (time.monotonic() - started)


def fill(client, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000,
                                      block_if_queue_full=True)
    for _ in range(n):
        producer.send_async(PAYLOAD, None)
    producer.flush()
    producer.close()


def local(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------------------------- publish


def test_a_topic_publish_rate_beats_the_namespace_and_removing_it_restores_the_namespaces(broker, client):
    name = local("pub")
    base = f"persistent://{NS}/{name}"
    partition = f"{base}-partition-1"
    assert rest("PUT", f"{broker.http_url}/admin/v2/persistent/{NS}/{name}/partitions", 2)[0] == 204
    admin(broker, "namespaces", "set-publish-rate", NS, "-m", "400")
    producer = client.create_producer(partition, batching_enabled=False, max_pending_messages=100,
                                      block_if_queue_full=True)
    publisher = Publisher(producer)
    try:
        wait_for(lambda: publisher.rate_over(800) < 520, 60, what="the namespace's 400 msg/s applied")
        rate = publisher.rate_over(800)
        assert 250 < rate < 520, f"{rate:.0f} msg/s under a namespace rate of 400"

        # on the partitioned topic: it covers the partition the producer writes to
        admin(broker, "topics", "set-publish-rate", base, "-m", "100")
        own = json.loads(admin(broker, "topics", "get-publish-rate", partition, "--json"))
        assert own == {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
        wait_for(lambda: publisher.rate_over(200) < 130, 60, what="the topic's 100 msg/s applied")
        rate = publisher.rate_over(200)
        assert 60 < rate < 130, f"{rate:.0f} msg/s under a topic rate of 100 (namespace 400)"
        assert metric(broker, "magnetar_publish_rate_limited_total", topic=partition) > 0
        metric(broker, "pulsar_publish_rate_limit_times", topic=partition)  # Pulsar's series is there

        admin(broker, "topics", "remove-publish-rate", base)
        assert json.loads(admin(broker, "topics", "get-publish-rate", base, "--json")) is None
        applied = json.loads(admin(broker, "topics", "get-publish-rate", base, "--applied", "--json"))
        assert applied["publishThrottlingRateInMsg"] == 400
        wait_for(lambda: publisher.rate_over(800) > 250, 60, what="the namespace's 400 msg/s again")
        rate = publisher.rate_over(800)
        assert 250 < rate < 520, f"{rate:.0f} msg/s: not the namespace's 400 again"
    finally:
        publisher.stop()
    stats = rest("GET", f"{broker.http_url}/admin/v2/persistent/{NS}/{name}-partition-1/stats")[1]
    assert stats["msgInCounter"] == publisher.acked()  # slowed, never refused


# ---------------------------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize("broker", [{"dispatch_throttling_rate_per_subscription_in_msg": 100}], indirect=True)
def test_the_broker_default_dispatch_rate_applies_until_a_namespace_or_topic_sets_one(broker, client):
    name = local("disp")
    topic = f"persistent://{NS}/{name}"
    url = f"{broker.http_url}/admin/v2/persistent/{NS}/{name}/subscriptionDispatchRate"
    client.subscribe(topic, "s").close()  # a durable subscription: the backlog waits for it
    fill(client, topic, 6000)
    assert rest("GET", url) == (204, None)
    assert rest("GET", url + "?applied=true") == (200, {
        "dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": 0, "relativeToPublishRate": False,
        "ratePeriodInSecond": 1})

    consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
    receive_rate(consumer, 150)  # the first period's burst, and then some
    rate = receive_rate(consumer, 300)
    assert 60 < rate < 130, f"{rate:.0f} msg/s under the broker's default of 100"
    sub_stats = rest("GET", f"{broker.http_url}/admin/v2/persistent/{NS}/{name}/stats")[1]["subscriptions"]["s"]
    assert sub_stats["dispatchThrottledMsgEventsBySubscriptionLimit"] > 0
    assert sub_stats["dispatchThrottledMsgEventsByTopicLimit"] == 0
    assert metric(broker, "pulsar_subscription_dispatch_throttled_msg_events", topic=topic, subscription="s",
                  reason="subscription") > 0

    rest_ns = f"{broker.http_url}/admin/v2/namespaces/{NS}/subscriptionDispatchRate"
    assert rest("POST", rest_ns, {"dispatchThrottlingRateInMsg": 200})[0] == 204
    assert rest("POST", url, {"dispatchThrottlingRateInMsg": 400})[0] == 204  # the topic's beats both
    wait_for(lambda: receive_rate(consumer, 400) > 250, 60, what="the topic's 400 msg/s applied")
    rate = receive_rate(consumer, 800)
    assert 250 < rate < 520, f"{rate:.0f} msg/s under a topic rate of 400"

    assert rest("DELETE", url)[0] == 204  # the namespace's 200 again, not the broker's 100
    wait_for(lambda: receive_rate(consumer, 200) < 260, 60, what="the namespace's 200 msg/s applied")
    rate = receive_rate(consumer, 400)
    assert 140 < rate < 260, f"{rate:.0f} msg/s under a namespace rate of 200 (broker 100)"


# ---------------------------------------------------------------------------------------------- refusals


def test_bad_bodies_are_400_unknown_topics_404_and_nothing_changes(broker, client):
    name = local("bad")
    t = f"{broker.http_url}/admin/v2/persistent/{NS}/{name}"
    for path in ("publishRate", "dispatchRate", "subscriptionDispatchRate"):
        status, answer = rest("POST", f"{t}/{path}", {"dispatchThrottlingRateInMsg": 5,
                                                      "publishThrottlingRateInMsg": 5})
        assert status in (400, 404), answer  # unknown field or unknown topic: either way refused
        assert rest("GET", f"{t}/{path}")[0] == 404
    client.create_producer(f"persistent://{NS}/{name}").close()  # now the topic exists

    good = {"dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": -1, "relativeToPublishRate": False,
            "ratePeriodInSecond": 2}
    assert rest("POST", f"{t}/dispatchRate", good)[0] == 204
    for bad, field in (({"dispatchThrottlingRateInMsg": "50"}, "dispatchThrottlingRateInMsg"),
                       ({"dispatchThrottlingRateInMsg": -2}, "dispatchThrottlingRateInMsg"),
                       ({"ratePeriodInSecond": 0}, "ratePeriodInSecond"),
                       ({"relativeToPublishRate": 1}, "relativeToPublishRate"),
                       ({"dispatchThrottlingRateInMsg": 5, "ratePeriodInSeconds": 1}, "ratePeriodInSeconds"),
                       ([50], "object")):
        status, answer = rest("POST", f"{t}/dispatchRate", bad)
        assert status == 400 and field in answer["reason"], (bad, answer)
    assert rest("GET", f"{t}/dispatchRate") == (200, good)
    status, answer = rest("POST", f"{t}/publishRate", {"publishThrottlingRateInByte": 1.5})
    assert status == 400 and "publishThrottlingRateInByte" in answer["reason"]
    assert rest("GET", f"{t}/publishRate") == (204, None)

    result = CliRunner().invoke(admin_app, ["topics", "set-publish-rate", f"persistent://{NS}/nope-{name}", "-m", "5",
                                            "--url", broker.http_url])
    assert result.exit_code == 1 and "404" in result.output
