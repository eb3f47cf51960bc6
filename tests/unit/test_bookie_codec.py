"""Property tests of the bookie's record codecs: round trips, and damage is always detected."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie import codec

record_types = st.sampled_from(list(codec.RecordType))
bodies = st.binary(max_size=2048)
u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
s64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@given(record_types, bodies)
def test_journal_record_round_trip(record_type, body):
    data = codec.encode_journal_record(record_type, body)
    assert codec.decode_journal_record(data) == (record_type, body, len(data))
    assert codec.encode_journal_header(record_type, body) + body == data
    assert codec.read_journal_record(io.BytesIO(data)) == (record_type, body, len(data))


@given(record_types, bodies, st.data())
def test_journal_record_truncation_is_detected(record_type, body, data):
    encoded = codec.encode_journal_record(record_type, body)
    cut = data.draw(st.integers(min_value=1, max_value=len(encoded) - 1))
    with pytest.raises(codec.CorruptRecord) as info:
        codec.decode_journal_record(encoded[:cut])
    assert info.value.truncated
    with pytest.raises(codec.CorruptRecord):
        codec.read_journal_record(io.BytesIO(encoded[:cut]))


@given(record_types, bodies, st.data())
def test_journal_record_bit_flip_is_detected(record_type, body, data):
    encoded = bytearray(codec.encode_journal_record(record_type, body))
    bit = data.draw(st.integers(min_value=0, max_value=len(encoded) * 8 - 1))
    encoded[bit // 8] ^= 1 << (bit % 8)
    # A flipped length may make the record look longer (truncated) or shorter (CRC mismatch): either way it
    # is never returned as data.
    with pytest.raises(codec.CorruptRecord):
        codec.decode_journal_record(bytes(encoded))


@given(st.lists(st.tuples(record_types, bodies), min_size=1, max_size=8), st.data())
def test_journal_stream_stops_at_first_damage(records, data):
    encoded = [codec.encode_journal_record(t, b) for t, b in records]
    stream = b"".join(encoded)
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    decoded = [(t, b) for t, b, _end in codec.iter_journal_records(stream[:cut])]
    complete = 0
    offset = 0
    for chunk in encoded:
        if offset + len(chunk) <= cut:
            complete += 1
        offset += len(chunk)
    assert decoded == records[:complete]


@given(u64, u64, s64, st.binary(max_size=4096))
def test_entry_record_round_trip(ledger_id, entry_id, lac, payload):
    data = codec.encode_entry_record(ledger_id, entry_id, lac, payload)
    assert len(data) == codec.entry_record_size(len(payload))
    record, end = codec.decode_entry_record(data)
    assert record == codec.EntryRecord(ledger_id, entry_id, lac, payload)
    assert end == len(data)
    assert codec.read_entry_record(io.BytesIO(data)) == (record, len(data))


@given(u64, u64, s64, st.binary(max_size=512), st.data())
def test_entry_record_damage_is_detected(ledger_id, entry_id, lac, payload, data):
    encoded = bytearray(codec.encode_entry_record(ledger_id, entry_id, lac, payload))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
        damaged = bytes(encoded[:cut])
    else:
        bit = data.draw(st.integers(min_value=0, max_value=len(encoded) * 8 - 1))
        encoded[bit // 8] ^= 1 << (bit % 8)
        damaged = bytes(encoded)
    with pytest.raises(codec.CorruptRecord):
        codec.decode_entry_record(damaged)


@settings(max_examples=50)
@given(st.binary(min_size=0, max_size=64))
def test_garbage_is_never_a_record(garbage):
    try:
        record_type, body, _end = codec.decode_journal_record(garbage)
    except codec.CorruptRecord:
        return
    # Only possible if the garbage happens to be a well-formed record (then it re-encodes identically).
    assert codec.encode_journal_record(record_type, body) == garbage[: codec.JOURNAL_HEAD_SIZE + len(body)]


def test_file_header():
    header = codec.encode_file_header(codec.JOURNAL_MAGIC, 42)
    assert len(header) == codec.FILE_HEADER_SIZE
    assert codec.decode_file_header(header, codec.JOURNAL_MAGIC) == 42
    with pytest.raises(codec.CorruptRecord):
        codec.decode_file_header(header, codec.ENTRY_LOG_MAGIC)
    with pytest.raises(codec.CorruptRecord):
        codec.decode_file_header(header[:10], codec.JOURNAL_MAGIC)
