"""The typed topic stats (``broker/service/topics/stats.py``) without servers: their REST JSON under Pulsar's
field names (present, absent and null as the admin API answers), and the ``/metrics`` series the collector
builds from them (names, labels and values), over a fake service holding snapshots with known values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import prometheus_client
import pytest

from broker.service.latency import BrokerLatency, StorageStats, storage_write_histogram
from broker.service.metrics import ServiceCollector
from broker.service.policies.backlog_quota import QuotaType
from broker.service.topics.stats import (BacklogQuotaStats, CompactionStats, ConsumerStats, DispatchThrottleStats,
                                         NonPersistentPublisherStats, NonPersistentSubscriptionStats,
                                         NonPersistentTopicStats, PublisherStats, ReplicationInboundStats,
                                         ReplicationStats, ReplicatorStats, SubscriptionStats, TopicStats)
from magnetar.topic_name import TopicName

TOPIC = "persistent://acme/orders/t1"
NP_TOPIC = "non-persistent://acme/orders/np"


def consumer(name: str, **kw) -> ConsumerStats:
    return ConsumerStats(consumer_name=name, msg_rate_out=2.0, msg_throughput_out=200.0, bytes_out_counter=1000,
                         msg_out_counter=10, msg_rate_redeliver=0.5, message_ack_rate=1.5, available_permits=990,
                         unacked_messages=3, avg_messages_per_entry=1, address="/127.0.0.1:5555",
                         connected_since="2024-01-01T00:00:00.000Z", client_version="Pulsar-CPP-v3.5.0",
                         last_acked_timestamp_ms=11, last_consumed_timestamp_ms=12, last_consumed_flow_timestamp_ms=13,
                         metadata={"app": "billing"}, **kw)


def persistent_topic_stats() -> TopicStats:
    shared = SubscriptionStats(
        type="Key_Shared", consumers=(consumer("c1", key_hash_ranges=("[0, 32767]",)),
                                      consumer("c2", key_hash_ranges=("[32768, 65535]",))),
        msg_rate_out=4.0, msg_throughput_out=400.0, bytes_out_counter=2000, msg_out_counter=20, msg_rate_redeliver=1.0,
        message_ack_rate=3.0, msg_backlog=42, backlog_size_bytes=4200, msg_backlog_no_delayed=40, msg_delayed=2,
        unacked_messages=6, msg_rate_expired=0.25, total_msg_expired=5, last_expire_timestamp_ms=21,
        last_consumed_flow_timestamp_ms=13, last_consumed_timestamp_ms=12, last_acked_timestamp_ms=11,
        last_mark_delete_advanced_timestamp_ms=22, is_durable=True, is_replicated=True,
        non_contiguous_deleted_messages_ranges=4,
        dispatch_throttling=DispatchThrottleStats(msg_events_by_subscription_limit=7,
                                                  bytes_events_by_subscription_limit=8, msg_events_by_topic_limit=9,
                                                  bytes_events_by_topic_limit=10),
        key_shared_mode="AUTO_SPLIT", allow_out_of_order_delivery=False)
    reader = SubscriptionStats(type="Exclusive", consumers=(consumer("r"),), msg_backlog=1, active_consumer_name="r",
                               dispatch_throttling=DispatchThrottleStats())
    west = ReplicationStats(
        outbound=ReplicatorStats(msg_rate_out=6.0, msg_throughput_out=600.0, msg_out_counter=60, bytes_out_counter=6000,
                                 replication_backlog=17, connected=True, replication_delay_s=1.5,
                                 outbound_connected_since="2024-01-01T00:00:00Z",
                                 outbound_connection="pulsar+ssl://b:6651 via pulsar+ssl://proxy:6651"),
        inbound=ReplicationInboundStats(msg_rate_in=3.0, msg_throughput_in=300.0, msg_in_counter=30))
    east = ReplicationStats(inbound=ReplicationInboundStats(msg_rate_in=1.0, msg_throughput_in=100.0, msg_in_counter=9))
    return TopicStats(
        msg_rate_in=5.0, msg_throughput_in=500.0, msg_rate_out=4.0, msg_throughput_out=400.0, bytes_in_counter=5000,
        msg_in_counter=50, bytes_out_counter=2000, msg_out_counter=20, average_msg_size=100.0,
        storage_size_bytes=123456, backlog_size_bytes=4200, waiting_publishers=1, publish_rate_limited_times=2,
        deduplication_status="Enabled", topic_epoch=3,
        publishers=(PublisherStats(producer_id=0, producer_name="p0", access_mode="Shared", msg_rate_in=5.0,
                                   msg_throughput_in=500.0, average_msg_size=100.0, address="/127.0.0.1:5556",
                                   connected_since="2024-01-01T00:00:00.000Z", client_version="Pulsar-CPP-v3.5.0",
                                   metadata={"k": "v"}),),
        subscriptions={"shared": shared, "reader": reader}, replication={"west": west, "east": east},
        non_contiguous_deleted_messages_ranges=4,
        backlog_quota=BacklogQuotaStats(limit_size_bytes=10_000, limit_time_s=-1, oldest_backlog_message_age_s=30,
                                        oldest_backlog_message_subscription_name="shared"),
        compaction=CompactionStats(last_compaction_removed_event_count=4, last_compaction_succeed_timestamp_ms=31,
                                   last_compaction_failed_timestamp_ms=0, last_compaction_duration_ms=120))


def non_persistent_topic_stats() -> NonPersistentTopicStats:
    sub = NonPersistentSubscriptionStats(type="Shared", consumers=(consumer("n1"),), msg_rate_out=2.0,
                                         msg_out_counter=10, msg_drop_rate=0.75)
    publisher = NonPersistentPublisherStats.of(PublisherStats(producer_id=4, producer_name="np0",
                                                              access_mode="Shared"))
    return NonPersistentTopicStats(msg_rate_in=2.0, msg_in_counter=10, publishers=(publisher,),
                                   subscriptions={"fast": sub}, msg_drop_rate=0.0)


# ---------------------------------------------------------------------------------------------- REST JSON


def test_consumer_and_publisher_json_have_pulsars_names() -> None:
    assert consumer("c1", read_position_when_joining="3:4").to_json() == {
        "msgRateOut": 2.0, "msgThroughputOut": 200.0, "bytesOutCounter": 1000, "msgOutCounter": 10,
        "msgRateRedeliver": 0.5, "messageAckRate": 1.5, "chunkedMessageRate": 0.0, "consumerName": "c1",
        "availablePermits": 990, "unackedMessages": 3, "avgMessagesPerEntry": 1,
        "blockedConsumerOnUnackedMsgs": False, "readPositionWhenJoining": "3:4", "address": "/127.0.0.1:5555",
        "connectedSince": "2024-01-01T00:00:00.000Z", "clientVersion": "Pulsar-CPP-v3.5.0",
        "lastAckedTimestamp": 11, "lastConsumedTimestamp": 12, "lastConsumedFlowTimestamp": 13,
        "metadata": {"app": "billing"}}  # no keyHashRanges outside Key_Shared
    assert consumer("c2", key_hash_ranges=("[0, 9]",)).to_json()["keyHashRanges"] == ["[0, 9]"]
    publisher = persistent_topic_stats().publishers[0]
    assert publisher.to_json() == {
        "accessMode": "Shared", "msgRateIn": 5.0, "msgThroughputIn": 500.0, "averageMsgSize": 100.0,
        "chunkedMessageRate": 0.0, "producerId": 0, "supportsPartialProducer": False, "producerName": "p0",
        "address": "/127.0.0.1:5556", "connectedSince": "2024-01-01T00:00:00.000Z",
        "clientVersion": "Pulsar-CPP-v3.5.0", "metadata": {"k": "v"}}
    assert NonPersistentPublisherStats.of(publisher).to_json() == {**publisher.to_json(), "msgDropRate": 0.0}


def test_persistent_topic_json_has_pulsars_names() -> None:
    out = persistent_topic_stats().to_json()
    assert {k: v for k, v in out.items() if k not in ("publishers", "subscriptions", "replication")} == {
        "msgRateIn": 5.0, "msgThroughputIn": 500.0, "msgRateOut": 4.0, "msgThroughputOut": 400.0,
        "bytesInCounter": 5000, "msgInCounter": 50, "bytesOutCounter": 2000, "msgOutCounter": 20,
        "averageMsgSize": 100.0, "msgChunkPublished": False, "storageSize": 123456, "backlogSize": 4200,
        "offloadedStorageSize": 0, "waitingPublishers": 1, "publishRateLimitedTimes": 2,
        "deduplicationStatus": "Enabled", "topicEpoch": 3, "nonContiguousDeletedMessagesRanges": 4,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0, "backlogQuotaLimitSize": 10_000,
        "backlogQuotaLimitTime": -1, "oldestBacklogMessageAgeSeconds": 30,
        "oldestBacklogMessageSubscriptionName": "shared",
        "compaction": {"lastCompactionRemovedEventCount": 4, "lastCompactionSucceedTimestamp": 31,
                       "lastCompactionFailedTimestamp": 0, "lastCompactionDurationTimeInMills": 120}}
    assert [p["producerName"] for p in out["publishers"]] == ["p0"]
    shared = out["subscriptions"]["shared"]
    assert {k: v for k, v in shared.items() if k != "consumers"} == {
        "msgRateOut": 4.0, "msgThroughputOut": 400.0, "bytesOutCounter": 2000, "msgOutCounter": 20,
        "msgRateRedeliver": 1.0, "messageAckRate": 3.0, "chunkedMessageRate": 0.0, "msgBacklog": 42,
        "backlogSize": 4200, "msgBacklogNoDelayed": 40, "blockedSubscriptionOnUnackedMsgs": False, "msgDelayed": 2,
        "unackedMessages": 6, "type": "Key_Shared", "activeConsumerName": None, "msgRateExpired": 0.25,
        "totalMsgExpired": 5, "lastExpireTimestamp": 21, "lastConsumedFlowTimestamp": 13,
        "lastConsumedTimestamp": 12, "lastAckedTimestamp": 11, "lastMarkDeleteAdvancedTimestamp": 22,
        "isDurable": True, "isReplicated": True, "replicated": True, "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": 4, "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "subscriptionProperties": {},
        "dispatchThrottledMsgEventsBySubscriptionLimit": 7, "dispatchThrottledBytesEventsBySubscriptionLimit": 8,
        "dispatchThrottledMsgEventsByTopicLimit": 9, "dispatchThrottledBytesEventsByTopicLimit": 10,
        "dispatchThrottledMsgEventsByBrokerLimit": 0, "dispatchThrottledBytesEventsByBrokerLimit": 0,
        "keySharedMode": "AUTO_SPLIT", "allowOutOfOrderDelivery": False}
    assert [c["keyHashRanges"] for c in shared["consumers"]] == [["[0, 32767]"], ["[32768, 65535]"]]
    reader = out["subscriptions"]["reader"]
    assert reader["activeConsumerName"] == "r" and "keySharedMode" not in reader
    assert "allowOutOfOrderDelivery" not in reader and "keyHashRanges" not in reader["consumers"][0]


def test_replication_json_by_side() -> None:
    out = persistent_topic_stats().to_json()["replication"]
    assert out["west"] == {  # both ways: the replicator's fields and the inbound rates
        "msgRateOut": 6.0, "msgThroughputOut": 600.0, "msgOutCounter": 60, "bytesOutCounter": 6000,
        "msgRateExpired": 0.0, "replicationBacklog": 17, "connected": True, "replicationDelayInSeconds": 1.5,
        "outboundConnection": "pulsar+ssl://b:6651 via pulsar+ssl://proxy:6651", "outboundConnectedSince": "2024-01-01T00:00:00Z", "inboundConnection": True,
        "lastError": "", "msgRateIn": 3.0, "msgThroughputIn": 300.0, "msgInCounter": 30}
    assert out["east"] == {  # inbound only
        "msgRateOut": 0.0, "msgThroughputOut": 0.0, "replicationBacklog": 0, "connected": False,
        "replicationDelayInSeconds": 0, "msgRateIn": 1.0, "msgThroughputIn": 100.0, "msgInCounter": 9,
        "inboundConnection": True}
    outbound_only = ReplicationStats(outbound=ReplicatorStats(last_error="ConnectError: refused")).to_json()
    assert outbound_only["inboundConnection"] is False and outbound_only["lastError"] == "ConnectError: refused"
    assert (outbound_only["msgRateIn"], outbound_only["msgThroughputIn"]) == (0.0, 0.0)
    assert "msgInCounter" not in outbound_only


def test_non_persistent_topic_json() -> None:
    out = non_persistent_topic_stats().to_json()
    assert out["msgDropRate"] == 0.0 and "compaction" not in out and out["replication"] == {}
    assert out["storageSize"] == 0 and out["backlogQuotaLimitSize"] == -1
    assert out["oldestBacklogMessageSubscriptionName"] is None
    sub = out["subscriptions"]["fast"]
    assert sub["msgDropRate"] == 0.75 and sub["msgBacklog"] == 0 and sub["isDurable"] is False
    assert not any(k.startswith("dispatchThrottled") for k in sub)
    assert out["publishers"][0]["msgDropRate"] == 0.0 and out["publishers"][0]["producerName"] == "np0"


def test_snapshots_are_frozen() -> None:
    stats = persistent_topic_stats()
    with pytest.raises(AttributeError):
        stats.msg_rate_in = 1.0  # type: ignore[misc]
    assert stats.msg_backlog == 43 and stats.consumer_count == 3


# ---------------------------------------------------------------------------------------------- /metrics


class _Done:
    """A completed managed-ledger add (what ``StorageStats.on_add_done`` reads)."""

    def __init__(self, failed: bool = False) -> None:
        self.failed = failed

    def cancelled(self) -> bool:
        return False

    def exception(self):
        return RuntimeError("write failed") if self.failed else None


def fake_topic(name: str, stats, *, evictions: dict[QuotaType, int], limited_total: int,
               pending_snapshots: int = 0) -> SimpleNamespace:
    now = [0.0]
    storage = StorageStats(lambda: now[0])
    for seconds, size in ((0.0003, 100), (0.004, 2000), (2.0, 2_000_000)):
        now[0] = 10.0 + seconds
        storage.on_add_done(10.0, size, _Done())
    storage.on_add_done(10.0, 50, _Done(failed=True))  # nothing stored: not counted
    return SimpleNamespace(stats=lambda: stats, topic_name=TopicName.parse(name), storage_stats=storage,
                           rate_limits=SimpleNamespace(publish_rate_limited_total=limited_total),
                           backlog_quota=SimpleNamespace(evictions=evictions),
                           replicated_subscriptions=SimpleNamespace(pending_snapshots=pending_snapshots))


def closing_topic() -> SimpleNamespace:
    def stats():
        raise RuntimeError("closing")
    return SimpleNamespace(stats=stats, topic_name=TopicName.parse("persistent://acme/orders/gone"))


@pytest.fixture
def registry() -> prometheus_client.CollectorRegistry:
    service = SimpleNamespace(
        cluster_name="c1", publish_latency=BrokerLatency(), storage_write_latency=storage_write_histogram(),
        topics=lambda: {TOPIC: fake_topic(TOPIC, persistent_topic_stats(), limited_total=12,
                                          evictions={QuotaType.SIZE: 2, QuotaType.AGE: 0}, pending_snapshots=1),
                        NP_TOPIC: fake_topic(NP_TOPIC, non_persistent_topic_stats(), limited_total=0,
                                             evictions={QuotaType.SIZE: 0, QuotaType.AGE: 0}),
                        "persistent://acme/orders/gone": closing_topic()},
        connection_counts=lambda: {"active": 2, "created": 5, "closed": 3})
    registry = prometheus_client.CollectorRegistry()
    registry.register(ServiceCollector(service))
    return registry


def topic_labels(topic: str = TOPIC, **extra: str) -> dict[str, str]:
    return {"cluster": "c1", "namespace": "acme/orders", "topic": topic, **extra}


def test_topic_series(registry) -> None:
    expected = {"pulsar_rate_in": 5.0, "pulsar_rate_out": 4.0, "pulsar_throughput_in": 500.0,
                "pulsar_throughput_out": 400.0, "pulsar_storage_size": 123456, "pulsar_msg_backlog": 43,
                "pulsar_producers_count": 1, "pulsar_consumers_count": 3, "pulsar_subscriptions_count": 2,
                "pulsar_average_msg_size": 100.0, "pulsar_in_messages_total": 50, "pulsar_in_bytes_total": 5000,
                "pulsar_publish_rate_limit_times": 2, "magnetar_publish_rate_limited_total": 12,
                "pulsar_storage_backlog_size": 4200, "pulsar_storage_backlog_quota_limit": 10_000,
                "pulsar_storage_backlog_quota_limit_time": -1, "pulsar_storage_backlog_age_seconds": 30,
                "pulsar_storage_write_latency_le_0_5": 1, "pulsar_storage_write_latency_le_1": 0,
                "pulsar_storage_write_latency_le_5": 1, "pulsar_storage_write_latency_overflow": 1,
                "pulsar_storage_write_latency_count": 3,
                "pulsar_entry_size_le_128": 1, "pulsar_entry_size_le_2_kb": 1, "pulsar_entry_size_le_1_mb": 0,
                "pulsar_entry_size_le_overflow": 1, "pulsar_entry_size_count": 3,
                "pulsar_entry_size_sum": 2_002_100}
    for name, value in expected.items():
        assert registry.get_sample_value(name, topic_labels()) == value, name
    # Pulsar's _sum is in microseconds
    assert registry.get_sample_value("pulsar_storage_write_latency_sum", topic_labels()) == pytest.approx(2_004_300)
    assert registry.get_sample_value("pulsar_storage_write_latency_le_overflow", topic_labels()) is None
    for quota_type, evicted in (("size", 2), ("time", 0)):
        assert registry.get_sample_value("pulsar_storage_backlog_quota_exceeded_evictions_total",
                                         topic_labels(quota_type=quota_type)) == evicted
    assert registry.get_sample_value("pulsar_rate_in", topic_labels("persistent://acme/orders/gone")) is None
    assert registry.get_sample_value("pulsar_storage_size", topic_labels(NP_TOPIC)) == 0
    assert registry.get_sample_value("pulsar_in_messages_total", topic_labels(NP_TOPIC)) == 10


def test_subscription_series(registry) -> None:
    expected = {"pulsar_subscription_back_log": 42, "pulsar_subscription_msg_rate_out": 4.0,
                "pulsar_subscription_msg_throughput_out": 400.0, "pulsar_subscription_msg_rate_redeliver": 1.0,
                "pulsar_subscription_unacked_messages": 6, "pulsar_subscription_consumers_count": 2}
    for name, value in expected.items():
        assert registry.get_sample_value(name, topic_labels(subscription="shared")) == value, name
    assert registry.get_sample_value("pulsar_subscription_back_log", topic_labels(subscription="reader")) == 1
    throttled = {("msg", "subscription"): 7, ("msg", "topic"): 9, ("bytes", "subscription"): 8,
                 ("bytes", "topic"): 10}
    for (dim, reason), value in throttled.items():
        name = f"pulsar_subscription_dispatch_throttled_{dim}_events"
        assert registry.get_sample_value(name, topic_labels(subscription="shared", reason=reason)) == value
        # a non-persistent subscription has no dispatch limits: its series read 0
        assert registry.get_sample_value(name, topic_labels(NP_TOPIC, subscription="fast", reason=reason)) == 0
    assert registry.get_sample_value("pulsar_subscription_dispatch_throttled_msg_events",
                                     topic_labels(subscription="shared", reason="broker")) is None


def test_replication_series(registry) -> None:
    west = {"pulsar_replication_rate_in": 3.0, "pulsar_replication_rate_out": 6.0,
            "pulsar_replication_throughput_in": 300.0, "pulsar_replication_throughput_out": 600.0,
            "pulsar_replication_backlog": 17, "pulsar_replication_delay_in_seconds": 1.5,
            "pulsar_replication_connected_count": 1}
    east = {**{name: 0 for name in west}, "pulsar_replication_rate_in": 1.0, "pulsar_replication_throughput_in": 100.0}
    for remote, expected in (("west", west), ("east", east)):
        for name, value in expected.items():
            assert registry.get_sample_value(name, topic_labels(remote_cluster=remote)) == value, (remote, name)


def test_connection_and_broker_series(registry) -> None:
    for name, value in (("pulsar_active_connections", 2), ("pulsar_connection_created_total_count", 5),
                        ("pulsar_connection_closed_total_count", 3)):
        assert registry.get_sample_value(name, {"cluster": "c1"}) == value
    assert registry.get_sample_value("magnetar_broker_publish_latency_seconds_count") == 0
    assert registry.get_sample_value("pulsar_broker_publish_latency_count", {"cluster": "c1"}) == 0
    assert math.isnan(registry.get_sample_value("pulsar_broker_publish_latency", {"cluster": "c1", "quantile": "0.99"}))
    # one pending snapshot on the persistent topic, none on the non-persistent one
    assert registry.get_sample_value("pulsar_replicated_subscriptions_pending_snapshots", {"cluster": "c1"}) == 1
