"""Typed stats of a topic and what it holds, as the admin REST API and ``/metrics`` both see them.

Theory of operation: nothing here is kept up to date. The hot paths only bump plain counters and
:class:`~broker.service.stats.RateMeter` totals on topics, producers, consumers and subscriptions; when stats
are asked for (``GET .../stats``, ``/admin/v2/broker-stats/topics``, a ``/metrics`` scrape) each owner builds
a frozen snapshot of itself from them (``Topic.stats()``, ``Subscription.stats()``, ``Consumer.stats()``,
``Producer.stats()``, the replicators' ``stats()``). The metrics collector reads the snapshots' attributes;
the admin REST boundary calls ``to_json()``, which renders Apache Pulsar's JSON: its camelCase field names
(``TopicStats``, ``SubscriptionStats``, ``ConsumerStats``, ``PublisherStats``, ``ReplicatorStats`` and their
``NonPersistent*`` variants), with the same fields present, absent or null as the admin API has always
answered (a field that only some topics have is an ``Optional`` attribute, left out of the JSON when None).

Attribute names are Pulsar's names in snake_case, with the unit last where Pulsar's name has none
(``backlog_size_bytes``, ``last_acked_timestamp_ms``). Rates are per second over the last stats window
(``msg_rate_*``: messages, ``msg_throughput_*``: bytes); counters count since the owner was created.

The backlog quota and dispatch throttling snapshots belong to the policies room (``policies/stats.py``:
imports flow topics -> policies) and are re-exported here. Pure: no asyncio, no protobuf.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Self, Sequence

from ..policies.stats import BacklogQuotaStats, DispatchThrottleStats

__all__ = [
    "BacklogQuotaStats", "CompactionStats", "ConsumerStats", "DispatchThrottleStats", "NonPersistentPublisherStats",
    "NonPersistentSubscriptionStats", "NonPersistentTopicStats", "PublisherStats", "ReplicationInboundStats",
    "ReplicationStats", "ReplicatorStats", "SubscriptionStats", "TopicStats",
]


def _values(stats: Any) -> dict[str, Any]:
    """The fields of a stats dataclass by name (shallow), to build a variant of it."""
    return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}


# ---------------------------------------------------------------------------------------------- producers


def with_key_hash_ranges(consumers: Sequence[Any], stats: Sequence["ConsumerStats"], key_shared: Any
                         ) -> list["ConsumerStats"]:
    """The consumers' stats with Pulsar's ``keyHashRanges`` (``"[start, end]"`` strings) of a Key_Shared
    dispatcher (anything with ``hash_ranges(consumer)``); unchanged when ``key_shared`` is None."""
    if key_shared is None:
        return list(stats)
    return [dataclasses.replace(s, key_hash_ranges=tuple(f"[{a}, {b}]" for a, b in key_shared.hash_ranges(c)))
            for c, s in zip(consumers, stats)]


@dataclass(frozen=True, kw_only=True, slots=True)
class PublisherStats:
    """One connected producer: Pulsar's ``PublisherStats``.

    Attributes:
        access_mode: the producer access mode's name (``Shared``, ``Exclusive``, ``WaitForExclusive``, ...).
        average_msg_size: bytes per message published since the producer was created (0 before any).
        connected_since: when the producer was created (ISO-8601, UTC).
        metadata: the producer properties the client sent.
    """

    producer_id: int
    producer_name: str
    access_mode: str
    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0
    average_msg_size: float = 0.0
    chunked_message_rate: float = 0.0
    supports_partial_producer: bool = False
    address: Optional[str] = None
    connected_since: Optional[str] = None
    client_version: Optional[str] = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "accessMode": self.access_mode,
            "msgRateIn": self.msg_rate_in,
            "msgThroughputIn": self.msg_throughput_in,
            "averageMsgSize": self.average_msg_size,
            "chunkedMessageRate": self.chunked_message_rate,
            "producerId": self.producer_id,
            "supportsPartialProducer": self.supports_partial_producer,
            "producerName": self.producer_name,
            "address": self.address,
            "connectedSince": self.connected_since,
            "clientVersion": self.client_version,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class NonPersistentPublisherStats(PublisherStats):
    """A producer of a non-persistent topic: Pulsar's ``NonPersistentPublisherStats``.

    Attributes:
        msg_drop_rate: messages/s dropped at publish (Magnetar never drops there: always 0).
    """

    msg_drop_rate: float = 0.0

    @classmethod
    def of(cls, publisher: PublisherStats, *, msg_drop_rate: float = 0.0) -> "NonPersistentPublisherStats":
        return cls(**_values(publisher), msg_drop_rate=msg_drop_rate)

    def to_json(self) -> dict[str, Any]:
        return {**PublisherStats.to_json(self), "msgDropRate": self.msg_drop_rate}


# ---------------------------------------------------------------------------------------------- consumers


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerStats:
    """One connected consumer: Pulsar's ``ConsumerStats``.

    Attributes:
        available_permits: the permits the client granted that are not used yet.
        avg_messages_per_entry: messages per delivered entry (a moving average, rounded).
        read_position_when_joining: Key_Shared: the position before which this consumer was restricted when
            it joined (None when it was not).
        key_hash_ranges: Key_Shared only: the hash ranges this consumer serves, as ``"[start, end]"``
            (None: not a Key_Shared subscription; not rendered).
    """

    consumer_name: str
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    bytes_out_counter: int = 0
    msg_out_counter: int = 0
    msg_rate_redeliver: float = 0.0
    message_ack_rate: float = 0.0
    chunked_message_rate: float = 0.0
    available_permits: int = 0
    unacked_messages: int = 0
    avg_messages_per_entry: int = 0
    blocked_consumer_on_unacked_msgs: bool = False
    read_position_when_joining: Optional[str] = None
    address: Optional[str] = None
    connected_since: Optional[str] = None
    client_version: Optional[str] = None
    last_acked_timestamp_ms: int = 0
    last_consumed_timestamp_ms: int = 0
    last_consumed_flow_timestamp_ms: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)
    key_hash_ranges: Optional[tuple[str, ...]] = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "msgRateOut": self.msg_rate_out,
            "msgThroughputOut": self.msg_throughput_out,
            "bytesOutCounter": self.bytes_out_counter,
            "msgOutCounter": self.msg_out_counter,
            "msgRateRedeliver": self.msg_rate_redeliver,
            "messageAckRate": self.message_ack_rate,
            "chunkedMessageRate": self.chunked_message_rate,
            "consumerName": self.consumer_name,
            "availablePermits": self.available_permits,
            "unackedMessages": self.unacked_messages,
            "avgMessagesPerEntry": self.avg_messages_per_entry,
            "blockedConsumerOnUnackedMsgs": self.blocked_consumer_on_unacked_msgs,
            "readPositionWhenJoining": self.read_position_when_joining,
            "address": self.address,
            "connectedSince": self.connected_since,
            "clientVersion": self.client_version,
            "lastAckedTimestamp": self.last_acked_timestamp_ms,
            "lastConsumedTimestamp": self.last_consumed_timestamp_ms,
            "lastConsumedFlowTimestamp": self.last_consumed_flow_timestamp_ms,
            "metadata": dict(self.metadata),
        }
        if self.key_hash_ranges is not None:
            out["keyHashRanges"] = list(self.key_hash_ranges)
        return out


# ---------------------------------------------------------------------------------------------- subscriptions


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscriptionStats:
    """One subscription: Pulsar's ``SubscriptionStats``.

    Attributes:
        type: the subscription type's name (``Exclusive``, ``Shared``, ``Failover``, ``Key_Shared``).
        msg_backlog: entries not acknowledged yet; ``msg_backlog_no_delayed`` leaves out those held back by
            delayed delivery (``msg_delayed``).
        backlog_size_bytes: the backlog's estimated size (the ledger's bytes per entry times the backlog).
        active_consumer_name: the consumer that is sent messages (Exclusive, Failover), else None.
        is_replicated: the subscription is replicated (rendered as both ``isReplicated`` and ``replicated``).
        non_contiguous_deleted_messages_ranges: acknowledged ranges past the mark-delete position.
        dispatch_throttling: events of the dispatch rate limits (None: no rate limits apply, as on a
            non-persistent topic; not rendered).
        key_shared_mode: Key_Shared only: ``AUTO_SPLIT`` or ``STICKY`` (None: not rendered).
        allow_out_of_order_delivery: Key_Shared on a persistent topic only (None: not rendered).
    """

    type: str
    consumers: tuple[ConsumerStats, ...] = ()
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    bytes_out_counter: int = 0
    msg_out_counter: int = 0
    msg_rate_redeliver: float = 0.0
    message_ack_rate: float = 0.0
    chunked_message_rate: float = 0.0
    msg_backlog: int = 0
    backlog_size_bytes: int = 0
    msg_backlog_no_delayed: int = 0
    blocked_subscription_on_unacked_msgs: bool = False
    msg_delayed: int = 0
    unacked_messages: int = 0
    active_consumer_name: Optional[str] = None
    msg_rate_expired: float = 0.0
    total_msg_expired: int = 0
    last_expire_timestamp_ms: int = 0
    last_consumed_flow_timestamp_ms: int = 0
    last_consumed_timestamp_ms: int = 0
    last_acked_timestamp_ms: int = 0
    last_mark_delete_advanced_timestamp_ms: int = 0
    is_durable: bool = False
    is_replicated: bool = False
    consumers_after_mark_delete_position: Mapping[str, str] = field(default_factory=dict)
    non_contiguous_deleted_messages_ranges: int = 0
    non_contiguous_deleted_messages_ranges_serialized_size: int = 0
    subscription_properties: Mapping[str, str] = field(default_factory=dict)
    dispatch_throttling: Optional[DispatchThrottleStats] = None
    key_shared_mode: Optional[str] = None
    allow_out_of_order_delivery: Optional[bool] = None

    @classmethod
    def of_consumers(cls, type: str, consumers: Sequence[ConsumerStats], *, removed_bytes_out: int,
                     removed_msg_out: int, **fields: Any) -> Self:
        """The stats of a subscription whose consumers are ``consumers``: their rates and counters summed (the
        counters with those of consumers gone, ``removed_*``), their latest timestamps; ``fields`` set the rest.
        Persistent and non-persistent subscriptions sum alike."""
        return cls(
            type=type, consumers=tuple(consumers),
            msg_rate_out=sum(c.msg_rate_out for c in consumers),
            msg_throughput_out=sum(c.msg_throughput_out for c in consumers),
            bytes_out_counter=removed_bytes_out + sum(c.bytes_out_counter for c in consumers),
            msg_out_counter=removed_msg_out + sum(c.msg_out_counter for c in consumers),
            message_ack_rate=sum(c.message_ack_rate for c in consumers),
            last_consumed_flow_timestamp_ms=max([c.last_consumed_flow_timestamp_ms for c in consumers], default=0),
            last_consumed_timestamp_ms=max([c.last_consumed_timestamp_ms for c in consumers], default=0),
            last_acked_timestamp_ms=max([c.last_acked_timestamp_ms for c in consumers], default=0),
            **fields)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def to_json(self) -> dict[str, Any]:
        out = {
            "msgRateOut": self.msg_rate_out,
            "msgThroughputOut": self.msg_throughput_out,
            "bytesOutCounter": self.bytes_out_counter,
            "msgOutCounter": self.msg_out_counter,
            "msgRateRedeliver": self.msg_rate_redeliver,
            "messageAckRate": self.message_ack_rate,
            "chunkedMessageRate": self.chunked_message_rate,
            "msgBacklog": self.msg_backlog,
            "backlogSize": self.backlog_size_bytes,
            "msgBacklogNoDelayed": self.msg_backlog_no_delayed,
            "blockedSubscriptionOnUnackedMsgs": self.blocked_subscription_on_unacked_msgs,
            "msgDelayed": self.msg_delayed,
            "unackedMessages": self.unacked_messages,
            "type": self.type,
            "activeConsumerName": self.active_consumer_name,
            "msgRateExpired": self.msg_rate_expired,
            "totalMsgExpired": self.total_msg_expired,
            "lastExpireTimestamp": self.last_expire_timestamp_ms,
            "lastConsumedFlowTimestamp": self.last_consumed_flow_timestamp_ms,
            "lastConsumedTimestamp": self.last_consumed_timestamp_ms,
            "lastAckedTimestamp": self.last_acked_timestamp_ms,
            "lastMarkDeleteAdvancedTimestamp": self.last_mark_delete_advanced_timestamp_ms,
            "consumers": [c.to_json() for c in self.consumers],
            "isDurable": self.is_durable,
            "isReplicated": self.is_replicated,
            "replicated": self.is_replicated,
            "consumersAfterMarkDeletePosition": dict(self.consumers_after_mark_delete_position),
            "nonContiguousDeletedMessagesRanges": self.non_contiguous_deleted_messages_ranges,
            "nonContiguousDeletedMessagesRangesSerializedSize":
                self.non_contiguous_deleted_messages_ranges_serialized_size,
            "subscriptionProperties": dict(self.subscription_properties),
        }
        if self.dispatch_throttling is not None:
            out.update(self.dispatch_throttling.to_json())
        if self.key_shared_mode is not None:
            out["keySharedMode"] = self.key_shared_mode
        if self.allow_out_of_order_delivery is not None:
            out["allowOutOfOrderDelivery"] = self.allow_out_of_order_delivery
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class NonPersistentSubscriptionStats(SubscriptionStats):
    """A subscription of a non-persistent topic: Pulsar's ``NonPersistentSubscriptionStats`` (its backlog
    fields stay 0 for dashboards that read them).

    Attributes:
        msg_drop_rate: messages/s dropped because no consumer had a permit for them.
    """

    msg_drop_rate: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {**SubscriptionStats.to_json(self), "msgDropRate": self.msg_drop_rate}


# ---------------------------------------------------------------------------------------------- replication


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplicatorStats:
    """The outbound side of replication to one remote cluster (this cluster's replicator): the fields of
    Pulsar's ``ReplicatorStats`` a replicator knows.

    Attributes:
        replication_backlog: entries not yet replicated (the replicator cursor's backlog).
        connected: the replicator's producer is connected to the remote cluster.
        replication_delay_s: age of the oldest entry not yet replicated (0 when caught up).
        outbound_connected_since: when the producer connected (ISO-8601, UTC; "" while not connected).
        outbound_connection: the remote broker the producer's connection reaches and the proxy it goes through
            (``pulsar+ssl://broker:port via pulsar+ssl://proxy:port``; "" while not connected).
        last_error: why the last connection attempt failed ("" when it did not).
    """

    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    msg_out_counter: int = 0
    bytes_out_counter: int = 0
    msg_rate_expired: float = 0.0
    replication_backlog: int = 0
    connected: bool = False
    replication_delay_s: float = 0.0
    outbound_connected_since: str = ""
    outbound_connection: str = ""
    last_error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "msgRateOut": self.msg_rate_out,
            "msgThroughputOut": self.msg_throughput_out,
            "msgOutCounter": self.msg_out_counter,
            "bytesOutCounter": self.bytes_out_counter,
            "msgRateExpired": self.msg_rate_expired,
            "replicationBacklog": self.replication_backlog,
            "connected": self.connected,
            "replicationDelayInSeconds": self.replication_delay_s,
            "outboundConnection": self.outbound_connection,
            "outboundConnectedSince": self.outbound_connected_since,
            "inboundConnection": False,
            "lastError": self.last_error,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplicationInboundStats:
    """The inbound side of replication from one remote cluster: what its replicator published here."""

    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0
    msg_in_counter: int = 0


def _side_value(side: str, name: str, absent: Any) -> property:
    """A read-only property: ``name`` of the ``side`` stats of a ReplicationStats, ``absent`` without that side."""
    def get(self: "ReplicationStats") -> Any:
        stats = getattr(self, side)
        return getattr(stats, name) if stats is not None else absent
    return property(get)


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplicationStats:
    """A topic's replication with one remote cluster, both ways: one entry of Pulsar's ``replication``
    section of topic stats. Either side may be missing (no replicator to that cluster; nothing received
    from it since the topic loaded); the properties read 0 for a missing side."""

    outbound: Optional[ReplicatorStats] = None
    inbound: Optional[ReplicationInboundStats] = None

    msg_rate_in = _side_value("inbound", "msg_rate_in", 0.0)
    msg_throughput_in = _side_value("inbound", "msg_throughput_in", 0.0)
    msg_rate_out = _side_value("outbound", "msg_rate_out", 0.0)
    msg_throughput_out = _side_value("outbound", "msg_throughput_out", 0.0)
    replication_backlog = _side_value("outbound", "replication_backlog", 0)
    replication_delay_s = _side_value("outbound", "replication_delay_s", 0)
    connected = _side_value("outbound", "connected", False)

    def to_json(self) -> dict[str, Any]:
        if self.outbound is not None:
            out = self.outbound.to_json()
        else:  # received from the cluster only: the outbound fields dashboards read, at rest
            out = {"msgRateOut": 0.0, "msgThroughputOut": 0.0, "replicationBacklog": 0, "connected": False,
                   "replicationDelayInSeconds": 0}
        inbound = self.inbound
        if inbound is None:
            out["msgRateIn"] = 0.0
            out["msgThroughputIn"] = 0.0
        else:
            out["msgRateIn"] = inbound.msg_rate_in
            out["msgThroughputIn"] = inbound.msg_throughput_in
            out["msgInCounter"] = inbound.msg_in_counter
            out["inboundConnection"] = True
        return out


# ---------------------------------------------------------------------------------------------- topics


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionStats:
    """The last compaction of a persistent topic: Pulsar's ``compaction`` section of topic stats (0s: none
    since the topic loaded)."""

    last_compaction_removed_event_count: int = 0
    last_compaction_succeed_timestamp_ms: int = 0
    last_compaction_failed_timestamp_ms: int = 0
    last_compaction_duration_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"lastCompactionRemovedEventCount": self.last_compaction_removed_event_count,
                "lastCompactionSucceedTimestamp": self.last_compaction_succeed_timestamp_ms,
                "lastCompactionFailedTimestamp": self.last_compaction_failed_timestamp_ms,
                "lastCompactionDurationTimeInMills": self.last_compaction_duration_ms}


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicStats:
    """A topic: Pulsar's ``TopicStats``.

    Attributes:
        msg_rate_out, msg_throughput_out: the sums over the subscriptions.
        bytes_out_counter, msg_out_counter: dispatched since the topic loaded (subscriptions removed since
            included where the topic keeps them).
        average_msg_size: bytes per message published since the topic loaded (0 before any).
        storage_size_bytes: what the topic's ledgers hold.
        backlog_size_bytes: the largest estimated backlog of its subscriptions.
        waiting_publishers: ``WaitForExclusive`` producers queued for the topic.
        publish_rate_limited_times: publish rate throttlings in the current stats window.
        deduplication_status: ``Enabled``, ``Disabled``, ``Recovering``, ... (Pulsar's words).
        topic_epoch: the exclusive-producer epoch (None before any exclusive producer).
        publishers, subscriptions: by producer (creation order) and by subscription name.
        replication: by remote cluster.
        backlog_quota: the quotas in force and the oldest backlog (merged into the topic's JSON fields).
        compaction: a persistent topic's last compaction (None: not rendered, a non-persistent topic).
    """

    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    bytes_in_counter: int = 0
    msg_in_counter: int = 0
    bytes_out_counter: int = 0
    msg_out_counter: int = 0
    average_msg_size: float = 0.0
    msg_chunk_published: bool = False
    storage_size_bytes: int = 0
    backlog_size_bytes: int = 0
    offloaded_storage_size_bytes: int = 0
    waiting_publishers: int = 0
    publish_rate_limited_times: int = 0
    deduplication_status: str = "Disabled"
    topic_epoch: Optional[int] = None
    publishers: tuple[PublisherStats, ...] = ()
    subscriptions: Mapping[str, SubscriptionStats] = field(default_factory=dict)
    replication: Mapping[str, ReplicationStats] = field(default_factory=dict)
    non_contiguous_deleted_messages_ranges: int = 0
    non_contiguous_deleted_messages_ranges_serialized_size: int = 0
    backlog_quota: BacklogQuotaStats = field(default_factory=BacklogQuotaStats)
    compaction: Optional[CompactionStats] = None

    @property
    def msg_backlog(self) -> int:
        """Entries not acknowledged, summed over the subscriptions."""
        return sum(s.msg_backlog for s in self.subscriptions.values())

    @property
    def consumer_count(self) -> int:
        return sum(len(s.consumers) for s in self.subscriptions.values())

    def to_json(self) -> dict[str, Any]:
        out = {
            "msgRateIn": self.msg_rate_in,
            "msgThroughputIn": self.msg_throughput_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputOut": self.msg_throughput_out,
            "bytesInCounter": self.bytes_in_counter,
            "msgInCounter": self.msg_in_counter,
            "bytesOutCounter": self.bytes_out_counter,
            "msgOutCounter": self.msg_out_counter,
            "averageMsgSize": self.average_msg_size,
            "msgChunkPublished": self.msg_chunk_published,
            "storageSize": self.storage_size_bytes,
            "backlogSize": self.backlog_size_bytes,
            "offloadedStorageSize": self.offloaded_storage_size_bytes,
            "waitingPublishers": self.waiting_publishers,
            "publishRateLimitedTimes": self.publish_rate_limited_times,
            "deduplicationStatus": self.deduplication_status,
            "topicEpoch": self.topic_epoch,
            "publishers": [p.to_json() for p in self.publishers],
            "subscriptions": {name: s.to_json() for name, s in self.subscriptions.items()},
            "replication": {cluster: r.to_json() for cluster, r in self.replication.items()},
            "nonContiguousDeletedMessagesRanges": self.non_contiguous_deleted_messages_ranges,
            "nonContiguousDeletedMessagesRangesSerializedSize":
                self.non_contiguous_deleted_messages_ranges_serialized_size,
            **self.backlog_quota.to_json(),
        }
        if self.compaction is not None:
            out["compaction"] = self.compaction.to_json()
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class NonPersistentTopicStats(TopicStats):
    """A non-persistent topic: Pulsar's ``NonPersistentTopicStats`` (storage and backlog fields stay 0).

    Attributes:
        msg_drop_rate: messages/s dropped at publish, summed over the publishers.
    """

    msg_drop_rate: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {**TopicStats.to_json(self), "msgDropRate": self.msg_drop_rate}
