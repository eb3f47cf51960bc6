"""BookKeeper's operation statistics (``bookie.opstats``) and their summary shape under BookKeeper's names:
quantiles within the sketch's relative error, the window, counts and sums by outcome."""

from __future__ import annotations

import math
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from bookie.bookkeeper_metrics import ledger_dir_usage_name, op_stats_family
from bookie.errors import BookieError
from bookie.metrics import BookieMetrics
from bookie.opstats import QUANTILES, OpStats, QuantileSketch


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def exact_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.001, max_value=3_600_000, allow_nan=False), min_size=1, max_size=300),
       st.sampled_from(QUANTILES))
def test_a_quantile_is_within_the_relative_error_of_the_value_at_its_rank(values, q):
    sketch = QuantileSketch(relative_error=0.01)
    for v in values:
        sketch.add(v)
    want = exact_quantile(values, q)
    got = sketch.quantile(q)
    assert abs(got - want) <= 0.0101 * want, (q, want, got)
    assert sketch.quantile(1.0) == max(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0.001, max_value=1e6, allow_nan=False), max_size=100),
       st.lists(st.floats(min_value=0.001, max_value=1e6, allow_nan=False), max_size=100))
def test_merging_two_sketches_equals_one_sketch_of_both(a, b):
    left, right, both = QuantileSketch(), QuantileSketch(), QuantileSketch()
    for v in a:
        left.add(v)
        both.add(v)
    for v in b:
        right.add(v)
        both.add(v)
    left.merge(right)
    assert left.count == both.count == len(a) + len(b)
    for q in QUANTILES:
        got, want = left.quantile(q), both.quantile(q)
        assert (math.isnan(got) and math.isnan(want)) or got == want


def test_an_empty_sketch_answers_nan_and_bad_arguments_are_refused():
    sketch = QuantileSketch()
    assert math.isnan(sketch.quantile(0.5))
    with pytest.raises(ValueError):
        sketch.quantile(1.5)
    with pytest.raises(ValueError):
        QuantileSketch(relative_error=0)
    with pytest.raises(ValueError):
        OpStats(window_s=0)
    sketch.add(math.nan)  # not a latency: ignored
    sketch.add(0.0)       # a clock too coarse to see the operation: counted, answered as 0
    assert sketch.count == 1 and sketch.quantile(0.5) == 0.0


def test_counts_and_sums_are_cumulative_and_quantiles_cover_one_to_two_windows():
    clock = FakeClock()
    ops = OpStats(window_s=60, clock=clock)
    for _ in range(99):
        ops.record(2.0, True)
    ops.record(500.0, True)
    ops.record(7.0, False)
    snap = ops.snapshot()
    assert (snap.success.count, snap.success.sum_ms) == (100, 99 * 2.0 + 500.0)
    assert (snap.failure.count, snap.failure.sum_ms) == (1, 7.0)
    assert snap.success.quantiles_ms[QUANTILES.index(0.5)] == pytest.approx(2.0, rel=0.01)
    assert snap.success.quantiles_ms[QUANTILES.index(1.0)] == 500.0
    assert snap.failure.quantiles_ms[QUANTILES.index(0.5)] == pytest.approx(7.0, rel=0.01)

    clock.now += 61  # a new window: the last one still counts
    ops.record(30.0, True)
    snap = ops.snapshot()
    assert snap.success.quantiles_ms[QUANTILES.index(1.0)] == 500.0
    clock.now += 61  # the window holding 500 ms is now two windows old: gone from the quantiles
    snap = ops.snapshot()
    assert snap.success.quantiles_ms[QUANTILES.index(1.0)] == 30.0
    assert snap.success.count == 101  # counts and sums never forget
    clock.now += 1000  # long quiet: no quantile at all, as BookKeeper shows NaN for an idle window
    snap = ops.snapshot()
    assert all(math.isnan(v) for v in snap.success.quantiles_ms + snap.failure.quantiles_ms)
    assert snap.success.count == 101 and snap.failure.count == 1


def test_the_summary_shape_is_bookkeepers():
    ops = OpStats()
    ops.record_seconds(0.004, True)
    registry = CollectorRegistry()

    class One:
        def collect(self):
            yield op_stats_family("bookie_journal_JOURNAL_SYNC", "sync", ops)

    registry.register(One())
    text = generate_latest(registry).decode()
    assert "# TYPE bookie_journal_JOURNAL_SYNC summary" in text
    for outcome in ("true", "false"):
        for q in ("0.5", "0.75", "0.95", "0.99", "0.999", "0.9999", "1.0"):
            assert f'bookie_journal_JOURNAL_SYNC{{quantile="{q}",success="{outcome}"}} ' in text
        assert f'bookie_journal_JOURNAL_SYNC_count{{success="{outcome}"}} ' in text
        assert f'bookie_journal_JOURNAL_SYNC_sum{{success="{outcome}"}} ' in text
    assert 'bookie_journal_JOURNAL_SYNC_count{success="true"} 1.0' in text
    assert 'bookie_journal_JOURNAL_SYNC{quantile="1.0",success="true"} 4.0' in text  # milliseconds


def test_ledger_dir_usage_names_follow_bookkeeper():
    assert ledger_dir_usage_name("/pulsar/data/bookkeeper/ledgers") == \
        "bookie_ledger_dir__pulsar_data_bookkeeper_ledgers_usage"
    assert ledger_dir_usage_name("data/bk-1/led.gers:x") == "bookie_ledger_dir_data_bk_1_led_gers_x_usage"


def test_one_measurement_feeds_the_histogram_and_the_op_stats():
    registry = CollectorRegistry()
    metrics = BookieMetrics(registry, "b1")
    metrics.bind(queue_depth=lambda: 3, ledgers=lambda: 2, read_only=lambda: 1, entry_logs=lambda: 1,
                 write_cache_bytes=lambda: 10, entries=lambda: 5, ledger_dir=pathlib.Path("/d/ledgers"))
    metrics.observe_add(0.002, True)
    metrics.observe_add(0.003, False)
    metrics.observe_read(0.001, False)
    metrics.add_bytes.inc(123)
    metrics.on_disk_sample(25, 100)
    value = registry.get_sample_value
    assert value("magnetar_bookie_add_latency_seconds_count", {"bookie": "b1"}) == 2
    assert value("bookkeeper_server_ADD_ENTRY_REQUEST_count", {"success": "true"}) == 1
    assert value("bookkeeper_server_ADD_ENTRY_count", {"success": "false"}) == 1
    assert value("magnetar_bookie_read_latency_seconds_count", {"bookie": "b1"}) == 0  # failures: op stats only
    assert value("bookkeeper_server_READ_ENTRY_REQUEST_count", {"success": "false"}) == 1
    assert value("bookie_WRITE_BYTES", {}) == 123
    assert value("bookie_SERVER_STATUS", {}) == 0
    assert value("bookie_ledger_writable_dirs", {}) == 0
    assert value("bookie_journal_JOURNAL_QUEUE_SIZE", {}) == 3
    assert value("bookie_ledgers_count", {}) == 2
    assert value("bookie_entries_count", {}) == 5
    assert value("bookie_ledger_dir__d_ledgers_usage", {}) == 75.0
    with pytest.raises(BookieError):
        metrics.bind(queue_depth=lambda: 0, ledgers=lambda: 0, read_only=lambda: 0, entry_logs=lambda: 0,
                     write_cache_bytes=lambda: 0, entries=lambda: 0, ledger_dir=pathlib.Path("/d"))
