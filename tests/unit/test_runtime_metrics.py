"""observability.runtime: collector pauses and event-loop lag reach the registry; the switch knob is checked."""

from __future__ import annotations

import asyncio
import gc
import platform
import sys

import pytest
from prometheus_client import CollectorRegistry

from observability.runtime import RuntimeMetrics, keep_large_blocks, tune_runtime


def _count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(f"{name}_count", labels) or 0.0


def test_gc_pauses_are_observed_per_generation_and_close_unhooks() -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    try:
        before = _count(registry, "magnetar_gc_pause_seconds", generation="2")
        gc.collect()
        assert _count(registry, "magnetar_gc_pause_seconds", generation="2") == before + 1
    finally:
        metrics.close()
    gc.collect()
    assert _count(registry, "magnetar_gc_pause_seconds", generation="2") == before + 1
    assert metrics._on_gc not in gc.callbacks


def test_a_blocked_loop_shows_as_lag() -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)

    async def main() -> None:
        metrics.start()
        await asyncio.sleep(0)
        import time
        time.sleep(0.2)  # the loop is blocked on purpose: what the probe must see
        deadline = asyncio.get_running_loop().time() + 5
        while _count(registry, "magnetar_event_loop_lag_seconds") < 1:
            assert asyncio.get_running_loop().time() < deadline, "no lag sample"
            await asyncio.sleep(0.01)

    try:
        asyncio.run(main())
    finally:
        metrics.close()
    # The blocked 200 ms landed above the 0.1 s bucket.
    assert (registry.get_sample_value("magnetar_event_loop_lag_seconds_bucket", {"le": "0.1"})
            < registry.get_sample_value("magnetar_event_loop_lag_seconds_bucket", {"le": "+Inf"}))


def test_switch_interval_comes_from_the_environment(monkeypatch) -> None:
    old = sys.getswitchinterval()
    try:
        monkeypatch.setenv("MAGNETAR_SWITCH_INTERVAL_S", "0.002")
        tune_runtime()
        assert sys.getswitchinterval() == pytest.approx(0.002)
        monkeypatch.setenv("MAGNETAR_SWITCH_INTERVAL_S", "soon")
        with pytest.raises(SystemExit, match="MAGNETAR_SWITCH_INTERVAL_S"):
            tune_runtime()
    finally:
        sys.setswitchinterval(old)
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)


def test_allocator_tuning_applies_on_glibc_and_can_be_turned_off(monkeypatch) -> None:
    monkeypatch.setenv("MAGNETAR_MALLOC_TUNING", "0")
    assert keep_large_blocks() is False
    monkeypatch.delenv("MAGNETAR_MALLOC_TUNING")
    assert keep_large_blocks() is (platform.libc_ver()[0] == "glibc")
