"""`magnetar up --netns`: two regions, each in its own network namespace, 40 ± 5 ms apart through the wan relay.

One deployment (a ZooKeeper, a bookie and a broker per region, the configuration store) made by the real command
line: the supervisor builds the namespaces, every server listens only inside them, a pulsar-client producer in
east's namespace publishes and a consumer in west's receives the replicated copies (at least one link delay after
they were published), a round trip between the regions costs at least two link delays, `magnetar netns cut`
stops replication (the backlog grows, west receives nothing), `heal` drains it, and `magnetar down` leaves no
process and no namespace of the deployment. A second, smaller deployment (one region; `[network] mode = "netns"`
in its topology) shows `down` removing the namespaces of a supervisor that was SIGKILLed, and `up` refusing to
start while namespaces of its data dir are left. Needs root (make test runs as root).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import urllib.request
from typing import Any, Iterator

import pytest

from clusters import netns
from clusters.network import deployment_prefix
from clusters.runtime import DataDir, group_alive, is_alive, signal_group
from tests.e2e.test_supervisor import magnetar, recorded
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

LATENCY_MS, JITTER_MS = 40.0, 5.0
MIN_ONE_WAY_MS = LATENCY_MS - JITTER_MS

# [network] gives the delay; its mode stays "host" here, so the --netns flag is what puts the regions apart.
TOPOLOGY = f"""
name = "two-apart"
[supervisor]
startup_timeout_s = 120.0
stop_grace_s = 5.0
[network]
latency_ms = {LATENCY_MS}
jitter_ms = {JITTER_MS}
[global_zookeeper]
[[regions]]
name = "east"
[regions.bookies]
count = 1
[regions.brokers]
count = 1
[[regions]]
name = "west"
[regions.bookies]
count = 1
[regions.brokers]
count = 1
"""

TOPIC = "persistent://apart/geo/orders"

PRODUCE = """
import sys, pulsar
url, topic, first, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
producer = client.create_producer(topic, batching_enabled=False)
for i in range(first, first + n):
    producer.send(f"m-{i}".encode())
client.close()
"""

CONSUME = """
import json, sys, time, pulsar
url, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
consumer = client.subscribe(topic, "apart", initial_position=pulsar.InitialPosition.Earliest)
print("ready", flush=True)
got = []
while len(got) < n:
    msg = consumer.receive(timeout_millis=120000)
    got.append({"data": msg.data().decode(), "publish_ms": msg.publish_timestamp(), "received_ms": time.time() * 1000})
    consumer.acknowledge(msg)
print(json.dumps(got), flush=True)
client.close()
"""

ROUND_TRIP = """
import sys, time, urllib.request
best = None
for _ in range(3):
    started = time.monotonic()
    with urllib.request.urlopen(sys.argv[1], timeout=30) as response:
        response.read()
    took = time.monotonic() - started
    best = took if best is None else min(best, took)
print(best)
"""


def in_region(namespace: str, script: str, *args: str, timeout_s: float = 90) -> str:
    """Runs ``script`` with this interpreter inside ``namespace`` (a client "in" the region); its stdout."""
    result = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", script, *args],
                            capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"in {namespace}: {result.stderr[-3000:]}"
    return result.stdout


class RegionConsumer:
    """CONSUME running inside a region's namespace: ``ready()`` once subscribed, ``result()`` what it received."""

    def __init__(self, namespace: str, url: str, n: int) -> None:
        self.proc = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c", CONSUME, url, TOPIC,
                                      str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def ready(self, timeout_s: float = 60) -> None:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"the consumer did not subscribe within {timeout_s} s") from None
        assert line == "ready", line

    def result(self, timeout_s: float = 120) -> list[dict[str, Any]]:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the consumer did not receive everything within {timeout_s} s") from None
        self.reader.join(timeout=10)
        assert self.proc.returncode == 0, self.proc.stderr.read()[-3000:]
        return json.loads(self.lines.get_nowait())

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the group is this test's
            self.proc.wait()


def http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def listening_ports(namespace: str | None = None) -> set[int]:
    """TCP ports in LISTEN state in ``namespace`` (None: the root namespace, where the test runs)."""
    prefix = [] if namespace is None else ["ip", "netns", "exec", namespace]
    text = subprocess.run([*prefix, "cat", "/proc/net/tcp", "/proc/net/tcp6"], capture_output=True, text=True,
                          check=True).stdout
    return {int(fields[1].rsplit(":", 1)[1], 16) for fields in (line.split() for line in text.splitlines()[1:])
            if len(fields) > 3 and fields[3] == "0A"}


@contextlib.contextmanager
def apart(tmp_path: pathlib.Path) -> Iterator[tuple[DataDir, dict[str, Any]]]:
    """``magnetar up --netns --detach``; afterwards, whatever happened: the logs, ``magnetar down``, then SIGKILL
    of every recorded group and removal of every namespace of the deployment's prefix still there."""
    topology = tmp_path / "two-apart.toml"
    topology.write_text(TOPOLOGY)
    ddir = DataDir(tmp_path / "deployment")
    try:
        result = magnetar("up", str(topology), "--data-dir", str(ddir.root), "--detach", "--netns", timeout_s=300)
        assert result.returncode == 0, f"up failed:\n{result.stdout}\n{result.stderr}"
        yield ddir, json.loads(ddir.topology_path.read_text())
    finally:
        for log in sorted(ddir.logs.glob("*.log")) if ddir.logs.exists() else []:
            print(f"----- last lines of {log} -----\n{ddir.log_tail(log, 30)}")
        try:
            magnetar("down", "--data-dir", str(ddir.root), timeout_s=120)
        finally:
            for _name, pid, ticks in recorded(ddir):
                signal_group(pid, ticks, signal.SIGKILL)
            state = ddir.read_state() or {}
            if state.get("network"):
                netns.remove(netns.Layout.from_document(state["network"]))


def test_up_netns_regions_apart_replicate_through_the_link_cut_and_heal(tmp_path: pathlib.Path) -> None:
    why_not = netns.available()
    assert not why_not, f"magnetar up --netns needs network namespaces (make test runs as root): {why_not}"
    prefix = deployment_prefix(tmp_path / "deployment")
    assert not netns.namespaces_with_prefix(prefix)

    with apart(tmp_path) as (ddir, doc):
        # -- the namespaces, the addresses, and nothing listening on the host ------------------------------
        network = doc["network"]
        assert network["mode"] == "netns" and network["prefix"] == prefix
        regions = network["regions"]
        east_ns, west_ns = regions["east"]["namespace"], regions["west"]["namespace"]
        assert sorted(netns.namespaces_with_prefix(prefix)) == sorted([network["wan_namespace"], east_ns, west_ns])
        east, west = (doc["regions"][r]["brokers"][0] for r in ("east", "west"))
        assert east["pulsar"].startswith(f"pulsar://{regions['east']['public_address']}:")
        assert west["http"].startswith(f"http://{regions['west']['public_address']}:")
        assert doc["wan_relay"]["kind"] == "wan-relay"
        state = ddir.read_state()
        ports = {r["name"]: set(r["ports"].values()) for r in state["processes"]}
        assert not set().union(*ports.values()) & listening_ports(), "a server listens in the root namespace"
        for region, namespace in (("east", east_ns), ("west", west_ns)):
            ours = set().union(*(p for name, p in ports.items() if name.startswith(f"{region}-")))
            assert ours and ours <= listening_ports(namespace), f"{region}'s servers listen in {namespace}"

        # -- a namespace replicated between the regions (admin calls from the host, through the relay) -----
        http("PUT", f"{east['http']}/admin/v2/tenants/apart", {"allowedClusters": ["east", "west"]})
        http("PUT", f"{east['http']}/admin/v2/namespaces/apart/geo")
        http("POST", f"{east['http']}/admin/v2/namespaces/apart/geo/replication", ["east", "west"])

        # -- a round trip between the regions costs two link delays at least -------------------------------
        rtt_s = float(in_region(east_ns, ROUND_TRIP, f"{west['http']}/admin/v2/clusters"))
        local_s = float(in_region(east_ns, ROUND_TRIP, f"{east['http']}/admin/v2/clusters"))
        print(f"\nround trip east -> west {rtt_s * 1000:.1f} ms, east -> east {local_s * 1000:.1f} ms")
        assert rtt_s >= 2 * MIN_ONE_WAY_MS / 1000, rtt_s

        # -- produced in east, consumed in west: each copy at least one link delay after it was published ----
        consumer = RegionConsumer(west_ns, west["pulsar"], 20)
        try:
            consumer.ready()
            in_region(east_ns, PRODUCE, east["pulsar"], TOPIC, "0", "20")
            got = consumer.result()
        finally:
            consumer.kill()
        assert sorted(m["data"] for m in got) == sorted(f"m-{i}" for i in range(20))
        delays_ms = [m["received_ms"] - m["publish_ms"] for m in got]
        print(f"replicated east -> west: min {min(delays_ms):.1f} ms, max {max(delays_ms):.1f} ms")
        assert min(delays_ms) >= MIN_ONE_WAY_MS, delays_ms

        def replication_backlog() -> int:
            stats = http("GET", f"{east['http']}/admin/v2/persistent/apart/geo/orders/stats")
            return stats["replication"]["west"]["replicationBacklog"]

        def west_in_counter() -> int:
            return http("GET", f"{west['http']}/admin/v2/persistent/apart/geo/orders/stats")["msgInCounter"]

        wait_for(lambda: replication_backlog() == 0, 30, what="replication east -> west drained")
        assert west_in_counter() == 20

        # -- cut: east keeps taking messages, none reaches west, the backlog grows ---------------------------
        cut = magnetar("netns", "cut", "east", "west", "--data-dir", str(ddir.root))
        assert cut.returncode == 0, cut.stderr
        shown = json.loads(magnetar("netns", "show", "--data-dir", str(ddir.root), "--json").stdout)
        assert shown["relay"]["cut"] == [["east", "west"]]
        consumer = RegionConsumer(west_ns, west["pulsar"], 10)
        try:
            consumer.ready()
            in_region(east_ns, PRODUCE, east["pulsar"], TOPIC, "20", "10")  # acknowledged in east
            wait_for(lambda: replication_backlog() == 10, 30, what="the ten new messages in east's backlog for west")
            assert west_in_counter() == 20, "a message crossed the cut link"
            assert consumer.proc.poll() is None  # still waiting: it has not got ten messages

            # -- heal: the backlog drains, west gets the rest ---------------------------------------------
            heal = magnetar("netns", "heal", "east", "west", "--data-dir", str(ddir.root))
            assert heal.returncode == 0, heal.stderr
            wait_for(lambda: replication_backlog() == 0, 60, what="the backlog drained after healing")
            got = consumer.result()
        finally:
            consumer.kill()
        assert sorted(m["data"] for m in got) == sorted(f"m-{i}" for i in range(20, 30))
        assert west_in_counter() == 30

        # -- silence and heal through the CLI: shown while it lasts, gone after -------------------------------
        silence = magnetar("netns", "silence", "west", "east", "--data-dir", str(ddir.root))
        assert silence.returncode == 0 and "silenced" in silence.stdout, silence.stderr
        shown = json.loads(magnetar("netns", "show", "--data-dir", str(ddir.root), "--json").stdout)
        assert shown["relay"]["silenced"] == [["east", "west"]] and shown["relay"]["cut"] == []
        assert magnetar("netns", "heal", "east", "west", "--data-dir", str(ddir.root)).returncode == 0
        shown = json.loads(magnetar("netns", "show", "--data-dir", str(ddir.root), "--json").stdout)
        assert shown["relay"]["silenced"] == []

        # -- down: no process and no namespace of the deployment is left ------------------------------------
        down = magnetar("down", "--data-dir", str(ddir.root), timeout_s=120)
        assert down.returncode == 0, f"{down.stdout}\n{down.stderr}"
        assert not [name for name, pid, ticks in recorded(ddir) if group_alive(pid, ticks)]
        assert not netns.namespaces_with_prefix(prefix)  # and with them every address a server listened at
        assert not set().union(*ports.values()) & listening_ports()
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
        assert prefix not in links
        routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
        assert f"dev {network['root_link']}" not in routes


SOLO = """
name = "solo-apart"
[supervisor]
startup_timeout_s = 120.0
stop_grace_s = 5.0
[network]
mode = "netns"
[[regions]]
name = "solo"
"""


def test_down_removes_the_namespaces_of_a_killed_supervisor_and_up_refuses_leftovers(tmp_path: pathlib.Path) -> None:
    why_not = netns.available()
    assert not why_not, f"magnetar up --netns needs network namespaces (make test runs as root): {why_not}"
    topology = tmp_path / "solo.toml"
    topology.write_text(SOLO)  # the topology's own [network] mode puts it in namespaces, no flag
    ddir = DataDir(tmp_path / "deployment")
    prefix = deployment_prefix(ddir.root)
    try:
        up = magnetar("up", str(topology), "--data-dir", str(ddir.root), "--detach", timeout_s=300)
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}"
        assert len(netns.namespaces_with_prefix(prefix)) == 2  # the wan's and the region's
        sup = ddir.read_state()["supervisor"]
        os.kill(sup["pid"], signal.SIGKILL)
        wait_for(lambda: not is_alive(sup["pid"], sup["start_ticks"]), 10, what="the supervisor gone")

        down = magnetar("down", "--data-dir", str(ddir.root), timeout_s=120)
        assert down.returncode == 0, f"{down.stdout}\n{down.stderr}"
        assert "removed the network namespaces" in down.stdout
        assert not [name for name, pid, ticks in recorded(ddir) if group_alive(pid, ticks)]
        assert not netns.namespaces_with_prefix(prefix)

        # Namespaces of this data dir's prefix left behind (say, by a supervisor killed while it built them):
        # up refuses to run in them and says how to remove them; down does.
        netns.build(netns.Layout.choose(prefix, ["solo"]))
        refused = magnetar("up", str(topology), "--data-dir", str(ddir.root), "--detach", timeout_s=120)
        assert refused.returncode == 1 and "are left" in refused.stderr, refused.stderr
        assert len(netns.namespaces_with_prefix(prefix)) == 2  # not touched by the refused up
        down = magnetar("down", "--data-dir", str(ddir.root), timeout_s=120)
        assert down.returncode == 0, f"{down.stdout}\n{down.stderr}"
        assert not netns.namespaces_with_prefix(prefix)
    finally:
        for _name, pid, ticks in recorded(ddir):
            signal_group(pid, ticks, signal.SIGKILL)
        netns.remove(netns.Layout(prefix=prefix, octet=100, regions=("solo",)))  # by prefix: any octet does
