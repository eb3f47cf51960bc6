"""Topic compaction, the pure part: which messages survive, how a surviving batch is rebuilt, and the
record format of a compacted ledger.

Theory of operation (as Pulsar's two-phase compactor). Phase one folds every message of the topic, in
order, into :class:`LatestPerKey`: a key's latest message id ``(position, batch index)`` replaces the earlier
one, a message with an empty payload (or ``null_value``) is a *tombstone* and removes the key. Phase two reads
the same messages again and keeps exactly those whose id is still the latest of their key
(:func:`compact_entry`): an entry that is not a batch survives whole or not at all; a batch is unpacked and
the survivors are re-batched into one entry (same codec, ``num_messages_in_batch`` = survivors; the client
numbers them 0..n-1 again). Messages without a key are dropped, as Pulsar does since 3.2 (its
``topicCompactionRetainNullKey=false`` default). Server markers are dropped too.

A compacted ledger holds one record per surviving entry: ``[ledger_id i64][entry_id i64][entry]``, the
original position first, so the messages keep their original message ids when served from it.

Nothing here imports asyncio.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Optional, Sequence

from broker.managed_ledger.api import Entry, Position
from magnetar.errors import MagnetarError
from magnetar.protocol.metadata import COMPRESSION_NONE, MessageMetadata
from magnetar.protocol.batch import join_batch, split_batch
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import encode_entry, parse_entry

COMPACTION_CURSOR = "__compaction"  # Pulsar's Compactor.COMPACTION_SUBSCRIPTION
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"  # Pulsar's COMPACTED_TOPIC_LEDGER_PROPERTY (cursor property)
EARLIEST = Position(-1, -1)

_RECORD_HEADER = struct.Struct(">qq")


class MessageRef(NamedTuple):
    """One message of an entry: its batch index (-1 when the entry is not a batch), key, tombstone flag."""

    index: int
    key: Optional[str]
    tombstone: bool


class CompactionError(MagnetarError):
    """An entry could not be compacted (undecodable). Not a BrokerServiceError: this module is pure logic,
    and the broker maps it at its boundary (``errors.map_error``: an internal error)."""


def _key_of(md) -> Optional[str]:
    return md.partition_key if md.HasField("partition_key") else None


def _batch_payload(md: MessageMetadata, payload: bytes) -> bytes:
    if md.compression != COMPRESSION_NONE:
        return decompress(md.compression, payload, md.uncompressed_size)
    return payload


def entry_messages(data: bytes) -> list[MessageRef]:
    """The messages of a stored entry, in batch order; [] for a server marker.

    Raises:
        CompactionError: the bytes are not a decodable entry.
    """
    try:
        parsed = parse_entry(data, require_checksum=False)
        md = parsed.metadata
        if md.HasField("marker_type"):
            return []
        if not md.HasField("num_messages_in_batch"):
            size = md.uncompressed_size if md.compression != COMPRESSION_NONE else len(parsed.payload)
            return [MessageRef(-1, _key_of(md), size == 0 or md.null_value)]
        items = split_batch(_batch_payload(md, parsed.payload), md.num_messages_in_batch)
    except ProtocolError as exc:
        raise CompactionError(f"undecodable entry: {exc}") from exc
    return [MessageRef(i, _key_of(item.metadata), len(item.payload) == 0 or item.metadata.null_value)
            for i, item in enumerate(items)]


@dataclass
class LatestPerKey:
    """Phase one: the latest message id of every live key (tombstoned keys removed)."""

    latest: dict[str, tuple[Position, int]] = field(default_factory=dict)
    messages_seen: int = 0

    def add(self, position: Position, data: bytes) -> None:
        for ref in entry_messages(data):
            self.messages_seen += 1
            if ref.key is None:
                continue
            if ref.tombstone:
                self.latest.pop(ref.key, None)
            else:
                self.latest[ref.key] = (position, ref.index)

    def survivors_of(self, position: Position) -> set[int]:
        """Batch indexes (-1: the whole non-batched entry) at ``position`` that are the latest of their key."""
        return {index for pos, index in self.latest.values() if pos == position}


def compact_entry(position: Position, data: bytes, latest: LatestPerKey) -> tuple[Optional[bytes], int]:
    """Phase two for one entry: (the entry to write to the compacted ledger or None, messages kept).

    Raises:
        CompactionError: the bytes are not a decodable entry.
    """
    keep = latest.survivors_of(position)
    if not keep:
        return None, 0
    refs = entry_messages(data)
    if len(refs) == 1 and refs[0].index == -1:
        return data, 1
    if len(keep) == len(refs):
        return data, len(refs)
    try:
        parsed = parse_entry(data, require_checksum=False)
        md = parsed.metadata
        items = split_batch(_batch_payload(md, parsed.payload), md.num_messages_in_batch)
        kept = [(item.metadata, item.payload) for i, item in enumerate(items) if i in keep]
        payload = join_batch(kept)
        new_md = MessageMetadata()
        new_md.CopyFrom(md)
        new_md.num_messages_in_batch = len(kept)
        if md.compression != COMPRESSION_NONE:
            new_md.uncompressed_size = len(payload)
            payload = compress(md.compression, payload)
        return encode_entry(new_md, payload, broker_entry_metadata=parsed.broker_entry_metadata), len(kept)
    except ProtocolError as exc:
        raise CompactionError(f"cannot rebuild the batch at {position}: {exc}") from exc


def compact(entries: Sequence[Entry]) -> tuple[list[Entry], int]:
    """Both phases over ``entries`` in memory (for tests and small topics): (surviving entries, messages
    removed)."""
    latest = LatestPerKey()
    for e in entries:
        latest.add(e.position, e.data)
    out, kept = [], 0
    for e in entries:
        data, n = compact_entry(e.position, e.data, latest)
        if data is not None:
            out.append(Entry(e.position, data))
            kept += n
    return out, latest.messages_seen - kept


# ------------------------------------------------------------------------------------------ ledger records


def encode_record(position: Position, data: bytes) -> bytes:
    return _RECORD_HEADER.pack(position.ledger_id, position.entry_id) + data


def decode_record(record: bytes) -> Entry:
    if len(record) < _RECORD_HEADER.size:
        raise CompactionError(f"compacted-ledger record of {len(record)} bytes is too short")
    ledger_id, entry_id = _RECORD_HEADER.unpack_from(record, 0)
    return Entry(Position(ledger_id, entry_id), bytes(record[_RECORD_HEADER.size:]))


def first_at_or_after(positions: Sequence[Position], position: Position) -> int:
    """Index of the first of the ascending ``positions`` that is ``>= position`` (len when none)."""
    return bisect.bisect_left(positions, position)


def iter_batches(start: int, end: int, size: int) -> Iterator[tuple[int, int]]:
    """Inclusive ``(first, last)`` ranges covering ``start..end-1`` in steps of ``size``."""
    for first in range(start, end, size):
        yield first, min(first + size, end) - 1
