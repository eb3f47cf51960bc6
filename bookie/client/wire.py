"""Hand-framed AddRequest bytes: encode each entry once, frame it for every bookie of its write set.

An entry goes to Qw bookies, each in its own AddRequest (one request per bookie carries every entry queued
for that bookie). Building a protobuf message per (entry, bookie) would copy the payload Qw times through
Python objects; instead the entry is framed once (``encode_entry``) and requests are assembled by
concatenating length-delimited field 2 records, which is exactly how protobuf encodes a repeated message
field. The ``Entry`` fields are written by hand, so the payload is copied once into the framed record and
once more into each request (a serialized message plus prefixes would copy it three times); every copy of
an entry of ~100 KiB is a fresh large allocation, and the broker profile showed these copies as its largest
single cost. ``tests/unit/test_ledger_wire.py`` checks the bytes parse back as the generated ``AddRequest``.
"""

from __future__ import annotations

from bookie.add_frames import frame_header

# Field tags of AddRequest: (field_number << 3) | wire_type.
_TAG_REQUEST_ID = b"\x08"  # field 1, varint
_TAG_ENTRIES = b"\x12"  # field 2, length-delimited
_TAG_RECOVERY_TRUE = b"\x18\x01"  # field 3, varint 1
# Field tags of Entry.
_TAG_LEDGER_ID = b"\x08"  # field 1, uint64
_TAG_ENTRY_ID = b"\x10"  # field 2, uint64
_TAG_LAC = b"\x18"  # field 3, sint64 (zigzag)
_TAG_PAYLOAD = b"\x22"  # field 4, bytes


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
    if last_add_confirmed < -1:
        raise ValueError(f"last add confirmed {last_add_confirmed} is below -1")
    # zigzag of sint64: 0 -> 0, -1 -> 1, n -> 2n
    zigzag = 1 if last_add_confirmed == -1 else last_add_confirmed << 1
    fields = b"".join((_TAG_LEDGER_ID, varint(ledger_id), _TAG_ENTRY_ID, varint(entry_id), _TAG_LAC, varint(zigzag),
                       _TAG_PAYLOAD, varint(len(payload))))
    return b"".join((_TAG_ENTRIES, varint(len(fields) + len(payload)), fields, payload))


def frame_add_request(request_id: int, framed_entries: list[bytes], *, recovery: bool = False,
                      length_prefixed: bool = False) -> bytes:
    """The serialized AddRequest carrying ``framed_entries`` (outputs of :func:`encode_entry`): one copy.

    ``length_prefixed`` puts the add port's frame header (``bookie.add_frames``) in front, in the same copy.
    """
    head = _TAG_REQUEST_ID + varint(request_id)
    if recovery:
        head += _TAG_RECOVERY_TRUE
    if length_prefixed:
        head = frame_header(len(head) + sum(map(len, framed_entries))) + head
    return b"".join((head, *framed_entries))
