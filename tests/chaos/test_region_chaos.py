"""Faults on a whole supervised region, with the real pulsar-client as the application.

One run: a deduplicating producer sends 20,000 messages; the owning broker is SIGKILLed while it sends and,
later in the same run, a bookie is SIGKILLed too. The consumer must receive every acknowledged message, in
order, exactly once. Then the whole region is stopped (`magnetar down`) and started again (`magnetar up` on
the same data directory): the subscription resumes where it was acknowledged.
"""

from __future__ import annotations

import json
import pathlib
import random
import signal
import threading
import urllib.request

import pulsar
import pytest
from kazoo.client import KazooClient

from clusters.runtime import DataDir, signal_group
from tests.e2e.test_supervisor import magnetar, recorded, up_detached
from tests.kit.wait import wait_for

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

TOPOLOGY = """\
name = "chaos"

[supervisor]
startup_timeout_s = 90.0
stop_grace_s = 15.0

[[regions]]
name = "chaos"

[regions.zookeeper]
port = 0

[regions.bookies]
count = 4            # E=3: a spare lets the ledger client replace a killed bookie
journal_sync = true

[regions.brokers]
count = 2
zk_session_timeout_ms = 4000   # a killed broker's bundles move after this
"""

TOTAL = 20_000
TOPIC = "persistent://public/default/chaos"


def http_json(url: str, method: str = "GET", body: bytes | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        data = response.read()
    return json.loads(data) if data else None


@pytest.fixture
def region(tmp_path: pathlib.Path):
    topology = tmp_path / "chaos.toml"
    topology.write_text(TOPOLOGY)
    ddir = DataDir(tmp_path / "deployment")
    try:
        up_detached(topology, ddir)
        yield topology, ddir
    finally:
        for log in sorted(ddir.logs.glob("*.log")) if ddir.logs.exists() else []:
            print(f"----- last lines of {log} -----\n{ddir.log_tail(log, 40)}")
        try:
            magnetar("down", "--data-dir", str(ddir.root), timeout_s=90)
        finally:
            for _name, pid, ticks in recorded(ddir):
                signal_group(pid, ticks, signal.SIGKILL)


def topology_doc(ddir: DataDir) -> dict:
    return json.loads(ddir.topology_path.read_text())


def owner_of(doc: dict, topic: str) -> dict:
    """The broker entry of topology.json that owns ``topic`` (asked through the lookup REST API)."""
    brokers = doc["regions"]["chaos"]["brokers"]
    path = topic.replace("persistent://", "persistent/")
    answer = http_json(f"{brokers[0]['http']}/lookup/v2/topic/{path}")
    return next(b for b in brokers if b["pulsar"] == answer["brokerUrl"])


def kill_recorded(ddir: DataDir, name: str) -> None:
    for recorded_name, pid, ticks in recorded(ddir):
        if recorded_name == name:
            signal_group(pid, ticks, signal.SIGKILL)
            return
    raise AssertionError(f"{name} is not recorded in {ddir.root}")


def current_ensemble(doc: dict, topic: str) -> list[str]:
    """The bookies of the topic's current ledger, read from the region's ZooKeeper."""
    brokers = doc["regions"]["chaos"]["brokers"]
    path = topic.replace("persistent://", "persistent/")
    stats = http_json(f"{brokers[0]['http']}/admin/v2/{path}/internalStats")
    ledger_id = stats["ledgers"][-1]["ledgerId"]
    zk = KazooClient(hosts=doc["regions"]["chaos"]["zookeeper"]["connect"])
    zk.start(timeout=15)
    try:
        data, _ = zk.get(f"/ledgers/{ledger_id}")
    finally:
        zk.stop()
        zk.close()
    from config_store import LedgerMetadata

    return LedgerMetadata.from_json(data).ensembles[-1][1]


def exit_signal(ddir: DataDir, name: str) -> str | None:
    state = ddir.read_state() or {"processes": []}
    return next((p.get("signal") for p in state["processes"] if p["name"] == name), None)


def test_broker_and_bookie_sigkill_under_dedup_then_region_restart(region) -> None:
    topology, ddir = region
    doc = topology_doc(ddir)
    brokers = doc["regions"]["chaos"]["brokers"]
    http_json(f"{brokers[0]['http']}/admin/v2/namespaces/public/default/deduplication", "POST", b"true")
    service_url = ",".join(b["pulsar"].removeprefix("pulsar://") for b in brokers)
    client = pulsar.Client(f"pulsar://{service_url}", operation_timeout_seconds=60)
    rng = random.Random(20261122)
    print(f"seed 20261122")
    try:
        consumer = client.subscribe(TOPIC, "audit", consumer_type=pulsar.ConsumerType.Failover)
        producer = client.create_producer(
            TOPIC, producer_name="chaos-producer", batching_enabled=True, batching_max_messages=50,
            block_if_queue_full=True, max_pending_messages=2_000, send_timeout_millis=0,
        )
        acked: set[int] = set()
        failed: list[str] = []
        lock = threading.Lock()

        def on_sent(i: int):
            def callback(result, _msg_id) -> None:
                with lock:
                    if result == pulsar.Result.Ok:
                        acked.add(i)
                    else:
                        failed.append(f"{i}: {result}")
            return callback

        owner = owner_of(doc, TOPIC)
        broker_kill_at = rng.randrange(3_000, 6_000)
        bookie_kill_at = rng.randrange(11_000, 14_000)
        bookie_name = None
        for i in range(TOTAL):
            if i == broker_kill_at:
                wait_for(lambda: len(acked) >= broker_kill_at // 2, 60, what="acks before the broker kill")
                kill_recorded(ddir, owner["name"])
            if i == bookie_kill_at:
                wait_for(lambda: len(acked) >= bookie_kill_at // 2, 120, what="acks before the bookie kill")
                # A bookie the topic is writing to right now, so the kill forces an ensemble change.
                ensemble = current_ensemble(doc, TOPIC)
                bookie_id = rng.choice(sorted(ensemble))
                bookie_name = next(b["name"] for b in doc["regions"]["chaos"]["bookies"] if b["bookie_id"] == bookie_id)
                kill_recorded(ddir, bookie_name)
            producer.send_async(f"m-{i}".encode(), on_sent(i), properties={"i": str(i)})
        producer.flush()
        wait_for(lambda: len(acked) + len(failed) == TOTAL, 120, what="every send answered")
        assert not failed, failed[:5]

        received: list[int] = []
        while len(received) < TOTAL:
            msg = consumer.receive(timeout_millis=60_000)
            received.append(int(msg.properties()["i"]))
            if len(received) <= TOTAL // 2:
                consumer.acknowledge(msg)
        assert received == list(range(TOTAL)), "every acknowledged message, in order, once"
        # The faults really happened: both processes died of SIGKILL and the topic changed hands.
        assert exit_signal(ddir, owner["name"]) == "SIGKILL"
        assert bookie_name is not None and exit_signal(ddir, bookie_name) == "SIGKILL"
        assert owner_of(doc, TOPIC)["name"] != owner["name"]
        consumer.close()
        producer.close()
    finally:
        client.close()

    # The whole region goes down and comes back on the same data directory.
    down = magnetar("down", "--data-dir", str(ddir.root), timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    up_detached(topology, ddir)
    doc = topology_doc(ddir)
    service_url = ",".join(b["pulsar"].removeprefix("pulsar://") for b in doc["regions"]["chaos"]["brokers"])
    client = pulsar.Client(f"pulsar://{service_url}", operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(TOPIC, "audit", consumer_type=pulsar.ConsumerType.Failover)
        resumed = [int(consumer.receive(timeout_millis=60_000).properties()["i"]) for _ in range(200)]
        first = resumed[0]
        # Acknowledged up to TOTAL/2 - 1. Without batch-index acks (as in Pulsar) an entry = a batch is
        # deleted only when all of its messages are acked, so the batch straddling TOTAL/2 comes back whole:
        # the subscription may resume up to one batch (50 messages) early, never later, and never skips.
        assert TOTAL // 2 - 50 < first <= TOTAL // 2, f"resumed at {first}, acknowledged up to {TOTAL // 2 - 1}"
        assert resumed == list(range(first, first + 200))
    finally:
        client.close()
