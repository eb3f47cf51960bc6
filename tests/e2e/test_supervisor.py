"""`magnetar up | status | down` with real processes: the supervisor starts, reports, never restarts, stops.

Each test runs the real command line in subprocesses. The detached supervisor is nobody's child here, so
the ``deployment`` fixture runs `magnetar down` afterwards and then SIGKILLs every process group recorded
in the data dir that is still ours (pid and start time match), whatever happened in the test.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
from typing import Any

import pytest

from tests.kit.wait import wait_for

from clusters import STANDALONE
from clusters.runtime import DataDir, group_alive, is_alive, signal_group
from magnetar import zookeeper as zk
from magnetar.net import is_listening
from tests.kit.process import python_command

# The bookie is written in parallel with the supervisor: until `magnetar bookie` exists, the scenario runs
# on a topology of ZooKeepers only, which exercises the same supervisor paths.
BOOKIES_EXIST = importlib.util.find_spec("bookie.server") is not None

ZK_ONLY = """
name = "zk-only"
[supervisor]
startup_timeout_s = 60
stop_grace_s = 5
[global_zookeeper]
[[regions]]
name = "east"
[[regions]]
name = "west"
"""

pytestmark = pytest.mark.timeout(180)


def magnetar(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        python_command(*args), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
    )


def recorded(ddir: DataDir) -> list[tuple[str, int, int]]:
    """(name, pid, start ticks) of the supervisor and every started process in state.json."""
    state = ddir.read_state() or {"supervisor": {}, "processes": []}
    found = [("supervisor", state["supervisor"].get("pid"), state["supervisor"].get("start_ticks"))]
    found += [(r["name"], r["pid"], r["start_ticks"]) for r in state["processes"] if r["pid"]]
    return found


def recorded_ports(ddir: DataDir) -> list[tuple[str, int]]:
    return [(r["host"], p) for r in (ddir.read_state() or {"processes": []})["processes"] for p in r["ports"].values()]


def assert_all_gone(ddir: DataDir) -> None:
    alive = [name for name, pid, ticks in recorded(ddir) if group_alive(pid, ticks)]
    assert not alive, f"still alive: {alive}"
    listening = [port for host, port in recorded_ports(ddir) if is_listening(host, port)]
    assert not listening, f"still listening: {listening}"


@pytest.fixture
def deployment(tmp_path: pathlib.Path):
    """(topology file, DataDir); afterwards nothing recorded in the data dir is left running."""
    if BOOKIES_EXIST:
        topology = STANDALONE
    else:
        topology = tmp_path / "zk-only.toml"
        topology.write_text(ZK_ONLY)
    ddir = DataDir(tmp_path / "deployment")
    yield topology, ddir
    # Shown by pytest only when the test failed.
    for log in sorted(ddir.logs.glob("*.log")) if ddir.logs.exists() else []:
        print(f"----- last lines of {log} -----\n{ddir.log_tail(log, 30)}")
    try:
        magnetar("down", "--data-dir", str(ddir.root), timeout_s=60)
    finally:
        for name, pid, ticks in recorded(ddir):
            signal_group(pid, ticks, signal.SIGKILL)


def up_detached(topology: pathlib.Path, ddir: DataDir) -> subprocess.CompletedProcess:
    result = magnetar("up", str(topology), "--data-dir", str(ddir.root), "--detach")
    assert result.returncode == 0, f"up failed:\n{result.stdout}\n{result.stderr}\n{ddir.log_tail(ddir.supervisor_log)}"
    return result


@contextlib.contextmanager
def running(topology: pathlib.Path, base: pathlib.Path, *, down_timeout_s: float = 90):
    """``magnetar up TOPOLOGY --detach`` in ``base/deployment``; yields (DataDir, its topology.json). On the way
    out, whatever the test did: the tail of every log, ``magnetar down``, then SIGKILL of every recorded
    process group still there."""
    ddir = DataDir(base / "deployment")
    try:
        up_detached(topology, ddir)
        yield ddir, json.loads(ddir.topology_path.read_text())
    finally:
        for log in sorted(ddir.logs.glob("*.log")) if ddir.logs.exists() else []:
            print(f"----- last lines of {log} -----\n{ddir.log_tail(log, 30)}")
        try:
            magnetar("down", "--data-dir", str(ddir.root), timeout_s=down_timeout_s)
        finally:
            for _name, pid, ticks in recorded(ddir):
                signal_group(pid, ticks, signal.SIGKILL)


def processes_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every process entry of topology.json."""
    found = [doc["global_zookeeper"]] if "global_zookeeper" in doc else []
    for region in doc["regions"].values():
        found.append(region["zookeeper"])
        found.extend(region.get("bookies", []))
        found.extend(region.get("brokers", []))
        found.extend([region["proxy"]] if "proxy" in region else [])
    return found + ([doc["prometheus"]] if "prometheus" in doc else [])


def assert_serving(doc: dict[str, Any]) -> None:
    """Every endpoint in topology.json answers: ZooKeepers `ruok` and /metrics, bookies GetBookieInfo and /metrics,
    brokers /health, /metrics and their binary port, Prometheus /-/ready."""
    import urllib.request

    for entry in processes_of(doc):
        if entry["kind"] == "zookeeper":
            host, port = entry["connect"].rsplit(":", 1)
            assert zk.is_healthy(host, int(port)), entry
            with urllib.request.urlopen(entry["metrics"], timeout=5) as response:
                assert b"\nmagnetar_zookeeper_up 1.0\n" in response.read(), entry
        elif entry["kind"] == "prometheus":
            with urllib.request.urlopen(entry["url"] + "/-/ready", timeout=5) as response:
                assert response.status == 200
        elif entry["kind"] == "bookie":
            import urllib.request

            import grpc

            from magnetar.proto import bookie_pb2, bookie_pb2_grpc

            with grpc.insecure_channel(entry["grpc"]) as channel:
                info = bookie_pb2_grpc.BookieServiceStub(channel).GetBookieInfo(bookie_pb2.BookieInfoRequest(), timeout=5)
            assert info.bookie_id == entry["bookie_id"] == entry["name"]
            with urllib.request.urlopen(entry["metrics"], timeout=5) as response:
                assert response.status == 200
        elif entry["kind"] == "broker":
            import urllib.request

            with urllib.request.urlopen(entry["http"] + "/health", timeout=5) as response:
                assert response.status == 200
            with urllib.request.urlopen(entry["metrics"], timeout=5) as response:
                assert response.status == 200
            host, port = entry["pulsar"].removeprefix("pulsar://").rsplit(":", 1)
            assert is_listening(host, int(port)), entry


def status_json(ddir: DataDir) -> tuple[int, dict[str, Any]]:
    result = magnetar("status", "--data-dir", str(ddir.root), "--json")
    return result.returncode, json.loads(result.stdout)


def test_up_status_sigkill_down_up_again_and_down_without_supervisor(deployment) -> None:
    topology, ddir = deployment

    # -- up: everything healthy, every endpoint in topology.json ------------------------------------------
    result = up_detached(topology, ddir)
    assert f"magnetar down --data-dir {ddir.root}" in result.stdout
    doc = json.loads(ddir.topology_path.read_text())
    state = ddir.read_state()
    assert doc["supervisor_pid"] == state["supervisor"]["pid"] and is_alive(
        state["supervisor"]["pid"], state["supervisor"]["start_ticks"]
    )
    entries = processes_of(doc)
    assert sorted(e["name"] for e in entries) == sorted(r["name"] for r in state["processes"])
    if BOOKIES_EXIST:
        assert [b["name"] for b in doc["regions"]["standalone"]["bookies"]] == [f"standalone-bookie-{n}" for n in (1, 2, 3)]
        brokers = doc["regions"]["standalone"]["brokers"]
        assert [b["name"] for b in brokers] == ["standalone-broker-1", "standalone-broker-2"]
        for broker in brokers:
            assert broker["pulsar"].startswith("pulsar://127.0.0.1:") and broker["http"].startswith("http://127.0.0.1:")
            assert broker["metrics"] == broker["http"] + "/metrics" and broker["broker_id"] == broker["name"]
    for entry in entries:
        assert pathlib.Path(entry["log"]) == ddir.logs / f"{entry['name']}.log" and pathlib.Path(entry["log"]).exists()
        # each in its own process group (and session), apart from the supervisor and from each other
        assert os.getpgid(entry["pid"]) == entry["pid"] == os.getsid(entry["pid"])
    assert_serving(doc)
    code, report = status_json(ddir)
    assert code == 0 and report["status"] == "running"
    assert {p["name"]: p["state"] for p in report["processes"]} == {e["name"]: "running" for e in entries}
    table = magnetar("status", "--data-dir", str(ddir.root))
    assert table.returncode == 0 and all(e["name"] in table.stdout for e in entries)

    # -- a second up on the same data dir is refused while the supervisor lives ---------------------------
    again = magnetar("up", str(topology), "--data-dir", str(ddir.root), "--detach")
    assert again.returncode == 1 and "already running" in again.stderr
    assert ddir.read_state()["supervisor"]["pid"] == doc["supervisor_pid"]

    # -- SIGKILL one process: reported dead with its signal, not restarted ----------------------------------
    victim = doc["regions"]["standalone"]["bookies"][1] if BOOKIES_EXIST else doc["regions"]["west"]["zookeeper"]
    os.killpg(victim["pid"], signal.SIGKILL)

    def victim_reported() -> Any:
        code, report = status_json(ddir)
        row = next(p for p in report["processes"] if p["name"] == victim["name"])
        return (code, row) if row["state"] == "exited" else None

    code, row = wait_for(victim_reported, timeout_s=15, what=f"{victim['name']} reported dead")
    assert code == 1 and row["signal"] == "SIGKILL" and row["exit_code"] == -signal.SIGKILL
    assert f"{victim['name']} exited with code -9 (SIGKILL)" in ddir.supervisor_log.read_text()
    table = magnetar("status", "--data-dir", str(ddir.root))
    assert table.returncode == 1 and "SIGKILL" in table.stdout
    code, report = status_json(ddir)
    assert all(p["state"] == "running" for p in report["processes"] if p["name"] != victim["name"])
    victim_port = victim["port"] if victim["kind"] == "zookeeper" else int(victim["grpc"].rsplit(":", 1)[1])
    assert not is_listening("127.0.0.1", victim_port)
    assert pathlib.Path(victim["log"]).read_text().count("started by the supervisor") == 1

    # -- down: everything gone, nothing listening -----------------------------------------------------------
    result = magnetar("down", "--data-dir", str(ddir.root))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not is_alive(doc["supervisor_pid"], state["supervisor"]["start_ticks"])
    assert_all_gone(ddir)
    code, report = status_json(ddir)
    assert code == 3 and report["status"] == "stopped"

    # -- up again on the same data dir: the same ports ------------------------------------------------------
    ports_before = json.loads(ddir.ports_path.read_text())
    up_detached(topology, ddir)
    doc2 = json.loads(ddir.topology_path.read_text())
    assert json.loads(ddir.ports_path.read_text()) == ports_before
    strip = lambda d: [{k: v for k, v in e.items() if k != "pid"} for e in processes_of(d)]  # noqa: E731
    assert strip(doc2) == strip(doc)
    assert doc2["supervisor_pid"] != doc["supervisor_pid"]
    assert_serving(doc2)

    # -- the supervisor is SIGKILLed: status says so, down still stops everything -------------------------
    sup = ddir.read_state()["supervisor"]
    os.kill(sup["pid"], signal.SIGKILL)
    wait_for(lambda: not is_alive(sup["pid"], sup["start_ticks"]), timeout_s=10, what="supervisor gone")
    code, report = status_json(ddir)
    assert code == 1 and report["status"] == "supervisor-gone" and not report["supervisor"]["alive"]
    assert all(p["state"] == "running" for p in report["processes"])  # orphans, still serving
    result = magnetar("down", "--data-dir", str(ddir.root))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is gone" in result.stdout
    assert_all_gone(ddir)

    # -- down with nothing running says so ----------------------------------------------------------------
    result = magnetar("down", "--data-dir", str(ddir.root))
    assert result.returncode == 0 and "nothing is running" in result.stdout


def test_startup_failure_stops_what_started_and_shows_why(tmp_path: pathlib.Path, deployment) -> None:
    _, ddir = deployment
    with socket.socket() as squatter:  # a stranger holds the second region's ZooKeeper port
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        topology = tmp_path / "clash.toml"
        topology.write_text(
            "name = 'clash'\n[[regions]]\nname = 'a'\n[[regions]]\nname = 'b'\n"
            f"[regions.zookeeper]\nport = {port}\n"
        )
        result = magnetar("up", str(topology), "--data-dir", str(ddir.root), "--detach")
        assert result.returncode == 1
        assert f"port {port} (b-zookeeper client) is already in use" in result.stderr
        state = ddir.read_state()
        assert state["status"] == "failed" and state["failed_process"] == "b-zookeeper"
        started = {r["name"]: r for r in state["processes"] if r["pid"]}
        assert list(started) == ["a-zookeeper"] and started["a-zookeeper"]["state"] == "stopped"
        assert not group_alive(started["a-zookeeper"]["pid"], started["a-zookeeper"]["start_ticks"])
        assert not ddir.topology_path.exists()
        assert magnetar("status", "--data-dir", str(ddir.root)).returncode == 3


def test_a_process_that_dies_at_startup_fails_up_with_its_log_tail(tmp_path: pathlib.Path, deployment) -> None:
    _, ddir = deployment
    topology = tmp_path / "bad-bookie.toml"
    topology.write_text(
        "name = 'bad'\n[supervisor]\nstop_grace_s = 5\n[[regions]]\nname = 'r'\n"
        "[regions.bookies]\ncount = 1\nread_threads = 0\n"  # passed through; the bookie refuses it
    )
    result = magnetar("up", str(topology), "--data-dir", str(ddir.root), "--detach")
    assert result.returncode == 1
    assert "r-bookie-1 exited with code" in result.stderr and "read_threads" in result.stderr
    assert_all_gone(ddir)


def test_stale_pids_of_strangers_are_never_signalled(tmp_path: pathlib.Path) -> None:
    """A recorded pid whose start time differs (reused by another program) is left alone by down."""
    import sys

    from clusters.runtime import start_ticks, write_json_atomically
    from tests.kit.process import ManagedProcess

    stranger = ManagedProcess(
        "stranger", [sys.executable, "-c", "import time; time.sleep(120)"], log_path=tmp_path / "stranger.log"
    ).start()
    ticks = start_ticks(stranger.pid)
    assert ticks is not None
    assert not signal_group(stranger.pid, ticks + 1, signal.SIGKILL)
    ddir = DataDir(tmp_path / "old")
    ddir.prepare()
    record = {
        "name": "r-zookeeper", "kind": "zookeeper", "region": "r", "host": "127.0.0.1", "ports": {"client": 1},
        "endpoints": {}, "log": "", "data_dir": "", "state": "running", "pid": stranger.pid,
        "start_ticks": ticks - 1, "started_at": None, "exit_code": None, "signal": None, "ended_at": None,
    }
    write_json_atomically(ddir.state_path, {
        "name": "old", "data_dir": str(ddir.root), "status": "running", "message": "", "stop_grace_s": 1,
        "supervisor": {"pid": stranger.pid, "start_ticks": ticks - 2}, "processes": [record],
    })
    result = magnetar("down", "--data-dir", str(ddir.root))
    assert result.returncode == 0 and "nothing is running" in result.stdout
    code, report = status_json(ddir)
    assert code == 1 and report["processes"][0]["state"] == "dead"
    assert stranger.alive and is_alive(stranger.pid, ticks)
