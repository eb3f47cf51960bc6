"""The pure compaction logic: latest message per key over single messages and batches, tombstones, keyless
messages and markers dropped, batches re-built with their survivors (compressed too), record codec."""

from __future__ import annotations

from typing import Optional

import pytest

from broker.managed_ledger.api import Entry, Position
from broker.service.topics.compaction.logic import (EARLIEST, LatestPerKey, compact, decode_record, encode_record,
                                             entry_messages, first_at_or_after)
from magnetar.protocol import pb
from magnetar.protocol.batch import join_batch, split_batch
from magnetar.protocol.compression import available, compress, decompress
from magnetar.protocol.frames import encode_entry, parse_entry


def single(key: Optional[str], payload: bytes) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        md.partition_key = key
    return encode_entry(md, payload)


def batch(items: list[tuple[Optional[str], bytes]], codec: int = pb.NONE) -> bytes:
    singles = []
    for key, payload in items:
        smd = pb.SingleMessageMetadata(payload_size=len(payload))
        if key is not None:
            smd.partition_key = key
        singles.append((smd, payload))
    payload = join_batch(singles)
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=len(items))
    if codec != pb.NONE:
        md.compression = codec
        md.uncompressed_size = len(payload)
        payload = compress(codec, payload)
    return encode_entry(md, payload)


def messages_of(data: bytes) -> list[tuple[Optional[str], bytes]]:
    """(key, payload) of every message of an entry."""
    parsed = parse_entry(data)
    md = parsed.metadata
    if not md.HasField("num_messages_in_batch"):
        return [(md.partition_key if md.HasField("partition_key") else None, parsed.payload)]
    payload = parsed.payload
    if md.compression != pb.NONE:
        payload = decompress(md.compression, payload, md.uncompressed_size)
    return [(m.metadata.partition_key if m.metadata.HasField("partition_key") else None, m.payload)
            for m in split_batch(payload, md.num_messages_in_batch)]


def flat(entries: list[Entry]) -> list[tuple[Position, Optional[str], bytes]]:
    return [(e.position, k, v) for e in entries for k, v in messages_of(e.data)]


def test_latest_single_message_per_key_survives_in_order() -> None:
    entries = [Entry(Position(1, i), single(f"k{i % 3}", f"v{i}".encode())) for i in range(7)]
    out, removed = compact(entries)
    assert flat(out) == [(Position(1, 4), "k1", b"v4"), (Position(1, 5), "k2", b"v5"), (Position(1, 6), "k0", b"v6")]
    assert removed == 4


def test_tombstone_removes_the_key_and_a_later_value_brings_it_back() -> None:
    entries = [Entry(Position(1, 0), single("a", b"1")), Entry(Position(1, 1), single("b", b"1")),
               Entry(Position(1, 2), single("a", b"")), Entry(Position(2, 0), single("b", b"")),
               Entry(Position(2, 1), single("b", b"2"))]
    out, removed = compact(entries)
    assert flat(out) == [(Position(2, 1), "b", b"2")]
    assert removed == 4


def test_null_value_flag_is_a_tombstone_too() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key="a", null_value=True)
    entries = [Entry(Position(1, 0), single("a", b"x")), Entry(Position(1, 1), encode_entry(md, b"ignored"))]
    assert compact(entries)[0] == []


def test_keyless_messages_and_markers_are_dropped() -> None:
    marker = encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                                             marker_type=pb.REPLICATED_SUBSCRIPTION_SNAPSHOT), b"m")
    entries = [Entry(Position(1, 0), single(None, b"x")), Entry(Position(1, 1), marker),
               Entry(Position(1, 2), single("a", b"y")), Entry(Position(1, 3), batch([(None, b"z"), ("b", b"w")]))]
    assert entry_messages(marker) == []
    out, removed = compact(entries)
    assert flat(out) == [(Position(1, 2), "a", b"y"), (Position(1, 3), "b", b"w")]
    assert removed == 2


def test_batches_are_unpacked_and_survivors_rebatched() -> None:
    first = batch([("a", b"a1"), ("b", b"b1"), ("c", b"c1")])
    second = batch([("a", b"a2"), ("c", b""), ("d", b"d1")])
    entries = [Entry(Position(1, 0), first), Entry(Position(1, 1), second)]
    out, removed = compact(entries)
    assert flat(out) == [(Position(1, 0), "b", b"b1"), (Position(1, 1), "a", b"a2"), (Position(1, 1), "d", b"d1")]
    assert parse_entry(out[0].data).metadata.num_messages_in_batch == 1  # checksum recomputed: parse verifies it
    assert parse_entry(out[1].data).metadata.num_messages_in_batch == 2
    assert removed == 3


def test_a_batch_whose_members_all_survive_is_kept_byte_for_byte() -> None:
    data = batch([("a", b"1"), ("b", b"2")])
    out, _ = compact([Entry(Position(3, 0), data)])
    assert out == [Entry(Position(3, 0), data)]


def test_a_key_repeated_inside_one_batch_keeps_its_last_member() -> None:
    out, removed = compact([Entry(Position(1, 0), batch([("a", b"1"), ("a", b"2"), ("b", b"3")]))])
    assert flat(out) == [(Position(1, 0), "a", b"2"), (Position(1, 0), "b", b"3")]
    assert removed == 1


@pytest.mark.parametrize("codec", [c for c in (pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY) if available(c)])
def test_compressed_batches_are_recompressed_with_their_codec(codec: int) -> None:
    entries = [Entry(Position(1, 0), batch([("a", b"x" * 100), ("b", b"y" * 100)], codec)),
               Entry(Position(1, 1), single("a", b"z"))]
    out, _ = compact(entries)
    assert parse_entry(out[0].data).metadata.compression == codec
    assert flat(out) == [(Position(1, 0), "b", b"y" * 100), (Position(1, 1), "a", b"z")]


def test_latest_per_key_counts_every_message() -> None:
    latest = LatestPerKey()
    latest.add(Position(1, 0), batch([("a", b"1"), ("b", b"2")]))
    latest.add(Position(1, 1), single("a", b"3"))
    assert latest.messages_seen == 3
    assert latest.survivors_of(Position(1, 0)) == {1} and latest.survivors_of(Position(1, 1)) == {-1}


def test_record_codec_and_search() -> None:
    data = single("k", b"v")
    assert decode_record(encode_record(Position(7, 3), data)) == Entry(Position(7, 3), data)
    positions = [Position(1, 2), Position(1, 5), Position(3, 0)]
    assert first_at_or_after(positions, EARLIEST) == 0
    assert first_at_or_after(positions, Position(1, 3)) == 1
    assert first_at_or_after(positions, Position(3, 1)) == 3
