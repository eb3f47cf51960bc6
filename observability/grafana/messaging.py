"""Messaging: topics and subscriptions, per namespace and topic.

Rates and throughput in and out, what is stored and waiting (backlog in entries and bytes, storage), the
subscriptions' unacknowledged messages and redeliveries, and latency: the brokers' publish latency quantiles,
Pulsar's storage write latency ranges (an entry counted once in the range its SEND-to-stored time fell in) and
the entry size ranges, both shown as entries per second in each range.
"""

from __future__ import annotations

from .kit import (CLUSTER, RATE, TOPICS, Query, build_dashboard, cluster_variable, eq, namespace_variable, sel,
                  stat, timeseries, topic_variable)

UID = "magnetar-messaging"

# Pulsar's ranges: metric suffix -> legend (upper bound). Pulsar's brokers spell the write latency's last range
# ``pulsar_storage_write_latency_overflow`` but the entry size's ``pulsar_entry_size_le_overflow``.
WRITE_LATENCY_RANGES = (("le_0_5", "≤ 0.5 ms"), ("le_1", "≤ 1 ms"), ("le_5", "≤ 5 ms"), ("le_10", "≤ 10 ms"),
                        ("le_20", "≤ 20 ms"), ("le_50", "≤ 50 ms"), ("le_100", "≤ 100 ms"),
                        ("le_200", "≤ 200 ms"), ("le_1000", "≤ 1 s"), ("overflow", "> 1 s"))
ENTRY_SIZE_RANGES = (("le_128", "≤ 128 B"), ("le_512", "≤ 512 B"), ("le_1_kb", "≤ 1 KB"), ("le_2_kb", "≤ 2 KB"),
                     ("le_4_kb", "≤ 4 KB"), ("le_16_kb", "≤ 16 KB"), ("le_100_kb", "≤ 100 KB"),
                     ("le_1_mb", "≤ 1 MB"), ("le_overflow", "> 1 MB"))
PUBLISH_QUANTILES = (("0.5", "p50"), ("0.99", "p99"), ("0.999", "p99.9"))


def _ranges(metric: str, ranges: tuple[tuple[str, str], ...]) -> list[Query]:
    return [Query(f"sum(rate({metric}_{suffix}{TOPICS}{RATE}))", legend) for suffix, legend in ranges]


def dashboard():
    by_topic = "sum by (topic)"
    by_sub = "sum by (topic, subscription)"
    panels = [
        stat("Topics", "Topics loaded that match the selection.", Query(f"count(pulsar_rate_in{TOPICS})", "topics")),
        stat("Producers", "Producers connected.", Query(f"sum(pulsar_producers_count{TOPICS})", "producers")),
        stat("Consumers", "Consumers connected.", Query(f"sum(pulsar_consumers_count{TOPICS})", "consumers")),
        stat("Subscriptions", "Subscriptions of the selected topics.",
             Query(f"sum(pulsar_subscriptions_count{TOPICS})", "subscriptions")),
        stat("Backlog", "Entries not yet acknowledged, over every subscription.",
             Query(f"sum(pulsar_msg_backlog{TOPICS})", "backlog")),
        stat("Storage", "Bytes stored by the selected topics.", Query(f"sum(pulsar_storage_size{TOPICS})", "stored"),
             unit="bytes"),
        timeseries("Publish rate", "Messages per second published, per topic.",
                   Query(f"{by_topic} (pulsar_rate_in{TOPICS})", "{{topic}}"), unit="mps"),
        timeseries("Dispatch rate", "Messages per second dispatched to consumers, per topic.",
                   Query(f"{by_topic} (pulsar_rate_out{TOPICS})", "{{topic}}"), unit="mps"),
        timeseries("Publish throughput", "Bytes per second published, per topic.",
                   Query(f"{by_topic} (pulsar_throughput_in{TOPICS})", "{{topic}}"), unit="Bps"),
        timeseries("Dispatch throughput", "Bytes per second dispatched, per topic.",
                   Query(f"{by_topic} (pulsar_throughput_out{TOPICS})", "{{topic}}"), unit="Bps"),
        timeseries("Messages published per namespace", "Messages per second, from the brokers' published "
                   "message counters.",
                   Query(f"sum by (cluster, namespace) (rate(pulsar_in_messages_total{TOPICS}{RATE}))",
                         "{{cluster}} {{namespace}}"), unit="mps"),
        timeseries("Bytes published per namespace", "Bytes per second, from the brokers' published byte counters.",
                   Query(f"sum by (cluster, namespace) (rate(pulsar_in_bytes_total{TOPICS}{RATE}))",
                         "{{cluster}} {{namespace}}"), unit="Bps"),
        timeseries("Backlog", "Entries not yet acknowledged, per topic.",
                   Query(f"{by_topic} (pulsar_msg_backlog{TOPICS})", "{{topic}}")),
        timeseries("Backlog size", "Estimated bytes of each topic's largest subscription backlog (what the "
                   "backlog quota limits).",
                   Query(f"{by_topic} (pulsar_storage_backlog_size{TOPICS})", "{{topic}}"), unit="bytes"),
        timeseries("Storage size", "Bytes stored, per topic.",
                   Query(f"{by_topic} (pulsar_storage_size{TOPICS})", "{{topic}}"), unit="bytes"),
        timeseries("Subscription backlog", "Entries not yet acknowledged, per subscription.",
                   Query(f"{by_sub} (pulsar_subscription_back_log{TOPICS})", "{{topic}} {{subscription}}")),
        timeseries("Unacknowledged messages", "Messages dispatched to consumers and not acknowledged yet, per "
                   "subscription.",
                   Query(f"{by_sub} (pulsar_subscription_unacked_messages{TOPICS})", "{{topic}} {{subscription}}")),
        timeseries("Redelivery rate", "Messages per second redelivered (negative acknowledgements, timeouts, "
                   "consumers gone), per subscription.",
                   Query(f"{by_sub} (pulsar_subscription_msg_rate_redeliver{TOPICS})",
                         "{{topic}} {{subscription}}"), unit="mps"),
        timeseries("Subscription dispatch rate", "Messages per second dispatched, per subscription.",
                   Query(f"{by_sub} (pulsar_subscription_msg_rate_out{TOPICS})", "{{topic}} {{subscription}}"),
                   unit="mps"),
        timeseries("Publish latency", "The brokers' publish latency quantiles (SEND arrival to entry stored), "
                   "the slowest broker of each region.",
                   *[Query(f'max by (cluster) (pulsar_broker_publish_latency{sel(CLUSTER, eq("quantile", q))})',
                           f"{{{{cluster}}}} {name}") for q, name in PUBLISH_QUANTILES], unit="ms"),
        timeseries("Storage write latency", "Entries per second stored, by the range of their write latency "
                   "(Pulsar's pulsar_storage_write_latency_le_* ranges).",
                   *_ranges("pulsar_storage_write_latency", WRITE_LATENCY_RANGES), unit="short", stacked=True,
                   bars=True),
        timeseries("Average storage write latency", "Mean write latency of the entries stored in the window, per "
                   "topic (Pulsar keeps the sum in microseconds).",
                   Query(f"{by_topic} (rate(pulsar_storage_write_latency_sum{TOPICS}{RATE})) / {by_topic} "
                         f"(rate(pulsar_storage_write_latency_count{TOPICS}{RATE}))", "{{topic}}"), unit="µs"),
        timeseries("Entry size", "Entries per second stored, by the range of their size (Pulsar's "
                   "pulsar_entry_size_le_* ranges; a batch is one entry).",
                   *_ranges("pulsar_entry_size", ENTRY_SIZE_RANGES), unit="short", stacked=True, bars=True),
        timeseries("Average entry size", "Mean size of the entries stored in the window, per topic.",
                   Query(f"{by_topic} (rate(pulsar_entry_size_sum{TOPICS}{RATE})) / {by_topic} "
                         f"(rate(pulsar_entry_size_count{TOPICS}{RATE}))", "{{topic}}"), unit="bytes"),
    ]
    return build_dashboard(uid=UID, title="Magnetar / Messaging", tags=["messaging", "topics"], panels=panels,
                           description="Topics and subscriptions by namespace and topic: rates, throughput, "
                                       "backlog, storage, unacknowledged messages, redeliveries, latency, "
                                       "entry sizes.",
                           variables=[cluster_variable("broker"), namespace_variable(), topic_variable()])
