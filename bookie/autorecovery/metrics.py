"""Auto-recovery's Prometheus series (``magnetar_autorecovery_*``), labelled with the process's ``worker`` id.

The auditor's gauges (under-replicated ledgers and fragments, the age of the oldest record, lost bookies)
are set by the elected auditor after each scan and are 0 on the other processes; sum or max over processes.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class AutoRecoveryMetrics:
    def __init__(self, registry: CollectorRegistry, worker_id: str) -> None:
        labels = ["worker"]

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry).labels(worker=worker_id)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=registry).labels(worker=worker_id)

        self.auditor = gauge("magnetar_autorecovery_auditor", "1 while this process is the region's elected auditor.")
        self.under_replicated_ledgers = gauge(
            "magnetar_autorecovery_under_replicated_ledgers",
            "Ledgers with a fragment below its write quorum (as of the auditor's last scan).")
        self.under_replicated_fragments = gauge(
            "magnetar_autorecovery_under_replicated_fragments",
            "Fragments (ensemble x bookie) recorded as under-replicated (as of the auditor's last scan).")
        self.oldest_under_replicated_seconds = gauge(
            "magnetar_autorecovery_oldest_under_replicated_seconds",
            "Age of the oldest under-replicated ledger record (0 when none).")
        self.lost_bookies = gauge(
            "magnetar_autorecovery_lost_bookies",
            "Bookies the auditor treats as lost (gone past the grace period, or marked for decommission).")
        self.fragments_replicated = counter(
            "magnetar_autorecovery_fragments_replicated_total",
            "Fragments copied to a new bookie and swapped into the ledger's metadata by this worker.")
        self.entries_copied = counter(
            "magnetar_autorecovery_entries_copied_total", "Entries copied to a new bookie by this worker.")
        self.bytes_copied = counter(
            "magnetar_autorecovery_bytes_copied_total", "Payload bytes copied to a new bookie by this worker.")
        self.failures = counter(
            "magnetar_autorecovery_failures_total",
            "Fragment repairs that failed (retried later): no source replica, no target bookie, a bookie error.")
        self.deferred = counter(
            "magnetar_autorecovery_deferred_total",
            "Claims of an under-replicated ledger left for later because it is still open (a live writer owns it).")
        self.scrubbed_entries = counter(
            "magnetar_autorecovery_scrubbed_entries_total", "Entries the scrubber read back from bookies.")
        self.scrub_bad_entries = counter(
            "magnetar_autorecovery_scrub_bad_entries_total",
            "Entries the scrubber found corrupt (CRC failure) or missing on a bookie meant to hold them.")
