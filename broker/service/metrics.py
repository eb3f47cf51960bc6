"""Prometheus series of the service, under Apache Pulsar's own names and labels.

One collector reads the live topics at scrape time (the hot path only bumps plain counters: storage write
latency and entry size ranges, publish latency, see ``latency.py``): each topic builds its typed stats
snapshot (``topics/stats.py``, the same the admin REST API renders as JSON) and the series are read from its
attributes; what only the metrics show (write latency and entry size ranges, backlog evictions, publish
throttlings since load) is read from the topic's own counters. Topic series carry ``cluster``,
``namespace``, ``topic``; subscription series add ``subscription``, replication series ``remote_cluster``;
connection series, the broker-wide publish latency and the pending replicated-subscription snapshots carry
``cluster`` only. Registered only into the registry given to ``BrokerService`` (tests pass a fresh one;
None registers nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .policies.backlog_quota import QuotaType
from .latency import ENTRY_SIZE_SUFFIXES, WRITE_LATENCY_SUFFIXES
from .topics.stats import DispatchThrottleStats, ReplicationStats, TopicStats

if TYPE_CHECKING:
    from .service import BrokerService

_TOPIC_LABELS = ["cluster", "namespace", "topic"]
_SUB_LABELS = ["cluster", "namespace", "topic", "subscription"]
_REPL_LABELS = ["cluster", "namespace", "topic", "remote_cluster"]
_QUOTA_LABELS = ["cluster", "namespace", "topic", "quota_type"]
_THROTTLE_LABELS = ["cluster", "namespace", "topic", "subscription", "reason"]
# Pulsar's dispatch throttling series (reason: the level of the limit that throttled):
# (metric, help, {reason: the count in DispatchThrottleStats})
_DISPATCH_THROTTLED_SERIES: tuple[tuple[str, str, dict[str, Callable[[DispatchThrottleStats], int]]], ...] = (
    ("pulsar_subscription_dispatch_throttled_msg_events", "Times a dispatch rate's message limit throttled the "
     "subscription, by the limit's level", {"subscription": lambda d: d.msg_events_by_subscription_limit,
                                            "topic": lambda d: d.msg_events_by_topic_limit}),
    ("pulsar_subscription_dispatch_throttled_bytes_events", "Times a dispatch rate's byte limit throttled the "
     "subscription, by the limit's level", {"subscription": lambda d: d.bytes_events_by_subscription_limit,
                                            "topic": lambda d: d.bytes_events_by_topic_limit}),
)
_NO_THROTTLING = DispatchThrottleStats()  # a subscription no dispatch rate limit applies to
# Pulsar's backlog quota series: (metric, help, value from the topic's stats)
_BACKLOG_QUOTA_SERIES: tuple[tuple[str, str, Callable[[TopicStats], float]], ...] = (
    ("pulsar_storage_backlog_size", "Estimated bytes of the largest subscription backlog",
     lambda t: t.backlog_size_bytes),
    ("pulsar_storage_backlog_quota_limit", "Size limit of the backlog quota (bytes; -1: none)",
     lambda t: t.backlog_quota.limit_size_bytes),
    ("pulsar_storage_backlog_quota_limit_time", "Age limit of the backlog quota (seconds; -1: none)",
     lambda t: t.backlog_quota.limit_time_s),
    ("pulsar_storage_backlog_age_seconds", "Age of the oldest unacknowledged message of the slowest subscription",
     lambda t: t.backlog_quota.oldest_backlog_message_age_s),
)
# Pulsar's replication series: (metric, help, value from one remote cluster's replication stats)
_REPLICATION_SERIES: tuple[tuple[str, str, Callable[[ReplicationStats], float]], ...] = (
    ("pulsar_replication_rate_in", "Messages/s received from the remote cluster", lambda r: r.msg_rate_in),
    ("pulsar_replication_rate_out", "Messages/s sent to the remote cluster", lambda r: r.msg_rate_out),
    ("pulsar_replication_throughput_in", "Bytes/s received from the remote cluster", lambda r: r.msg_throughput_in),
    ("pulsar_replication_throughput_out", "Bytes/s sent to the remote cluster", lambda r: r.msg_throughput_out),
    ("pulsar_replication_backlog", "Entries not yet replicated to the remote cluster",
     lambda r: r.replication_backlog),
    ("pulsar_replication_delay_in_seconds", "Age of the oldest entry not yet replicated",
     lambda r: r.replication_delay_s),
    ("pulsar_replication_connected_count", "1 when the replicator is connected to the remote cluster",
     lambda r: r.connected),
)


class ServiceCollector(Collector):
    def __init__(self, service: "BrokerService") -> None:
        self.service = service

    def describe(self):  # names are fixed, but described lazily: no collision checks against other collectors
        return []

    def collect(self) -> Iterator:
        svc = self.service
        g = {
            "pulsar_rate_in": GaugeMetricFamily("pulsar_rate_in", "Messages/s published", labels=_TOPIC_LABELS),
            "pulsar_rate_out": GaugeMetricFamily("pulsar_rate_out", "Messages/s dispatched", labels=_TOPIC_LABELS),
            "pulsar_throughput_in": GaugeMetricFamily("pulsar_throughput_in", "Bytes/s published",
                                                      labels=_TOPIC_LABELS),
            "pulsar_throughput_out": GaugeMetricFamily("pulsar_throughput_out", "Bytes/s dispatched",
                                                       labels=_TOPIC_LABELS),
            "pulsar_storage_size": GaugeMetricFamily("pulsar_storage_size", "Bytes stored", labels=_TOPIC_LABELS),
            "pulsar_msg_backlog": GaugeMetricFamily("pulsar_msg_backlog", "Backlog (entries) over subscriptions",
                                                    labels=_TOPIC_LABELS),
            "pulsar_producers_count": GaugeMetricFamily("pulsar_producers_count", "Connected producers",
                                                        labels=_TOPIC_LABELS),
            "pulsar_consumers_count": GaugeMetricFamily("pulsar_consumers_count", "Connected consumers",
                                                        labels=_TOPIC_LABELS),
            "pulsar_subscriptions_count": GaugeMetricFamily("pulsar_subscriptions_count", "Subscriptions",
                                                            labels=_TOPIC_LABELS),
            "pulsar_average_msg_size": GaugeMetricFamily("pulsar_average_msg_size", "Average message size (bytes)",
                                                         labels=_TOPIC_LABELS),
        }
        in_msgs = CounterMetricFamily("pulsar_in_messages", "Messages published", labels=_TOPIC_LABELS)
        in_bytes = CounterMetricFamily("pulsar_in_bytes", "Bytes published", labels=_TOPIC_LABELS)
        s = {
            "pulsar_subscription_back_log": GaugeMetricFamily("pulsar_subscription_back_log",
                                                              "Subscription backlog (entries)", labels=_SUB_LABELS),
            "pulsar_subscription_msg_rate_out": GaugeMetricFamily("pulsar_subscription_msg_rate_out",
                                                                  "Messages/s dispatched", labels=_SUB_LABELS),
            "pulsar_subscription_msg_throughput_out": GaugeMetricFamily(
                "pulsar_subscription_msg_throughput_out", "Bytes/s dispatched", labels=_SUB_LABELS),
            "pulsar_subscription_msg_rate_redeliver": GaugeMetricFamily(
                "pulsar_subscription_msg_rate_redeliver", "Messages/s redelivered", labels=_SUB_LABELS),
            "pulsar_subscription_unacked_messages": GaugeMetricFamily(
                "pulsar_subscription_unacked_messages", "Unacknowledged messages", labels=_SUB_LABELS),
            "pulsar_subscription_consumers_count": GaugeMetricFamily(
                "pulsar_subscription_consumers_count", "Connected consumers", labels=_SUB_LABELS),
        }
        r = {metric: GaugeMetricFamily(metric, text, labels=_REPL_LABELS) for metric, text, _ in _REPLICATION_SERIES}
        lat = {suffix: GaugeMetricFamily(f"pulsar_storage_write_latency_{suffix}",
                                         "Entries whose managed-ledger add took this long (ms range; _sum in "
                                         "microseconds), since the topic loaded", labels=_TOPIC_LABELS)
               for suffix in (*WRITE_LATENCY_SUFFIXES, "count", "sum")}
        size = {suffix: GaugeMetricFamily(f"pulsar_entry_size_{suffix}", "Entries added of a size in this range "
                                          "(bytes), since the topic loaded", labels=_TOPIC_LABELS)
                for suffix in (*ENTRY_SIZE_SUFFIXES, "count", "sum")}
        pending_snapshots = 0
        q = {metric: GaugeMetricFamily(metric, text, labels=_TOPIC_LABELS) for metric, text, _ in _BACKLOG_QUOTA_SERIES}
        evictions = CounterMetricFamily("pulsar_storage_backlog_quota_exceeded_evictions",
                                        "Times a backlog over its quota was evicted", labels=_QUOTA_LABELS)
        publish_limited = GaugeMetricFamily("pulsar_publish_rate_limit_times", "Times the publish rate limit "
                                            "throttled the topic's producers in the current stats window",
                                            labels=_TOPIC_LABELS)
        publish_limited_total = CounterMetricFamily("magnetar_publish_rate_limited", "Times the publish rate "
                                                    "limit throttled the topic's producers since it loaded",
                                                    labels=_TOPIC_LABELS)
        throttled = {metric: GaugeMetricFamily(metric, text, labels=_THROTTLE_LABELS)
                     for metric, text, _ in _DISPATCH_THROTTLED_SERIES}
        for name, topic in svc.topics().items():
            try:
                st = topic.stats()
            except Exception:
                continue
            labels = [svc.cluster_name, topic.topic_name.namespace, name]
            subs = st.subscriptions
            g["pulsar_rate_in"].add_metric(labels, st.msg_rate_in)
            g["pulsar_rate_out"].add_metric(labels, st.msg_rate_out)
            g["pulsar_throughput_in"].add_metric(labels, st.msg_throughput_in)
            g["pulsar_throughput_out"].add_metric(labels, st.msg_throughput_out)
            g["pulsar_storage_size"].add_metric(labels, st.storage_size_bytes)
            g["pulsar_msg_backlog"].add_metric(labels, st.msg_backlog)
            g["pulsar_producers_count"].add_metric(labels, len(st.publishers))
            g["pulsar_consumers_count"].add_metric(labels, st.consumer_count)
            g["pulsar_subscriptions_count"].add_metric(labels, len(subs))
            g["pulsar_average_msg_size"].add_metric(labels, st.average_msg_size)
            in_msgs.add_metric(labels, st.msg_in_counter)
            storage = topic.storage_stats
            wl = storage.write_latency
            for suffix, n in zip(WRITE_LATENCY_SUFFIXES, wl.buckets):
                lat[suffix].add_metric(labels, n)
            lat["count"].add_metric(labels, wl.count)
            lat["sum"].add_metric(labels, wl.sum)
            es = storage.entry_size
            for suffix, n in zip(ENTRY_SIZE_SUFFIXES, es.buckets):
                size[suffix].add_metric(labels, n)
            size["count"].add_metric(labels, es.count)
            size["sum"].add_metric(labels, es.sum)
            controller = getattr(topic, "replicated_subscriptions", None)
            if controller is not None:
                pending_snapshots += controller.pending_snapshots
            in_bytes.add_metric(labels, st.bytes_in_counter)
            publish_limited.add_metric(labels, st.publish_rate_limited_times)
            publish_limited_total.add_metric(labels, topic.rate_limits.publish_rate_limited_total)
            for metric, _, value in _BACKLOG_QUOTA_SERIES:
                q[metric].add_metric(labels, value(st))
            for quota_type in QuotaType:
                evictions.add_metric(labels + [quota_type.label], topic.backlog_quota.evictions[quota_type])
            for remote, x in st.replication.items():
                rl = labels + [remote]
                for metric, _, value in _REPLICATION_SERIES:
                    r[metric].add_metric(rl, float(value(x)))
            for sub_name, x in subs.items():
                sl = labels + [sub_name]
                s["pulsar_subscription_back_log"].add_metric(sl, x.msg_backlog)
                s["pulsar_subscription_msg_rate_out"].add_metric(sl, x.msg_rate_out)
                s["pulsar_subscription_msg_throughput_out"].add_metric(sl, x.msg_throughput_out)
                s["pulsar_subscription_msg_rate_redeliver"].add_metric(sl, x.msg_rate_redeliver)
                s["pulsar_subscription_unacked_messages"].add_metric(sl, x.unacked_messages)
                s["pulsar_subscription_consumers_count"].add_metric(sl, x.consumer_count)
                throttling = x.dispatch_throttling or _NO_THROTTLING
                for metric, _, by_reason in _DISPATCH_THROTTLED_SERIES:
                    for reason, count in by_reason.items():
                        throttled[metric].add_metric(sl + [reason], count(throttling))
        yield from g.values()
        yield in_msgs
        yield in_bytes
        yield from s.values()
        yield from r.values()
        yield from lat.values()
        yield from size.values()
        yield from q.values()
        yield evictions
        yield publish_limited
        yield publish_limited_total
        yield from throttled.values()
        cluster = [svc.cluster_name]
        snapshots = GaugeMetricFamily("pulsar_replicated_subscriptions_pending_snapshots",
                                      "Replicated-subscription snapshots started and not yet completed or timed "
                                      "out, over this broker's topics", labels=["cluster"])
        snapshots.add_metric(cluster, pending_snapshots)
        yield snapshots
        yield svc.publish_latency.summary_family(svc.cluster_name)
        yield svc.publish_latency.histogram_family()
        yield from self._connections()

    def _connections(self) -> Iterator:
        server = self.service.connection_counts()
        cluster = [self.service.cluster_name]
        active = GaugeMetricFamily("pulsar_active_connections", "Open client connections", labels=["cluster"])
        active.add_metric(cluster, server["active"])
        created = GaugeMetricFamily("pulsar_connection_created_total_count", "Client connections accepted",
                                    labels=["cluster"])
        created.add_metric(cluster, server["created"])
        closed = GaugeMetricFamily("pulsar_connection_closed_total_count", "Client connections closed",
                                   labels=["cluster"])
        closed.add_metric(cluster, server["closed"])
        return active, created, closed
