"""`magnetar zookeeper --metrics-port`: a real ZooKeeper, its numbers on /metrics from mntr at every scrape, and a
wrapper that never leaves its JVM behind (stopped with it, killed with it) nor outlives it."""

from __future__ import annotations

import os
import pathlib
import signal
import urllib.request

import pytest
from kazoo.client import KazooClient

from magnetar import zookeeper as zk
from magnetar.net import free_port, is_listening
from tests.kit.process import ManagedProcess, python_command
from tests.kit.promtool import check_metrics
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(120)


def start(tmp_path: pathlib.Path) -> tuple[ManagedProcess, int, int]:
    port, metrics_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    proc = ManagedProcess(
        "zookeeper",
        python_command("zookeeper", "--port", str(port), "--data-dir", str(tmp_path / "zk"),
                       "--metrics-port", str(metrics_port)),
        log_path=tmp_path / "logs" / "zookeeper.log",
        health=lambda: zk.is_healthy("127.0.0.1", port) and is_listening("127.0.0.1", metrics_port),
    )
    proc.start(timeout_s=60)
    return proc, port, metrics_port


def scrape(metrics_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def jvm_of(proc: ManagedProcess) -> int:
    children = pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_metrics_follow_the_server_and_promtool_parses_them(tmp_path: pathlib.Path) -> None:
    proc, port, metrics_port = start(tmp_path)
    before = wait_for(lambda: (m := scrape(metrics_port)).get("magnetar_zookeeper_up") == 1 and m, timeout_s=30,
                      what="ZooKeeper serving")
    client = KazooClient(hosts=f"127.0.0.1:{port}")
    client.start(timeout=15)
    try:
        for n in range(5):
            client.create(f"/metrics-test-{n}", b"x", ephemeral=n % 2 == 0)
        after = scrape(metrics_port)  # mntr is asked at the scrape: the new znodes are there at once
        assert after["znode_count"] == before["znode_count"] + 5
        assert after["ephemerals_count"] == before["ephemerals_count"] + 3
        assert after["num_alive_connections"] >= 1 and after["zookeeper_server_znode_count"] == after["znode_count"]
        assert after['magnetar_zookeeper_server_state{state="standalone"}'] == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
            check = check_metrics(response.read())
        assert check.parsed, check.output
        assert all(not name.startswith("magnetar_") for name, _ in check.problems), check.output
    finally:
        client.stop()
        client.close()


def test_stopping_the_wrapper_stops_zookeeper_and_a_dead_zookeeper_ends_the_wrapper(tmp_path: pathlib.Path) -> None:
    proc, port, metrics_port = start(tmp_path)
    jvm = jvm_of(proc)
    os.kill(proc.pid, signal.SIGTERM)  # the wrapper alone: it passes the signal on and waits for the JVM
    assert proc.proc.wait(timeout=30) == 128 + signal.SIGTERM  # the JVM's own exit code on SIGTERM
    wait_for(lambda: not pathlib.Path(f"/proc/{jvm}").exists() or b"Z" in _state(jvm), timeout_s=10,
             what="the JVM gone")
    assert not is_listening("127.0.0.1", port) and not is_listening("127.0.0.1", metrics_port)

    proc.start(timeout_s=60)
    os.kill(jvm_of(proc), signal.SIGKILL)
    assert proc.proc.wait(timeout=30) == 128 + signal.SIGKILL
    assert not is_listening("127.0.0.1", metrics_port)


def _state(pid: int) -> bytes:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return b"Z"
    return stat[stat.rindex(b")") + 2:][:1]
