"""Hand-framed AddRequest bytes: encode each entry once, frame it for every bookie of its write set.

An entry goes to Qw bookies, each in its own AddRequest (one request per bookie carries every entry queued
for that bookie). Building a protobuf message per (entry, bookie) would copy the payload Qw times through
Python objects; instead the entry is serialized once (``encode_entry``) and requests are assembled by
concatenating length-delimited field 2 records, which is exactly how protobuf encodes a repeated message
field. ``tests/unit/test_ledger_wire.py`` checks the bytes parse back as the generated ``AddRequest``.
"""

from __future__ import annotations

from magnetar.proto import bookie_pb2

# Field tags of AddRequest: (field_number << 3) | wire_type.
_TAG_REQUEST_ID = b"\x08"  # field 1, varint
_TAG_ENTRIES = b"\x12"  # field 2, length-delimited
_TAG_RECOVERY_TRUE = b"\x18\x01"  # field 3, varint 1


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0:
        raise ValueError("varint of a negative number")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_entry(ledger_id: int, entry_id: int, last_add_confirmed: int, payload: bytes) -> bytes:
    """One ``Entry`` message, already framed as an AddRequest field-2 record (tag + length + body)."""
    body = bookie_pb2.Entry(
        ledger_id=ledger_id, entry_id=entry_id, last_add_confirmed=last_add_confirmed, payload=payload
    ).SerializeToString()
    return _TAG_ENTRIES + varint(len(body)) + body


def frame_add_request(request_id: int, framed_entries: list[bytes], *, recovery: bool = False) -> bytes:
    """The serialized AddRequest carrying ``framed_entries`` (outputs of :func:`encode_entry`)."""
    head = _TAG_REQUEST_ID + varint(request_id)
    if recovery:
        head += _TAG_RECOVERY_TRUE
    return head + b"".join(framed_entries)
