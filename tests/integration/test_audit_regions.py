"""The consistency audit against a real deployment (real ZooKeeper, bookies and brokers per region, geo-replication
between them), with real Spark: the test run's shared local session, and a Spark standalone cluster (a master and a
worker started from the pyspark installation) for the CLI. (Three regions: ``test_audit_three_regions.py``.)

* healthy traffic from pulsar-client in both regions (batched and not, a partitioned topic, keys, properties,
  a message sent with ``disable_replication``): no violation, and the counts are what was produced;
* faults made by ``spark.faults`` through the brokers (a message in one region only, a duplicate, a reordered
  pair, a changed payload, strays by routing and by replication clusters): each one found, attributed to its
  region, topic, origin, producer and sequence id, and nothing else;
* a replicated subscription followed across regions: no divergence; moved back in one region: divergence;
* ``magnetar audit --master spark://...`` on the standalone cluster gives the report of the local session.

The healthy and fault cases run with each reader of :func:`spark.audit.load`: through the brokers, and the
Magnetar data source (which reads each open ledger up to its newest entry: the brokers' ledger writers send an
explicit LAC once adds stop). Both give ``__replicateTo``. The standalone comparison uses whichever reader
``--reader auto`` picks (the data source) on both sides. Each namespace is produced once and audited by each
reader (an audit only reads), and each audit of the faulty namespace runs once: the standalone test compares
with the local one the fault test made.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import urllib.request
import uuid

import pulsar
import pytest

pytest.importorskip("pyspark")

from magnetar.net import free_port  # noqa: E402
from spark.audit import comparable, source_available  # noqa: E402
from spark.audit.runner import audit_deployment  # noqa: E402
from spark.audit.subscriptions import check_subscriptions  # noqa: E402
from spark.audit.topology import read_topology  # noqa: E402
from spark.faults import Fault, FaultInjector  # noqa: E402
from tests.e2e.test_geo_replication import client, producer_for, wait_replicated  # noqa: E402
from tests.kit.process import ManagedProcess  # noqa: E402
from tests.kit.regions import start_regions, write_topology  # noqa: E402,F401 (write_topology: test_audit_three_regions)
from tests.kit.wait import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(600)

READERS = pytest.mark.parametrize("reader", ["brokers", "source"])

EAST, WEST = "us-east", "eu-west"
TENANT = "audit"
N = 200


@pytest.fixture(scope="module")
def regions(tmp_path_factory, zk_server):
    deployment = start_regions([EAST, WEST], tmp_path_factory.mktemp("audit-regions"), zk_server,
                               bookies=2, brokers=1)
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def topology(regions, tmp_path_factory) -> pathlib.Path:
    """The deployment's regions."""
    return write_topology(regions, [EAST, WEST], tmp_path_factory.mktemp("audit-topology") / "topology.json")


@pytest.fixture(scope="module")
def spark(spark_session):
    """The test run's shared local session (``tests/conftest.py``)."""
    return spark_session


@pytest.fixture(scope="module")
def clients(regions):
    made = {name: client(r) for name, r in regions.items()}
    yield made
    for c in made.values():
        c.close()


def namespace(regions, clusters=(EAST, WEST)) -> str:
    return regions.create_replicated_namespace(TENANT, f"ns-{uuid.uuid4().hex[:6]}", list(clusters))


def produce(c: pulsar.Client, topic: str, name: str, count: int, *, batching: bool, **send_kwargs) -> None:
    """``count`` messages from producer ``name``, every send acknowledged."""
    results: list = []
    producer = producer_for(c, topic, name, batching=batching)
    for i in range(count):
        producer.send_async(f"{name}|{i}".encode(), lambda result, _mid: results.append(result),
                            properties={"i": str(i)}, partition_key=f"k{i % 7}", **send_kwargs)
    producer.flush()
    wait_for(lambda: len(results) == count, 60, what=f"{count} sends of {name} answered")
    assert set(results) == {pulsar.Result.Ok}, results
    producer.close()


def position(text: str) -> tuple[int, int]:
    ledger, entry = text.split(":")
    return int(ledger), int(entry)


def found_faults(spark, out_dir: pathlib.Path, report: dict) -> set[Fault]:
    """Every violation of the run in ``out_dir``, read back from its Parquet files as plain Spark reads them."""
    found = set()
    for kind in ("missing", "duplicate", "order", "payload_mismatch", "stray"):
        for row in spark.read.parquet(str(out_dir / report["checks"][kind]["parquet"])).collect():
            found.add(Fault(kind, row["region"], row["topic"], row["origin"], row["producer"], row["seq"]))
    return found


# ------------------------------------------------------------------------------------------ healthy


def need(reader: str, spark) -> None:
    assert reader != "source" or source_available(spark), "the Magnetar data source is not registered"


@pytest.fixture(scope="module")
def healthy(regions, clients) -> str:
    """A namespace with healthy traffic from pulsar-client in both regions, fully replicated (each reader audits
    the same one: reading changes nothing)."""
    ns = namespace(regions)
    plain, parted = f"persistent://{ns}/plain", f"persistent://{ns}/parted"
    regions[EAST].admin("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    produce(clients[EAST], plain, "east-app", N, batching=False)
    produce(clients[WEST], plain, "west-app", N, batching=True)
    produce(clients[EAST], parted, "east-parted", N, batching=True)
    produce(clients[EAST], plain, "east-local", 3, batching=False, disable_replication=True)
    wait_replicated(regions, plain, [EAST, WEST], [EAST, WEST])
    wait_replicated(regions, parted, [EAST], [WEST], partitions=2)
    return ns


@READERS
def test_healthy_two_regions_report_no_violation_and_what_was_produced(healthy, spark, topology, tmp_path, reader):
    need(reader, spark)
    ns = healthy
    plain, parted = f"persistent://{ns}/plain", f"persistent://{ns}/parted"

    report = audit_deployment(spark, topology, namespace=ns, out_dir=tmp_path, grace_s=5, reader=reader)
    assert report["inputs"]["reader"] == reader and report["inputs"]["replicate_to"] is True
    assert report["violations"] == 0, report["checks"]
    assert report["checks"]["missing"]["count"] == 0  # east-local's 3 messages are not expected in eu-west
    assert report["checks"]["subscription_divergence"]["checked"] is True
    assert report["in_flight"]["count"] == 0
    parts = [f"{parted}-partition-{p}" for p in range(2)]
    assert sorted(report["topics"]) == sorted([plain, *parts])
    assert report["expected_regions"] == {t: sorted([EAST, WEST]) for t in sorted([plain, *parts])}
    rows = report["rows"]["by_topic"]
    assert rows[plain] == {EAST: 2 * N + 3, WEST: 2 * N}
    assert sum(rows[p][EAST] for p in parts) == sum(rows[p][WEST] for p in parts) == N
    assert report["rows"]["by_region"] == {EAST: 3 * N + 3, WEST: 3 * N}
    messages = report["messages"]["by_topic"]
    assert messages[plain] == {EAST: N + 3, WEST: N}
    assert sum(messages[p][EAST] for p in parts) == N
    delays = report["replication_delay"]["by_direction"]
    assert delays[f"{EAST} -> {WEST}"]["count"] == 2 * N and delays[f"{WEST} -> {EAST}"]["count"] == N
    assert json.loads((tmp_path / "report.json").read_text()) == report


# ------------------------------------------------------------------------------------------ faults


@pytest.fixture(scope="module")
def faulty(regions, clients):
    """A namespace with healthy traffic and one of each fault (the faults injected, the namespace)."""
    ns = namespace(regions)
    topic, narrow = f"persistent://{ns}/faults", f"persistent://{ns}/narrow"
    produce(clients[EAST], topic, "east-app", 50, batching=False)
    produce(clients[WEST], topic, "west-app", 50, batching=True)
    wait_replicated(regions, topic, [EAST, WEST], [EAST, WEST])
    # narrow: a topic whose own replication clusters leave eu-west out.
    regions[EAST].admin("POST", f"/admin/v2/persistent/{ns}/narrow/replication", [EAST])
    wait_for(lambda: regions[WEST].admin("GET", f"/admin/v2/persistent/{ns}/narrow/replication") == [EAST], 30,
             what="eu-west reads narrow's replication clusters")

    async def inject() -> list[Fault]:
        urls = {name: r.pulsar_url for name, r in regions.items()}
        async with FaultInjector(urls) as f:
            return [
                *await f.only_in(EAST, [WEST], topic, producer="ghost", seq=1),
                *await f.duplicate(topic, origin=EAST, into=WEST, producer="east-app", seq=10),
                *await f.reorder(topic, origin=EAST, into=WEST, producer="shuffler", seqs=(1, 2)),
                *await f.changed_payload(topic, origin=EAST, into=WEST, producer="tamper", seq=1),
                *await f.stray(topic, origin=EAST, into=WEST, producer="router", seq=1),
                *await f.stray(narrow, origin=EAST, into=WEST, producer="outsider", seq=1, replicate_to=()),
            ]

    faults = asyncio.run(inject())
    # The replicators pass over the planted entries (they carry replicated_from): once they did, a copy that
    # is not in eu-west is missing for good rather than in flight.
    wait_replicated(regions, topic, [EAST, WEST], [EAST, WEST])
    return faults, ns


@pytest.fixture(scope="module")
def fault_audit(faulty, spark, topology, tmp_path_factory):
    """``reader`` -> (the report of the faulty namespace's audit through it, its output directory): each audit
    runs once in the module (the standalone-cluster test compares its report with the local one)."""
    done: dict[str, tuple[dict, pathlib.Path]] = {}

    def audit(reader: str) -> tuple[dict, pathlib.Path]:
        if reader not in done:
            out = tmp_path_factory.mktemp(f"fault-audit-{reader}")
            _faults, ns = faulty
            done[reader] = (audit_deployment(spark, topology, namespace=ns, out_dir=out, subscriptions=False,
                                             reader=reader), out)
        return done[reader]

    return audit


@READERS
def test_each_injected_fault_is_found_and_attributed(faulty, fault_audit, spark, reader):
    need(reader, spark)
    faults, ns = faulty
    report, out = fault_audit(reader)
    expected = set(faults)  # a stray by routing ("router") is seen through each message's replicate_to
    assert report["inputs"]["reader"] == reader and report["inputs"]["replicate_to"] is True
    assert found_faults(spark, out, report) == expected
    assert report["violations"] == len(expected)
    assert report["checks"]["duplicate"]["by_direction"] == {f"{EAST} -> {WEST}": 1}
    assert report["rows"]["by_topic"][f"persistent://{ns}/faults"][EAST] == 100 + 1 + 2 + 1 + 1


# ------------------------------------------------------------------------------------------ subscriptions


def test_replicated_subscription_divergence(regions, clients, topology):
    """Acknowledged in us-east, the subscription follows in eu-west: no divergence. Moved back in eu-west (a
    seek there), it stays behind what us-east's snapshot requires: divergence, attributed to eu-west."""
    ns = namespace(regions)
    topic, sub = f"persistent://{ns}/followed", "followed"
    east = clients[EAST].subscribe(topic, sub, replicate_subscription_state_enabled=True,
                                   initial_position=pulsar.InitialPosition.Earliest)
    producer = producer_for(clients[EAST], topic, "east-app", batching=False)
    for i in range(1500):  # each send waits for its receipt: a few seconds of traffic, so snapshots (taken every
        producer.send(f"m{i}".encode())  # second while data comes in) interleave with the messages
    producer.flush()
    for _ in range(1000):
        east.acknowledge(east.receive(timeout_millis=30_000))
    east.close()
    producer.send(b"sentinel")  # stored after the UPDATE the acknowledgements caused
    wait_replicated(regions, topic, [EAST], [WEST], timeout_s=60)

    def west_position():
        cursors = regions[WEST].admin("GET", f"/admin/v2/persistent/{ns}/followed/internalStats")["cursors"]
        return cursors.get(sub, {}).get("markDeletePosition")

    wait_for(lambda: west_position() not in (None, "") and not west_position().endswith(":-1"), 60,
             what=f"eu-west's {sub} moved by us-east's update (now {west_position()})")

    deployment = read_topology(topology)
    healthy = check_subscriptions(deployment, [topic], grace_s=10)
    assert healthy.checked and healthy.subscriptions >= 1 and list(healthy.rows) == [], healthy

    regions[WEST].admin("POST", f"/admin/v2/persistent/{ns}/followed/subscription/{sub}/resetcursor/0")
    behind = check_subscriptions(deployment, [topic], grace_s=2)
    assert [(r["source_region"], r["region"], r["subscription"], r["topic"]) for r in behind.rows] == \
        [(EAST, WEST, sub, topic)]
    row = behind.rows[0]
    assert position(row["position"]) < position(row["required_position"]), row


# ------------------------------------------------------------------------------------------ standalone cluster


def _spark_home() -> pathlib.Path:
    import pyspark

    return pathlib.Path(pyspark.__file__).parent


@pytest.fixture
def standalone(tmp_path):
    """A Spark standalone master and worker (separate processes, own process groups), bound to 127.0.0.1."""
    home = _spark_home()
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {"SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(tmp_path / "logs"), "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1"}  # they start faster; they carry no data
    spark_class = str(home / "bin" / "spark-class")

    def status() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as answer:
            return json.loads(answer.read())

    master = ManagedProcess("spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                             "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                            log_path=tmp_path / "master.log", env=env, health=lambda: bool(status()))
    worker = ManagedProcess("spark-worker", [spark_class, "org.apache.spark.deploy.worker.Worker",
                                             f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--webui-port",
                                             str(worker_ui), "--cores", "2", "--memory", "1536m", "--work-dir",
                                             str(tmp_path / "work")],
                            log_path=tmp_path / "worker.log", env=env)
    try:
        master.start(timeout_s=90)
        worker.start()
        master.wait_until(lambda: status().get("aliveworkers") == 1, timeout_s=90, what="a worker registered")
        yield f"spark://127.0.0.1:{port}"
    finally:
        worker.cleanup()
        master.cleanup()


def test_standalone_cluster_gives_the_local_report(faulty, spark, fault_audit, topology, standalone, tmp_path):
    """The CLI on the cluster picks its reader as ``--reader auto`` does: the data source, which the local audit
    it is compared with used too (the module's audit of the faulty namespace, shared with the fault test)."""
    _faults, ns = faulty
    assert source_available(spark)  # what auto picks
    local, local_out = fault_audit("source")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pathlib.Path(__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")]),
           "SPARK_LOCAL_IP": "127.0.0.1"}
    jvm = "-XX:TieredStopAtLevel=1"  # short-lived JVMs, tiny inputs: see SPARK_TEST_JAVA_OPTIONS in tests/conftest.py
    out = tmp_path / "cluster"
    done = subprocess.run(
        [sys.executable, "-m", "magnetar", "audit", "--topology", str(topology), "--namespace", ns,
         "--master", standalone, "--out", str(out), "--no-subscriptions", "--conf", "spark.driver.host=127.0.0.1",
         "--conf", "spark.executor.memory=1g", "--conf", f"spark.driver.extraJavaOptions={jvm}",
         "--conf", f"spark.executor.extraJavaOptions={jvm}"],
        env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # violations were found
    cluster = json.loads((out / "report.json").read_text())
    assert cluster["run"]["master"] == standalone
    assert local["violations"] > 0
    assert comparable(cluster) == comparable(json.loads((local_out / "report.json").read_text()))
    assert "violation" in done.stdout and "Checks" in done.stdout
