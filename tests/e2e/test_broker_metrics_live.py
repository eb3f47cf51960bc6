"""A live broker's ``/metrics`` on a two-region deployment: real promtool, and the broker-wide series that need
replication to move.

Two regions (one bookie, one broker each, real processes, one global configuration store) replicate a
namespace. With topics, producers, consumers, subscriptions (one of them replicated) and replication present,
so every per-topic, per-subscription and per-remote-cluster family has series:

* ``promtool check metrics`` (Debian's ``/usr/bin/promtool``) parses the exposition and reports no problem
  except the naming-convention lints that Apache Pulsar's own names cause (``ALLOWED_LINTS``: gauges named
  ``*_count`` / ``*_sum``, which are Pulsar's names and what its dashboards query);
* the names of issue 15 are there, with Pulsar's labels;
* ``pulsar_replicated_subscriptions_pending_snapshots`` counts a snapshot that cannot complete while the other
  region is away, and drops back to 0 once it is back.
"""

from __future__ import annotations

import subprocess
import urllib.request
import uuid

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kit.regions import Region, Regions, start_regions
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

EAST, WEST = "metrics-east", "metrics-west"
TENANT = "obs"
PROMTOOL = "/usr/bin/promtool"
# promtool's lints that Apache Pulsar's own names cause (names its brokers export and its dashboards query):
# gauges ending in _count / _sum, and the entry size ranges' "kb" / "mb".
_COUNT = 'non-histogram and non-summary metrics should not have "_count" suffix'
_SUM = 'non-histogram and non-summary metrics should not have "_sum" suffix'
_UNIT = "metric names should not contain abbreviated units"
ALLOWED_LINTS = {
    **{name: _COUNT for name in ("pulsar_producers_count", "pulsar_consumers_count", "pulsar_subscriptions_count",
                                 "pulsar_subscription_consumers_count", "pulsar_replication_connected_count",
                                 "pulsar_storage_write_latency_count", "pulsar_entry_size_count",
                                 "pulsar_connection_created_total_count", "pulsar_connection_closed_total_count")},
    **{name: _SUM for name in ("pulsar_storage_write_latency_sum", "pulsar_entry_size_sum")},
    **{f"pulsar_entry_size_le_{r}": _UNIT for r in ("1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb")},
}


@pytest.fixture(scope="module")
def regions(tmp_path_factory, zk_server):
    deployment = start_regions([EAST, WEST], tmp_path_factory.mktemp("metrics"), zk_server, bookies=1, brokers=1,
                               managed_ledger_ensemble_size=1, managed_ledger_write_quorum=1,
                               managed_ledger_ack_quorum=1, replicated_subscriptions_snapshot_interval_ms=200)
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def clients(regions):
    made = {name: pulsar.Client(regions[name].pulsar_url, operation_timeout_seconds=30,
                                logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)) for name in regions}
    yield made
    for c in made.values():
        c.close()


def scrape(region: Region) -> str:
    with urllib.request.urlopen(f"{region.http_url}/metrics", timeout=30) as response:
        return response.read().decode()


def samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(region: Region, metric: str, /, **labels: str):
    """The value of the first sample ``metric`` with ``labels`` on the region's broker (None if absent)."""
    for s in samples(scrape(region)):
        if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def replicated_namespace(regions: Regions) -> str:
    return regions.create_replicated_namespace(TENANT, f"ns-{uuid.uuid4().hex[:8]}", [EAST, WEST])


def promtool_problems(text: str) -> list[tuple[str, str]]:
    """``(metric, problem)`` for each line promtool reports; a parse error fails the test at once."""
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    output = (result.stdout + result.stderr).strip()
    assert "error while linting" not in output and "parsing error" not in output, output[:2000]
    problems = []
    for line in output.splitlines():
        metric, _, problem = line.partition(" ")
        problems.append((metric, problem.strip()))
    assert result.returncode == (3 if problems else 0), (result.returncode, output[:2000])
    return problems


def test_promtool_finds_no_problem_but_pulsars_own_names(regions, clients) -> None:
    ns = replicated_namespace(regions)
    topic = f"persistent://{ns}/orders-{uuid.uuid4().hex[:6]}"
    east = clients[EAST]
    consumer = east.subscribe(topic, "audit", consumer_type=pulsar.ConsumerType.Shared)
    replicated = east.subscribe(topic, "follow", replicate_subscription_state_enabled=True)
    producer = east.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    got = [consumer.receive(10_000) for _ in range(5)]
    consumer.acknowledge(got[0])
    replicated.acknowledge_cumulative(replicated.receive(10_000))
    np_topic = f"non-persistent://{ns}/ticks-{uuid.uuid4().hex[:6]}"
    east.create_producer(np_topic).send(b"tick")
    wait_for(lambda: value(regions[EAST], "pulsar_replication_connected_count", topic=topic,
                           remote_cluster=WEST) == 1, 60, what=f"{topic} replicating to {WEST}")

    text = scrape(regions[EAST])
    names = {s.name for s in samples(text)}
    topic_labels = {"cluster": EAST, "namespace": ns, "topic": topic}
    per_topic = [s for s in samples(text) if s.labels.get("topic") == topic]
    for name in ("pulsar_storage_write_latency_le_1", "pulsar_storage_write_latency_overflow",
                 "pulsar_storage_write_latency_count", "pulsar_storage_write_latency_sum", "pulsar_entry_size_le_128",
                 "pulsar_entry_size_le_overflow", "pulsar_entry_size_count", "pulsar_entry_size_sum",
                 "pulsar_storage_backlog_size", "pulsar_storage_backlog_quota_limit"):
        assert any(s.name == name and s.labels == topic_labels for s in per_topic), name
    for name in ("pulsar_subscription_unacked_messages", "pulsar_subscription_msg_rate_redeliver"):
        assert any(s.name == name and s.labels == {**topic_labels, "subscription": "audit"} for s in per_topic), name
    assert any(s.name == "pulsar_replication_backlog" and s.labels == {**topic_labels, "remote_cluster": WEST}
               for s in per_topic)
    for name in ("pulsar_broker_publish_latency", "pulsar_broker_publish_latency_count",
                 "pulsar_replicated_subscriptions_pending_snapshots", "magnetar_zookeeper_session_events_total"):
        assert name in names, name
    assert value(regions[EAST], "magnetar_zookeeper_session_events_total", name="metadata-store",
                 event="connected") >= 1

    problems = promtool_problems(text)
    unexpected = [(m, p) for m, p in problems if ALLOWED_LINTS.get(m) != p]
    assert not unexpected, "\n".join(f"{m} {p}" for m, p in unexpected)
    print(f"promtool check metrics: {len(text)} bytes, {len(names)} sample names; problems (Pulsar's names): "
          f"{sorted(problems)}")
    producer.close()


def test_pending_snapshots_count_a_snapshot_the_other_region_cannot_answer(regions, clients) -> None:
    ns = replicated_namespace(regions)
    topic = f"persistent://{ns}/followed-{uuid.uuid4().hex[:6]}"
    east = clients[EAST]
    east.subscribe(topic, "follow", replicate_subscription_state_enabled=True)
    producer = east.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    wait_for(lambda: value(regions[EAST], "pulsar_replication_connected_count", topic=topic,
                           remote_cluster=WEST) == 1, 60, what=f"{topic} replicating to {WEST}")
    pending = "pulsar_replicated_subscriptions_pending_snapshots"
    regions[WEST].stop_brokers()
    try:
        producer.send(b"while away")  # new data: the next snapshot's request gets no response
        wait_for(lambda: value(regions[EAST], pending, cluster=EAST) == 1, 30,
                 what=f"a pending snapshot on {EAST} while {WEST} is away")
    finally:
        regions[WEST].start_brokers()
    wait_for(lambda: value(regions[EAST], pending, cluster=EAST) == 0, 60,
             what=f"the snapshot completed once {WEST} is back")
    producer.close()
