"""Backlog quotas with pulsar-client, as a Pulsar user meets them: producers refused (ProducerBlockedQuotaExceeded
Error / Exception) while a subscription's backlog is over a size or age quota and accepted again once it
caught up; producers already connected closed by the periodic check; ``consumer_backlog_eviction`` moving
the slow subscription forward (and counting it); a topic's own quota overriding its namespace's; Pulsar's
stats fields and Prometheus series."""

from __future__ import annotations

import pulsar
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.service import ServiceConfig
from broker.service.policies.backlog_quota import QuotaType
from broker.service.metrics import ServiceCollector
from config_store import BacklogQuota, Policies, TopicPolicies
from tests.kit.broker_thread import broker, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

RECEIVE_MS = 10_000
PAYLOAD = b"x" * 500
MEMORY_ONLY = pytest.mark.parametrize("storage", ["memory"])
PERIODIC = {"config": ServiceConfig(stats_update_interval_s=1.0, backlog_quota_check_interval_s=0.3)}
AT_CREATION_ONLY = {"config": ServiceConfig(stats_update_interval_s=1.0, backlog_quota_check_enabled=False)}


@pytest.fixture
def client(new_client):
    return new_client(logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), operation_timeout_seconds=10)


def set_namespace_quotas(broker, **quotas: BacklogQuota) -> None:
    broker.set_policies("public/default", Policies(replication_clusters=["test"], backlog_quota_map=quotas))


def fill(client, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(n):
        producer.send(PAYLOAD)
    producer.close()


def topic_stats(broker, topic: str) -> dict:
    return broker.stats(topic)


def metrics(broker) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry()
    registry.register(ServiceCollector(broker.service))
    text = broker.call(lambda: generate_latest(registry).decode())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def series(found: dict, name: str, topic: str, **labels: str) -> float:
    for (n, lbl), value in found.items():
        d = dict(lbl)
        if n == name and d.get("topic") == topic and all(d.get(k) == v for k, v in labels.items()):
            return value
    raise KeyError(f"{name}{labels} for {topic} not in {sorted({n for n, _ in found})}")


@pytest.mark.parametrize("broker", [AT_CREATION_ONLY], indirect=True)
def test_producer_exception_refuses_producers_until_the_backlog_is_acknowledged(broker, client):
    set_namespace_quotas(broker, destination_storage=BacklogQuota(2000, -1, "producer_exception"))
    topic = unique_topic("quota-exc")
    consumer = client.subscribe(topic, "slow", consumer_type=pulsar.ConsumerType.Shared)
    fill(client, topic, 10)
    assert topic_stats(broker, topic)["backlogSize"] >= 2000
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    assert topic_stats(broker, topic)["publishers"] == []
    for _ in range(10):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    wait_for(lambda: topic_stats(broker, topic)["backlogSize"] == 0, 10, what="backlog acknowledged")
    producer = client.create_producer(topic)
    producer.send(b"again")
    assert consumer.receive(RECEIVE_MS).data() == b"again"


@pytest.mark.parametrize("broker", [AT_CREATION_ONLY], indirect=True)
def test_producer_request_hold_refuses_with_the_hold_error_and_a_topic_quota_overrides(broker, client):
    set_namespace_quotas(broker, destination_storage=BacklogQuota(1 << 30, -1, "producer_exception"))
    topic = unique_topic("quota-hold")
    client.subscribe(topic, "slow")
    fill(client, topic, 6)
    client.create_producer(topic).close()  # a GiB namespace quota: not reached
    name = topic.split("/")[-1]
    broker.run(broker.config_store.set_topic_policies, "public", "default", "persistent", name,
               TopicPolicies(backlog_quota_map={"destination_storage": BacklogQuota(1000, -1,
                                                                                    "producer_request_hold")}))
    wait_for(lambda: topic_stats(broker, topic)["backlogQuotaLimitSize"] == 1000, 10, what="topic quota applied")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    broker.run(broker.config_store.set_topic_policies, "public", "default", "persistent", name, TopicPolicies())
    wait_for(lambda: topic_stats(broker, topic)["backlogQuotaLimitSize"] == 1 << 30, 10, what="override removed")
    client.create_producer(topic).send(b"ok")


@pytest.mark.parametrize("broker", [PERIODIC], indirect=True)
def test_the_periodic_check_closes_connected_producers_over_quota(broker, client):
    set_namespace_quotas(broker, destination_storage=BacklogQuota(2000, -1, "producer_exception"))
    topic = unique_topic("quota-close")
    client.subscribe(topic, "slow")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=5000)
    for _ in range(3):
        producer.send(PAYLOAD)  # 1,500 bytes: under the quota, the producer stays
    assert len(topic_stats(broker, topic)["publishers"]) == 1
    producer.send(PAYLOAD)  # 2,000 bytes: at the limit
    wait_for(lambda: topic_stats(broker, topic)["publishers"] == [], 10, what="producer closed by the check")
    with pytest.raises((pulsar.ProducerBlockedQuotaExceededException, pulsar.Timeout)):
        producer.send(b"refused")
    assert topic_stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] == 4


@MEMORY_ONLY
@pytest.mark.parametrize("broker", [PERIODIC], indirect=True)
def test_consumer_backlog_eviction_moves_the_slow_subscription_forward(broker, client):
    set_namespace_quotas(broker, destination_storage=BacklogQuota(3000, -1, "consumer_backlog_eviction"))
    topic = unique_topic("quota-evict")
    slow = client.subscribe(topic, "slow", receiver_queue_size=1)
    fast = client.subscribe(topic, "fast")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"%02d" % i + PAYLOAD)
        fast.acknowledge(fast.receive(RECEIVE_MS))

    def evicted() -> bool:
        st = topic_stats(broker, topic)
        return st["backlogSize"] <= 2700 and st["subscriptions"]["slow"]["msgBacklog"] < 20

    st = wait_for(lambda: evicted() and topic_stats(broker, topic), 10, what="slow subscription evicted")
    assert st["subscriptions"]["fast"]["msgBacklog"] == 0
    kept, size = st["subscriptions"]["slow"]["msgBacklog"], st["backlogSize"]
    # eviction keeps as many of these equal-sized entries as fit in 90% of 3,000 bytes, no fewer (the size
    # counts what is stored: payload, metadata and the broker entry metadata)
    assert 0 < kept and size <= 2700 < size + size // kept
    assert st["publishers"] and st["backlogQuotaLimitSize"] == 3000  # eviction never blocks producers
    cursor = broker.call(lambda: broker.service.topics()[topic].internal_stats()["cursors"]["slow"])
    assert cursor["markDeletePosition"].endswith(f":{19 - kept}")
    found = metrics(broker)
    assert series(found, "pulsar_storage_backlog_quota_exceeded_evictions_total", topic, quota_type="size") >= 1
    assert series(found, "pulsar_storage_backlog_quota_exceeded_evictions_total", topic, quota_type="time") == 0
    assert series(found, "pulsar_storage_backlog_quota_limit", topic) == 3000
    assert series(found, "pulsar_storage_backlog_quota_limit_time", topic) == -1
    received = [slow.receive(RECEIVE_MS).data()[:2] for _ in range(2)]
    assert b"15" in received or b"16" in received  # what it reads now is the newest five
    producer.send(b"more")


@MEMORY_ONLY
@pytest.mark.parametrize("broker", [PERIODIC], indirect=True)
def test_message_age_eviction_acknowledges_what_is_older_than_the_limit(broker, client):
    set_namespace_quotas(broker, message_age=BacklogQuota(-1, 1, "consumer_backlog_eviction"))
    topic = unique_topic("quota-age")
    client.subscribe(topic, "slow")
    fill(client, topic, 5)
    st = topic_stats(broker, topic)
    assert st["backlogQuotaLimitTime"] == 1 and st["subscriptions"]["slow"]["msgBacklog"] == 5
    wait_for(lambda: topic_stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] == 0, 15,
             what="messages older than 1 s evicted")
    evictions = broker.call(lambda: dict(broker.service.topics()[topic].backlog_quota.evictions))
    assert evictions[QuotaType.SIZE] == 0 and evictions[QuotaType.AGE] >= 1
    found = metrics(broker)
    assert series(found, "pulsar_storage_backlog_quota_exceeded_evictions_total", topic, quota_type="time") >= 1
    assert topic_stats(broker, topic)["oldestBacklogMessageAgeSeconds"] == 0


@MEMORY_ONLY
@pytest.mark.parametrize("broker", [AT_CREATION_ONLY], indirect=True)
def test_message_age_quota_refuses_producers_once_the_oldest_message_is_too_old(broker, client):
    set_namespace_quotas(broker, message_age=BacklogQuota(-1, 1, "producer_exception"))
    topic = unique_topic("quota-age-exc")
    consumer = client.subscribe(topic, "slow")
    fill(client, topic, 2)
    client.create_producer(topic).close()  # the oldest message is younger than a second (on a sane machine)

    def refused() -> bool:
        try:
            client.create_producer(topic).close()
        except pulsar.ProducerBlockedQuotaExceededException:
            return True
        return False

    wait_for(refused, 15, interval_s=0.2, what="producer refused for an old backlog")
    st = topic_stats(broker, topic)
    assert st["oldestBacklogMessageAgeSeconds"] >= 1 and st["oldestBacklogMessageSubscriptionName"] == "slow"
    found = metrics(broker)
    assert series(found, "pulsar_storage_backlog_age_seconds", topic) >= 1
    for _ in range(2):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    wait_for(lambda: topic_stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] == 0, 10, what="acked")
    client.create_producer(topic).send(b"fresh")
