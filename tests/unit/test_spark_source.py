"""The Spark source's pure parts: schema, message ids, entry decoding, planning, offsets (no servers, no JVM)."""

from __future__ import annotations

import datetime
import gc
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.client import LedgerEntry
from magnetar.protocol import MessageId, compress, encode_entry, join_batch, pb
from spark.source.decode import RowBuilder, encode_message_id
from spark.source.errors import SourceDataError
from spark.source.offsets import EARLIEST, Position, offsets_from_json, offsets_to_json
from spark.source.planning import LedgerExtent, latest_position, plan_topic
from spark.source.schema import ARROW_SCHEMA, COLUMNS, spark_schema

TOPIC = "persistent://t/ns/x"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _ms(when: datetime.datetime) -> int:
    return (when - _EPOCH) // datetime.timedelta(milliseconds=1)

# ------------------------------------------------------------------------------------------ schema


def test_arrow_schema_is_what_spark_expects_of_the_declared_schema() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)
    assert list(COLUMNS) == ["value", "__key", "__topic", "__messageId", "__publishTime", "__eventTime",
                             "__messageProperties", "__region", "__producerName", "__sequenceId", "__replicatedFrom",
                             "__ledgerId", "__entryId", "__batchIndex", "__replicateTo", "__brokerPublishTime",
                             "__index"]


# ------------------------------------------------------------------------------------------ message ids


@given(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(-1, 2**31 - 1),
       st.integers(0, 100_000), st.integers(1, 100_000))
def test_message_id_bytes_equal_the_protocol_codec(ledger: int, entry: int, partition: int, index: int,
                                                   size: int) -> None:
    assert encode_message_id(ledger, entry, partition) == MessageId(ledger, entry, partition).serialize()
    assert encode_message_id(ledger, entry, partition, index, size) == \
        MessageId(ledger, entry, partition, index, size).serialize()


def test_message_id_bytes_are_pulsar_clients() -> None:
    pulsar = pytest.importorskip("pulsar")
    data = encode_message_id(12, 34, 2, 5, 10)
    mid = pulsar.MessageId.deserialize(data)
    assert (mid.ledger_id(), mid.entry_id(), mid.partition(), mid.batch_index()) == (12, 34, 2, 5)
    assert mid.serialize() == data


# ------------------------------------------------------------------------------------------ decoding


def _md(**fields) -> pb.MessageMetadata:
    fields.setdefault("producer_name", "prod")
    fields.setdefault("sequence_id", 100)
    fields.setdefault("publish_time", 1_700_000_000_123)
    return pb.MessageMetadata(**fields)


def _batch(items: list[tuple[pb.SingleMessageMetadata, bytes]], codec: int = pb.NONE, **md) -> bytes:
    raw = join_batch(items)
    payload = compress(codec, raw) if codec != pb.NONE else raw
    meta = _md(num_messages_in_batch=len(items), compression=codec, **md)
    if codec != pb.NONE:
        meta.uncompressed_size = len(raw)
    return encode_entry(meta, payload)


def _rows(builder: RowBuilder) -> list[dict]:
    batch = builder.flush()
    assert batch.schema.equals(ARROW_SCHEMA)
    return batch.to_pylist()


def test_single_message_entry_is_one_row() -> None:
    md = _md(partition_key="k", event_time=1_700_000_000_999, replicated_from="us-east")
    md.properties.add(key="a", value="1")
    b = RowBuilder(TOPIC, "eu-west", -1)
    assert b.add_entry(7, 3, encode_entry(md, b"hello")) == 1
    (row,) = _rows(b)
    assert row["value"] == b"hello" and row["__key"] == "k" and row["__topic"] == TOPIC
    assert MessageId.deserialize(row["__messageId"]) == MessageId(7, 3)
    assert _ms(row["__publishTime"]) == 1_700_000_000_123
    assert _ms(row["__eventTime"]) == 1_700_000_000_999
    assert row["__messageProperties"] == [("a", "1")]
    assert (row["__region"], row["__producerName"], row["__sequenceId"], row["__replicatedFrom"]) == \
        ("eu-west", "prod", 100, "us-east")
    assert (row["__ledgerId"], row["__entryId"], row["__batchIndex"]) == (7, 3, -1)


@pytest.mark.parametrize("codec", [pb.NONE, pb.LZ4, pb.ZSTD, pb.ZLIB, pb.SNAPPY])
def test_batched_entry_gives_one_row_per_member_with_its_own_metadata(codec: int) -> None:
    items = []
    for i in range(5):
        sm = pb.SingleMessageMetadata(payload_size=0)
        if i % 2:
            sm.partition_key = f"k{i}"
            sm.properties.add(key="i", value=str(i))
            sm.event_time = 1_000 + i
        if i == 4:
            sm.sequence_id = 999
        items.append((sm, f"m{i}".encode() * (i + 1)))
    b = RowBuilder(f"{TOPIC}-partition-3", "r", 3)
    assert b.add_entry(9, 0, _batch(items, codec)) == 5
    rows = _rows(b)
    assert [r["value"] for r in rows] == [p for _, p in items]
    assert [r["__key"] for r in rows] == [None, "k1", None, "k3", None]
    assert [r["__messageProperties"] for r in rows] == [[], [("i", "1")], [], [("i", "3")], []]
    assert [None if r["__eventTime"] is None else _ms(r["__eventTime"]) for r in rows] == \
        [None, 1_001, None, 1_003, None]
    # A member's own sequence id wins; otherwise the entry's plus the index, as pulsar-client assigns them.
    assert [r["__sequenceId"] for r in rows] == [100, 101, 102, 103, 999]
    assert [r["__batchIndex"] for r in rows] == list(range(5))
    assert [MessageId.deserialize(r["__messageId"]) for r in rows] == [MessageId(9, 0, 3, i, 5) for i in range(5)]
    assert {r["__producerName"] for r in rows} == {"prod"} and {r["__replicatedFrom"] for r in rows} == {None}


def test_replicate_to_is_each_messages_and_empty_when_unset() -> None:
    """An entry's ``replicate_to`` (pulsar-client's ``replication_clusters`` / ``disable_replication``) is every
    member's; unset is an empty list, never null."""
    b = RowBuilder(TOPIC, "r", -1)
    b.add_entry(1, 0, encode_entry(_md(), b"plain"))
    b.add_entry(1, 1, encode_entry(_md(replicate_to=["__local__"]), b"local"))
    items = [(pb.SingleMessageMetadata(payload_size=0), b"m%d" % i) for i in range(3)]
    b.add_entry(1, 2, _batch(items, replicate_to=["us-east", "ap-south"]))
    b.add_entry(1, 3, _batch(items[:2]))
    rows = _rows(b)
    assert [r["__replicateTo"] for r in rows] == [[], ["__local__"], *[["us-east", "ap-south"]] * 3, [], []]


def test_markers_and_compacted_out_members_give_no_rows() -> None:
    b = RowBuilder(TOPIC, "r", -1)
    marker = _md(marker_type=pb.REPLICATED_SUBSCRIPTION_SNAPSHOT)
    assert b.add_entry(1, 0, encode_entry(marker, b"\x00\x01")) == 0
    assert b.markers == 1
    gone = pb.SingleMessageMetadata(payload_size=0, compacted_out=True)
    kept = pb.SingleMessageMetadata(payload_size=0)
    assert b.add_entry(1, 1, _batch([(gone, b"a"), (kept, b"b")])) == 1
    (row,) = _rows(b)
    assert (row["value"], row["__batchIndex"], row["__sequenceId"]) == (b"b", 1, 101)


def test_rows_accumulate_until_flushed() -> None:
    b = RowBuilder(TOPIC, "r", -1)
    for e in range(3):
        b.add_entry(2, e, encode_entry(_md(sequence_id=e), b"x%d" % e))
    assert b.rows == 3
    assert [r["__entryId"] for r in _rows(b)] == [0, 1, 2]
    assert b.rows == 0 and b.flush().num_rows == 0


def test_a_chunk_decodes_into_full_batches_with_the_cycle_collector_paused_only_meanwhile() -> None:
    from spark.source.runtime import _decode

    class Probe(RowBuilder):
        collecting: list[bool] = []

        def add_entry(self, ledger_id, entry_id, data):
            self.collecting.append(gc.isenabled())
            return super().add_entry(ledger_id, entry_id, data)

    entries = [LedgerEntry(2, e, encode_entry(_md(sequence_id=e), b"x")) for e in range(5)]
    b = Probe(TOPIC, "r", -1)
    assert gc.isenabled()
    batches = _decode(b, entries, 2)
    assert [x.num_rows for x in batches] == [2, 2] and b.rows == 1  # the fifth waits for the next chunk
    assert Probe.collecting == [False] * 5 and gc.isenabled()  # restored, also for whoever consumes the batches
    gc.disable()
    try:
        _decode(b, entries, 2)
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()
    with pytest.raises(SourceDataError):
        _decode(b, [LedgerEntry(2, 9, b"not an entry")], 2)
    assert gc.isenabled()


@pytest.mark.parametrize("entry", [b"", b"\x0e\x01\x00\x00\x00\x00garbage", b"not an entry at all"])
def test_unreadable_entries_fail_naming_the_position(entry: bytes) -> None:
    with pytest.raises(SourceDataError, match=r"entry 4:5"):
        RowBuilder(TOPIC, "r", -1).add_entry(4, 5, entry)


def test_a_sequence_id_past_a_signed_long_is_a_data_error() -> None:
    b = RowBuilder(TOPIC, "r", -1)
    with pytest.raises(SourceDataError, match="2:4 has a sequence id beyond"):
        b.add_entry(2, 4, encode_entry(_md(sequence_id=1 << 63), b"x"))
    with pytest.raises(SourceDataError, match="2:5 has a sequence id beyond"):
        b.add_entry(2, 5, _batch([(pb.SingleMessageMetadata(payload_size=1, sequence_id=(1 << 64) - 1), b"y")]))


def test_a_batch_that_does_not_split_fails() -> None:
    bad = encode_entry(_md(num_messages_in_batch=3), join_batch([(pb.SingleMessageMetadata(payload_size=0), b"a")]))
    with pytest.raises(SourceDataError, match="cannot be read as messages"):
        RowBuilder(TOPIC, "r", -1).add_entry(4, 5, bad)


# ------------------------------------------------------------------------------------------ planning


def _plan(extents, **kwargs):
    kwargs.setdefault("max_entries_per_split", 1000)
    return [(s.ledger_id, s.first_entry_id, s.last_entry_id)
            for s in plan_topic("r", "zk:1", TOPIC, -1, extents, **kwargs)]


def test_every_ledger_with_entries_is_a_split_and_big_ones_are_cut() -> None:
    extents = [LedgerExtent(3, 9), LedgerExtent(5, -1), LedgerExtent(8, 24, closed=False)]
    assert _plan(extents) == [(3, 0, 9), (8, 0, 24)]
    assert _plan(extents, max_entries_per_split=10) == [(3, 0, 9), (8, 0, 9), (8, 10, 19), (8, 20, 24)]


def test_start_is_inclusive_and_end_exclusive() -> None:
    extents = [LedgerExtent(3, 9), LedgerExtent(5, 9), LedgerExtent(8, 9)]
    assert _plan(extents, start=Position(3, 4), end=Position(8, 2)) == [(3, 4, 9), (5, 0, 9), (8, 0, 1)]
    assert _plan(extents, start=Position(5, 10)) == [(8, 0, 9)]
    assert _plan(extents, start=Position(4, 0), end=Position(5, 0)) == []
    assert _plan(extents, end=Position(3, 1)) == [(3, 0, 0)]


@given(st.lists(st.integers(-1, 30), min_size=1, max_size=6), st.integers(1, 7), st.integers(0, 8),
       st.integers(0, 31), st.integers(0, 8), st.integers(0, 31))
def test_splits_cover_exactly_the_range(lasts, max_entries, sl, se, el, ee) -> None:
    extents = [LedgerExtent(i, last) for i, last in enumerate(lasts)]
    start, end = Position(sl, se), Position(el, ee)
    got = []
    for ledger, first, last in _plan(extents, start=start, end=end, max_entries_per_split=max_entries):
        assert last - first + 1 <= max_entries
        got += [(ledger, e) for e in range(first, last + 1)]
    expected = [(i, e) for i, last in enumerate(lasts) for e in range(last + 1) if start <= Position(i, e) < end]
    assert got == expected


def test_latest_position_stops_at_the_first_open_ledger_and_never_goes_back() -> None:
    assert latest_position([]) == EARLIEST
    assert latest_position([LedgerExtent(3, 9), LedgerExtent(5, -1), LedgerExtent(8, 4, closed=False)]) == \
        Position(8, 5)
    # An older ledger still open (a rollover in progress): the offset waits for it to close.
    assert latest_position([LedgerExtent(3, 9, closed=False), LedgerExtent(5, 4, closed=False)]) == Position(3, 10)
    assert latest_position([LedgerExtent(3, 2, closed=False)], floor=Position(3, 5)) == Position(3, 5)


def test_offsets_round_trip_through_spark_json() -> None:
    offsets = {"us-east": {TOPIC: Position(3, 4)}, "eu-west": {}}
    doc = offsets_to_json(offsets)
    assert json.loads(json.dumps(doc)) == {"eu-west": {}, "us-east": {TOPIC: {"ledgerId": 3, "entryId": 4}}}
    assert offsets_from_json(doc) == offsets


# ------------------------------------------------------------------------------------------ JSON / Avro values


_RECORD = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": ["null", "string"]},
    {"name": "price", "type": ["double", "null"]},
    {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "where", "type": ["null", {"type": "record", "name": "Place", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}]},
    {"name": "raw", "type": "bytes"},
]}


def _values_schema(kind: str = "AVRO"):
    from spark.source.values import ValueSchema

    return ValueSchema(kind, json.dumps(_RECORD))


def test_avro_record_fields_become_spark_columns_ahead_of_the_metadata() -> None:
    from pyspark.sql.types import (ArrayType, BinaryType, DoubleType, IntegerType, LongType, MapType, StringType,
                                   StructField, StructType)

    schema = spark_schema(_values_schema())
    assert schema.fieldNames()[:8] == ["id", "item", "price", "tags", "attrs", "kind", "where", "raw"]
    assert schema.fieldNames()[8:] == list(COLUMNS[1:])
    by_name = {f.name: f for f in schema.fields}
    assert by_name["id"] == StructField("id", LongType(), False)
    assert by_name["item"] == StructField("item", StringType(), True)
    assert by_name["price"] == StructField("price", DoubleType(), True)
    assert by_name["tags"].dataType == ArrayType(StringType(), False) and by_name["tags"].nullable
    assert by_name["attrs"].dataType == MapType(StringType(), IntegerType(), False)
    assert by_name["kind"] == StructField("kind", StringType(), False)
    assert by_name["where"].dataType == StructType([StructField("city", StringType(), False),
                                                    StructField("zip", IntegerType(), True)])
    assert by_name["raw"].dataType == BinaryType()


@pytest.mark.parametrize("definition, message", [
    ({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]}, "union"),
    ({"type": "record", "name": "R", "fields": [{"name": "__key", "type": "string"}]}, "collide"),
    ({"type": "string"}, "not an Avro record"),
])
def test_unsupported_schemas_are_refused_with_the_reason(definition, message) -> None:
    from spark.source.values import ValueSchema

    with pytest.raises(Exception) as caught:
        ValueSchema("JSON", json.dumps(definition))
    assert "SourceOptionError" in type(caught.value).__name__ and message in str(caught.value)


def _order(i: int) -> dict:
    return {"id": i, "item": None if i % 2 else f"item-{i}", "price": i * 1.5, "tags": ["a", str(i)],
            "attrs": {"n": i}, "kind": "B" if i % 2 else "A", "where": {"city": "Paris", "zip": None}, "raw": b"\x00"}


def test_avro_and_json_payloads_decode_into_the_columns() -> None:
    fastavro = pytest.importorskip("fastavro")
    import io

    parsed = fastavro.parse_schema(_RECORD)
    for kind in ("AVRO", "JSON"):
        b = RowBuilder(TOPIC, "r", -1, _values_schema(kind))
        for i in range(3):
            if kind == "AVRO":
                out = io.BytesIO()
                fastavro.schemaless_writer(out, parsed, _order(i))
                data = out.getvalue()
            else:
                data = json.dumps({k: v for k, v in _order(i).items() if k != "raw"}).encode()  # bytes: not JSON
            b.add_entry(5, i, encode_entry(_md(), data))
        batch = b.flush()
        from pyspark.sql.pandas.types import to_arrow_schema

        assert batch.schema.equals(to_arrow_schema(spark_schema(_values_schema(kind)), timezone="UTC")), kind
        rows = batch.to_pylist()
        assert [r["id"] for r in rows] == [0, 1, 2]
        assert [r["item"] for r in rows] == ["item-0", None, "item-2"]
        assert [r["attrs"] for r in rows] == [[("n", 0)], [("n", 1)], [("n", 2)]]
        assert rows[1]["where"] == {"city": "Paris", "zip": None} and rows[1]["kind"] == "B"
        assert rows[2]["__entryId"] == 2 and "value" not in rows[0]
        if kind == "AVRO":
            assert rows[0]["raw"] == b"\x00"


def test_a_payload_that_is_not_of_the_schema_is_a_data_error_naming_the_message() -> None:
    b = RowBuilder(TOPIC, "r", -1, _values_schema("JSON"))
    b.add_entry(5, 7, encode_entry(_md(), b"not json"))
    with pytest.raises(SourceDataError, match="message 5:7 does not"):
        b.flush()
    # Behind other entries' rows, in a batch: the row's own entry and index are named
    b = RowBuilder(TOPIC, "r", -1, _values_schema("JSON"))
    good = json.dumps({k: v for k, v in _order(1).items() if k != "raw"}).encode()
    b.add_entry(5, 8, _batch([(pb.SingleMessageMetadata(payload_size=len(good)), good)] * 2))
    b.add_entry(5, 9, _batch([(pb.SingleMessageMetadata(payload_size=len(good)), good),
                              (pb.SingleMessageMetadata(payload_size=8), b"not json")]))
    with pytest.raises(SourceDataError, match="message 5:9:1 does not"):
        b.flush()
