"""magnetar perf's stage table: parsing /metrics histograms and quantiles of a run's difference (pure)."""

from __future__ import annotations

import math

import prometheus_client

from bookie.metrics import BookieMetrics
from broker.service.latency import storage_write_histogram
from magnetar import perf_stages


def exposition(metrics: BookieMetrics) -> str:
    return prometheus_client.generate_latest(metrics.registry).decode()


def test_journal_stages_and_bookie_add_are_read_per_stage_and_differenced():
    metrics = BookieMetrics(prometheus_client.CollectorRegistry(), "b1")
    metrics.on_stages(0.0001, 0.0002, 0.0, 0.004)
    before = perf_stages.parse_histograms(exposition(metrics))
    for _ in range(99):
        metrics.on_stages(0.0001, 0.0002, 0.0, 0.004)
    metrics.on_stages(0.0001, 0.0002, 0.3, 0.9)  # one slow sync, and the group behind it waited
    for _ in range(100):
        metrics.observe_add(0.006, True)
    rows = {r[0]: r for r in perf_stages.stage_rows(before, perf_stages.parse_histograms(exposition(metrics)))}
    assert rows["journal: fsync"][1] == 100  # the observation before the first scrape is not this run's
    assert rows["journal: fsync"][2] == 5.0  # p50 in the 5 ms bucket
    assert rows["journal: fsync"][4] == 1000.0  # p99.9: the slow one, in the 1 s bucket
    assert rows["journal: force wait"][4] == 500.0
    assert rows["bookie: add"][1] == 100 and rows["bookie: add"][3] == 10.0
    assert "broker: SEND->receipt" not in rows  # nothing of it in these scrapes


def test_broker_histogram_and_two_bookies_sum():
    hist = storage_write_histogram()
    for seconds in (0.001, 0.002, 0.03):
        hist.record(seconds)
    registry = prometheus_client.CollectorRegistry()

    class Collector:
        def collect(self):
            yield hist.histogram_family()
    registry.register(Collector())
    broker_text = prometheus_client.generate_latest(registry).decode()
    b1 = BookieMetrics(prometheus_client.CollectorRegistry(), "b1")
    b2 = BookieMetrics(prometheus_client.CollectorRegistry(), "b2")
    b1.on_stages(0, 0, 0, 0.001)
    b2.on_stages(0, 0, 0, 0.001)
    after = perf_stages.merge(perf_stages.parse_histograms(t) for t in (broker_text, exposition(b1), exposition(b2)))
    rows = {r[0]: r for r in perf_stages.stage_rows({}, after)}
    assert rows["broker: ledger add"][1] == 3 and rows["broker: ledger add"][3] == 50.0
    assert rows["journal: fsync"][1] == 2
    lines = perf_stages.format_rows(list(rows.values()))
    assert any("journal: fsync" in line for line in lines)


def test_quantile_of_nothing_is_nan_and_urls_get_metrics_path():
    assert math.isnan(perf_stages.quantile({}, 0.5))
    assert perf_stages.metrics_url("http://h:1/") == "http://h:1/metrics"
    assert perf_stages.metrics_url("http://h:1/metrics") == "http://h:1/metrics"
    assert perf_stages.format_rows([])[0].startswith("== stages: no observations")
