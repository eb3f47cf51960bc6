"""The pure parts of bench/latency.py: the open-loop schedule, the figures and the table; no server runs."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.perf_worker import Pacer

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


latency = _load("latency")
peers = _load("latency_peers")


class FakeClock:
    def __init__(self) -> None:
        self.ns = 5_000_000_000

    def __call__(self) -> int:
        return self.ns


def test_the_schedule_owes_what_fell_due_and_keeps_it_owed_after_a_stall():
    clock = FakeClock()
    pacer = Pacer(1000.0, clock_ns=clock)
    assert pacer.due(100) == 0  # message 0 is due 1 ms after the start
    clock.ns += 1_000_000
    assert pacer.due(100) == 1
    pacer.sent += 1
    clock.ns += 250_000_000  # a stalled sender: 250 more messages fell due meanwhile
    assert pacer.due(100) == 100  # capped per call ...
    pacer.sent += 100
    assert pacer.due(1000) == 150  # ... and the rest still owed: the schedule does not slip
    assert pacer.scheduled_ns(0) == pacer.start_ns + 1_000_000
    assert pacer.scheduled_ns(250) == pacer.start_ns + 251_000_000


@given(st.floats(min_value=1.0, max_value=1e6), st.integers(min_value=0, max_value=10**10))
def test_no_message_is_due_before_its_scheduled_time(rate, elapsed_ns):
    clock = FakeClock()
    pacer = Pacer(rate, clock_ns=clock)
    clock.ns += elapsed_ns
    due = pacer.due(10**9)
    if due:
        assert pacer.scheduled_ns(due - 1) <= clock.ns  # the last one owed is due already
    assert pacer.scheduled_ns(due) >= clock.ns - 1  # the next one is not (1 ns of rounding)


def test_wait_is_until_the_next_message_within_bounds():
    clock = FakeClock()
    pacer = Pacer(100.0, clock_ns=clock)  # one message every 10 ms
    assert pacer.wait_s() == pytest.approx(0.010)
    clock.ns += 9_900_000
    assert pacer.wait_s() == 0.0005  # never a busy loop
    assert Pacer(0.5, clock_ns=clock).wait_s() == 0.05  # never long enough to miss the deadline by much
    assert Pacer(0, clock_ns=clock).due(7) == 7  # no rate: everything at once


def test_latencies_are_summarised_in_milliseconds_within_the_histogram_precision():
    samples = [1_000_000] * 98 + [20_000_000, 250_000_000]  # 98 at 1 ms, one at 20 ms, one at 250 ms
    got = latency.summarize_ns(samples)
    assert got["count"] == 100
    assert got["p50"] == pytest.approx(1.0, rel=1e-3)
    assert got["p99"] == pytest.approx(20.0, rel=1e-3)
    assert got["p99.9"] == pytest.approx(250.0, rel=1e-3)
    assert got["max"] == pytest.approx(250.0, rel=1e-3)
    assert latency.summarize_ns([]) == {"count": 0}


def test_the_table_has_one_aligned_line_per_point_and_says_what_was_skipped():
    rows = [
        {"system": "magnetar", "client": "pulsar-client", "rate": 10000.0, "achieved": 9987.4,
         "latency_ms": {"p50": 3.2, "p99": 41.0, "p99.9": 88.123, "max": 120.0}, "errors": 0},
        {"system": "redis", "client": "redis-py", "rate": 50000.0, "achieved": 31000.0,
         "latency_ms": {"p50": 900.0, "p99": 1800.5, "p99.9": 1900.0, "max": 1950.0}, "errors": 3,
         "error": "TimeoutError: late"},
        {"system": "nats", "client": "-", "rate": 1000.0, "skipped": "nats: skipped"},
    ]
    lines = latency.format_table(rows)
    assert lines[0].split()[:4] == ["system", "client", "rate", "asked"]
    assert len(lines) == 4
    assert "10,000" in lines[1] and "9,987" in lines[1] and "88.12" in lines[1]
    assert lines[2].endswith("3 (TimeoutError: late)") and "1,800.50" in lines[2]
    assert "skipped" in lines[3]
    # columns line up: every number of the p50 column ends where its header does
    end = lines[0].index("p50 ms") + len("p50 ms")
    assert lines[1][:end].endswith("3.20") and lines[2][:end].endswith("900.00")


def test_rates_parse_with_k_and_refuse_nonsense():
    assert latency.parse_rates("1000, 10k,50000") == [1000.0, 10000.0, 50000.0]
    for bad in ("", "0", "-5", "fast"):
        with pytest.raises(ValueError):
            latency.parse_rates(bad)


def test_bad_options_are_refused_with_a_message(capsys):
    for argv in (["--quorum", "2/3/1"], ["--systems", "kafka"], ["--journal-sync", "maybe"], ["--rates", "x"]):
        with pytest.raises(SystemExit) as exited:
            latency._args(argv)
        assert exited.value.code == 2
    assert "--systems takes magnetar, nats, redis" in capsys.readouterr().err


def test_a_missing_peer_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(peers.shutil, "which", lambda _name: None)
    reason = peers.missing("redis")
    assert reason.startswith("redis: skipped") and "redis-server binary" in reason
    assert "scripts/ensure-bench-peers" in reason
    monkeypatch.setattr(peers.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(peers.importlib.util, "find_spec", lambda _module: object())
    assert peers.missing("nats") is None


def test_server_settings_parse_to_typed_values_and_refuse_a_missing_value():
    got = latency.parse_settings(["flush_interval_ms=200", "direct_io=false", "gc_compaction_live_ratio=0.25",
                                  "advertised_host=example"])
    assert got == {"flush_interval_ms": 200, "direct_io": False, "gc_compaction_live_ratio": 0.25,
                   "advertised_host": "example"}
    with pytest.raises(ValueError):
        latency.parse_settings(["flush_interval_ms"])


async def test_the_in_flight_bound_waits_for_an_answer_and_not_longer():
    import asyncio

    flight = peers._InFlight(2)
    flight.sent = 2
    waiter = asyncio.ensure_future(flight.room())
    await asyncio.sleep(0)
    assert not waiter.done()  # two unanswered: no room
    flight.answer()
    await asyncio.wait_for(waiter, 1.0)
    assert flight.pending == 1


def test_open_loop_needs_a_rate_to_measure_from():
    from typer.testing import CliRunner

    from magnetar.perf import perf_app

    result = CliRunner().invoke(perf_app, ["produce", "pulsar://127.0.0.1:1", "t", "--open-loop"])
    assert result.exit_code != 0
    assert "--open-loop needs --rate" in result.output


timeline = _load("latency_timeline")


def test_the_timeline_groups_slow_windows_into_episodes():
    rate = 1000.0  # 10 messages a 10 ms window
    latency_us = [2000] * 1000
    latency_us[105] = 15000  # window 10 (0.10 s) alone
    latency_us[500] = 12000  # windows 50 and 52 (0.50 s, 0.52 s): within 30 ms, one episode
    latency_us[525] = 30000
    latency_us[900] = 10000  # not over the threshold (10 ms)
    latency_us[999] = -1  # failed: not a latency
    got = timeline.episodes(latency_us, rate, 10.0)
    assert [(round(s, 2), round(length, 2), worst) for s, length, worst in got] == [(0.1, 0.01, 15.0),
                                                                                     (0.5, 0.03, 30.0)]
    assert timeline.summary(latency_us) == {"acknowledged": 999, "failed": 1, "p50": 2.0, "p99": 2.0,
                                            "p99.9": 30.0, "max": 30.0}
    assert timeline.episodes([], rate, 10.0) == [] and timeline.summary([-1]) == {"acknowledged": 0}
