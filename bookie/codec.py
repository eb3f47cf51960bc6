"""Record formats of the bookie's files: pure encode/decode, no I/O beyond reading a given file object.

Theory of operation. Both the journal and the entry logs are append-only files made of a 16-byte file
header followed by self-checking records. A record starts with its length and a CRC32C (Castagnoli) that
covers the length field and everything after the CRC, so a torn write, a zero-filled tail, a flipped bit
or a corrupted length is detected rather than returned as data. Readers stop at the first record that
does not check out; the journal cuts its file there (a torn tail after a crash).

Journal record::

    u32 body_length | u32 crc32c(length, type, body) | u8 type | body

Entry-log record (the unit the index points at: ``(log_id, offset, size)``, ``size = 8 + length``)::

    u32 length | u32 crc32c(length, rest) | u64 ledger_id | u64 entry_id | i64 last_add_confirmed | payload

All integers are little-endian on disk; index keys (``bookie.index``) are big-endian so that LMDB orders
them by (ledger, entry).
"""

from __future__ import annotations

import enum
import struct
from typing import BinaryIO, Iterator, NamedTuple, Optional

import crc32c as _crc32c

from .errors import CorruptRecordError

_crc = _crc32c.crc32c

FILE_HEADER = struct.Struct("<4sHHQ")  # magic, version, reserved, file id
FILE_HEADER_SIZE = FILE_HEADER.size  # 16
FORMAT_VERSION = 1
JOURNAL_MAGIC = b"MGJ1"
ENTRY_LOG_MAGIC = b"MGL1"

_JOURNAL_HEAD = struct.Struct("<IIB")
_JOURNAL_LEN_TYPE = struct.Struct("<IB")
JOURNAL_HEAD_SIZE = _JOURNAL_HEAD.size  # 9
# A journal record holds at most one AddRequest (bounded by the gRPC message limit); anything claiming to
# be larger than this is a corrupt length, not a record.
JOURNAL_RECORD_MAX_BYTES = 1 << 30

_ENTRY_PREFIX = struct.Struct("<II")
_ENTRY_META = struct.Struct("<QQq")
_LEN = struct.Struct("<I")
ENTRY_HEAD_SIZE = _ENTRY_PREFIX.size + _ENTRY_META.size  # 32
ENTRY_RECORD_MAX_BYTES = 1 << 30

_U64 = struct.Struct("<Q")


class RecordType(enum.IntEnum):
    """Journal record types."""

    ADD = 1  # body: a serialized AddRequest holding the accepted entries
    FENCE = 2  # body: u64 ledger id
    DELETE = 3  # body: u64 ledger id
    PAD = 4  # body: zeros; fills a direct-I/O write up to a block boundary, skipped at replay


# A record failed its length or CRC check (``truncated``: the file ended inside it); the codec's name for the
# bookie's CorruptRecordError (one class: what a reader finds corrupt is what the bookie reports).
CorruptRecord = CorruptRecordError


# -- file header --------------------------------------------------------------------------------------


def encode_file_header(magic: bytes, file_id: int) -> bytes:
    return FILE_HEADER.pack(magic, FORMAT_VERSION, 0, file_id)


def decode_file_header(data: bytes, magic: bytes) -> int:
    """The file id of a valid header; raises CorruptRecord otherwise."""
    if len(data) < FILE_HEADER_SIZE:
        raise CorruptRecord("file shorter than its header", truncated=True)
    got_magic, version, _reserved, file_id = FILE_HEADER.unpack_from(data)
    if got_magic != magic:
        raise CorruptRecord(f"bad magic {got_magic!r}, expected {magic!r}")
    if version != FORMAT_VERSION:
        raise CorruptRecord(f"unsupported format version {version}")
    return file_id


# -- journal records ----------------------------------------------------------------------------------


def encode_journal_record(record_type: int, body: bytes) -> bytes:
    """One framed journal record."""
    head = _JOURNAL_LEN_TYPE.pack(len(body), record_type)
    crc = _crc(body, _crc(head))
    return _LEN.pack(len(body)) + _LEN.pack(crc) + bytes((record_type,)) + body


def encode_journal_header(record_type: int, body: bytes) -> bytes:
    """The 9-byte head of a journal record whose body is written separately (avoids copying the body)."""
    crc = _crc(body, _crc(_JOURNAL_LEN_TYPE.pack(len(body), record_type)))
    return _JOURNAL_HEAD.pack(len(body), crc, record_type)


def encode_journal_padding(size: int) -> bytes:
    """The head of a PAD record ``size`` bytes long in all (its body, ``size - JOURNAL_HEAD_SIZE`` zero
    bytes, is written separately)."""
    return encode_journal_header(RecordType.PAD, bytes(size - JOURNAL_HEAD_SIZE))


def decode_journal_record(data: bytes | memoryview, offset: int = 0) -> tuple[int, bytes, int]:
    """Decodes the record at ``offset``: returns ``(type, body, end_offset)`` or raises CorruptRecord."""
    end_head = offset + JOURNAL_HEAD_SIZE
    if len(data) < end_head:
        raise CorruptRecord("journal record header cut short", truncated=True)
    length, crc, record_type = _JOURNAL_HEAD.unpack_from(data, offset)
    if length > JOURNAL_RECORD_MAX_BYTES:
        raise CorruptRecord(f"journal record length {length} is impossible")
    end = end_head + length
    if len(data) < end:
        raise CorruptRecord("journal record body cut short", truncated=True)
    body = bytes(data[end_head:end])
    return _check_journal(length, crc, record_type, body), body, end


def _check_journal(length: int, crc: int, record_type: int, body: bytes) -> int:
    if _crc(body, _crc(_JOURNAL_LEN_TYPE.pack(length, record_type))) != crc:
        raise CorruptRecord("journal record CRC mismatch")
    return record_type


def read_journal_record(f: BinaryIO) -> Optional[tuple[int, bytes, int]]:
    """Reads the next record from a file positioned at a record boundary.

    Returns ``(type, body, size_in_bytes)``, or None at a clean end of file; raises CorruptRecord (with
    ``truncated`` set when the file ends inside the record).
    """
    head = f.read(JOURNAL_HEAD_SIZE)
    if not head:
        return None
    if len(head) < JOURNAL_HEAD_SIZE:
        raise CorruptRecord("journal record header cut short", truncated=True)
    length, crc, record_type = _JOURNAL_HEAD.unpack(head)
    if length > JOURNAL_RECORD_MAX_BYTES:
        raise CorruptRecord(f"journal record length {length} is impossible")
    body = f.read(length)
    if len(body) < length:
        raise CorruptRecord("journal record body cut short", truncated=True)
    return _check_journal(length, crc, record_type, body), body, JOURNAL_HEAD_SIZE + length


def iter_journal_records(data: bytes, offset: int = 0) -> Iterator[tuple[int, bytes, int]]:
    """Yields ``(type, body, end_offset)`` for every good record; stops silently at the first bad one."""
    while offset < len(data):
        try:
            record_type, body, offset = decode_journal_record(data, offset)
        except CorruptRecord:
            return
        yield record_type, body, offset


def encode_ledger_id(ledger_id: int) -> bytes:
    return _U64.pack(ledger_id)


def decode_ledger_id(body: bytes) -> int:
    if len(body) != _U64.size:
        raise CorruptRecord(f"ledger-id body of {len(body)} bytes")
    return _U64.unpack(body)[0]


# -- entry-log records --------------------------------------------------------------------------------


class EntryRecord(NamedTuple):
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    payload: bytes


def encode_entry_record(ledger_id: int, entry_id: int, last_add_confirmed: int, payload: bytes) -> bytes:
    """One framed entry-log record (its size is ``ENTRY_HEAD_SIZE + len(payload)``)."""
    return encode_entry_record_head(ledger_id, entry_id, last_add_confirmed, payload) + payload


def encode_entry_record_head(ledger_id: int, entry_id: int, last_add_confirmed: int, payload: bytes) -> bytes:
    """The ``ENTRY_HEAD_SIZE`` bytes that precede ``payload`` in its entry-log record (written separately,
    so the payload is not copied)."""
    meta = _ENTRY_META.pack(ledger_id, entry_id, last_add_confirmed)
    length = _ENTRY_META.size + len(payload)
    crc = _crc(payload, _crc(meta, _crc(_LEN.pack(length))))
    return _ENTRY_PREFIX.pack(length, crc) + meta


# Ledger id of an entry-log padding record: fills a direct-I/O write up to a block boundary; no index entry
# points at it and scans skip it. Real ledger ids never come near it.
PADDING_LEDGER_ID = (1 << 64) - 1


def encode_entry_padding(size: int) -> bytes:
    """The head of a padding record ``size`` bytes long in all (its payload, ``size - ENTRY_HEAD_SIZE``
    zero bytes, is written separately)."""
    return encode_entry_record_head(PADDING_LEDGER_ID, 0, -1, bytes(size - ENTRY_HEAD_SIZE))


def decode_entry_record(data: bytes | memoryview, offset: int = 0) -> tuple[EntryRecord, int]:
    """Decodes the record at ``offset``: ``(record, end_offset)``; raises CorruptRecord."""
    if len(data) < offset + ENTRY_HEAD_SIZE:
        raise CorruptRecord("entry record header cut short", truncated=True)
    length, crc = _ENTRY_PREFIX.unpack_from(data, offset)
    if length < _ENTRY_META.size or length > ENTRY_RECORD_MAX_BYTES:
        raise CorruptRecord(f"entry record length {length} is impossible")
    end = offset + _ENTRY_PREFIX.size + length
    if len(data) < end:
        raise CorruptRecord("entry record cut short", truncated=True)
    rest = memoryview(data)[offset + _ENTRY_PREFIX.size : end]
    if _crc(rest, _crc(_LEN.pack(length))) != crc:
        raise CorruptRecord("entry record CRC mismatch")
    ledger_id, entry_id, lac = _ENTRY_META.unpack_from(rest)
    return EntryRecord(ledger_id, entry_id, lac, bytes(rest[_ENTRY_META.size :])), end


def entry_record_size(payload_size: int) -> int:
    return ENTRY_HEAD_SIZE + payload_size


def read_entry_record(f: BinaryIO) -> Optional[tuple[EntryRecord, int]]:
    """Reads the next entry record from a file positioned at a record boundary.

    Returns ``(record, size)``, None at a clean end of file; raises CorruptRecord.
    """
    prefix = f.read(_ENTRY_PREFIX.size)
    if not prefix:
        return None
    if len(prefix) < _ENTRY_PREFIX.size:
        raise CorruptRecord("entry record header cut short", truncated=True)
    length, _crc_value = _ENTRY_PREFIX.unpack(prefix)
    if length < _ENTRY_META.size or length > ENTRY_RECORD_MAX_BYTES:
        raise CorruptRecord(f"entry record length {length} is impossible")
    rest = f.read(length)
    if len(rest) < length:
        raise CorruptRecord("entry record cut short", truncated=True)
    record, size = decode_entry_record(prefix + rest)
    return record, size
