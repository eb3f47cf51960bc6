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

Cost. A broker with 10,000 topics exports about half a million series, so the collector writes the text
itself (``exposition.py``): one pass over the topics gathers a row of values per topic (one ``attrgetter``
call reads the stats attributes), per subscription and per remote cluster; rows are transposed into
columns, one per family, and each family is written with one f-string per sample. Label sets are formatted
once per topic and subscription and kept between scrapes (dropped with the topic). The text comes out one
family at a time, with pause points every ``_TOPICS_PER_STEP`` topics, so ``/metrics`` streams it without
holding the event loop for the whole scrape. ``bench/metrics_scrape.py`` measures it.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily

from .exposition import TextCollector, family_text, format_families, label_set
from .latency import ENTRY_SIZE_SUFFIXES, WRITE_LATENCY_SUFFIXES
from .policies.backlog_quota import QuotaType
from .topics.stats import DispatchThrottleStats

if TYPE_CHECKING:
    from .service import BrokerService

# (metric, type, help, attribute of the topic's stats snapshot)
_TOPIC_STATS_SERIES = (
    ("pulsar_rate_in", "gauge", "Messages/s published", "msg_rate_in"),
    ("pulsar_rate_out", "gauge", "Messages/s dispatched", "msg_rate_out"),
    ("pulsar_throughput_in", "gauge", "Bytes/s published", "msg_throughput_in"),
    ("pulsar_throughput_out", "gauge", "Bytes/s dispatched", "msg_throughput_out"),
    ("pulsar_storage_size", "gauge", "Bytes stored", "storage_size_bytes"),
    ("pulsar_msg_backlog", "gauge", "Backlog (entries) over subscriptions", "msg_backlog"),
    ("pulsar_consumers_count", "gauge", "Connected consumers", "consumer_count"),
    ("pulsar_average_msg_size", "gauge", "Average message size (bytes)", "average_msg_size"),
    ("pulsar_in_messages", "counter", "Messages published", "msg_in_counter"),
    ("pulsar_in_bytes", "counter", "Bytes published", "bytes_in_counter"),
    ("pulsar_publish_rate_limit_times", "gauge", "Times the publish rate limit throttled the topic's producers in "
     "the current stats window", "publish_rate_limited_times"),
    ("pulsar_storage_backlog_size", "gauge", "Estimated bytes of the largest subscription backlog",
     "backlog_size_bytes"),
    ("pulsar_storage_backlog_quota_limit", "gauge", "Size limit of the backlog quota (bytes; -1: none)",
     "backlog_quota.limit_size_bytes"),
    ("pulsar_storage_backlog_quota_limit_time", "gauge", "Age limit of the backlog quota (seconds; -1: none)",
     "backlog_quota.limit_time_s"),
    ("pulsar_storage_backlog_age_seconds", "gauge", "Age of the oldest unacknowledged message of the slowest "
     "subscription", "backlog_quota.oldest_backlog_message_age_s"),
)
_TOPIC_STATS_VALUES = attrgetter(*(attr for *_, attr in _TOPIC_STATS_SERIES))
# What a topic row holds after the stats attributes, in this order (see _topic_row).
_TOPIC_OWN_SERIES = (
    ("pulsar_producers_count", "gauge", "Connected producers"),
    ("pulsar_subscriptions_count", "gauge", "Subscriptions"),
    ("magnetar_publish_rate_limited", "counter", "Times the publish rate limit throttled the topic's producers "
     "since it loaded"),
    *((f"pulsar_storage_write_latency_{suffix}", "gauge", "Entries whose managed-ledger add took this long (ms "
       "range; _sum in microseconds), since the topic loaded") for suffix in (*WRITE_LATENCY_SUFFIXES, "count", "sum")),
    *((f"pulsar_entry_size_{suffix}", "gauge", "Entries added of a size in this range (bytes), since the topic "
       "loaded") for suffix in (*ENTRY_SIZE_SUFFIXES, "count", "sum")),
)
_TOPIC_FAMILIES = (*((name, kind, text) for name, kind, text, _ in _TOPIC_STATS_SERIES), *_TOPIC_OWN_SERIES)

_SUB_SERIES = (
    ("pulsar_subscription_back_log", "gauge", "Subscription backlog (entries)", "msg_backlog"),
    ("pulsar_subscription_msg_rate_out", "gauge", "Messages/s dispatched", "msg_rate_out"),
    ("pulsar_subscription_msg_throughput_out", "gauge", "Bytes/s dispatched", "msg_throughput_out"),
    ("pulsar_subscription_msg_rate_redeliver", "gauge", "Messages/s redelivered", "msg_rate_redeliver"),
    ("pulsar_subscription_unacked_messages", "gauge", "Messages dispatched and not yet acknowledged",
     "unacked_messages"),
    ("pulsar_subscription_consumers_count", "gauge", "Connected consumers", "consumer_count"),
)
_SUB_VALUES = attrgetter(*(attr for *_, attr in _SUB_SERIES))

# Pulsar's dispatch throttling series, label ``reason``: the level of the limit that throttled.
# (metric, help, attribute per reason)
_THROTTLE_SERIES = (
    ("pulsar_subscription_dispatch_throttled_msg_events", "Times a dispatch rate's message limit throttled the "
     "subscription, by the limit's level", (("subscription", "msg_events_by_subscription_limit"),
                                            ("topic", "msg_events_by_topic_limit"))),
    ("pulsar_subscription_dispatch_throttled_bytes_events", "Times a dispatch rate's byte limit throttled the "
     "subscription, by the limit's level", (("subscription", "bytes_events_by_subscription_limit"),
                                            ("topic", "bytes_events_by_topic_limit"))),
)
_THROTTLE_REASONS = tuple(reason for reason, _ in _THROTTLE_SERIES[0][2])
_THROTTLE_VALUES = attrgetter(*(attr for *_, by_reason in _THROTTLE_SERIES for _, attr in by_reason))
_NO_THROTTLING = DispatchThrottleStats()  # a subscription no dispatch rate limit applies to

_REPLICATION_SERIES = (
    ("pulsar_replication_rate_in", "gauge", "Messages/s received from the remote cluster", "msg_rate_in"),
    ("pulsar_replication_rate_out", "gauge", "Messages/s sent to the remote cluster", "msg_rate_out"),
    ("pulsar_replication_throughput_in", "gauge", "Bytes/s received from the remote cluster", "msg_throughput_in"),
    ("pulsar_replication_throughput_out", "gauge", "Bytes/s sent to the remote cluster", "msg_throughput_out"),
    ("pulsar_replication_backlog", "gauge", "Entries not yet replicated to the remote cluster",
     "replication_backlog"),
    ("pulsar_replication_delay_in_seconds", "gauge", "Age of the oldest entry not yet replicated",
     "replication_delay_s"),
    ("pulsar_replication_connected_count", "gauge", "1 when the replicator is connected to the remote cluster",
     "connected"),
)
_REPLICATION_VALUES = attrgetter(*(attr for *_, attr in _REPLICATION_SERIES))

_TOPIC_LABELS = ("cluster", "namespace", "topic")
# Topics read between two yields of a scrape (see exposition_steps): a few tens of milliseconds of work, so a
# scrape of 10,000 topics does not hold the event loop for the whole of it.
_TOPICS_PER_STEP = 500


class _Labels:
    """A topic's label sets, formatted once and kept while the topic stays loaded."""

    __slots__ = ("topic", "quota", "subscriptions", "remotes")

    def __init__(self, cluster: str, namespace: str, topic: str) -> None:
        self.topic = label_set(_TOPIC_LABELS, (cluster, namespace, topic))
        base = self.topic[:-1]  # without the closing brace: more labels follow
        self.quota = tuple(f'{base},quota_type="{t.label}"}}' for t in QuotaType)
        self.subscriptions: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.remotes: dict[str, str] = {}

    def subscription(self, name: str) -> tuple[str, tuple[str, ...]]:
        """The subscription's label set, and its label sets per throttling reason."""
        found = self.subscriptions.get(name)
        if found is None:
            sub = self.topic[:-1] + label_set(("subscription",), (name,)).replace("{", ",", 1)
            found = self.subscriptions[name] = (sub, tuple(f'{sub[:-1]},reason="{r}"}}' for r in _THROTTLE_REASONS))
        return found

    def remote(self, cluster: str) -> str:
        found = self.remotes.get(cluster)
        if found is None:
            found = self.remotes[cluster] = self.topic[:-1] + label_set(("remote_cluster",), (cluster,)).replace(
                "{", ",", 1)
        return found


class ServiceCollector(TextCollector):
    def __init__(self, service: "BrokerService") -> None:
        self.service = service
        self._labels: dict[str, _Labels] = {}

    def exposition_pieces(self) -> Iterator[str]:
        svc = self.service
        cluster = svc.cluster_name
        labels_of, kept = self._labels, {}
        topic_rows: list[tuple] = []
        topic_labels: list[str] = []
        quota_rows: list[tuple[str, int]] = []
        sub_rows: list[tuple] = []
        sub_labels: list[str] = []
        throttle_labels: list[tuple[str, ...]] = []
        throttle_rows: list[tuple] = []
        repl_rows: list[tuple] = []
        repl_labels: list[str] = []
        pending_snapshots = 0
        for i, (name, topic) in enumerate(svc.topics().items(), 1):
            if i % _TOPICS_PER_STEP == 0:
                yield ""  # a pause point: the event loop may run other callbacks here
            try:
                st = topic.stats()
            except Exception:  # a topic closing under us: it is left out of this scrape
                continue
            labels = labels_of.get(name)
            if labels is None:
                labels = _Labels(cluster, topic.topic_name.namespace, name)
            kept[name] = labels
            topic_labels.append(labels.topic)
            topic_rows.append(_topic_row(st, topic))
            evictions = topic.backlog_quota.evictions
            quota_rows.extend((lbl, evictions[t]) for lbl, t in zip(labels.quota, QuotaType))
            for sub_name, x in st.subscriptions.items():
                sub_lbl, by_reason = labels.subscription(sub_name)
                sub_labels.append(sub_lbl)
                sub_rows.append(_SUB_VALUES(x))
                throttle_labels.append(by_reason)
                throttle_rows.append(_THROTTLE_VALUES(x.dispatch_throttling or _NO_THROTTLING))
            for remote, x in st.replication.items():
                repl_labels.append(labels.remote(remote))
                repl_rows.append(tuple(int(v) if v.__class__ is bool else v for v in _REPLICATION_VALUES(x)))
            controller = getattr(topic, "replicated_subscriptions", None)
            if controller is not None:
                pending_snapshots += controller.pending_snapshots
        self._labels = kept  # unloaded topics' label sets go

        yield from _columns_text(_TOPIC_FAMILIES, topic_labels, topic_rows)
        yield family_text("pulsar_storage_backlog_quota_exceeded_evictions", "counter",
                          "Times a backlog over its quota was evicted", quota_rows)
        yield from _columns_text(((n, k, t) for n, k, t, _ in _SUB_SERIES), sub_labels, sub_rows)
        n = len(_THROTTLE_REASONS)
        for i, (metric, text, _) in enumerate(_THROTTLE_SERIES):
            yield family_text(metric, "gauge", text, [(lbl[j], row[i * n + j]) for lbl, row in
                                                      zip(throttle_labels, throttle_rows) for j in range(n)])
        yield from _columns_text(((n, k, t) for n, k, t, _ in _REPLICATION_SERIES), repl_labels, repl_rows)
        yield self._broker_series(cluster, pending_snapshots)

    def _broker_series(self, cluster: str, pending_snapshots: int) -> str:
        """The broker-wide families (a few samples each), written by prometheus_client."""
        svc = self.service
        snapshots = GaugeMetricFamily("pulsar_replicated_subscriptions_pending_snapshots",
                                      "Replicated-subscription snapshots started and not yet completed or timed "
                                      "out, over this broker's topics", labels=["cluster"])
        snapshots.add_metric([cluster], pending_snapshots)
        families = [snapshots, svc.publish_latency.summary_family(cluster), svc.publish_latency.histogram_family(),
                    svc.storage_write_latency.histogram_family()]
        server = svc.connection_counts()
        for metric, text, key in (("pulsar_active_connections", "Open client connections", "active"),
                                  ("pulsar_connection_created_total_count", "Client connections accepted", "created"),
                                  ("pulsar_connection_closed_total_count", "Client connections closed", "closed")):
            family = GaugeMetricFamily(metric, text, labels=["cluster"])
            family.add_metric([cluster], server[key])
            families.append(family)
        return format_families(families)


def _topic_row(st, topic) -> tuple:
    """One topic's values in ``_TOPIC_FAMILIES`` order."""
    storage = topic.storage_stats
    wl, es = storage.write_latency, storage.entry_size
    return (*_TOPIC_STATS_VALUES(st), len(st.publishers), len(st.subscriptions),
            topic.rate_limits.publish_rate_limited_total, *wl.buckets, wl.count, wl.sum, *es.buckets, es.count,
            es.sum)


def _columns_text(families, labels: Sequence[str], rows: Sequence[tuple]) -> Iterator[str]:
    """Family i's text from column i of ``rows`` (one row per label set), one family at a time; families
    without rows get their HELP and TYPE lines only."""
    columns = list(zip(*rows)) if rows else None
    for i, (metric, kind, text) in enumerate(families):
        yield family_text(metric, kind, text, zip(labels, columns[i]) if columns else ())
