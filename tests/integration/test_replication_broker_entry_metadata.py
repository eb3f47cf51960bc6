"""Broker entry metadata across geo-replication (two real regions, brokers exposing the metadata): a replicated
copy carries the remote region's own index and broker time, not the origin's; and the audit, reading the
regions with the Magnetar data source, reports a replication delay that is not zero."""

from __future__ import annotations

import asyncio
import json
import pathlib
import uuid

import pulsar
import pytest

pytest.importorskip("pyspark")

from magnetar.protocol.client import Client, InitialPosition  # noqa: E402
from spark.audit import source_available  # noqa: E402
from spark.audit.runner import audit_deployment  # noqa: E402
from tests.e2e.test_geo_replication import client, producer_for, wait_replicated  # noqa: E402
from tests.kit.regions import start_regions  # noqa: E402
from tests.kit.wait import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(600)

EAST, WEST = "us-east", "eu-west"
TENANT = "bem"


@pytest.fixture(scope="module")
def regions(tmp_path_factory, zk_server):
    deployment = start_regions([EAST, WEST], tmp_path_factory.mktemp("bem-regions"), zk_server, bookies=2,
                               brokers=1, exposing_broker_entry_metadata_to_client_enabled=True)
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def clients(regions):
    made = {name: client(r) for name, r in regions.items()}
    yield made
    for c in made.values():
        c.close()


def produce(c: pulsar.Client, topic: str, name: str, count: int, *, batching: bool, **send_kwargs) -> None:
    results: list = []
    producer = producer_for(c, topic, name, batching=batching)
    for i in range(count):
        producer.send_async(f"{name}|{i}".encode(), lambda result, _mid: results.append(result), **send_kwargs)
    producer.flush()
    wait_for(lambda: len(results) == count, 60, what=f"{count} sends of {name} answered")
    assert set(results) == {pulsar.Result.Ok}, results
    producer.close()


async def read(url: str, topic: str, n: int) -> dict[bytes, tuple[int, int]]:
    """payload -> (index, broker time) of the first ``n`` messages of subscription ``audit``."""
    async with Client(url, operation_timeout_s=15) as ours:
        consumer = await ours.subscribe(topic, "audit", initial_position=InitialPosition.EARLIEST)
        got = [await consumer.receive(timeout_s=15) for _ in range(n)]
        await consumer.close()
    return {m.payload: (m.index, m.broker_publish_time_ms) for m in got}


def test_a_copy_carries_its_own_regions_index_and_broker_time(regions, clients) -> None:
    ns = regions.create_replicated_namespace(TENANT, f"ns-{uuid.uuid4().hex[:6]}", [EAST, WEST])
    topic = f"persistent://{ns}/t"
    for name in (EAST, WEST):  # subscriptions first: they keep what is stored for the reads below
        clients[name].subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest).close()
    produce(clients[WEST], topic, "west-local", 5, batching=False, disable_replication=True)
    produce(clients[EAST], topic, "east-plain", 20, batching=False)
    produce(clients[EAST], topic, "east-batched", 30, batching=True)
    wait_replicated(regions, topic, [EAST], [WEST])
    east = asyncio.run(read(regions[EAST].pulsar_url, topic, 50))
    west = asyncio.run(read(regions[WEST].pulsar_url, topic, 55))
    assert sorted(i for i, _ in east.values()) == list(range(50))  # us-east: its 50 messages
    assert sorted(i for i, _ in west.values()) == list(range(55))  # eu-west: its own 5, then the 50 copies
    copies = [p for p in east]
    assert {west[p][0] for p in copies} == set(range(5, 55))  # eu-west's numbering, not us-east's
    delays = [west[p][1] - east[p][1] for p in copies]  # eu-west's broker stored each copy after us-east's
    assert min(delays) >= 0 and max(delays) > 0, delays


def test_the_audit_reports_a_replication_delay(regions, clients, tmp_path, spark_session) -> None:
    spark = spark_session  # the test run's shared local session (tests/conftest.py)
    assert source_available(spark), "the Magnetar data source is not registered"
    ns = regions.create_replicated_namespace(TENANT, f"ns-{uuid.uuid4().hex[:6]}", [EAST, WEST])
    topic = f"persistent://{ns}/t"
    for name in (EAST, WEST):  # a subscription keeps every copy stored (retention 0 trims the rest)
        clients[name].subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
    produce(clients[EAST], topic, "east-app", 200, batching=False)
    produce(clients[WEST], topic, "west-app", 200, batching=True)
    wait_replicated(regions, topic, [EAST, WEST], [EAST, WEST])
    # The ledgers stay open: the data source reads each up to its newest entry (explicit LAC once adds stop).
    doc = {"regions": {name: {"zookeeper": {"connect": r.zk_connect},
                              "brokers": [{"http": b.http_url, "pulsar": b.pulsar_url} for b in r.brokers]}
                       for name, r in regions.items()}}
    topology = pathlib.Path(tmp_path) / "topology.json"
    topology.write_text(json.dumps(doc))
    report = audit_deployment(spark, topology, namespace=ns, out_dir=tmp_path / "out", grace_s=5,
                              reader="source", subscriptions=False)
    assert report["inputs"]["arrival"] == "__brokerPublishTime"
    assert report["violations"] == 0, report["checks"]
    for direction in (f"{EAST} -> {WEST}", f"{WEST} -> {EAST}"):
        stats = report["replication_delay"]["by_direction"].get(direction)
        assert stats is not None, json.dumps({k: report[k] for k in ("rows", "messages", "checks", "notes")})
        assert stats["count"] == 200, stats
        assert stats["min_ms"] >= 0 and stats["max_ms"] > 0 and stats["p99_ms"] > 0, stats
