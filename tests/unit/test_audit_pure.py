"""The audit's pure parts, without Spark: report folding and rendering, the replicated-subscription comparison
and snapshot decoding, topology files, topic names, and the command's refusals before Spark starts."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from broker.managed_ledger.api import Position as BrokerPosition
from magnetar.cli import app
from magnetar.protocol import pb
from magnetar.protocol.frames import encode_entry
from replicator import markers
from spark.audit.errors import AuditInputError
from spark.audit.policies import parse_topics
from spark.audit.report import assemble, comparable, summary, tally
from spark.audit.subscriptions import Position, Snapshot, SubscriptionState, decode_snapshot, divergences
from spark.audit.topology import read_topology

EAST, WEST, SOUTH = "us-east", "eu-west", "ap-south"
T = "persistent://t/ns/x"


# ------------------------------------------------------------------------------------------ report


def test_tally_counts_by_topic_region_and_direction():
    counts = tally([(T, EAST, WEST, 2), (T, EAST, EAST, 1), ("persistent://t/ns/y", WEST, EAST, 4)])
    assert counts == {"count": 7, "by_topic": {T: 3, "persistent://t/ns/y": 4}, "by_region": {EAST: 5, WEST: 2},
                      "by_direction": {f"{EAST} -> {EAST}": 1, f"{EAST} -> {WEST}": 2, f"{WEST} -> {EAST}": 4}}


def _report(missing: int) -> dict:
    checks = {"missing": {**tally([(T, EAST, WEST, missing)] if missing else []), "examples": []},
              "subscription_divergence": {"checked": False, "reason": "not asked for", "count": 0}}
    delay = {"origin": EAST, "region": WEST, "count": 10, "p50_ms": 1.23456, "p99_ms": 9.0, "min_ms": 0.0,
             "max_ms": 12.0}
    return assemble(topics=[T], regions=[EAST, WEST], expected={T: [WEST, EAST]},
                    inputs={"reader": "brokers", "replicate_to": True, "arrival": "__publishTime"},
                    rows=[(T, EAST, 20), (T, WEST, 10)], messages=[(T, EAST, 10), (T, WEST, 10)], checks=checks,
                    delays_by_direction=[delay], delays_by_topic=[{**delay, "topic": T}], notes=["a note"],
                    run={"master": "local[2]"})


def test_assemble_totals_and_the_ok_flag():
    report = _report(missing=3)
    assert not report["ok"] and report["violations"] == 3
    assert report["rows"] == {"total": 30, "by_region": {EAST: 20, WEST: 10}, "by_topic": {T: {EAST: 20, WEST: 10}}}
    assert report["messages"]["total"] == 20
    assert report["expected_regions"] == {T: [WEST, EAST]}
    assert report["replication_delay"]["by_direction"][f"{EAST} -> {WEST}"]["p50_ms"] == 1.235
    assert report["replication_delay"]["by_topic"][T][f"{EAST} -> {WEST}"]["count"] == 10
    assert _report(missing=0)["ok"]
    assert json.loads(json.dumps(report)) == report  # plain JSON
    assert "run" not in comparable(report) and comparable(report)["violations"] == 3


def test_summary_renders_every_check_and_direction():
    from rich.console import Console

    console = Console(width=200, record=True)
    for part in summary(_report(missing=3)):
        console.print(part)
    text = console.export_text()
    assert "3 violation(s)" in text and "missing" in text and f"{EAST} -> {WEST}: 3" in text
    assert "subscription_divergence" in text and "not checked" in text and "a note" in text


# ------------------------------------------------------------------------------------------ subscriptions


def _state(region, mark_delete, snapshot=None, *, sub="s", replicated=True):
    return SubscriptionState(T, region, sub, mark_delete, replicated, snapshot)


def test_a_region_at_or_past_the_snapshot_position_has_not_diverged():
    snap = Snapshot(Position(5, 10), {WEST: Position(7, 3)}, Position(5, 12))
    assert divergences([_state(EAST, Position(5, 20), snap), _state(WEST, Position(7, 3))]) == []
    assert divergences([_state(EAST, Position(5, 20), snap), _state(WEST, Position(8, 0))]) == []


def test_a_region_behind_the_snapshot_position_has_diverged():
    snap = Snapshot(Position(5, 10), {WEST: Position(7, 3), SOUTH: Position(2, 9)}, Position(5, 12))
    rows = divergences([_state(EAST, Position(5, 20), snap), _state(WEST, Position(7, 2)),
                        _state(SOUTH, Position(2, 9), sub="other")])
    assert rows == [
        {"topic": T, "subscription": "s", "source_region": EAST, "region": SOUTH, "source_position": "5:20",
         "snapshot_position": "5:10", "required_position": "2:9", "position": None},
        {"topic": T, "subscription": "s", "source_region": EAST, "region": WEST, "source_position": "5:20",
         "snapshot_position": "5:10", "required_position": "7:3", "position": "7:2"},
    ]
    # Regions the audit does not read are not judged.
    assert [r["region"] for r in divergences([_state(EAST, Position(5, 20), snap), _state(WEST, Position(7, 2))],
                                             regions=[EAST, WEST])] == [WEST]


def test_without_a_snapshot_or_replication_nothing_is_required():
    snap = Snapshot(Position(5, 10), {WEST: Position(7, 3)}, Position(5, 12))
    assert divergences([_state(EAST, Position(5, 20)), _state(WEST, Position(1, 0))]) == []
    assert divergences([_state(EAST, Position(5, 20), snap, replicated=False), _state(WEST, Position(1, 0))]) == []


def test_decode_snapshot_reads_only_snapshot_markers():
    message = markers.snapshot("id-1", BrokerPosition(5, 10), {WEST: BrokerPosition(7, 3)})
    entry = markers.encode_marker_entry(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT, message, replicate_to=[EAST])
    snap = decode_snapshot(entry, Position(5, 12))
    assert snap == Snapshot(Position(5, 10), {WEST: Position(7, 3)}, Position(5, 12))
    request = markers.encode_marker_entry(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST,
                                          markers.snapshot_request("id-1", EAST))
    assert decode_snapshot(request, Position(5, 11)) is None
    data = encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"payload")
    assert decode_snapshot(data, Position(5, 1)) is None
    assert decode_snapshot(b"not an entry", Position(5, 2)) is None
    assert Position.parse("12:-1") == Position(12, -1) and str(Position(3, 4)) == "3:4"


# ------------------------------------------------------------------------------------------ inputs


def test_topology_json_gives_each_regions_endpoints(tmp_path):
    doc = {"regions": {
        EAST: {"zookeeper": {"connect": "127.0.0.1:2181"},
               "brokers": [{"http": "http://127.0.0.1:8080", "pulsar": "pulsar://127.0.0.1:6650"},
                           {"http": "http://127.0.0.1:8081", "pulsar": "pulsar://127.0.0.1:6651"}]},
        WEST: {"zookeeper": {"connect": "127.0.0.1:2182"},
               "brokers": [{"http": "http://127.0.0.1:9080", "pulsar": "pulsar://127.0.0.1:7650"}]}}}
    (tmp_path / "topology.json").write_text(json.dumps(doc))
    topology = read_topology(tmp_path)  # the data directory stands for its topology.json
    east = topology.regions[EAST]
    assert east.admin_url == "http://127.0.0.1:8080"
    assert east.service_url == "pulsar://127.0.0.1:6650,127.0.0.1:6651"
    assert east.zk_connect == "127.0.0.1:2181" and topology.token == ""
    assert topology.select([WEST]).names == [WEST]
    with pytest.raises(AuditInputError, match="unknown region"):
        topology.select(["mars"])


def test_a_secured_topology_presents_the_admin_token(tmp_path):
    token = tmp_path / "admin.jwt"
    token.write_text("a.b.c\n")
    doc = {"security": {"ca_file": "/ca.pem", "superuser_roles": ["admin"],
                        "roles": {"admin": {"token_file": str(token)}}},
           "regions": {EAST: {"zookeeper": {"connect": "zk:1"},
                              "proxy": {"https": "https://p:8443", "pulsar_ssl": "pulsar+ssl://p:6651"},
                              "brokers": [{"http": "http://b:8080", "pulsar": "pulsar://b:6650"}]}}}
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(doc))
    topology = read_topology(path)
    assert topology.token == "a.b.c" and topology.tls_trust_certs_file == "/ca.pem"
    assert topology.regions[EAST].service_url == "pulsar+ssl://p:6651"


@pytest.mark.parametrize("content, message", [(None, "cannot read"), ("{", "not JSON"), ("{}", "names no region")])
def test_bad_topologies_are_refused(tmp_path, content, message):
    path = tmp_path / "topology.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AuditInputError, match=message):
        read_topology(path)


def test_topic_names_are_completed_and_checked():
    assert parse_topics(["t/ns/x", "persistent://t/ns/y-partition-1"]) == ["persistent://t/ns/x",
                                                                            "persistent://t/ns/y-partition-1"]
    with pytest.raises(AuditInputError, match="not persistent"):
        parse_topics(["non-persistent://t/ns/x"])
    with pytest.raises(AuditInputError, match="bad topic name"):
        parse_topics(["a/b/c/d/e//"])


@pytest.mark.parametrize("args, message", [
    ([], "either --namespace"),
    (["--namespace", "t/ns", "--topic", "t/ns/x"], "either --namespace"),
    (["--namespace", "t/ns", "--reader", "kafka"], "--reader"),
    (["--namespace", "t/ns", "--conf", "novalue"], "KEY=VALUE"),
    (["--namespace", "t/ns"], "cannot read the topology"),
])
def test_the_command_refuses_bad_options_before_spark_starts(tmp_path, args, message):
    result = CliRunner().invoke(app, ["audit", "--topology", str(tmp_path / "missing.json"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
