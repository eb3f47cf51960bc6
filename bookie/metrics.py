"""The bookie's Prometheus series: ``magnetar_bookie_*``, every one labelled with the ``bookie`` id, and the same
measurements under BookKeeper's names (:mod:`bookie.bookkeeper_metrics`), so dashboards and alerts written for
BookKeeper read a Magnetar bookie as they are.

Hot-path cost is kept per request, not per entry: counters are incremented by the number of entries and
bytes of a whole request; gauges that mirror state (queue depth, ledgers, read-only, entry logs) are
computed only when scraped (``set_function``). Each latency is measured once, where the ``magnetar_bookie_*``
histogram observes it, and that one value also feeds BookKeeper's operation statistics
(:class:`bookie.opstats.OpStats`): :meth:`BookieMetrics.observe_add`, :meth:`BookieMetrics.observe_read` and
the journal's :meth:`BookieMetrics.on_sync` / :meth:`BookieMetrics.on_sync_failed`.
"""

from __future__ import annotations

import pathlib
from typing import Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .bookkeeper_metrics import BookKeeperCollector, BookieState
from .errors import BookieError
from .ledger_storage import StorageObserver
from .opstats import OpStats

_LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class BookieMetrics(StorageObserver):
    """All series of one bookie in ``registry``."""

    def __init__(self, registry: CollectorRegistry, bookie_id: str, *, latency_window_s: float = 60.0) -> None:
        self.registry = registry
        labels = ["bookie"]

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry).labels(bookie=bookie_id)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=registry).labels(bookie=bookie_id)

        def histogram(name: str, doc: str, buckets) -> Histogram:
            return Histogram(name, doc, labels, registry=registry, buckets=buckets).labels(bookie=bookie_id)

        self.add_entries = counter("magnetar_bookie_add_entries_total", "Entries acknowledged as stored.")
        self._add_bytes_family = Counter(
            "magnetar_bookie_add_bytes_total", "Payload bytes acknowledged as stored.", labels, registry=registry
        )
        self.add_bytes = self._add_bytes_family.labels(bookie=bookie_id)
        self.add_requests_failed = counter(
            "magnetar_bookie_add_requests_failed_total", "Add requests answered with a status other than OK."
        )
        streams = Counter("magnetar_bookie_add_streams_total",
                          "Add streams opened, by transport (grpc: AddEntries calls; tcp: add-port connections).",
                          ["bookie", "transport"], registry=registry)
        self.add_streams = {t: streams.labels(bookie=bookie_id, transport=t) for t in ("grpc", "tcp")}
        self.add_connections_broken = counter(
            "magnetar_bookie_add_connections_broken_total",
            "Add-port connections closed for breaking the framing (a wrong preamble, an oversized or cut frame).")
        self.add_latency = histogram(
            "magnetar_bookie_add_latency_seconds", "Add request receipt to acknowledgement.", _LATENCY_BUCKETS_S
        )
        self.read_entries = counter("magnetar_bookie_read_entries_total", "Entries returned by reads.")
        self._read_bytes_family = Counter(
            "magnetar_bookie_read_bytes_total", "Payload bytes returned by reads.", labels, registry=registry
        )
        self.read_bytes = self._read_bytes_family.labels(bookie=bookie_id)
        self.read_latency = histogram(
            "magnetar_bookie_read_latency_seconds", "Read request receipt to last response.", _LATENCY_BUCKETS_S
        )
        self.read_corrupt = counter(
            "magnetar_bookie_read_corrupt_total", "Reads that found a record failing its CRC (answered INTERNAL)."
        )
        self.journal_sync_latency = histogram(
            "magnetar_bookie_journal_sync_latency_seconds", "Journal write + fdatasync of one group.",
            _LATENCY_BUCKETS_S,
        )
        stages = Histogram(
            "magnetar_bookie_journal_stage_seconds",
            "Time of one journal group in each stage (queue, write, force_wait, fsync), for the oldest group "
            "of each sync.", ["bookie", "stage"], registry=registry, buckets=_LATENCY_BUCKETS_S,
        )
        self.journal_stages = tuple(stages.labels(bookie=bookie_id, stage=s)
                                    for s in ("queue", "write", "force_wait", "fsync"))
        self.journal_batch_entries = histogram(
            "magnetar_bookie_journal_batch_entries", "Entries made durable by one journal fsync.", _BATCH_BUCKETS
        )
        self.journal_queue_depth = gauge("magnetar_bookie_journal_queue_depth", "Records waiting for the journal.")
        self.ledgers = gauge("magnetar_bookie_ledgers", "Ledgers stored (not deleted).")
        self.disk_free = gauge("magnetar_bookie_disk_free_bytes", "Free bytes of the data directory's filesystem.")
        self.disk_total = gauge("magnetar_bookie_disk_total_bytes", "Size of the data directory's filesystem.")
        self.read_only = gauge("magnetar_bookie_read_only", "1 while the bookie refuses adds (low disk).")
        self.entry_logs = gauge("magnetar_bookie_entry_logs", "Entry log files.")
        self.write_cache_bytes = gauge("magnetar_bookie_write_cache_bytes", "Bytes in the write cache.")
        self.flush_latency = histogram(
            "magnetar_bookie_flush_latency_seconds", "Write-cache flush to entry logs and index.",
            (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )
        self.flush_yields = counter(
            "magnetar_bookie_flush_yields_total",
            "Entry-log writes, fsyncs and index commits (of flushes and compaction) that waited for a busy journal.",
        )
        self.flush_yield_timeouts = counter(
            "magnetar_bookie_flush_yield_timeouts_total",
            "Of those, waits that ended at flush_yield_max_ms with the journal still busy.",
        )
        self.gc_reclaimed = counter(
            "magnetar_bookie_gc_reclaimed_bytes_total", "Entry-log bytes reclaimed by garbage collection."
        )
        # BookKeeper's operation statistics, fed by the same measurements as the histograms above.
        self.add_ops = OpStats(window_s=latency_window_s)
        self.read_ops = OpStats(window_s=latency_window_s)
        self.journal_sync_ops = OpStats(window_s=latency_window_s)
        self._disk_used_fraction: Optional[float] = None
        self._bookkeeper: Optional[BookKeeperCollector] = None

    def bind(
        self,
        *,
        queue_depth: Callable[[], float],
        ledgers: Callable[[], float],
        read_only: Callable[[], float],
        entry_logs: Callable[[], float],
        write_cache_bytes: Callable[[], float],
        entries: Callable[[], float],
        ledger_dir: pathlib.Path,
    ) -> None:
        """Wires the state-mirroring gauges to the live objects (evaluated at scrape time) and registers the
        series under BookKeeper's names. Once only."""
        if self._bookkeeper is not None:
            raise BookieError("BookieMetrics.bind() was already called")
        self.journal_queue_depth.set_function(queue_depth)
        self.ledgers.set_function(ledgers)
        self.read_only.set_function(read_only)
        self.entry_logs.set_function(entry_logs)
        self.write_cache_bytes.set_function(write_cache_bytes)
        self._bookkeeper = BookKeeperCollector(
            BookieState(
                read_only=lambda: bool(read_only()),
                ledgers=ledgers,
                entries=entries,
                journal_queue=queue_depth,
                write_cache_bytes=write_cache_bytes,
                written_bytes=lambda: _counter_value(self._add_bytes_family),
                read_bytes=lambda: _counter_value(self._read_bytes_family),
                ledger_dir_used_fraction=lambda: self._disk_used_fraction,
            ),
            ledger_dir=ledger_dir, add_ops=self.add_ops, read_ops=self.read_ops, journal_sync_ops=self.journal_sync_ops,
        )
        self.registry.register(self._bookkeeper)

    # -- measurements ----------------------------------------------------------------------------------

    def observe_add(self, seconds: float, ok: bool) -> None:
        """One add request answered, ``seconds`` after it was received; ``ok``: answered OK."""
        self.add_latency.observe(seconds)
        self.add_ops.record_seconds(seconds, ok)

    def observe_read(self, seconds: float, ok: bool) -> None:
        """One read request ended, ``seconds`` after it was received; ``ok``: served (the histogram has only
        those)."""
        if ok:
            self.read_latency.observe(seconds)
        self.read_ops.record_seconds(seconds, ok)

    def on_disk_sample(self, free: int, total: int) -> None:
        """A sample of the data directory's filesystem (the disk monitor's)."""
        self.disk_free.set(free)
        self.disk_total.set(total)
        self._disk_used_fraction = (total - free) / total if total > 0 else 0.0

    # -- StorageObserver -------------------------------------------------------------------------------

    def on_sync(self, seconds: float, entries: int, records: int, nbytes: int) -> None:
        self.journal_sync_latency.observe(seconds)
        self.journal_batch_entries.observe(entries)
        self.journal_sync_ops.record_seconds(seconds, True)

    def on_sync_failed(self, seconds: float) -> None:
        self.journal_sync_ops.record_seconds(seconds, False)

    def on_stages(self, queue_s: float, write_s: float, force_wait_s: float, fsync_s: float) -> None:
        for child, seconds in zip(self.journal_stages, (queue_s, write_s, force_wait_s, fsync_s)):
            child.observe(seconds)

    def on_flush(self, entries: int, nbytes: int, seconds: float) -> None:
        self.flush_latency.observe(seconds)

    def on_flush_yield(self, seconds: float, idle: bool) -> None:
        self.flush_yields.inc()
        if not idle:
            self.flush_yield_timeouts.inc()

    def on_gc_reclaimed(self, nbytes: int) -> None:
        self.gc_reclaimed.inc(nbytes)

    def on_corrupt_read(self) -> None:
        self.read_corrupt.inc()


def _counter_value(family: Counter) -> float:
    """The value of a counter with one child (its ``_total`` sample), through prometheus_client's public API."""
    for metric in family.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                return sample.value
    return 0.0
