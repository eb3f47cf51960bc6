"""``magnetar perf produce|consume`` as a user runs it: a subprocess against a serving broker.

The quick tests run against the binary-protocol service in a thread of the test process (in-memory
storage); the slow one against a real ``magnetar broker`` process on real bookies and ZooKeeper.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from tests.kit.broker_thread import broker, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.brokers import start_brokers
from tests.kit.wait import wait_for

LATENCY_LINE = re.compile(r"== latency ms: p50 [\d.]+  p95 [\d.]+  p99 [\d.]+  p99\.9 [\d.]+  max [\d.]+")
SUMMARY_LINE = re.compile(r"== (produce|consume) summary: [\d.]+ s, ([\d,]+) msgs, ([\d,]+) msg/s, ([\d.]+) MB/s")


def perf(*args: str, timeout_s: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "magnetar", "perf", *args], capture_output=True, text=True,
                          timeout=timeout_s)


def check_report(result: subprocess.CompletedProcess, json_path) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    summary = SUMMARY_LINE.search(result.stdout)
    assert summary and int(summary.group(3).replace(",", "")) > 0, result.stdout
    assert LATENCY_LINE.search(result.stdout), result.stdout
    assert re.search(r"\[\s+[\d.]+s\] (produce|consume)\s+[\d,]+ msg/s", result.stdout), result.stdout  # interval lines
    data = json.loads(json_path.read_text())
    assert data["messages"] > 0 and data["msg_per_s"] > 0 and data["latency_ms"]["p99.9"] > 0
    return data


@pytest.mark.parametrize("client_kind", ["pulsar", "magnetar"])
def test_perf_produce_reports_throughput_and_latency(broker, tmp_path, client_kind):
    out = tmp_path / "summary.json"
    result = perf("produce", broker.url, unique_topic("perf"), "--duration", "2", "--interval", "1",
                  "--client", client_kind, "--json", str(out))
    data = check_report(result, out)
    assert data["errors"] == 0 and data["client"] == client_kind


# What perf consume counts does not depend on the broker's storage: on the real one (bookies) only
@pytest.mark.parametrize("storage", ["bookies"], indirect=True)
@pytest.mark.parametrize("client_kind", ["pulsar", "magnetar"])
@pytest.mark.parametrize("sub_type", ["Shared", "Exclusive"])  # acknowledged one by one / cumulatively
def test_perf_consume_counts_what_perf_produce_sent(broker, tmp_path, client_kind, sub_type):
    topic = unique_topic("perf")
    consume_json = tmp_path / "consume.json"
    # Its output goes to a file, not a pipe read only at the end: a consumer whose output filled the pipe would
    # block in a write and never finish (seen in CI: it did not exit within 60 s of Ctrl-C).
    consume_out = tmp_path / "consume.out"
    argv = [sys.executable, "-m", "magnetar", "perf", "consume", broker.url, topic, "--client", client_kind,
            "--subscription-type", sub_type, "--duration", "120", "--interval", "1", "--json", str(consume_json)]
    # Started with SIGINT ignored, as by a parent that ignores it (exec keeps that): Ctrl-C must still end it.
    ignoring = ("import os, signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                f"os.execv({sys.executable!r}, {argv!r})")
    with open(consume_out, "w") as out:
        consumer = subprocess.Popen([sys.executable, "-c", ignoring], stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        # Produce once the subscription exists (its initial position is "latest").
        wait_for(lambda: "perf" in broker.stats(topic).get("subscriptions", {}), 30, what="perf subscription")
        produce_json = tmp_path / "produce.json"
        produced = check_report(perf("produce", broker.url, topic, "--duration", "2", "--rate", "5000", "--interval", "1",
                                     "--client", "magnetar", "--processes", "2", "--json", str(produce_json)),
                                produce_json)
        # Everything received is acknowledged (cumulatively or one by one): no backlog is left. Then Ctrl-C
        # ends the consumer (regression: a fixed 8 s run ended before a loaded machine had delivered it all)
        wait_for(lambda: broker.stats(topic)["subscriptions"]["perf"]["msgBacklog"] == 0, 60, what="no backlog")
        consumer.send_signal(signal.SIGINT)
        try:
            consumer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            output = consume_out.read_text(errors="replace")
            pytest.fail(f"perf consume did not exit within 60 s of SIGINT ({len(output)} bytes of output):\n"
                        f"{output[:3000]}\n...\n{output[-3000:]}")
    finally:
        consumer.kill()
        consumer.wait()
    stdout = consume_out.read_text(errors="replace")
    consumed = check_report(subprocess.CompletedProcess(argv, consumer.returncode, stdout, ""), consume_json)
    assert consumed["messages"] == produced["messages"]
    # pulsar-client was once handed a Python logger that let every DEBUG line through, one per message
    # received: a fifth of the consume rate went to logging
    assert "DEBUG" not in stdout, stdout[:2000]
    assert 5000 * 1.5 <= produced["messages"] <= 5000 * 2.5  # --rate is the total over both processes


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_perf_produce_against_a_broker_process_on_bookies(tmp_path, zk_connect, bookie_factory):
    bookies = bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect)
    out = tmp_path / "summary.json"
    stages = [arg for process in (b, *bookies) for arg in ("--stages-from", process.http_url)]
    result = perf("produce", b.pulsar_url, "persistent://public/default/perf", "--duration", "2", "--interval", "1",
                  "--json", str(out), *stages, timeout_s=180)
    check_report(result, out)
    # where the publish time went: every stage of this run, each with as many observations as it saw
    counts = {m.group(1).strip(): int(m.group(2).replace(",", "")) for m in re.finditer(
        r"^==\s+((?:broker|bookie|journal): [\w >-]+?)\s+([\d,]+)\s+[\d.]+\s+[\d.inf]+\s+[\d.inf]+$",
        result.stdout, re.M)}
    assert set(counts) >= {"broker: SEND->receipt", "broker: ledger add", "bookie: add", "journal: queue",
                           "journal: write", "journal: force wait", "journal: fsync"}, result.stdout[-3000:]
    assert counts["broker: ledger add"] <= counts["broker: SEND->receipt"]  # one entry carries a batch
    assert counts["journal: fsync"] == counts["journal: queue"] > 0  # each synced group is timed in every stage
    # (a bookie add request carries many entries: its count is of requests, not of entries)


def test_pulsar_client_workers_are_pinned_to_one_cpu_each() -> None:
    import os
    import subprocess
    import sys

    cpus = sorted(os.sched_getaffinity(0))
    code = ("import os; from magnetar.perf_worker import pin_worker; c = pin_worker(1); "
            "print(c, sorted(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    expected = cpus[1 % len(cpus)]
    assert out.split(None, 1) == [str(expected), f"[{expected}]\n"]


def test_consume_workers_are_pinned_from_the_last_cpu_down() -> None:
    """A produce and a consume run side by side must not share a core (both have a worker 0)."""
    import os
    import subprocess
    import sys

    cpus = sorted(os.sched_getaffinity(0))
    code = ("import os; from magnetar.perf_worker import pin_worker; c = pin_worker(0, from_last=True); "
            "print(c, sorted(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split(None, 1) == [str(cpus[-1]), f"[{cpus[-1]}]\n"]
