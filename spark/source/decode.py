"""Stored entries to rows (pure): parse, decompress, split batches, and fill Arrow columns.

An entry is what the producer sent (``MessageMetadata`` + payload, possibly compressed, possibly a batch),
parsed with the protocol's own codec (:func:`magnetar.protocol.parse_entry`, :func:`~magnetar.protocol.
decompress`, :func:`~magnetar.protocol.split_batch`), exactly as a consumer sees it:

* a marker (``marker_type`` set: replicated-subscription snapshots and the like) gives no row;
* a non-batched entry gives one row, ``__batchIndex`` -1, id ``(ledger, entry, partition)``;
* a batched entry gives one row per member not compacted out, ``__batchIndex`` its index, id
  ``(ledger, entry, partition, index)`` with the batch size, as pulsar-client serializes a received
  message's id; a member's key, properties, event time and sequence id are its own
  (``SingleMessageMetadata``), the sequence id defaulting to the entry's plus the index as pulsar-client
  assigns them; producer name, publish time, ``replicated_from`` and ``replicate_to`` are the entry's.
* ``__brokerPublishTime`` and ``__index`` come from the entry's broker entry metadata (null without it): the
  broker's time is the entry's; the index is the member's own, counted back from the entry's (which is that
  of its last message), as Pulsar's ``Message.getIndex``.

Columns are kept as Python lists and arrays (the fields a batch's members share: once per entry) and
become one ``pyarrow.RecordBatch`` per :meth:`RowBuilder.flush` (shared fields spread over their rows by Arrow).
"""

from __future__ import annotations

from array import array
from itertools import repeat
from operator import attrgetter, itemgetter

import pyarrow as pa

from magnetar.protocol import ProtocolError, decompress, parse_entry, split_batch

from .errors import SourceDataError
from .schema import ARROW_SCHEMA, arrow_schema

__all__ = ["RowBuilder", "encode_message_id"]

_TIMESTAMP = ARROW_SCHEMA.field("__publishTime").type
_PROPERTIES = ARROW_SCHEMA.field("__messageProperties").type
_CLUSTERS = ARROW_SCHEMA.field("__replicateTo").type
_U64 = 1 << 64
_METADATA, _PAYLOAD = itemgetter(0), itemgetter(1)  # of a split_batch item
_COMPACTED_OUT = attrgetter("compacted_out")


def _fixed(type_: pa.DataType, n: int, values: array) -> pa.Array:
    """``n`` fixed-width values without nulls, from an ``array`` of the same width (its memory, not copied)."""
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(values)])


def _varint(value: int) -> bytes:
    value %= _U64  # negative int32/int64 fields are sent as 64-bit two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint(i) for i in range(1 << 14)]  # every batch index and size in one or two bytes


def _vi(value: int) -> bytes:
    return _SMALL[value] if 0 <= value < 16384 else _varint(value)


def _id_prefix(ledger_id: int, entry_id: int, partition: int) -> bytes:
    # MessageIdData: ledgerId = 1, entryId = 2, partition = 3 (only when not -1)
    prefix = b"\x08" + _vi(ledger_id) + b"\x10" + _vi(entry_id)
    return prefix + b"\x18" + _vi(partition) if partition != -1 else prefix


def encode_message_id(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1,
                      batch_size: int = 0) -> bytes:
    """The bytes of ``MessageId(...).serialize()`` (and pulsar-client's ``MessageId.serialize()``), without
    building a protobuf message per row."""
    out = _id_prefix(ledger_id, entry_id, partition)
    if batch_index != -1:
        out += b"\x20" + _vi(batch_index)
    if batch_size:
        out += b"\x30" + _vi(batch_size)
    return out


class RowBuilder:
    """Accumulates the rows of one split (one topic, one region) column by column.

    Attributes:
        rows: rows held since the last flush.
        markers: marker entries skipped so far.
    """

    def __init__(self, topic: str, region: str, partition: int, value_schema=None) -> None:
        self.topic = topic
        self.region = region
        self.partition = partition
        self.markers = 0
        # A JSON/Avro topic read as columns (spark.source.values): payloads decoded at flush.
        self._decoder = value_schema.decoder() if value_schema is not None else None
        self._schema = arrow_schema(value_schema)
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        # One slot per row:
        self._values: list[bytes] = []
        self._keys: list = []
        self._ids: list[bytes] = []
        self._events: list = []
        self._prop_offsets: list[int] = [0]
        self._prop_keys: list[str] = []
        self._prop_values: list[str] = []
        self._sequences = array("q")
        self._indexes = array("i")
        self._entry_indexes: list = []
        self._row_entry = array("q")  # the row's entry: its position in the per-entry lists below
        # One slot per entry (a batch's members share them; spread over the rows at flush, in Arrow):
        self._publish: list[int] = []
        self._producers: list[str] = []
        self._replicated: list = []
        self._ledgers: list[int] = []
        self._entries: list[int] = []
        self._replicate_to: list[list[str]] = []
        self._broker_times: list = []

    def add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> int:
        """Adds the rows of one stored entry; returns how many.

        Raises:
            SourceDataError: the entry is not a readable message entry (checksum, metadata, codec, batch).
        """
        try:
            return self._add(ledger_id, entry_id, data)
        except ProtocolError as e:
            raise SourceDataError(f"{self.topic} in {self.region}: entry {ledger_id}:{entry_id} cannot be read as "
                                  f"messages: {e}") from None
        except OverflowError:  # a uint64 sequence id at or past 2**63: Spark's bigint column cannot hold it
            raise SourceDataError(f"{self.topic} in {self.region}: entry {ledger_id}:{entry_id} has a sequence id "
                                  "beyond a signed 64-bit integer") from None

    def _add(self, ledger_id: int, entry_id: int, data: bytes) -> int:
        parsed = parse_entry(data, require_checksum=False)
        md = parsed.metadata
        if md.HasField("marker_type"):
            self.markers += 1
            return 0
        payload = parsed.payload
        if md.compression:
            payload = decompress(md.compression, payload, md.uncompressed_size)
        prefix = _id_prefix(ledger_id, entry_id, self.partition)
        bem = parsed.broker_entry_metadata
        index = bem.index if bem is not None and bem.HasField("index") else None
        if md.HasField("num_messages_in_batch"):
            n = self._add_batch(prefix, md, payload, index)
            if not n:
                return 0
        else:
            n = 1
            self._values.append(payload)
            self._keys.append(md.partition_key if md.HasField("partition_key") else None)
            self._ids.append(prefix)
            self._events.append(md.event_time * 1000 if md.event_time else None)
            props = md.properties
            if props:
                self._prop_keys.extend([kv.key for kv in props])
                self._prop_values.extend([kv.value for kv in props])
            self._prop_offsets.append(len(self._prop_keys))
            self._sequences.append(md.sequence_id)
            self._indexes.append(-1)
            self._entry_indexes.append(index)
        self._row_entry.extend(repeat(len(self._ledgers), n))
        self._publish.append(md.publish_time * 1000)
        self._producers.append(md.producer_name)
        self._replicated.append(md.replicated_from if md.HasField("replicated_from") else None)
        self._ledgers.append(ledger_id)
        self._entries.append(entry_id)
        self._replicate_to.append(list(md.replicate_to))
        self._broker_times.append(bem.broker_timestamp * 1000
                                  if bem is not None and bem.HasField("broker_timestamp") else None)
        self.rows += n
        return n

    def _add_batch(self, prefix: bytes, md, payload: bytes, last_index: int | None) -> int:
        count = md.num_messages_in_batch
        items = split_batch(payload, count)
        metas = list(map(_METADATA, items))
        indexes = range(count)
        if any(map(_COMPACTED_OUT, metas)):  # only in a compacted ledger: keep the index of each
            indexes = [i for i, sm in enumerate(metas) if not sm.compacted_out]
            items = [items[i] for i in indexes]
            metas = [metas[i] for i in indexes]
        head, tail = prefix + b"\x20", b"\x30" + _vi(count)
        base_sequence = md.sequence_id
        self._values.extend(map(_PAYLOAD, items))
        self._keys.extend([sm.partition_key if sm.HasField("partition_key") else None for sm in metas])
        small = _SMALL if count <= len(_SMALL) else None
        self._ids.extend([head + small[i] + tail for i in indexes] if small is not None
                         else [head + _vi(i) + tail for i in indexes])
        self._events.extend([sm.event_time * 1000 if sm.event_time else None for sm in metas])
        self._sequences.extend([sm.sequence_id if sm.HasField("sequence_id") else base_sequence + i
                                for i, sm in zip(indexes, metas)])
        self._indexes.extend(indexes)
        if last_index is None:
            self._entry_indexes.extend(repeat(None, len(metas)))
        else:
            self._entry_indexes.extend([last_index - count + 1 + i for i in indexes])
        prop_keys, prop_values, prop_offsets = self._prop_keys, self._prop_values, self._prop_offsets
        for sm in metas:
            props = sm.properties
            if props:
                for kv in props:
                    prop_keys.append(kv.key)
                    prop_values.append(kv.value)
            prop_offsets.append(len(prop_keys))
        return len(metas)

    def flush(self) -> pa.RecordBatch:
        """The rows held, as one record batch of :data:`~spark.source.schema.ARROW_SCHEMA`; then empty again."""
        n = self.rows
        row_entry = _fixed(pa.int64(), n, self._row_entry)

        def per_entry(values: list, type_: pa.DataType) -> pa.Array:
            return pa.array(values, type_).take(row_entry)

        # A JSON/Avro topic's payloads become its schema's columns; others are the binary ``value``.
        values = self._value_columns() if self._decoder is not None else [pa.array(self._values, pa.binary())]
        columns = [
            *values,
            pa.array(self._keys, pa.string()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.array(self._ids, pa.binary()),
            per_entry(self._publish, _TIMESTAMP),
            pa.array(self._events, _TIMESTAMP),
            pa.MapArray.from_arrays(pa.array(self._prop_offsets, pa.int32()), pa.array(self._prop_keys, pa.string()),
                                    pa.array(self._prop_values, pa.string()), type=_PROPERTIES),
            pa.repeat(pa.scalar(self.region, pa.string()), n),
            per_entry(self._producers, pa.string()),
            _fixed(pa.int64(), n, self._sequences),
            per_entry(self._replicated, pa.string()),
            per_entry(self._ledgers, pa.int64()),
            per_entry(self._entries, pa.int64()),
            _fixed(pa.int32(), n, self._indexes),
            per_entry(self._replicate_to, _CLUSTERS),
            per_entry(self._broker_times, _TIMESTAMP),
            pa.array(self._entry_indexes, pa.int64()),
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        self._reset()
        return batch

    def _value_columns(self) -> list[pa.Array]:
        decoded = []
        for i, payload in enumerate(self._values):
            try:
                decoded.append(self._decoder.decode(payload))
            except ValueError as e:
                entry = self._row_entry[i]
                raise SourceDataError(
                    f"{self.topic} in {self.region}: message {self._ledgers[entry]}:{self._entries[entry]}"
                    f"{'' if self._indexes[i] < 0 else ':' + str(self._indexes[i])} does not match the topic's "
                    f"{self._decoder.schema.kind} schema: {e}") from None
        nfields = len(self._decoder.schema.fields)
        target = pa.struct(list(self._schema)[:nfields])
        try:
            return self._decoder.columns(decoded, target)
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise SourceDataError(f"{self.topic} in {self.region}: values do not fit the topic's "
                                  f"{self._decoder.schema.kind} schema: {e}") from None
