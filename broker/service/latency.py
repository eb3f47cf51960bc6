"""Latency and size distributions the broker exports under Apache Pulsar's names.

Three measurements, each taken where Pulsar takes it:

* **Storage write latency**, per topic: from the moment the topic hands an entry to its managed ledger until
  the add completes (durable at the ack quorum). Pulsar exports it as one gauge per latency range in
  milliseconds (``pulsar_storage_write_latency_le_0_5`` ... ``_le_1000`` and, as its brokers spell it,
  ``pulsar_storage_write_latency_overflow``), each counting the entries whose latency fell in that range
  (not a cumulative histogram), with ``_count`` and ``_sum``; the sum is in **microseconds**, as Pulsar's
  (its ranges are kept in µs). Pulsar resets the ranges every stats period; Magnetar's count since the topic
  loaded, so ``rate()`` over them gives entries/s per range.
* **Entry size**, per topic: bytes of each entry added, in Pulsar's ranges (``pulsar_entry_size_le_128`` ...
  ``_le_1_mb``, ``_le_overflow``; Pulsar's "1 MB" bound is 1,232,896 bytes), with ``_count`` and ``_sum``.
* **Publish latency**, broker-wide: from a SEND's arrival to its receipt (or error) going out. Pulsar's
  ``pulsar_broker_publish_latency`` is a Summary in milliseconds whose quantiles (0, 0.5, 0.95, 0.99, 0.999,
  0.9999, 1) describe the last completed stats period (NaN when it saw no SEND) while ``_count`` and ``_sum``
  grow for ever; :class:`BrokerLatency` keeps that, and the same observations as the Prometheus histogram
  ``magnetar_broker_publish_latency_seconds`` (which aggregates across brokers).

The hot path only bumps plain counters (a bisect and a few additions); families are built at scrape time.
"""

from __future__ import annotations

import bisect
import math
import random
from typing import Callable, Optional, Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric

# Upper bounds of Pulsar's storage write latency ranges (ms) and the suffixes of their metric names.
WRITE_LATENCY_BOUNDS_MS = (0.5, 1, 5, 10, 20, 50, 100, 200, 1000)
WRITE_LATENCY_SUFFIXES = ("le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000",
                          "overflow")
# Upper bounds of Pulsar's entry size ranges (bytes; its managed ledger's) and their suffixes.
ENTRY_SIZE_BOUNDS_BYTES = (128, 512, 1024, 2048, 4096, 16_384, 102_400, 1_232_896)
ENTRY_SIZE_SUFFIXES = ("le_128", "le_512", "le_1_kb", "le_2_kb", "le_4_kb", "le_16_kb", "le_100_kb", "le_1_mb",
                       "le_overflow")

BROKER_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)
# Pulsar's publish latency quantiles, with the label values its exposition writes.
PUBLISH_QUANTILES = ((0.0, "0.0"), (0.5, "0.5"), (0.95, "0.95"), (0.99, "0.99"), (0.999, "0.999"),
                     (0.9999, "0.9999"), (1.0, "1.0"))
PUBLISH_WINDOW_SAMPLES_MAX = 4096  # observations kept per stats period for the quantiles (a uniform sample)


class RangeCounts:
    """How many values fell in each of Pulsar's ranges (``value <= bound``; the last range is the overflow),
    with their number and sum."""

    __slots__ = ("bounds", "buckets", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.buckets = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def record(self, value: float, weight_for_sum: float = 1.0) -> None:
        """Counts ``value`` in its range; the sum grows by ``value * weight_for_sum`` (a unit conversion)."""
        self.buckets[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value * weight_for_sum


class StorageStats:
    """One topic's storage write latency and entry sizes, counted when an add to its managed ledger completes.

    Attributes:
        write_latency: ranges in ms; ``sum`` in microseconds (Pulsar's unit for ``pulsar_storage_write_latency_sum``).
        entry_size: ranges and sum in bytes.
    """

    __slots__ = ("write_latency", "entry_size", "_clock", "_broker_wide")

    def __init__(self, clock: Callable[[], float], broker_wide: Optional["SecondsHistogram"] = None) -> None:
        self.write_latency = RangeCounts(WRITE_LATENCY_BOUNDS_MS)
        self.entry_size = RangeCounts(ENTRY_SIZE_BOUNDS_BYTES)
        self._clock = clock
        self._broker_wide = broker_wide  # the same latencies, every topic of the broker, in seconds

    def on_add_done(self, handed_s: float, size_bytes: int, future) -> None:
        """Done-callback of a managed-ledger add handed over at ``handed_s``: a stored entry is counted; a
        failed or cancelled add is not (nothing was stored)."""
        if future.cancelled() or future.exception() is not None:
            return
        seconds = self._clock() - handed_s
        self.write_latency.record(seconds * 1000.0, 1000.0)
        self.entry_size.record(size_bytes)
        if self._broker_wide is not None:
            self._broker_wide.record(seconds)


class SecondsHistogram:
    """A broker-wide latency histogram in seconds (``BROKER_BUCKETS_S``), built into a family at scrape time."""

    __slots__ = ("name", "doc", "buckets", "count", "sum_s")

    def __init__(self, name: str, doc: str) -> None:
        self.name = name
        self.doc = doc
        self.buckets = [0] * (len(BROKER_BUCKETS_S) + 1)
        self.count = 0
        self.sum_s = 0.0

    def record(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(BROKER_BUCKETS_S, seconds)] += 1
        self.count += 1
        self.sum_s += seconds

    def histogram_family(self) -> HistogramMetricFamily:
        return _histogram_family(self.name, self.doc, self.buckets, self.sum_s)


def storage_write_histogram() -> SecondsHistogram:
    """``magnetar_broker_storage_write_latency_seconds``: a managed-ledger add handed over until durable at the
    ack quorum (the broker's side of the bookie round trip), every topic of the broker."""
    return SecondsHistogram("magnetar_broker_storage_write_latency_seconds",
                            "Managed-ledger add handed over to durable at the ack quorum, every topic of this broker")


def _histogram_family(name: str, doc: str, buckets: Sequence[int], sum_s: float) -> HistogramMetricFamily:
    cumulative = []
    running = 0
    for bound, n in zip((*map(str, BROKER_BUCKETS_S), "+Inf"), buckets):
        running += n
        cumulative.append((bound, running))
    return HistogramMetricFamily(name, doc, buckets=cumulative, sum_value=sum_s)


class BrokerLatency:
    """The broker-wide publish latency (SEND arrival to receipt): Pulsar's Summary (ms) and a histogram (s).

    ``record`` is called once per receipt; ``rotate`` once per stats period (the service's periodic work)
    publishes the period's quantiles, as Pulsar rotates its sketches. Quantiles come from a uniform sample of
    at most ``samples_max`` observations of the period, so memory stays bounded whatever the rate.
    """

    __slots__ = ("buckets", "count", "sum_s", "_window", "_seen", "_quantiles_ms", "_samples_max", "_random")

    def __init__(self, *, samples_max: int = PUBLISH_WINDOW_SAMPLES_MAX, seed: Optional[int] = None) -> None:
        self.buckets = [0] * (len(BROKER_BUCKETS_S) + 1)
        self.count = 0
        self.sum_s = 0.0
        self._window: list[float] = []
        self._seen = 0  # observations in the current period (the sample keeps at most samples_max of them)
        self._quantiles_ms: tuple[float, ...] = tuple(math.nan for _ in PUBLISH_QUANTILES)
        self._samples_max = samples_max
        self._random = random.Random(seed)

    def record(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(BROKER_BUCKETS_S, seconds)] += 1
        self.count += 1
        self.sum_s += seconds
        self._seen += 1
        window = self._window
        if len(window) < self._samples_max:
            window.append(seconds)
        else:  # reservoir sampling: every observation of the period is kept with the same probability
            slot = self._random.randrange(self._seen)
            if slot < self._samples_max:
                window[slot] = seconds

    def rotate(self) -> None:
        """Ends the stats period: its quantiles become the exported ones, a new period starts."""
        self._quantiles_ms = quantiles_ms(self._window)
        self._window = []
        self._seen = 0

    @property
    def quantiles_ms(self) -> tuple[float, ...]:
        """The last completed period's quantiles (ms) in ``PUBLISH_QUANTILES`` order; NaN when it was empty."""
        return self._quantiles_ms

    def summary_family(self, cluster: str) -> Metric:
        """``pulsar_broker_publish_latency`` as Pulsar's broker exports it (ms, label ``cluster``)."""
        family = Metric("pulsar_broker_publish_latency", "Publish latency (ms): SEND arrival to receipt; "
                        "quantiles over the last stats period", "summary")
        for (_, label), value in zip(PUBLISH_QUANTILES, self._quantiles_ms):
            family.add_sample("pulsar_broker_publish_latency", {"cluster": cluster, "quantile": label}, value)
        family.add_sample("pulsar_broker_publish_latency_count", {"cluster": cluster}, self.count)
        family.add_sample("pulsar_broker_publish_latency_sum", {"cluster": cluster}, self.sum_s * 1000.0)
        return family

    def histogram_family(self) -> HistogramMetricFamily:
        cumulative = []
        running = 0
        for bound, n in zip((*map(str, BROKER_BUCKETS_S), "+Inf"), self.buckets):
            running += n
            cumulative.append((bound, running))
        return HistogramMetricFamily("magnetar_broker_publish_latency_seconds",
                                     "SEND arrival to receipt, every topic of this broker",
                                     buckets=cumulative, sum_value=self.sum_s)


def quantiles_ms(samples_s: Sequence[float]) -> tuple[float, ...]:
    """Pulsar's publish latency quantiles (ms) of ``samples_s`` (nearest rank); NaN for each when empty."""
    if not samples_s:
        return tuple(math.nan for _ in PUBLISH_QUANTILES)
    ordered = sorted(samples_s)
    last = len(ordered) - 1
    return tuple(ordered[min(last, max(0, math.ceil(q * len(ordered)) - 1))] * 1000.0 for q, _ in PUBLISH_QUANTILES)
