"""Hand-rolled encoders for the two frames the broker sends most: MESSAGE headers and SEND_RECEIPTs.

Pure (no asyncio). Building a protobuf object per message costs several microseconds in Python; these
functions write the same bytes (fields in field-number order, as protobuf serializes them, so the unit
tests compare them byte for byte with ``encode_command``) from a few integers. Everything else goes
through ``magnetar.protocol.encode_command``.

Wire facts used: proto2 ``repeated int64`` fields are not packed (one tag per value); negative int32/int64
values are 10-byte varints (two's complement); ledger and entry ids are uint64 (-1 is 2^64 - 1).
"""

from __future__ import annotations

import struct
from typing import Sequence

_U32_PAIR = struct.Struct(">II")
_U64 = 1 << 64

_TYPE_MESSAGE = 9
_TYPE_SEND_RECEIPT = 7


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of ``value`` (negative values as 64-bit two's complement)."""
    if value < 0:
        value += _U64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINT_CACHE = [varint(i) for i in range(1 << 14)]


def _v(value: int) -> bytes:
    if 0 <= value < 16384:
        return _VARINT_CACHE[value]
    return varint(value)


def _message_id(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1,
                ack_set: Sequence[int] = (), batch_size: int = 0) -> bytes:
    parts = [b"\x08", _v(ledger_id % _U64), b"\x10", _v(entry_id % _U64)]
    if partition != -1:
        parts += [b"\x18", _v(partition)]
    if batch_index != -1:
        parts += [b"\x20", _v(batch_index)]
    for word in ack_set:
        parts += [b"\x28", _v(word)]
    if batch_size:
        parts += [b"\x30", _v(batch_size)]
    return b"".join(parts)


def message_frame_header(consumer_id: int, ledger_id: int, entry_id: int, entry_size_bytes: int, *,
                         redelivery_count: int = 0, ack_set: Sequence[int] = (),
                         consumer_epoch: int | None = None, partition: int = -1) -> bytes:
    """``[total_size][command_size][BaseCommand MESSAGE]`` for a MESSAGE whose entry has ``entry_size_bytes``;
    ``partition`` is the topic's partition index (-1: not a partition), which clients put in the message id."""
    mid = _message_id(ledger_id, entry_id, partition)
    body = [b"\x08", _v(consumer_id), b"\x12", _v(len(mid)), mid]
    if redelivery_count:
        body += [b"\x18", _v(redelivery_count)]
    for word in ack_set:
        body += [b"\x20", _v(word)]
    if consumer_epoch is not None:
        body += [b"\x28", _v(consumer_epoch)]
    inner = b"".join(body)
    cmd = b"".join((b"\x08\x09\x4a", _v(len(inner)), inner))
    return _U32_PAIR.pack(4 + len(cmd) + entry_size_bytes, len(cmd)) + cmd


def send_receipt_frame(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, *,
                       highest_sequence_id: int | None = None) -> bytes:
    """A complete SEND_RECEIPT frame."""
    mid = _message_id(ledger_id, entry_id)
    body = [b"\x08", _v(producer_id), b"\x10", _v(sequence_id % _U64), b"\x1a", _v(len(mid)), mid]
    if highest_sequence_id is not None:
        body += [b"\x20", _v(highest_sequence_id % _U64)]
    inner = b"".join(body)
    cmd = b"".join((b"\x08\x07\x3a", _v(len(inner)), inner))
    return _U32_PAIR.pack(4 + len(cmd), len(cmd)) + cmd
