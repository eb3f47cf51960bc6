"""Kafka record batches ⇄ Pulsar entries (broker/kafka/records.py): every codec aiokafka offers, keys,
values, headers and timestamps survive both ways; pulsar-client's entries (batched or not, compressed) read as
records; malformed input is refused with Kafka's error codes."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.kafka.records import (KafkaRecord, RecordsError, batch_to_entry, entry_messages, entry_to_batch,
                                  split_record_batches)
from magnetar.protocol import compression, pb
from magnetar.protocol.batch import join_batch
from magnetar.protocol.frames import encode_entry, parse_entry

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

keys = st.none() | st.binary(max_size=20)
values = st.none() | st.binary(max_size=200)
header = st.tuples(st.text(min_size=1, max_size=8).filter(lambda k: not k.startswith("__kafka")),
                   st.none() | st.binary(max_size=12))
records = st.lists(st.tuples(keys, values, st.integers(1, 2**41), st.lists(header, max_size=3)),
                   min_size=1, max_size=12)


def build(items, codec: int = 0, *, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                        base_sequence=base_sequence, batch_size=1 << 24)
    for i, (key, value, ts, headers) in enumerate(items):
        builder.append(i, timestamp=ts, key=key, value=value, headers=list(headers))
    return bytes(builder.build())


@settings(max_examples=60, deadline=None)
@given(items=records, codec=st.sampled_from(sorted(CODECS.values())), base=st.integers(0, 2**40))
def test_a_batch_survives_the_round_trip_through_an_entry(items, codec, base) -> None:
    batch = split_record_batches(build(items, codec))[0]
    entry = batch_to_entry(batch, producer_name="p", sequence_id=7)
    parsed = parse_entry(entry)
    assert parsed.metadata.num_messages_in_batch == len(items)
    assert parsed.metadata.compression == {0: pb.NONE, 1: pb.ZLIB, 2: pb.SNAPPY, 3: pb.LZ4, 4: pb.ZSTD}[codec]
    back = MemoryRecords(entry_to_batch(entry, base)).next_batch()
    assert back.base_offset == base and back.validate_crc()
    got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in back]
    assert got == [(base + i, k, v, ts, list(h)) for i, (k, v, ts, h) in enumerate(items)]


def test_pulsar_client_entries_read_as_records() -> None:
    single = pb.SingleMessageMetadata(partition_key="k1", event_time=1234)
    single.properties.add(key="h", value="v")
    payload = join_batch([(single, b"one"), (pb.SingleMessageMetadata(), b"two")])
    md = pb.MessageMetadata(producer_name="x", sequence_id=0, publish_time=999, num_messages_in_batch=2,
                            compression=pb.LZ4, uncompressed_size=len(payload))
    batched = encode_entry(md, compression.compress(pb.LZ4, payload))
    assert entry_messages(batched) == [KafkaRecord(b"k1", b"one", 1234, (("h", b"v"),)),
                                       KafkaRecord(None, b"two", 999, ())]
    plain = encode_entry(pb.MessageMetadata(producer_name="x", sequence_id=1, publish_time=5, partition_key="k"),
                         b"solo")
    assert entry_messages(plain) == [KafkaRecord(b"k", b"solo", 5, ())]
    replicated = pb.MessageMetadata(producer_name="x", sequence_id=1, publish_time=5, replicated_from="east")
    replicated.properties.add(key="__magnetar.repl.source_position", value="1:0")
    replicated.properties.add(key="app", value="kept")
    assert entry_messages(encode_entry(replicated, b"r")) == [KafkaRecord(None, b"r", 5, (("app", b"kept"),))]
    marker = encode_entry(pb.MessageMetadata(producer_name="x", sequence_id=2, publish_time=5, marker_type=10), b"")
    assert entry_messages(marker) == []


def test_idempotence_fields_are_read() -> None:
    batch = split_record_batches(build([(b"k", b"v", 1, [])], producer_id=42, base_sequence=9))[0]
    assert (batch.producer_id, batch.base_sequence) == (42, 9)


@pytest.mark.parametrize("data, code", [
    (b"", 42),
    (b"\x00" * 8, 42),  # no complete batch
    (b"garbage" * 10, 2),
])
def test_malformed_records_are_refused(data, code) -> None:
    with pytest.raises(RecordsError) as caught:
        split_record_batches(data)
    assert caught.value.code in (code, 2, 42)


def test_a_corrupted_batch_fails_its_crc() -> None:
    data = bytearray(build([(b"k", b"value", 1, [])]))
    data[-1] ^= 0xFF
    with pytest.raises(RecordsError) as caught:
        split_record_batches(bytes(data))
    assert caught.value.code == 2


def test_old_message_formats_are_refused() -> None:
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1, key=b"k", value=b"v")
    with pytest.raises(RecordsError) as caught:
        split_record_batches(bytes(builder.build()))
    assert caught.value.code == 43
