"""The bookie's measurements under Apache BookKeeper's Prometheus names, as Pulsar's metric reference lists them.

Pulsar's dashboards and alert rules query a bookie by BookKeeper's names (``bookie_SERVER_STATUS``,
``bookie_journal_JOURNAL_SYNC{success="true",quantile="0.99"}``, ``rate(bookie_WRITE_BYTES[1m])``...). This
collector renders, at scrape time, the measurements :class:`bookie.metrics.BookieMetrics` already takes, under
those names, with BookKeeper's labels only (no ``bookie`` label: Prometheus's ``instance`` tells bookies apart,
as it does for BookKeeper):

* gauges: ``bookie_SERVER_STATUS`` (1 writable, 0 read-only), ``bookie_write_cache_size``,
  ``bookie_journal_JOURNAL_QUEUE_SIZE``, ``bookie_ledger_writable_dirs`` and the usage in percent of the
  ledger directory, ``bookie_ledger_dir_<path>_usage`` where ``<path>`` is the directory with every character
  other than a letter, digit or ``_`` replaced by ``_`` (BookKeeper's ``/pulsar/data/bookkeeper/ledgers``
  gives ``bookie_ledger_dir__pulsar_data_bookkeeper_ledgers_usage``);
* operation statistics, BookKeeper's summary shape: ``bookie_journal_JOURNAL_SYNC``,
  ``bookkeeper_server_ADD_ENTRY_REQUEST`` and ``bookkeeper_server_READ_ENTRY_REQUEST``, each with
  ``success="true"`` and ``success="false"``: quantiles (:data:`bookie.opstats.QUANTILES`) in milliseconds,
  ``_count`` and ``_sum``. BookKeeper times ``ADD_ENTRY`` (processing) apart from ``ADD_ENTRY_REQUEST``
  (until the response is sent); a Magnetar bookie answers in the same step it learns the outcome, so the one
  measurement is exposed under both names, ``bookkeeper_server_ADD_ENTRY`` and ``..._REQUEST`` (likewise
  ``READ_ENTRY``), whose ``_count`` is what BookKeeper's dashboards divide for a success rate;
* four series whose BookKeeper names break Prometheus's naming rules, exposed *untyped* (OpenMetrics
  ``unknown``) so that their names stay exact: ``bookie_WRITE_BYTES`` and ``bookie_READ_BYTES`` (cumulative
  bytes; BookKeeper types them ``counter``, but OpenMetrics, which Prometheus asks for when scraping, and
  ``promtool check metrics`` require a counter's samples to end in ``_total``, which would rename them), and
  ``bookie_ledgers_count`` and ``bookie_entries_count`` (BookKeeper's gauges; ``promtool check metrics``
  reserves ``_count`` for histograms and summaries). PromQL reads an untyped series as it reads a typed one:
  ``rate(bookie_WRITE_BYTES[1m])`` works as it does against BookKeeper.

Bookie meanings where Magnetar differs from BookKeeper: ``bookie_entries_count`` counts entries in the index
(flushed to entry logs), as BookKeeper's DbLedgerStorage counts its location index; entries still in the write
cache are not in it yet. There is one ledger directory, writable unless the disk monitor turned the bookie
read-only, so ``bookie_ledger_writable_dirs`` is 1 or 0, with ``bookie_SERVER_STATUS``.
``bookie_journal_JOURNAL_SYNC`` is the journal's group commit as Magnetar measures it (write + fdatasync of one
group, the same measurement as ``magnetar_bookie_journal_sync_latency_seconds``); BookKeeper times the fsync
alone. ``bookie_journal_JOURNAL_QUEUE_SIZE`` counts records queued for the journal writer.
"""

from __future__ import annotations

import pathlib
import re
from typing import Callable, Iterator, NamedTuple, Optional

from prometheus_client.core import GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector

from .opstats import QUANTILES, OpStats

__all__ = ["BookKeeperCollector", "BookieState", "ledger_dir_usage_name"]

_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_]")
_QUANTILE_LABELS = tuple(repr(float(q)) for q in QUANTILES)  # "0.5" ... "1.0", as BookKeeper writes them


def ledger_dir_usage_name(directory: str) -> str:
    """BookKeeper's name of a ledger directory's usage gauge: ``bookie_ledger_dir_`` + the path with ``/`` as
    ``_`` + ``_usage``. Characters a metric name may not hold become ``_`` too (BookKeeper's Prometheus
    provider does the same), and so does ``:``, which Prometheus reserves for recording rules."""
    return "bookie_ledger_dir_" + _NOT_IN_NAME.sub("_", directory) + "_usage"


class BookieState(NamedTuple):
    """Where the collector reads the bookie's state, each evaluated at scrape time (from the metrics thread:
    plain reads of numbers, no locks taken on the event loop's structures)."""

    read_only: Callable[[], bool]
    ledgers: Callable[[], float]
    entries: Callable[[], float]
    journal_queue: Callable[[], float]
    write_cache_bytes: Callable[[], float]
    written_bytes: Callable[[], float]
    read_bytes: Callable[[], float]
    ledger_dir_used_fraction: Callable[[], Optional[float]]  # None until the disk monitor sampled once


class BookKeeperCollector(Collector):
    """Renders the bookie's series under BookKeeper's names (see the module docstring)."""

    def __init__(self, state: BookieState, *, ledger_dir: pathlib.Path, add_ops: OpStats, read_ops: OpStats,
                 journal_sync_ops: OpStats) -> None:
        self.state = state
        self.ledger_dir_usage_name = ledger_dir_usage_name(str(ledger_dir))
        self._ledger_dir = ledger_dir
        self._ops = (
            ("bookkeeper_server_ADD_ENTRY", "Add requests: latency (ms) from receipt to the answer, by outcome",
             add_ops),
            ("bookkeeper_server_ADD_ENTRY_REQUEST", "Add requests: latency (ms) from receipt to the answer, by "
             "outcome", add_ops),
            ("bookkeeper_server_READ_ENTRY", "Read requests: latency (ms) from receipt to the last entry sent, "
             "by outcome", read_ops),
            ("bookkeeper_server_READ_ENTRY_REQUEST", "Read requests: latency (ms) from receipt to the last entry "
             "sent, by outcome", read_ops),
            ("bookie_journal_JOURNAL_SYNC", "Journal group commits: latency (ms) of writing and syncing one "
             "group, by outcome", journal_sync_ops),
        )

    def describe(self) -> list:  # names are fixed, but described lazily: no collision checks at registration
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.state
        writable = not s.read_only()
        yield GaugeMetricFamily("bookie_SERVER_STATUS", "Bookie state: 1 writable, 0 read-only",
                                value=1 if writable else 0)
        yield UnknownMetricFamily("bookie_WRITE_BYTES", "Payload bytes of entries stored (acknowledged adds); "
                                  "only grows", value=s.written_bytes())
        yield UnknownMetricFamily("bookie_READ_BYTES", "Payload bytes of entries returned by reads; only grows",
                                  value=s.read_bytes())
        yield UnknownMetricFamily("bookie_ledgers_count", "Ledgers stored (deleted ones not counted)",
                                  value=s.ledgers())
        yield UnknownMetricFamily("bookie_entries_count", "Entries in the index (flushed to entry logs)",
                                  value=s.entries())
        yield GaugeMetricFamily("bookie_write_cache_size", "Bytes in the write cache", value=s.write_cache_bytes())
        yield GaugeMetricFamily("bookie_journal_JOURNAL_QUEUE_SIZE", "Records waiting for the journal writer",
                                value=s.journal_queue())
        yield GaugeMetricFamily("bookie_ledger_writable_dirs", "Ledger directories accepting writes",
                                value=1 if writable else 0)
        used = s.ledger_dir_used_fraction()
        yield GaugeMetricFamily(self.ledger_dir_usage_name, f"Used space of {self._ledger_dir}'s filesystem "
                                "(percent)", value=100.0 * (used or 0.0))
        for name, doc, ops in self._ops:
            yield op_stats_family(name, doc, ops)


def op_stats_family(name: str, doc: str, ops: OpStats) -> Metric:
    """One operation's statistics in BookKeeper's summary shape: per outcome, the quantiles, _count and _sum."""
    family = Metric(name, doc, "summary")
    snapshot = ops.snapshot()
    for success in (False, True):
        outcome = snapshot.outcome(success)
        label = "true" if success else "false"
        for quantile, value in zip(_QUANTILE_LABELS, outcome.quantiles_ms):
            family.add_sample(name, {"success": label, "quantile": quantile}, value)
        family.add_sample(name + "_count", {"success": label}, outcome.count)
        family.add_sample(name + "_sum", {"success": label}, outcome.sum_ms)
    return family
