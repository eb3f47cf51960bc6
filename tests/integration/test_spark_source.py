"""``spark.read.format("magnetar")`` and ``readStream`` against real regions, checked against what pulsar-client sent.

One deployment serves the module: two regions (us-east, eu-west: each a ZooKeeper chroot, two bookies, one
broker; ledgers roll over every 200 entries so topics span several ledgers) and the test run's shared local Spark session.
Every topic is checked row by row against the producers' own record (the message ids pulsar-client's send
callbacks returned, payloads, keys, properties, event times, producer names, sequence ids): nothing missing,
nothing extra. An open ledger is read up to its newest entry (the broker's ledger writer sends an explicit LAC
once adds stop), which one test checks on an idle topic; the others unload the topic before a bounded read,
which closes its ledger, so that they read closed ledgers and do not depend on that timing.
Each topic gets a durable subscription before anything is produced: it holds every ledger (brokers do not
apply a namespace's retention policy to managed ledgers yet, so without a cursor a rolled-over ledger is
trimmed at once).
"""

from __future__ import annotations

import datetime
import json
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Optional

import pulsar
import pytest

from magnetar.protocol import MessageId
from tests.kit.regions import Region, Regions, start_regions, topic_path
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

EAST, WEST = "us-east", "eu-west"
TENANT = "spark"
ENTRIES_PER_LEDGER = 200
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def regions(tmp_path_factory, zk_server):
    deployment = start_regions([EAST, WEST], tmp_path_factory.mktemp("spark"), zk_server, bookies=2, brokers=1,
                               managed_ledger_max_entries_per_ledger=ENTRIES_PER_LEDGER)
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def spark(spark_session):
    """The test run's shared local session (``tests/conftest.py``)."""
    return spark_session


@pytest.fixture(scope="module")
def namespace(regions: Regions) -> str:
    """A namespace replicated to both regions."""
    return regions.create_replicated_namespace(TENANT, "data", [EAST, WEST])


@pytest.fixture(scope="module")
def local_namespace(regions: Regions) -> str:
    """A namespace of us-east only."""
    return regions.create_replicated_namespace(TENANT, "local", [EAST])


@pytest.fixture
def east_client(regions):
    c = pulsar.Client(regions[EAST].pulsar_url, operation_timeout_seconds=30,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    c.close()


# ------------------------------------------------------------------------------------------ helpers


@dataclass(frozen=True)
class Sent:
    topic: str
    ledger_id: int
    entry_id: int
    partition: int
    batch_index: int
    payload: bytes
    key: Optional[str]
    properties: dict
    event_time_ms: Optional[int]
    producer: str
    sequence_id: int


def produce(client: pulsar.Client, topic: str, n: int, *, name: str, batching: bool = True,
            compression=pulsar.CompressionType.NONE, batch_max: int = 100, keys: int = 7,
            one_by_one: bool = False) -> list[Sent]:
    """Sends ``n`` messages (payload, key, properties and event time derived from the index) and returns each
    one's id as the send callback reported it; ``one_by_one``: each send waits for the previous one's receipt."""
    producer = client.create_producer(topic, producer_name=name, batching_enabled=batching,
                                      batching_max_messages=batch_max, compression_type=compression,
                                      block_if_queue_full=True, max_pending_messages=5000, send_timeout_millis=0)
    results: list[Any] = [None] * n
    done = threading.Semaphore(0)

    def callback_for(i: int):
        def callback(res, msg_id) -> None:
            results[i] = (res, msg_id)
            done.release()
        return callback

    for i in range(n):
        key = f"k{i % keys}" if i % 5 else None
        producer.send_async(payload(name, i), callback_for(i), properties={"i": str(i), "by": name},
                            partition_key=key, event_timestamp=(1_700_000_000_000 + i) if i % 3 else None)
        if one_by_one:
            producer.flush()
            assert done.acquire(timeout=60), "a send was never acknowledged"
            done.release()
    producer.flush()
    for _ in range(n):
        assert done.acquire(timeout=60), "a send was never acknowledged"
    producer.close()
    out = []
    sequence: dict[int, int] = {}  # pulsar-client numbers each partition's messages from 0
    for i, (res, mid) in enumerate(results):
        assert res == pulsar.Result.Ok, (i, res)
        partition = mid.partition()
        sequence[partition] = sequence.get(partition, -1) + 1
        out.append(Sent(f"{topic}-partition-{partition}" if partition >= 0 else topic, mid.ledger_id(),
                        mid.entry_id(), partition, mid.batch_index(), payload(name, i),
                        f"k{i % keys}" if i % 5 else None, {"i": str(i), "by": name},
                        (1_700_000_000_000 + i) if i % 3 else None, name, sequence[partition]))
    return out


def hold(client: pulsar.Client, topic: str) -> None:
    """A durable subscription at the start of ``topic``: no ledger of it is trimmed while it exists."""
    client.subscribe(topic, "hold", initial_position=pulsar.InitialPosition.Earliest).close()


def _ms(when: datetime.datetime) -> int:
    return (when - _EPOCH) // datetime.timedelta(milliseconds=1)


def payload(name: str, i: int) -> bytes:
    return f"{name}:{i}:".encode() + bytes((i * 7 + j) % 251 for j in range(i % 40))


def unload(region: Region, topic: str) -> None:
    """Closes the topic's current ledger (its last entry becomes readable) by unloading the topic."""
    region.admin("PUT", f"/admin/v2/{topic_path(topic)}/unload")


def new_topic(namespace: str, prefix: str = "t") -> str:
    return f"persistent://{namespace}/{prefix}-{uuid.uuid4().hex[:8]}"


def reader(spark, region: Region, **options: Any):
    r = spark.read.format("magnetar").option("admin.url", region.http_url).option("metadata.url", region.zk_connect)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r


def rows_of(df) -> list[dict]:
    return df.toArrow().to_pylist()


def assert_rows_match(rows: list[dict], sent: list[Sent], *, region: str,
                      replicated_from: Optional[str] = None) -> None:
    """Every sent message is read exactly once, with every column as the producer set it."""
    by_id = {(s.topic, s.ledger_id, s.entry_id, s.batch_index): s for s in sent} if replicated_from is None else None
    by_payload = {s.payload: s for s in sent}
    assert len(by_payload) == len(sent)
    seen = set()
    for row in rows:
        s = by_payload.get(row["value"])
        assert s is not None, f"unexpected row {row}"
        assert row["value"] not in seen, f"read twice: {row}"
        seen.add(row["value"])
        if by_id is not None:  # ids are the origin region's: compare them only there
            assert by_id.get((row["__topic"], row["__ledgerId"], row["__entryId"], row["__batchIndex"])) is s, row
        assert row["__topic"] == s.topic
        assert row["__key"] == s.key, row
        props = dict(row["__messageProperties"])
        props.pop("__magnetar.repl.source_position", None)
        assert props == s.properties, row
        event = row["__eventTime"]
        assert (None if event is None else _ms(event)) == s.event_time_ms, row
        assert row["__producerName"] == s.producer
        assert row["__sequenceId"] == s.sequence_id, row
        assert row["__region"] == region
        assert row["__replicatedFrom"] == replicated_from
        mid = MessageId.deserialize(row["__messageId"])
        assert (mid.ledger_id, mid.entry_id, mid.partition, mid.batch_index) == \
            (row["__ledgerId"], row["__entryId"], s.partition if by_id is not None else mid.partition,
             row["__batchIndex"]), row
    assert len(seen) == len(sent), f"{len(sent) - len(seen)} messages not read"


# ------------------------------------------------------------------------------------------ tests


def test_topic_over_several_ledgers_reads_back_exactly(spark, regions, local_namespace, east_client) -> None:
    """50,000 messages (batched, and unbatched) over many ledgers: every id, payload and field, one
    Spark partition per ledger at least; explicit start and end positions select exactly their range."""
    east = regions[EAST]
    topic = new_topic(local_namespace, "many")
    hold(east_client, topic)
    sent = produce(east_client, topic, 1_000, name="single", batching=False)
    sent += produce(east_client, topic, 49_000, name="batched", batch_max=200)
    unload(east, topic)

    df = reader(spark, east, topic=topic, maxEntriesPerSplit=150).load()
    rows = rows_of(df)
    assert len(rows) == 50_000
    assert_rows_match(rows, sent, region=EAST)
    ledgers = {r["__ledgerId"] for r in rows}
    assert len(ledgers) >= 5, ledgers
    partitions = df.rdd.getNumPartitions()
    assert partitions >= len(ledgers), (partitions, ledgers)
    assert {r["__batchIndex"] for r in rows if r["__producerName"] == "single"} == {-1}
    assert max(r["__batchIndex"] for r in rows) > 0

    # [start, end): from the 300th single message to the 700th, by entry position.
    first, stop = sent[300], sent[700]
    ranged = reader(spark, east, topic=topic,
                    startingOffsets=json.dumps({topic: {"ledgerId": first.ledger_id, "entryId": first.entry_id}}),
                    endingOffsets=json.dumps({topic: {"ledgerId": stop.ledger_id, "entryId": stop.entry_id}})).load()
    got = sorted(int(r["__sequenceId"]) for r in ranged.select("__sequenceId").toArrow().to_pylist())
    assert got == list(range(300, 700))


@pytest.mark.parametrize("codec", [pulsar.CompressionType.LZ4, pulsar.CompressionType.ZSTD], ids=["lz4", "zstd"])
def test_compressed_batches_and_entries(spark, regions, local_namespace, east_client, codec) -> None:
    east = regions[EAST]
    topic = new_topic(local_namespace, "codec")
    hold(east_client, topic)
    sent = produce(east_client, topic, 2_000, name="zb", compression=codec, batch_max=300)
    sent += produce(east_client, topic, 50, name="zs", compression=codec, batching=False)
    unload(east, topic)
    rows = rows_of(reader(spark, east, topic=topic).load())
    assert_rows_match(rows, sent, region=EAST)


def test_partitioned_topic_reads_every_partition(spark, regions, local_namespace, east_client) -> None:
    """Each partition is read as its own topic; ids carry the partition and equal what a consumer gets."""
    east = regions[EAST]
    topic = new_topic(local_namespace, "parts")
    east.admin("PUT", f"/admin/v2/{topic_path(topic)}/partitions", 3)
    hold(east_client, topic)
    consumer = east_client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    sent = produce(east_client, topic, 600, name="p", keys=11)
    unload(east, topic)
    df = reader(spark, east, topic=topic).load()
    rows = rows_of(df)
    assert_rows_match(rows, sent, region=EAST)
    assert {r["__topic"] for r in rows} == {f"{topic}-partition-{i}" for i in range(3)}
    # A pattern over the namespace finds the same partitions; a topic that was never written reads empty.
    pattern = reader(spark, east, topicsPattern=topic + ".*").load()
    assert pattern.count() == len(sent)
    assert reader(spark, east, topic=new_topic(local_namespace, "never")).load().count() == 0

    # What a pulsar-client consumer gets as the serialized id is what __messageId holds.
    ids = {r["value"]: r["__messageId"] for r in rows}
    for _ in range(50):
        msg = consumer.receive(timeout_millis=30_000)
        assert msg.message_id().serialize() == ids[msg.data()]
    consumer.close()


def test_replicated_copy_shows_origin(spark, regions, namespace, east_client) -> None:
    """A message produced in us-east and read from eu-west's bookies: replicated from us-east, with the origin
    producer's name and sequence ids; reading both regions at once labels each copy with its region."""
    east, west = regions[EAST], regions[WEST]
    topic = new_topic(namespace, "repl")
    hold(east_client, topic)
    west_client = pulsar.Client(west.pulsar_url, operation_timeout_seconds=30,
                                logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    hold(west_client, topic)
    west_client.close()
    sent = produce(east_client, topic, 300, name="origin", batch_max=50)
    sent += produce(east_client, topic, 20, name="origin-single", batching=False)
    wait_for(lambda: west.topic_stats(topic).get("msgInCounter", 0) >= len(sent), 60,
             what="eu-west stored every replicated message")
    unload(east, topic)
    unload(west, topic)

    rows = rows_of(reader(spark, west, topic=topic).load())
    assert_rows_match(rows, sent, region=WEST, replicated_from=EAST)
    props = [dict(r["__messageProperties"]) for r in rows if r["__producerName"] == "origin-single"]
    assert all("__magnetar.repl.source_position" in p for p in props)

    both = spark.read.format("magnetar").option("topic", topic).option("regions", json.dumps({
        name: {"admin.url": regions[name].http_url, "metadata.url": regions[name].zk_connect}
        for name in (EAST, WEST)})).load()
    counts = {r["__region"]: r["count"] for r in both.groupBy("__region").count().collect()}
    assert counts == {EAST: len(sent), WEST: len(sent)}
    # The copy keeps the origin's publish time (the producer's metadata travels as it was).
    times = {}
    for r in both.select("value", "__region", "__publishTime").toArrow().to_pylist():
        times.setdefault(r["value"], {})[r["__region"]] = r["__publishTime"]
    assert all(t[EAST] == t[WEST] for t in times.values())
    origin = both.filter("__region = 'us-east'").filter("__replicatedFrom is not null").count()
    assert origin == 0


def test_an_idle_topics_newest_message_is_read(spark, regions, local_namespace, east_client) -> None:
    """Nothing follows the last message and the topic stays loaded (its ledger open): a bounded read still
    returns it, within a deadline (the writer's explicit LAC, sent once adds stop, makes it readable)."""
    east = regions[EAST]
    topic = new_topic(local_namespace, "idle")
    hold(east_client, topic)
    sent = produce(east_client, topic, 3, name="idle", batching=False, one_by_one=True)
    rows: list[dict] = []

    def all_read() -> bool:
        rows[:] = rows_of(reader(spark, east, topic=topic).load())
        return len(rows) == 3

    wait_for(all_read, 30, interval_s=0.2, what="a bounded read returns the idle topic's newest message")
    assert_rows_match(rows, sent, region=EAST)
    # The topic stayed loaded, its ledger open, and the newest message is the last one the broker confirmed.
    stats = east.admin("GET", f"/admin/v2/{topic_path(topic)}/internalStats")
    assert stats["state"] == "LedgerOpened", stats
    assert stats["lastConfirmedEntry"] == f"{sent[-1].ledger_id}:{sent[-1].entry_id}", stats


@pytest.mark.parametrize("kind", ["json", "avro"])
def test_a_json_or_avro_topic_reads_as_the_schemas_fields(spark, regions, local_namespace, east_client, kind) -> None:
    """A producer with pulsar-client's JsonSchema / AvroSchema: the record's fields are top-level columns (as
    the pulsar-spark connector gives them) holding what was sent; ``decodeSchema`` false gives the bytes;
    a read mixing topics of different schemas is refused with the reason."""
    from pulsar.schema import Array, AvroSchema, Double, Integer, JsonSchema, Record, String

    class Order(Record):
        item = String()
        qty = Integer()
        price = Double()
        tags = Array(String())

    east = regions[EAST]
    topic = new_topic(local_namespace, kind)
    hold(east_client, topic)
    producer = east_client.create_producer(topic, producer_name=f"{kind}-orders",
                                           schema=(JsonSchema if kind == "json" else AvroSchema)(Order))
    sent = [Order(item=f"item-{i}", qty=i, price=i * 0.5, tags=[f"t{i}", "x"] if i % 2 else None) for i in range(20)]
    for order in sent:
        producer.send(order)
    producer.close()
    unload(east, topic)

    df = reader(spark, east, topic=topic).load()
    assert df.columns[:4] == ["item", "qty", "price", "tags"] and "value" not in df.columns
    assert dict(df.dtypes)["qty"] == "int" and dict(df.dtypes)["tags"] == "array<string>"
    rows = sorted(df.toArrow().to_pylist(), key=lambda r: r["qty"])
    assert [(r["item"], r["qty"], r["price"], r["tags"]) for r in rows] == \
        [(o.item, o.qty, o.price, o.tags) for o in sent]
    assert {r["__producerName"] for r in rows} == {f"{kind}-orders"}

    raw = reader(spark, east, topic=topic, decodeSchema="false").load()
    assert raw.columns[0] == "value" and raw.count() == len(sent)

    plain = new_topic(local_namespace, "plain")
    hold(east_client, plain)
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException) as caught:
        reader(spark, east, topics=f"{topic},{plain}").load()
    assert "decodeSchema" in str(caught.value) and "different schemas" in str(caught.value)


def test_bad_options_fail_before_any_work(spark) -> None:
    """Each bad option fails ``load()`` with the source's option error naming it; the unreachable
    addresses show that nothing was contacted first."""
    from pyspark.errors import PySparkException

    nowhere = {"admin.url": "http://127.0.0.1:9", "metadata.url": "127.0.0.1:9"}
    cases = [
        ({**nowhere}, "topic"),
        ({**nowhere, "topic": "t", "startingOffsets": "{not json"}, "startingOffsets"),
        ({**nowhere, "topic": "non-persistent://public/default/x"}, "topic"),
        ({**nowhere, "topic": "t", "maxEntriesPerSplit": "0"}, "maxEntriesPerSplit"),
        ({**nowhere, "topic": "t", "startingOfsets": "earliest"}, "startingOfsets"),
        ({"admin.url": "pulsar://127.0.0.1:6650", "metadata.url": "127.0.0.1:9", "topic": "t"}, "admin.url"),
        ({"admin.url": "http://127.0.0.1:9", "topic": "t"}, "metadata.url"),
    ]
    for options, option in cases:
        with pytest.raises(PySparkException) as caught:
            spark.read.format("magnetar").options(**options).load()
        text = str(caught.value)
        # Spark hands option names over lowercased; known ones are named as documented.
        assert "SourceOptionError" in text and f"option {option!r}".lower() in text.lower(), text
    # A stream's reader is made when the query starts: its bad options end the query before it reads.
    stream = spark.readStream.format("magnetar").options(**nowhere, topic="t", endingOffsets="latest").load()
    query = stream.writeStream.format("memory").queryName("refused").start()
    try:
        with pytest.raises(PySparkException) as caught:
            query.awaitTermination(120)
        assert "option 'endingOffsets'" in str(caught.value)
    finally:
        query.stop()


def test_stream_picks_up_messages_produced_after_it_started(spark, regions, local_namespace, east_client,
                                                            tmp_path) -> None:
    east = regions[EAST]
    topic = new_topic(local_namespace, "stream")
    hold(east_client, topic)
    seen: list[dict] = []
    lock = threading.Lock()

    def collect(batch_df, batch_id) -> None:
        got = batch_df.select("value", "__ledgerId", "__entryId", "__batchIndex").toArrow().to_pylist()
        with lock:
            seen.extend(got)

    stream = (spark.readStream.format("magnetar").option("admin.url", east.http_url)
              .option("metadata.url", east.zk_connect).option("topic", topic)
              .option("startingOffsets", "earliest").load())
    query = (stream.writeStream.foreachBatch(collect).trigger(processingTime="500 milliseconds")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        def values() -> list[bytes]:
            if query.exception() is not None:
                raise AssertionError(f"the streaming query failed: {query.exception()}")
            with lock:
                return [r["value"] for r in seen]

        # An open ledger is read up to its newest entry: each entry carries the writer's LAC when it was sent,
        # and once adds stop the writer tells the bookies the rest (explicit LAC).
        first = produce(east_client, topic, 10, name="s1", batching=False, one_by_one=True)
        wait_for(lambda: len(values()) >= 10, 90, interval_s=0.2, what="the stream read the open ledger's messages")
        first += produce(east_client, topic, 40, name="s2", batching=False)
        wait_for(lambda: len(values()) >= 50, 90, interval_s=0.2, what="the stream read the open ledger's burst")
        unload(east, topic)  # closes the ledger: the next messages go to a new one
        second = produce(east_client, topic, 25, name="s3", batch_max=10)
        unload(east, topic)
        wait_for(lambda: len(values()) >= 75, 90, interval_s=0.2, what="the stream read messages of a new ledger")
        got = values()
        assert sorted(got) == sorted(s.payload for s in first + second)
        assert len({(r["__ledgerId"], r["__entryId"], r["__batchIndex"]) for r in seen}) == 75
        assert query.exception() is None
    finally:
        query.stop()


def test_a_namespaces_retention_keeps_consumed_ledgers_until_lifted(spark, regions, east_client) -> None:
    """Regression: a namespace's retention policy did not reach its topics' managed ledgers, so a topic without
    subscriptions lost each ledger as soon as it rolled over, whatever the policy said. With unlimited retention
    every message stays readable; back to no retention, the rolled-over ledgers are trimmed."""
    east = regions[EAST]
    namespace = regions.create_replicated_namespace(TENANT, f"kept-{uuid.uuid4().hex[:6]}", [EAST])
    retention = f"/admin/v2/namespaces/{namespace}/retention"
    east.admin("POST", retention, {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    topic = new_topic(namespace, "kept")
    sent = produce(east_client, topic, 3 * ENTRIES_PER_LEDGER + 10, name="kept", batching=False, one_by_one=True)
    unload(east, topic)

    def ledgers() -> int:
        return len(east.admin("GET", f"/admin/v2/{topic_path(topic)}/internalStats")["ledgers"])

    assert ledgers() >= 4  # nothing trimmed: no subscription, but retention keeps it all
    assert reader(spark, east, topic=topic).load().count() == len(sent)

    east.admin("POST", retention, {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    wait_for(lambda: ledgers() <= 1, 30, interval_s=0.5, what="the consumed ledgers trimmed once retention is 0")
