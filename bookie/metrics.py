"""The bookie's Prometheus series (``magnetar_bookie_*``), every one labelled with the ``bookie`` id.

Hot-path cost is kept per request, not per entry: counters are incremented by the number of entries and
bytes of a whole request; gauges that mirror state (queue depth, ledgers, read-only, entry logs) are
computed only when scraped (``set_function``).
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .ledger_storage import StorageObserver

_LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class BookieMetrics(StorageObserver):
    """All series of one bookie in ``registry``."""

    def __init__(self, registry: CollectorRegistry, bookie_id: str) -> None:
        self.registry = registry
        labels = ["bookie"]

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry).labels(bookie=bookie_id)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=registry).labels(bookie=bookie_id)

        def histogram(name: str, doc: str, buckets) -> Histogram:
            return Histogram(name, doc, labels, registry=registry, buckets=buckets).labels(bookie=bookie_id)

        self.add_entries = counter("magnetar_bookie_add_entries_total", "Entries acknowledged as stored.")
        self.add_bytes = counter("magnetar_bookie_add_bytes_total", "Payload bytes acknowledged as stored.")
        self.add_requests_failed = counter(
            "magnetar_bookie_add_requests_failed_total", "Add requests answered with a status other than OK."
        )
        self.add_latency = histogram(
            "magnetar_bookie_add_latency_seconds", "Add request receipt to acknowledgement.", _LATENCY_BUCKETS_S
        )
        self.read_entries = counter("magnetar_bookie_read_entries_total", "Entries returned by reads.")
        self.read_bytes = counter("magnetar_bookie_read_bytes_total", "Payload bytes returned by reads.")
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
        self.gc_reclaimed = counter(
            "magnetar_bookie_gc_reclaimed_bytes_total", "Entry-log bytes reclaimed by garbage collection."
        )

    def bind(
        self,
        *,
        queue_depth: Callable[[], float],
        ledgers: Callable[[], float],
        read_only: Callable[[], float],
        entry_logs: Callable[[], float],
        write_cache_bytes: Callable[[], float],
    ) -> None:
        """Wires the state-mirroring gauges to the live objects (evaluated at scrape time)."""
        self.journal_queue_depth.set_function(queue_depth)
        self.ledgers.set_function(ledgers)
        self.read_only.set_function(read_only)
        self.entry_logs.set_function(entry_logs)
        self.write_cache_bytes.set_function(write_cache_bytes)

    # -- StorageObserver -------------------------------------------------------------------------------

    def on_sync(self, seconds: float, entries: int, records: int, nbytes: int) -> None:
        self.journal_sync_latency.observe(seconds)
        self.journal_batch_entries.observe(entries)

    def on_flush(self, entries: int, nbytes: int, seconds: float) -> None:
        self.flush_latency.observe(seconds)

    def on_gc_reclaimed(self, nbytes: int) -> None:
        self.gc_reclaimed.inc(nbytes)

    def on_corrupt_read(self) -> None:
        self.read_corrupt.inc()
