"""The consistency audit of a healthy three-region deployment (real ZooKeeper, bookies and brokers per region,
geo-replication between all three), with real Spark, through each reader: 0 violations and the counts produced,
with messages narrowed by pulsar-client's ``replication_clusters`` and kept local by ``disable_replication``
(expected only where they were routed). Its own module so that the two-region tests (``test_audit_regions.py``)
do not carry a third region's processes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from spark.audit.runner import audit_deployment  # noqa: E402
from tests.e2e.test_geo_replication import client, wait_replicated  # noqa: E402
from tests.integration.test_audit_regions import READERS, namespace, need, produce, write_topology  # noqa: E402
from tests.kit.regions import start_regions  # noqa: E402

pytestmark = pytest.mark.timeout(600)

EAST, WEST, SOUTH = "us-east", "eu-west", "ap-south"


@pytest.fixture(scope="module")
def regions(tmp_path_factory, zk_server):
    deployment = start_regions([EAST, WEST, SOUTH], tmp_path_factory.mktemp("audit-three"), zk_server,
                               bookies=2, brokers=1)
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def topology(regions, tmp_path_factory):
    return write_topology(regions, [EAST, WEST, SOUTH], tmp_path_factory.mktemp("audit-three") / "topology.json")


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


N, NARROW, LOCAL = 20, 4, 3


@pytest.fixture(scope="module")
def healthy(regions, clients) -> str:
    """Every region produces (batched and not); us-east also sends messages routed to eu-west only
    (``replication_clusters``) and ap-south some kept local (``disable_replication``). Returns the topic, fully
    replicated (each reader audits it: reading changes nothing)."""
    ns = namespace(regions, (EAST, WEST, SOUTH))
    topic = f"persistent://{ns}/three"
    produce(clients[EAST], topic, "east-app", N, batching=False)
    produce(clients[WEST], topic, "west-app", N, batching=True)
    produce(clients[SOUTH], topic, "south-app", N, batching=False)
    produce(clients[EAST], topic, "east-narrow", NARROW, batching=False, replication_clusters=[EAST, WEST])
    produce(clients[SOUTH], topic, "south-local", LOCAL, batching=True, disable_replication=True)
    wait_replicated(regions, topic, [EAST, WEST, SOUTH], [EAST, WEST, SOUTH])
    return topic


@READERS
def test_healthy_three_regions_report_no_violation_and_what_was_produced(healthy, spark, topology, tmp_path, reader):
    """Nothing is missing where a message was not routed, nothing else is wrong, and the counts are what was
    produced."""
    need(reader, spark)
    topic = healthy
    ns = topic.removeprefix("persistent://").rsplit("/", 1)[0]
    n, narrow, local = N, NARROW, LOCAL

    report = audit_deployment(spark, topology, namespace=ns, out_dir=tmp_path, grace_s=5, reader=reader)
    assert report["inputs"]["reader"] == reader and report["inputs"]["replicate_to"] is True
    assert report["violations"] == 0, report["checks"]
    assert report["in_flight"]["count"] == 0
    assert report["expected_regions"] == {topic: sorted([EAST, WEST, SOUTH])}
    assert report["rows"]["by_region"] == {EAST: 3 * n + narrow, WEST: 3 * n + narrow, SOUTH: 3 * n + local}
    assert report["messages"]["by_topic"][topic] == {EAST: n + narrow, WEST: n, SOUTH: n + local}
    delays = {d: s["count"] for d, s in report["replication_delay"]["by_direction"].items()}
    assert delays == {f"{EAST} -> {WEST}": n + narrow, f"{EAST} -> {SOUTH}": n, f"{WEST} -> {EAST}": n,
                      f"{WEST} -> {SOUTH}": n, f"{SOUTH} -> {EAST}": n, f"{SOUTH} -> {WEST}": n}
