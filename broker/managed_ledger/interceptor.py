"""Broker entry metadata: what a managed ledger prefixes to every entry it appends (pure, no asyncio).

Pulsar's brokers run ``brokerEntryMetadataInterceptors`` on every entry before it goes to the bookies; the
two Pulsar ships are ``AppendBrokerTimestampMetadataInterceptor`` (``broker_timestamp``: ms since the epoch
when the broker appended the entry) and ``AppendIndexMetadataInterceptor`` (``index``: a per-topic message
counter). The result is a ``[0x0e02][size u32][BrokerEntryMetadata]`` section in front of the entry as the
producer sent it (``magnetar.protocol.frames``).

The index counts messages, not entries, continuously over the whole managed ledger: an entry stores the
index of its LAST message, a batch of ``n`` messages advances it by ``n``, and the first message of a topic
has index 0 (Pulsar's convention: the counter starts at -1 and each entry adds its message count). So the
index of an entry's first message (its *base*, a Kafka base offset) is ``index - n + 1``. The message count
is the entry's ``MessageMetadata.num_messages_in_batch`` (1 when unset, as for markers and chunks: Pulsar
adds markers with a count of 1 too; an entry whose metadata cannot be read counts as 1).

:class:`BrokerEntryMetadataInterceptor` holds the counter; the managed ledger calls :meth:`intercept` for
each append in append order, :meth:`rollback` when appends that were never written fail, and sets
``next_index`` when it opens (recovered from the last stored entry that carries an index).
"""

from __future__ import annotations

import struct
from typing import Iterable, Optional

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C

__all__ = ["TIMESTAMP", "INDEX", "parse_interceptor_names", "messages_in_entry", "read_broker_entry_metadata",
           "stored_index", "entry_base_index", "BrokerEntryMetadataInterceptor"]

TIMESTAMP = "timestamp"
INDEX = "index"

_PULSAR_PACKAGE = "org.apache.pulsar.common.intercept."
_NAMES = {
    TIMESTAMP: TIMESTAMP, "AppendBrokerTimestampMetadataInterceptor": TIMESTAMP,
    _PULSAR_PACKAGE + "AppendBrokerTimestampMetadataInterceptor": TIMESTAMP,
    INDEX: INDEX, "AppendIndexMetadataInterceptor": INDEX, _PULSAR_PACKAGE + "AppendIndexMetadataInterceptor": INDEX,
}

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_BEM_MAGIC = _U16.pack(MAGIC_BROKER_ENTRY_METADATA)


def parse_interceptor_names(names: Iterable[str]) -> frozenset[str]:
    """``{"timestamp", "index"}`` or a part of it, from Pulsar's class names (with or without their package)
    or the short names; items may also be comma-separated lists (Pulsar's ``broker.conf`` form). ValueError
    names an unknown one."""
    kinds: set[str] = set()
    for item in names:
        if not isinstance(item, str):
            raise ValueError(f"broker entry metadata interceptor names are strings, not {item!r}")
        for name in (part.strip() for part in item.split(",")):
            if not name:
                continue
            kind = _NAMES.get(name)
            if kind is None:
                raise ValueError(f"unknown broker entry metadata interceptor {name!r}: use {TIMESTAMP!r}, {INDEX!r} "
                                 "or Pulsar's AppendBrokerTimestampMetadataInterceptor / AppendIndexMetadataInterceptor")
            kinds.add(kind)
    return frozenset(kinds)


def _metadata_span(data: bytes) -> Optional[tuple[int, int]]:
    """(start, end) of the MessageMetadata in a stored entry, None if the bytes are not an entry."""
    size = len(data)
    pos = 0
    if size >= 6 and _U16.unpack_from(data, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        pos = 6 + _U32.unpack_from(data, 2)[0]
    if size - pos >= 6 and _U16.unpack_from(data, pos)[0] == MAGIC_CRC32C:
        pos += 6
    if size - pos < 4:
        return None
    md_size = _U32.unpack_from(data, pos)[0]
    start = pos + 4
    return (start, start + md_size) if start + md_size <= size else None


def messages_in_entry(data: bytes) -> int:
    """How many messages the entry holds: ``num_messages_in_batch`` (at least 1; 1 when unset or unreadable)."""
    span = _metadata_span(data)
    if span is None:
        return 1
    try:
        md = pb.MessageMetadata.FromString(memoryview(data)[span[0]:span[1]])
    except DecodeError:
        return 1
    return max(md.num_messages_in_batch, 1) if md.HasField("num_messages_in_batch") else 1


def read_broker_entry_metadata(data: bytes) -> Optional[pb.BrokerEntryMetadata]:
    """The entry's broker entry metadata, None when it has none (or it is unreadable)."""
    if len(data) < 6 or data[:2] != _BEM_MAGIC:
        return None
    end = 6 + _U32.unpack_from(data, 2)[0]
    if end > len(data):
        return None
    try:
        return pb.BrokerEntryMetadata.FromString(memoryview(data)[6:end])
    except DecodeError:
        return None


def stored_index(data: bytes) -> Optional[int]:
    """The index stored with the entry (that of its last message), None when it carries none."""
    bem = read_broker_entry_metadata(data)
    return bem.index if bem is not None and bem.HasField("index") else None


def entry_base_index(data: bytes) -> Optional[int]:
    """The index of the entry's first message (``index - messages + 1``), None when it carries no index."""
    index = stored_index(data)
    return None if index is None else index - messages_in_entry(data) + 1


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _section(timestamp_ms: Optional[int], index: Optional[int]) -> bytes:
    """``[0x0e02][size][BrokerEntryMetadata]``, the message encoded by hand (two varint fields: broker_timestamp
    = 1, index = 2; a unit test holds it equal to protobuf's encoding): this runs once per append."""
    body = b""
    if timestamp_ms is not None:
        body += b"\x08" + _varint(timestamp_ms)
    if index is not None:
        body += b"\x10" + _varint(index)
    return _BEM_MAGIC + _U32.pack(len(body)) + body


def _without_section(data: bytes) -> bytes:
    if len(data) >= 6 and data[:2] == _BEM_MAGIC:
        end = 6 + _U32.unpack_from(data, 2)[0]
        if end <= len(data):
            return data[end:]
    return data


class BrokerEntryMetadataInterceptor:
    """The broker entry metadata of one managed ledger: which fields it adds, and the index counter.

    Attributes:
        timestamp: adds ``broker_timestamp``.
        index: adds ``index``.
        next_index: the index the next appended message gets (counts messages handed to :meth:`intercept`).
    """

    __slots__ = ("timestamp", "index", "next_index")

    def __init__(self, *, timestamp: bool, index: bool, next_index: int = 0) -> None:
        if next_index < 0:
            raise ValueError(f"next_index must not be negative, not {next_index}")
        self.timestamp = timestamp
        self.index = index
        self.next_index = next_index

    @classmethod
    def from_names(cls, names: Iterable[str]) -> Optional["BrokerEntryMetadataInterceptor"]:
        """The interceptor the names ask for (see :func:`parse_interceptor_names`), None for none."""
        kinds = parse_interceptor_names(names)
        return cls(timestamp=TIMESTAMP in kinds, index=INDEX in kinds) if kinds else None

    def intercept(self, data: bytes, now_ms: int, num_messages: Optional[int] = None) -> tuple[bytes, Optional[int]]:
        """``(bytes to store, index of the entry's first message)`` for one append (the index is None when
        indexes are off). ``num_messages``: the entry's message count when the caller already parsed its
        metadata (else it is read from ``data``, see :func:`messages_in_entry`). An existing section in
        ``data`` is replaced. Advances ``next_index``: call it in append order and only for an entry that is
        then appended (or :meth:`rollback`)."""
        base: Optional[int] = None
        last: Optional[int] = None
        if self.index:
            base = self.next_index
            self.next_index += max(num_messages, 1) if num_messages is not None else messages_in_entry(data)
            last = self.next_index - 1
        timestamp = max(now_ms, 0) if self.timestamp else None
        return _section(timestamp, last) + _without_section(data), base

    def rollback(self, base_index: int) -> None:
        """Appends from the one whose first message got ``base_index`` on were never written (they failed
        before reaching a ledger): their indexes are given out again."""
        if 0 <= base_index <= self.next_index:
            self.next_index = base_index
