"""Publish latency: from a SEND's arrival to the moment its entry is stored (what a receipt waits for).

Pulsar exports it per topic as a set of counters, one per latency range in milliseconds
(``pulsar_storage_write_latency_le_0_5`` ... ``_le_1000``, ``_le_overflow``, each counting the entries
whose latency fell in that range, not a cumulative histogram) with ``_count`` and ``_sum`` (ms);
dashboards built on those names read Magnetar's unchanged. :class:`WriteLatency` keeps those counters
for one topic; it is updated once per stored entry on the receipt path, so it costs a bisect and two
additions. The broker-wide distribution is a regular Prometheus histogram
(``magnetar_broker_publish_latency_seconds``), kept by :class:`BrokerLatency` and exported by the
service's collector with the topic series.
"""

from __future__ import annotations

import bisect
from typing import Optional

from prometheus_client.core import HistogramMetricFamily

# Upper bounds (ms) of Pulsar's storage write latency ranges and their metric name suffixes.
WRITE_LATENCY_BOUNDS_MS = (0.5, 1, 5, 10, 20, 50, 100, 200, 1000)
WRITE_LATENCY_SUFFIXES = ("le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000",
                          "le_overflow")

BROKER_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)


class WriteLatency:
    """Counts of one topic's entries per Pulsar latency range, plus their number and sum (ms)."""

    __slots__ = ("buckets", "count", "sum_ms", "_broker")

    def __init__(self, broker: Optional["BrokerLatency"] = None) -> None:
        self.buckets = [0] * len(WRITE_LATENCY_SUFFIXES)
        self.count = 0
        self.sum_ms = 0.0
        self._broker = broker

    def record(self, seconds: float) -> None:
        ms = seconds * 1000.0
        self.buckets[bisect.bisect_left(WRITE_LATENCY_BOUNDS_MS, ms)] += 1
        self.count += 1
        self.sum_ms += ms
        if self._broker is not None:
            self._broker.record(seconds)


class BrokerLatency:
    """The broker-wide publish latency distribution (every topic), as a Prometheus histogram family."""

    __slots__ = ("buckets", "count", "sum_s")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BROKER_BUCKETS_S) + 1)
        self.count = 0
        self.sum_s = 0.0

    def record(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(BROKER_BUCKETS_S, seconds)] += 1
        self.count += 1
        self.sum_s += seconds

    def family(self) -> HistogramMetricFamily:
        cumulative = []
        running = 0
        for bound, n in zip((*map(str, BROKER_BUCKETS_S), "+Inf"), self.buckets):
            running += n
            cumulative.append((bound, running))
        return HistogramMetricFamily("magnetar_broker_publish_latency_seconds",
                                     "SEND arrival to entry stored, every topic of this broker",
                                     buckets=cumulative, sum_value=self.sum_s)
