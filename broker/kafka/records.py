"""Kafka record batches (v2) ⇄ Pulsar entries (pure).

Produce: each Kafka record batch becomes one Pulsar *batched* entry (``num_messages_in_batch`` = the batch's
record count), so a batch is stored, replicated and deduplicated as one unit, as a pulsar-client batch is:

* record key → ``partition_key`` (UTF-8; other bytes base64 with ``partition_key_b64_encoded``), a null key
  leaves it unset; record value → payload (a null value sets ``null_value``);
* headers → ``properties`` (a header whose value is not UTF-8 is kept as ``__kafka_b64.<key>`` = base64, and a
  null value as ``__kafka_null.<key>``, so the reverse is exact);
* record timestamp → ``event_time`` (Kafka's -1, no timestamp, leaves it unset);
* the batch's codec → the entry's (gzip → ZLIB, snappy, lz4, zstd as they are), over the joined payload.

Fetch: an entry becomes one record batch v2 whose base offset is the offset of the entry's first message,
uncompressed, whatever wrote it (a pulsar-client message, batched or not, compressed or not): the payload →
value, ``partition_key`` → key, properties → headers (but the broker's own ``__magnetar.*``, such as a
replicated entry's origin position), ``event_time`` (else ``publish_time``) → timestamp.
"""

from __future__ import annotations

import base64
import binascii
import struct
import time
from dataclasses import dataclass
from typing import Optional

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from magnetar.errors import MagnetarError
from magnetar.protocol import compression, pb
from magnetar.protocol.batch import join_batch, split_batch
from magnetar.protocol.frames import encode_entry, parse_entry

__all__ = ["RecordsError", "KafkaBatch", "split_record_batches", "batch_to_entry", "entry_to_batch"]

_B64_PREFIX = "__kafka_b64."
_NULL_PREFIX = "__kafka_null."
_INTERNAL_PREFIX = "__magnetar."
# Kafka attributes' codec bits -> Pulsar CompressionType
_KAFKA_TO_PULSAR = {0: pb.NONE, 1: pb.ZLIB, 2: pb.SNAPPY, 3: pb.LZ4, 4: pb.ZSTD}
_BATCH_HEADER = struct.Struct(">qi")  # base offset, batch length
_MAX_BATCH_BUILD = 1 << 30


class RecordsError(MagnetarError, ValueError):
    """Records a client sent cannot be stored (``code``: the Kafka error to answer with)."""

    def __init__(self, message: str, code: int = 2) -> None:  # CORRUPT_MESSAGE
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class KafkaRecord:
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: int
    headers: tuple[tuple[str, Optional[bytes]], ...]


@dataclass(frozen=True)
class KafkaBatch:
    """One decoded Kafka record batch as a producer sent it."""

    records: tuple[KafkaRecord, ...]
    codec: int  # Kafka's compression bits
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool


def split_record_batches(data: bytes) -> list[KafkaBatch]:
    """Decodes the record batches of a Produce partition (``records``).

    Raises:
        RecordsError: not v2 batches (UNSUPPORTED_FOR_MESSAGE_FORMAT), a bad CRC, truncated or undecodable
            records, a control batch (CORRUPT_MESSAGE / INVALID_REQUEST).
    """
    if not data:
        raise RecordsError("no records", code=42)
    batches: list[KafkaBatch] = []
    try:
        records = MemoryRecords(bytes(data))
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            if not isinstance(batch, DefaultRecordBatch) or batch.magic != 2:
                raise RecordsError("only record batches v2 (magic 2) are accepted", code=43)
            if not batch.validate_crc():
                raise RecordsError("a record batch fails its CRC check")
            if batch.is_control_batch:
                raise RecordsError("control batches cannot be produced", code=42)
            items = tuple(KafkaRecord(r.key, r.value, r.timestamp, tuple(r.headers)) for r in batch)
            if not items:
                raise RecordsError("an empty record batch", code=42)
            batches.append(KafkaBatch(items, batch.compression_type, batch.producer_id, batch.producer_epoch,
                                      batch.base_sequence, batch.is_transactional))
    except RecordsError:
        raise
    except Exception as exc:  # aiokafka raises CorruptRecordError, struct.error, ValueError, ...
        raise RecordsError(f"undecodable record batch: {type(exc).__name__}: {exc}") from None
    if not batches:
        raise RecordsError("no complete record batch", code=42)
    return batches


def _single_metadata(record: KafkaRecord) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata()
    if record.key is not None:
        try:
            single.partition_key = record.key.decode("utf-8")
        except UnicodeDecodeError:
            single.partition_key = base64.b64encode(record.key).decode("ascii")
            single.partition_key_b64_encoded = True
    if record.value is None:
        single.null_value = True
    if record.timestamp is not None and record.timestamp > 0:
        single.event_time = record.timestamp
    for key, value in record.headers:
        prop = single.properties.add()
        if value is None:
            prop.key, prop.value = _NULL_PREFIX + key, ""
            continue
        try:
            prop.key, prop.value = key, bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            prop.key, prop.value = _B64_PREFIX + key, base64.b64encode(value).decode("ascii")
    return single


def batch_to_entry(batch: KafkaBatch, *, producer_name: str, sequence_id: int,
                   publish_time_ms: Optional[int] = None) -> bytes:
    """The Pulsar entry storing ``batch`` (see the module docstring)."""
    payload = join_batch((_single_metadata(r), r.value or b"") for r in batch.records)
    metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id,
                                  publish_time=publish_time_ms or int(time.time() * 1000),
                                  num_messages_in_batch=len(batch.records))
    if len(batch.records) > 1:
        metadata.highest_sequence_id = sequence_id + len(batch.records) - 1
    codec = _KAFKA_TO_PULSAR.get(batch.codec, pb.NONE)
    if codec != pb.NONE:
        metadata.compression = codec
        metadata.uncompressed_size = len(payload)
        payload = compression.compress(codec, payload)
    return encode_entry(metadata, payload)


def _headers(properties) -> list[tuple[str, Optional[bytes]]]:
    headers: list[tuple[str, Optional[bytes]]] = []
    for prop in properties:
        key = prop.key
        if key.startswith(_INTERNAL_PREFIX):
            continue  # the broker's own (a replicated entry's origin position)
        if key.startswith(_NULL_PREFIX):
            headers.append((key[len(_NULL_PREFIX):], None))
        elif key.startswith(_B64_PREFIX):
            try:
                headers.append((key[len(_B64_PREFIX):], base64.b64decode(prop.value, validate=True)))
            except (binascii.Error, ValueError):
                headers.append((key, prop.value.encode("utf-8")))
        else:
            headers.append((key, prop.value.encode("utf-8")))
    return headers


def _key(md) -> Optional[bytes]:
    if not md.HasField("partition_key"):
        return None
    if md.partition_key_b64_encoded:
        try:
            return base64.b64decode(md.partition_key, validate=True)
        except (binascii.Error, ValueError):
            pass
    return md.partition_key.encode("utf-8")


def entry_messages(entry: bytes) -> list[KafkaRecord]:
    """The messages of a stored entry (without its broker entry metadata) as Kafka records.

    Raises:
        MagnetarError: an entry that cannot be parsed or decompressed (the caller skips or fails it).
    """
    parsed = parse_entry(entry, require_checksum=False)
    md = parsed.metadata
    if md.HasField("marker_type"):
        return []  # replication and transaction markers are not messages
    payload = parsed.payload
    if md.compression != pb.NONE:
        payload = compression.decompress(md.compression, payload, md.uncompressed_size)
    base_time = md.event_time or md.publish_time
    if not md.HasField("num_messages_in_batch"):
        value = None if md.null_value else bytes(payload)
        return [KafkaRecord(_key(md), value, base_time, tuple(_headers(md.properties)))]
    out = []
    for single_md, value in split_batch(payload, md.num_messages_in_batch):
        out.append(KafkaRecord(_key(single_md), None if single_md.null_value else value,
                               single_md.event_time or base_time,
                               tuple(_headers([*md.properties, *single_md.properties]))))
    return out


def records_to_batch(records: list[KafkaRecord], base_offset: int) -> bytes:
    """One uncompressed record batch v2 of ``records`` at offsets ``base_offset``..."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=_MAX_BATCH_BUILD)
    for i, record in enumerate(records):
        builder.append(i, timestamp=record.timestamp if record.timestamp > 0 else 0, key=record.key,
                       value=record.value, headers=list(record.headers))
    data = bytearray(builder.build())
    # the base offset is outside the CRC (which covers attributes onwards): set it after building
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def entry_to_batch(entry: bytes, base_offset: int) -> bytes:
    """The record batch v2 a Kafka consumer receives for a stored entry (see the module docstring)."""
    return records_to_batch(entry_messages(entry), base_offset)
