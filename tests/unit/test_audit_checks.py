"""The audit's checks on small DataFrames, with real Spark (the test run's shared local session).

Every case builds the rows a data source would return for a few messages in two or three regions
(``Regions.publish`` writes the origin copy and its replicated copies as a replicator stores them), breaks one
thing, and checks that the audit finds exactly that, attributed to the right region, topic, producer and
sequence id, and nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Optional

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from spark.audit import AuditInputError, SubscriptionOutcome, build, run_audit, run_session  # noqa: E402
from spark.audit import columns as C  # noqa: E402
from spark.audit.checks import delay_stats, pack  # noqa: E402

pytestmark = pytest.mark.timeout(300)

T = "persistent://t/ns/orders"
EAST, WEST, SOUTH = "us-east", "eu-west", "ap-south"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SCHEMA = StructType([*C.CONTRACT_SCHEMA.fields, C.REPLICATE_TO_FIELD, C.BROKER_PUBLISH_TIME_FIELD])


@pytest.fixture(scope="module")
def spark(spark_session):
    """The test run's shared local session (``tests/conftest.py``)."""
    return spark_session


@dataclass
class Regions:
    """Rows of a deployment's topics: each region's ledger ids and next entry id, every copy appended in order."""

    names: tuple[str, ...] = (EAST, WEST)
    rows: list[tuple] = field(default_factory=list)
    next_entry: dict[str, int] = field(default_factory=dict)

    def ledger(self, region: str) -> int:
        return 10 + self.names.index(region)

    def store(self, region: str, *, topic: str = T, producer: str, seq: int, origin: str, value: bytes,
              batch: int = -1, props: Optional[dict] = None, publish_ms: int = 0, arrival_ms: Optional[int] = None,
              replicate_to: Optional[list] = None, key: Optional[str] = None, entry: Optional[int] = None) -> None:
        """One copy stored in ``region`` (a replicated copy when ``origin`` is another region)."""
        if entry is None:
            entry = self.next_entry.get(region, 0)
            if batch <= 0:
                self.next_entry[region] = entry + 1
            else:
                entry -= 1  # later members of a batch share the entry
        properties = dict(props or {})
        if origin != region:
            properties["__magnetar.repl.source_position"] = f"{self.ledger(origin)}:{entry}"
        publish = T0 + dt.timedelta(milliseconds=publish_ms)
        arrival = T0 + dt.timedelta(milliseconds=arrival_ms if arrival_ms is not None else publish_ms)
        self.rows.append((value, key, topic, b"\x08\x01", publish, None, properties, region, producer, seq,
                          None if origin == region else origin, self.ledger(region), entry, batch, replicate_to,
                          arrival))

    def publish(self, origin: str, producer: str, seq: int, *, topic: str = T, to: Optional[list] = None,
                delay_ms: int = 5, batch: int = -1, replicate_to: Optional[list] = None,
                publish_ms: Optional[int] = None, value: Optional[bytes] = None) -> None:
        """A message published in ``origin`` and its replicated copies in ``to`` (default: every other region)."""
        publish_ms = seq * 10 if publish_ms is None else publish_ms
        value = value if value is not None else f"{origin}|{producer}|{seq}".encode()
        props = {"i": str(seq)}
        self.store(origin, topic=topic, producer=producer, seq=seq, origin=origin, value=value, batch=batch,
                   props=props, publish_ms=publish_ms, replicate_to=replicate_to)
        for region in (to if to is not None else [r for r in self.names if r != origin]):
            self.store(region, topic=topic, producer=producer, seq=seq, origin=origin, value=value, batch=batch,
                       props=props, publish_ms=publish_ms, arrival_ms=publish_ms + delay_ms,
                       replicate_to=replicate_to)

    def frame(self, spark, *, drop=()):
        df = spark.createDataFrame(self.rows, SCHEMA)
        return df.drop(*drop) if drop else df


def healthy(names=(EAST, WEST), n: int = 5) -> Regions:
    regions = Regions(names)
    for origin in names:
        for seq in range(n):
            regions.publish(origin, f"p-{origin}", seq)
    return regions


def violations(spark, regions: Regions, expected=None, **kwargs) -> dict[str, list[dict]]:
    """Every check's violations, computed in one Spark job (their union, each row's own columns as JSON)."""
    frames = build(regions.frame(spark, **kwargs), expected or {T: list(regions.names)})
    union = None
    for name, df in frames.violations.items():
        part = df.select(F.lit(name).alias("check"), F.to_json(F.struct(*df.columns)).alias("row"))
        union = part if union is None else union.unionAll(part)
    found: dict[str, list[dict]] = {name: [] for name in frames.violations}
    for r in union.collect():
        found[r["check"]].append(json.loads(r["row"]))
    return {name: sorted(rows, key=lambda r: (r["region"], r["topic"], r["producer"], r["seq"], r["batch"]))
            for name, rows in found.items()}


def only(found: dict[str, list[dict]], check: str) -> list[dict]:
    """The rows of ``check``, after asserting that every other check found nothing."""
    others = {k: v for k, v in found.items() if k != check and v}
    assert not others, f"unexpected violations besides {check}: {others}"
    return found[check]


def pos(position: dict) -> tuple:
    return (position["ledger"], position["entry"], position["batch"])


def attribution(row: dict) -> tuple:
    return (row["region"], row["topic"], row["origin"], row["producer"], row["seq"])


# ------------------------------------------------------------------------------------------ healthy


def test_healthy_deployments_have_no_violation(spark):
    """Two regions, three regions, batches, partitions, a message kept local by disable_replication: each
    topic clean (one DataFrame, one Spark job)."""
    regions = Regions((EAST, WEST, SOUTH))
    expected = {}
    for topic, names in ((f"{T}-two", (EAST, WEST)), (f"{T}-three", (EAST, WEST, SOUTH))):
        expected[topic] = list(names)
        for origin in names:
            for seq in range(5):  # replicated copies carry __magnetar.repl.source_position, origins do not
                regions.publish(origin, f"p-{origin}", seq, topic=topic, to=[r for r in names if r != origin])
    expected[f"{T}-batched"] = [EAST, WEST]
    for i in range(4):  # one entry of 4 messages: sequence ids 100..103, batch indexes 0..3
        regions.publish(EAST, "p", 100 + i, topic=f"{T}-batched", to=[WEST], batch=i, publish_ms=0)
    for p in range(2):  # named by partition, as the admin API lists them
        expected[f"{T}-parted-partition-{p}"] = [EAST, WEST]
        regions.publish(EAST, "p", 1, topic=f"{T}-parted-partition-{p}", to=[WEST])
    regions.publish(EAST, "local", 1, topic=f"{T}-two", to=[], replicate_to=[C.LOCAL_ONLY])
    found = violations(spark, regions, expected)
    assert all(not rows for rows in found.values()), found


# ------------------------------------------------------------------------------------------ faults


def faulty() -> tuple[Regions, dict[str, list[str]]]:
    """Two healthy regions plus one fault per topic (and a third region for strays)."""
    regions = Regions((EAST, WEST, SOUTH))
    two = [EAST, WEST]
    expected = {f"{T}-{name}": two for name in ("missing", "duplicate", "late-duplicate", "order", "payload",
                                                "props", "key", "stray", "routed")}
    expected[f"{T}-routed"] = [EAST, WEST, SOUTH]
    for topic, names in expected.items():
        for origin in names:
            for seq in range(3):
                regions.publish(origin, f"p-{origin}", seq, topic=topic, to=[r for r in names if r != origin])

    def copy(region, topic, producer, seq, *, value=None, props=None, key=None):
        regions.store(region, topic=topic, producer=producer, seq=seq, origin=EAST, props=props or {"i": str(seq)},
                      value=value if value is not None else f"{EAST}|{producer}|{seq}".encode(), key=key)

    regions.publish(EAST, "lonely", 7, topic=f"{T}-missing", to=[])
    copy(WEST, f"{T}-duplicate", f"p-{EAST}", 1)
    copy(EAST, f"{T}-late-duplicate", f"p-{EAST}", 0)  # again in its origin, after everything else
    for seq in (1, 2):
        regions.publish(EAST, "r", seq, topic=f"{T}-order", to=[])
    for seq in (2, 1):  # the replicated copies arrive swapped
        copy(WEST, f"{T}-order", "r", seq)
    regions.publish(EAST, "c", 1, topic=f"{T}-payload", to=[])
    copy(WEST, f"{T}-payload", "c", 1, value=b"tampered")
    regions.publish(EAST, "c", 1, topic=f"{T}-props", to=[])
    copy(WEST, f"{T}-props", "c", 1, props={"i": "changed"})
    regions.publish(EAST, "c", 1, topic=f"{T}-key", to=[])
    copy(WEST, f"{T}-key", "c", 1, key="another-key")
    regions.publish(EAST, "s", 1, topic=f"{T}-stray", to=[WEST, SOUTH])  # ap-south is not a region of the topic
    regions.publish(EAST, "s", 1, topic=f"{T}-routed", to=[WEST, SOUTH], replicate_to=[WEST])
    return regions, expected


def test_each_fault_is_detected_and_attributed(spark):
    regions, expected = faulty()
    found = violations(spark, regions, expected)
    assert [attribution(r) for r in found["missing"]] == [(WEST, f"{T}-missing", EAST, "lonely", 7)]
    assert found["missing"][0]["present_in"] == [EAST]
    assert sorted(attribution(r) for r in found["duplicate"]) == sorted([
        (EAST, f"{T}-late-duplicate", EAST, f"p-{EAST}", 0), (WEST, f"{T}-duplicate", EAST, f"p-{EAST}", 1)])
    dup = next(r for r in found["duplicate"] if r["region"] == WEST)
    assert dup["copies"] == 2 and pos(dup["first_pos"]) < pos(dup["last_pos"])
    # The late duplicate is not also an order violation: only each message's first copy is ordered.
    assert [attribution(r) for r in found["order"]] == [(WEST, f"{T}-order", EAST, "r", 1)]
    order = found["order"][0]
    assert order["previous_seq"] == 2 and pos(order["previous_position"]) < pos(order["position"])
    assert [attribution(r) for r in found["payload_mismatch"]] == [
        (WEST, f"{T}-key", EAST, "c", 1), (WEST, f"{T}-payload", EAST, "c", 1), (WEST, f"{T}-props", EAST, "c", 1)]
    assert all(r["reference_region"] == EAST and r["hash"] != r["reference_hash"] for r in found["payload_mismatch"])
    assert sorted(attribution(r) for r in found["stray"]) == [(SOUTH, f"{T}-routed", EAST, "s", 1),
                                                         (SOUTH, f"{T}-stray", EAST, "s", 1)]
    assert {tuple(r["expected_regions"]) for r in found["stray"]} == {tuple(sorted([EAST, WEST]))}


def test_without_replicate_to_a_local_only_message_looks_missing(spark):
    regions = healthy()
    regions.publish(EAST, "local", 1, to=[], replicate_to=[C.LOCAL_ONLY])
    rows = only(violations(spark, regions, drop=[C.REPLICATE_TO]), "missing")
    assert [attribution(r) for r in rows] == [(WEST, T, EAST, "local", 1)]


def test_a_copy_beyond_the_replicators_cursor_is_in_flight_not_missing(spark):
    regions = healthy(n=3)  # us-east holds entries 0..5: its own three, then eu-west's three
    regions.publish(EAST, "lost", 1, to=[])  # entry 6: the replicator towards eu-west passed it
    regions.publish(EAST, "late", 1, to=[])  # entry 7: not yet
    frames = build(regions.frame(spark), {T: [EAST, WEST]},
                   replicated_up_to={(T, EAST, WEST): pack(regions.ledger(EAST), 6)})
    both = frames.violations["missing"].select(F.lit("missing").alias("kind"), "region", "producer") \
        .unionAll(frames.in_flight.select(F.lit("in_flight").alias("kind"), "region", "producer"))
    assert sorted(tuple(r) for r in both.collect()) == [("in_flight", WEST, "late"), ("missing", WEST, "lost")]


# ------------------------------------------------------------------------------------------ delays


def test_delays_per_direction_use_the_brokers_publish_time(spark):
    regions = Regions()
    for seq in range(100):
        regions.publish(EAST, "p", seq, delay_ms=seq + 1)  # 1..100 ms east -> west
        regions.publish(WEST, "q", seq, delay_ms=1000)
    frames = build(regions.frame(spark), {T: [EAST, WEST]})
    assert frames.arrival_column == C.BROKER_PUBLISH_TIME
    stats = {(r["origin"], r["region"]): r for r in delay_stats(frames.delays, ["origin", "region"]).collect()}
    east = stats[(EAST, WEST)]
    assert east["count"] == 100 and east["max_ms"] == 100.0 and east["min_ms"] == 1.0
    assert 49 <= east["p50_ms"] <= 51 and 98 <= east["p99_ms"] <= 100
    assert stats[(WEST, EAST)]["p50_ms"] == 1000.0


def test_without_broker_time_delays_come_from_publish_time(spark):
    regions = healthy()
    frames = build(regions.frame(spark, drop=[C.BROKER_PUBLISH_TIME]), {T: [EAST, WEST]})
    assert frames.arrival_column == C.PUBLISH_TIME
    stats = delay_stats(frames.delays, ["origin", "region"]).collect()
    assert {r["max_ms"] for r in stats} == {0.0}  # a replicated copy keeps its origin's publish time


# ------------------------------------------------------------------------------------------ the job


def test_run_audit_writes_parquet_per_check_and_the_report(spark, tmp_path):
    regions = healthy(n=3)
    regions.publish(EAST, "lonely", 9, to=[])
    regions.store(WEST, producer=f"p-{EAST}", seq=1, origin=EAST, value=f"{EAST}|p-{EAST}|1".encode(),
                  props={"i": "1"})
    divergence = {"topic": T, "subscription": "s", "source_region": EAST, "region": WEST, "source_position": "10:5",
                  "snapshot_position": "10:4", "required_position": "11:3", "position": "11:1"}
    outcome = SubscriptionOutcome(checked=True, rows=[divergence], subscriptions=2)
    report = run_audit(regions.frame(spark), {T: [EAST, WEST]}, topics=[T], regions=[EAST, WEST], out_dir=tmp_path,
                       subscriptions=outcome)
    assert report == json.loads((tmp_path / "report.json").read_text())
    assert not report["ok"] and report["violations"] == 3
    checks = report["checks"]
    assert checks["missing"]["by_direction"] == {f"{EAST} -> {WEST}": 1}
    assert checks["duplicate"]["by_topic"] == {T: 1} and checks["duplicate"]["by_region"] == {WEST: 1}
    assert checks["order"]["count"] == checks["payload_mismatch"]["count"] == checks["stray"]["count"] == 0
    assert checks["subscription_divergence"]["count"] == 1
    assert checks["missing"]["examples"][0]["producer"] == "lonely"
    assert report["rows"]["by_region"] == {EAST: 7, WEST: 7}
    assert report["messages"]["by_topic"] == {T: {EAST: 4, WEST: 3}}
    assert report["replication_delay"]["by_direction"][f"{EAST} -> {WEST}"]["count"] == 3  # per message
    # Plain Spark reads every check's Parquet back, without Magnetar's code.
    for check in ("missing", "duplicate", "order", "payload_mismatch", "stray", "subscription_divergence"):
        back = spark.read.parquet(str(tmp_path / checks[check]["parquet"]))
        assert back.count() == checks[check]["count"], check
    missing = spark.read.parquet(str(tmp_path / "violations" / "missing")).collect()[0]
    assert (missing["region"], missing["producer"], missing["seq"]) == (WEST, "lonely", 9)


def test_a_missing_column_is_a_clear_error(spark):
    regions = healthy(n=1)
    with pytest.raises(AuditInputError, match="__sequenceId"):
        build(regions.frame(spark, drop=[C.SEQUENCE_ID]), {T: [EAST, WEST]})


def test_no_expected_region_is_a_clear_error(spark):
    with pytest.raises(AuditInputError, match="no expected region"):
        build(healthy(n=1).frame(spark), {T: []})


def test_a_run_uses_a_running_session_as_it_is_and_leaves_it_running(spark):
    """Regression: ``magnetar demo``'s audit, run inside the test run, stopped the shared session it had been
    handed by ``getOrCreate``; the next Spark test in that process failed ("jsc is null")."""
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    with run_session(master="local[1]", conf={"spark.sql.shuffle.partitions": "7"}) as used:
        assert used is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == partitions  # the owner's settings kept
    assert spark.range(5).count() == 5  # still running
