"""The distributions behind the broker's Pulsar-named series (``broker/service/latency.py``) and the ZooKeeper
session-event counter (``config_store/metrics.py``), without servers: ranges and units as Pulsar's, the publish
latency Summary's period rotation and bounded sample, and session events counted per store and event."""

from __future__ import annotations

import math

import prometheus_client
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.service.latency import (ENTRY_SIZE_BOUNDS_BYTES, ENTRY_SIZE_SUFFIXES, PUBLISH_QUANTILES,
                                    WRITE_LATENCY_BOUNDS_MS, WRITE_LATENCY_SUFFIXES, BrokerLatency, RangeCounts,
                                    quantiles_ms)
from config_store import MemoryMetadataStore
from config_store.metrics import SessionEventsCollector, process_stores


def test_ranges_are_pulsars() -> None:
    assert len(WRITE_LATENCY_SUFFIXES) == len(WRITE_LATENCY_BOUNDS_MS) + 1
    assert len(ENTRY_SIZE_SUFFIXES) == len(ENTRY_SIZE_BOUNDS_BYTES) + 1
    # Pulsar's brokers spell the latency overflow without "le_", the entry size overflow with it
    assert WRITE_LATENCY_SUFFIXES[-1] == "overflow" and ENTRY_SIZE_SUFFIXES[-1] == "le_overflow"
    counts = RangeCounts(ENTRY_SIZE_BOUNDS_BYTES)
    for size in (128, 129, 1024, 1025, 1_232_896, 1_232_897):  # a bound belongs to its own range (<=)
        counts.record(size)
    by_suffix = dict(zip(ENTRY_SIZE_SUFFIXES, counts.buckets))
    assert by_suffix == {"le_128": 1, "le_512": 1, "le_1_kb": 1, "le_2_kb": 1, "le_4_kb": 0, "le_16_kb": 0,
                         "le_100_kb": 0, "le_1_mb": 1, "le_overflow": 1}


@given(st.lists(st.floats(0, 5000, allow_nan=False), max_size=200))
def test_range_counts_add_up(values) -> None:
    counts = RangeCounts(WRITE_LATENCY_BOUNDS_MS)
    for v in values:
        counts.record(v, 1000.0)
    assert sum(counts.buckets) == counts.count == len(values)
    assert counts.sum == pytest.approx(sum(values) * 1000.0)


def test_publish_quantiles_describe_the_last_completed_period() -> None:
    latency = BrokerLatency(seed=1)
    assert all(math.isnan(q) for q in latency.quantiles_ms)  # nothing completed yet
    for ms in range(1, 101):  # 1..100 ms
        latency.record(ms / 1000)
    assert all(math.isnan(q) for q in latency.quantiles_ms)  # the period is still open
    latency.rotate()
    q = dict(zip((label for _, label in PUBLISH_QUANTILES), latency.quantiles_ms))
    assert q["0.0"] == pytest.approx(1) and q["1.0"] == pytest.approx(100)
    assert q["0.5"] == pytest.approx(50) and q["0.95"] == pytest.approx(95) and q["0.99"] == pytest.approx(99)
    latency.rotate()  # an empty period: NaN again, while count and sum keep growing for ever
    assert all(math.isnan(v) for v in latency.quantiles_ms)
    assert latency.count == 100 and latency.sum_s == pytest.approx(5.05)


def test_publish_latency_sample_is_bounded_and_uniform() -> None:
    latency = BrokerLatency(samples_max=500, seed=7)
    for i in range(20_000):  # the first half fast (1 ms), the second slow (9 ms)
        latency.record(0.001 if i < 10_000 else 0.009)
    assert len(latency._window) == 500 and latency.count == 20_000
    latency.rotate()
    q = dict(zip((label for _, label in PUBLISH_QUANTILES), latency.quantiles_ms))
    assert q["0.0"] == pytest.approx(1) and q["1.0"] == pytest.approx(9)
    assert q["0.95"] == pytest.approx(9)  # a sample kept only the first 500 would say 1 ms


def test_quantiles_of_one_sample_and_none() -> None:
    assert quantiles_ms([0.002]) == tuple(2.0 for _ in PUBLISH_QUANTILES)
    assert all(math.isnan(v) for v in quantiles_ms([]))


def test_summary_and_histogram_families_in_the_exposition() -> None:
    latency = BrokerLatency()
    latency.record(0.004)
    latency.rotate()
    registry = prometheus_client.CollectorRegistry()

    class One:
        def collect(self):
            yield latency.summary_family("east")
            yield latency.histogram_family()

    registry.register(One())
    text = prometheus_client.generate_latest(registry).decode()
    assert "# TYPE pulsar_broker_publish_latency summary" in text
    assert 'pulsar_broker_publish_latency{cluster="east",quantile="0.99"} 4.0' in text
    assert 'pulsar_broker_publish_latency_count{cluster="east"} 1.0' in text
    assert 'pulsar_broker_publish_latency_sum{cluster="east"} 4.0' in text  # milliseconds
    assert 'magnetar_broker_publish_latency_seconds_bucket{le="0.005"} 1.0' in text


async def test_session_events_are_counted_per_store_and_event() -> None:
    async with MemoryMetadataStore() as local, MemoryMetadataStore() as configuration:
        registry = prometheus_client.CollectorRegistry()
        registry.register(SessionEventsCollector(process_stores(local, configuration), cluster="east"))

        def value(name: str, event: str) -> float:
            return registry.get_sample_value("magnetar_zookeeper_session_events_total",
                                             {"cluster": "east", "name": name, "event": event})

        assert value("metadata-store", "connected") == 1  # the first session
        for event in ("suspended", "reconnected", "expired"):
            assert value("metadata-store", event) == 0  # present from the start, at 0
        local.suspend()
        local.resume()
        local.expire_session()
        events = ("connected", "suspended", "reconnected", "expired")
        assert [value("metadata-store", e) for e in events] == [2, 1, 1, 1]
        assert value("configuration-metadata-store", "expired") == 0
        # one shared store is listed once, as the local one
        assert list(process_stores(local, local)) == ["metadata-store"]
