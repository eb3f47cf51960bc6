"""What the broker reads from a stored entry without touching its payload, and batch ack-set arithmetic.

Pure (no asyncio). A stored entry is ``[0x0e02 section]?[0x0e01][crc32c][metadata_size][metadata][payload]``
(``magnetar.protocol.frames``). Dispatch needs only the metadata: how many messages the entry holds
(permits are counted in messages), whether it is an internal marker (never delivered), its deliver time
(delayed delivery), its publish time (seek by time, TTL) and its sticky key (Key_Shared). The checksum was
verified when the entry was published and is verified again by the consumer, so it is not recomputed here.

Ack sets: Pulsar's batch-index acknowledgements carry a bit set (64 bits per signed int64 word) of the
batch members *still unacknowledged*; the broker ANDs the sets it receives and sends the result along
with a redelivered entry so the client skips what was already acknowledged.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

from google.protobuf.message import DecodeError

from broker.managed_ledger.ranges import ack_set_from_words, ack_set_to_words
from magnetar.protocol.metadata import COMPRESSION_NONE, MessageMetadata
from magnetar.protocol.batch import split_batch
from magnetar.protocol.compression import decompress
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class EntryInfo(NamedTuple):
    num_messages: int
    marker: bool
    metadata: MessageMetadata
    deliver_at_ms: int = 0  # ``deliver_at_time`` (ms since the epoch); 0: not delayed


def _metadata_span(entry: bytes) -> tuple[int, int]:
    """(start, end) of the serialized MessageMetadata inside ``entry``."""
    pos = 0
    size = len(entry)
    if size >= 6 and _U16.unpack_from(entry, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        pos = 6 + _U32.unpack_from(entry, 2)[0]
    if size - pos >= 6 and _U16.unpack_from(entry, pos)[0] == MAGIC_CRC32C:
        pos += 6
    if size - pos < 4:
        raise ProtocolError(f"entry of {size} bytes too short for its metadata size")
    md_size = _U32.unpack_from(entry, pos)[0]
    start = pos + 4
    if start + md_size > size:
        raise ProtocolError(f"metadata of {md_size} bytes overruns a {size}-byte entry")
    return start, start + md_size


def peek_metadata(entry: bytes) -> MessageMetadata:
    """The entry's MessageMetadata. Raises ProtocolError for bytes that are not an entry."""
    start, end = _metadata_span(entry)
    try:
        return MessageMetadata.FromString(memoryview(entry)[start:end])
    except DecodeError as exc:
        raise ProtocolError(f"undecodable message metadata: {exc}") from None


def entry_payload(entry: bytes) -> bytes:
    """The bytes after the entry's metadata (e.g. a marker's message). Raises ProtocolError for bytes that
    are not an entry."""
    return entry[_metadata_span(entry)[1]:]


def entry_info(entry: bytes) -> EntryInfo:
    """Message count, marker flag and deliver time; an undecodable entry counts as one ordinary message."""
    try:
        md = peek_metadata(entry)
    except ProtocolError:
        return EntryInfo(1, False, MessageMetadata())
    n = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
    return EntryInfo(max(n, 1), md.HasField("marker_type"), md, md.deliver_at_time)


def publish_time_of(entry: bytes) -> int:
    """Publish time in ms (0 when unreadable)."""
    try:
        return peek_metadata(entry).publish_time
    except ProtocolError:
        return 0


def sticky_key(entry: bytes, md: MessageMetadata | None = None) -> bytes:
    """The key Key_Shared routes by: ordering key, else partition key, else the first batch member's key
    (as Pulsar's ``peekStickyKey``), else ``b"NONE_KEY"``."""
    try:
        if md is None:
            md = peek_metadata(entry)
        if md.HasField("ordering_key"):
            return md.ordering_key
        if md.HasField("partition_key"):
            return md.partition_key.encode()
        if md.HasField("num_messages_in_batch"):
            _, end = _metadata_span(entry)
            payload = entry[end:]
            if md.compression != COMPRESSION_NONE:
                payload = decompress(md.compression, payload, md.uncompressed_size)
            first = split_batch(payload)[0].metadata
            if first.HasField("ordering_key"):
                return first.ordering_key
            if first.HasField("partition_key"):
                return first.partition_key.encode()
    except (ProtocolError, IndexError):
        pass
    return b"NONE_KEY"


# ------------------------------------------------------------------------------------------ ack sets


def ack_set_to_int(words: Sequence[int]) -> int:
    """Signed int64 words (little-endian word order, as ``java.util.BitSet.toLongArray``) to a Python int."""
    return ack_set_from_words(words)


def int_to_ack_set(value: int) -> list[int]:
    """Reverses :func:`ack_set_to_int` (no trailing zero words, as BitSet does)."""
    return list(ack_set_to_words(value))


def full_ack_set(batch_size: int) -> int:
    """Every member of a batch of ``batch_size`` unacknowledged."""
    return (1 << batch_size) - 1
