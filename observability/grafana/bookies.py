"""Bookies: the storage nodes of each region, under BookKeeper's own series names.

The journal first (fsync latency and the queue waiting for it: what every acknowledged add waits on), then
the add and read requests as the bookie serves them (latency quantiles of BookKeeper's op stats, request
rates, bytes), what is stored (ledgers, entries), and the disk: writable ledger directories, the read-only
state a full disk forces, and how full each bookie's filesystem is.

BookKeeper's op stats are Summaries in milliseconds with ``success`` and ``quantile`` labels.
"""

from __future__ import annotations

from .kit import CLUSTER, RATE, Query, build_dashboard, cluster_variable, eq, sel, stat, timeseries

UID = "magnetar-bookies"

_BOOKIES = sel(CLUSTER)
_BY_BOOKIE = "sum by (cluster, instance)"
_LEGEND = "{{cluster}} {{instance}}"
_QUANTILES = (("0.5", "p50"), ("0.99", "p99"))


def _op_latency(metric: str) -> list[Query]:
    return [Query(f"max by (cluster, instance) ({metric}{sel(CLUSTER, eq('success', 'true'), eq('quantile', q))})",
                  f"{_LEGEND} {name}") for q, name in _QUANTILES]


def dashboard():
    panels = [
        stat("Bookies up", "Bookies Prometheus reaches now, of those it scrapes.",
             Query(f'sum(up{sel(eq("job", "bookie"), CLUSTER)})', "up"),
             Query(f'count(up{sel(eq("job", "bookie"), CLUSTER)})', "scraped")),
        stat("Read-only bookies", "Bookies refusing adds (bookie_SERVER_STATUS = 0), normally because a ledger "
             "directory's disk is full.", Query(f"sum(1 - bookie_SERVER_STATUS{_BOOKIES})", "read-only"), red_at=1),
        stat("Ledgers", "Ledgers stored on the selected bookies.", Query(f"sum(bookie_ledgers_count{_BOOKIES})",
                                                                          "ledgers")),
        stat("Entries", "Entries stored on the selected bookies.", Query(f"sum(bookie_entries_count{_BOOKIES})",
                                                                          "entries")),
        stat("Bytes written", "Bytes per second the selected bookies write.",
             Query(f"sum(rate(bookie_WRITE_BYTES{_BOOKIES}{RATE}))", "written"), unit="Bps"),
        stat("Bytes read", "Bytes per second the selected bookies read.",
             Query(f"sum(rate(bookie_READ_BYTES{_BOOKIES}{RATE}))", "read"), unit="Bps"),
        timeseries("Journal sync latency", "fsync of the journal, per bookie (an add is acknowledged only after "
                   "the sync covering it).", *_op_latency("bookie_journal_JOURNAL_SYNC"), unit="ms"),
        timeseries("Journal syncs", "Journal fsyncs per second, per bookie.",
                   Query(f"{_BY_BOOKIE} (rate(bookie_journal_JOURNAL_SYNC_count{sel(CLUSTER, eq('success', 'true'))}"
                         f"{RATE}))", _LEGEND), unit="ops"),
        timeseries("Journal queue", "Requests waiting for the journal, per bookie.",
                   Query(f"{_BY_BOOKIE} (bookie_journal_JOURNAL_QUEUE_SIZE{_BOOKIES})", _LEGEND)),
        timeseries("Add entry latency", "ADD_ENTRY requests, receipt to response, per bookie.",
                   *_op_latency("bookkeeper_server_ADD_ENTRY_REQUEST"), unit="ms"),
        timeseries("Read entry latency", "READ_ENTRY requests, receipt to response, per bookie.",
                   *_op_latency("bookkeeper_server_READ_ENTRY_REQUEST"), unit="ms"),
        timeseries("Requests", "ADD_ENTRY and READ_ENTRY requests per second, per bookie and outcome.",
                   Query(f"sum by (cluster, instance, success) (rate(bookkeeper_server_ADD_ENTRY_REQUEST_count"
                         f"{_BOOKIES}{RATE}))", f"{_LEGEND} add success={{{{success}}}}"),
                   Query(f"sum by (cluster, instance, success) (rate(bookkeeper_server_READ_ENTRY_REQUEST_count"
                         f"{_BOOKIES}{RATE}))", f"{_LEGEND} read success={{{{success}}}}"), unit="reqps"),
        timeseries("Bytes written and read", "Bytes per second, per bookie.",
                   Query(f"{_BY_BOOKIE} (rate(bookie_WRITE_BYTES{_BOOKIES}{RATE}))", f"{_LEGEND} written"),
                   Query(f"{_BY_BOOKIE} (rate(bookie_READ_BYTES{_BOOKIES}{RATE}))", f"{_LEGEND} read"), unit="Bps"),
        timeseries("Ledgers and entries", "What each bookie stores.",
                   Query(f"{_BY_BOOKIE} (bookie_ledgers_count{_BOOKIES})", f"{_LEGEND} ledgers"),
                   Query(f"{_BY_BOOKIE} (bookie_entries_count{_BOOKIES})", f"{_LEGEND} entries")),
        timeseries("Writable ledger directories", "Ledger directories with room to write, per bookie (0: the "
                   "bookie turns read-only).",
                   Query(f"{_BY_BOOKIE} (bookie_ledger_writable_dirs{_BOOKIES})", _LEGEND)),
        timeseries("Bookie state", "1 writable, 0 read-only, per bookie.",
                   Query(f"{_BY_BOOKIE} (bookie_SERVER_STATUS{_BOOKIES})", _LEGEND)),
        timeseries("Disk usage", "Used share of the filesystem holding each bookie's data directory.",
                   Query(f"{_BY_BOOKIE} (1 - magnetar_bookie_disk_free_bytes{_BOOKIES} / "
                         f"magnetar_bookie_disk_total_bytes{_BOOKIES})", _LEGEND), unit="percentunit"),
        timeseries("Disk free", "Free bytes of the filesystem holding each bookie's data directory.",
                   Query(f"{_BY_BOOKIE} (magnetar_bookie_disk_free_bytes{_BOOKIES})", _LEGEND), unit="bytes"),
    ]
    return build_dashboard(uid=UID, title="Magnetar / Bookies", tags=["bookkeeper", "bookies"], panels=panels,
                           description="Bookies: journal sync latency and queue, add and read latency, bytes, "
                                       "ledgers and entries, writable directories, read-only state, disk.",
                           variables=[cluster_variable("bookie")])
