"""Batched payloads: split(join(x)) == x, and malformed batches only ever raise BatchFormatError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import BatchFormatError, encode_single_message, join_batch, pb, split_batch

text = st.text(max_size=20)
single_metadatas = st.builds(
    pb.SingleMessageMetadata,
    properties=st.lists(st.builds(pb.KeyValue, key=text, value=text), max_size=3),
    partition_key=st.one_of(st.none(), text),
    event_time=st.integers(min_value=0, max_value=(1 << 64) - 1),
    sequence_id=st.one_of(st.none(), st.integers(min_value=0, max_value=(1 << 64) - 1)),
    null_value=st.booleans(),
)
items = st.lists(st.tuples(single_metadatas, st.binary(max_size=300)), max_size=20)


@given(items)
def test_split_join_round_trip(messages):
    batch = join_batch(messages)
    for count in (len(messages), None):
        split = split_batch(batch, count)
        assert [m.payload for m in split] == [payload for _, payload in messages]
        for got, (metadata, payload) in zip(split, messages):
            assert got.metadata.payload_size == len(payload)
            got.metadata.ClearField("payload_size")
            assert got.metadata == metadata  # the caller's metadata was not modified either
    assert join_batch(split_batch(batch)) == batch


def test_item_layout() -> None:
    item = encode_single_message(pb.SingleMessageMetadata(partition_key="k"), b"abc")
    md = pb.SingleMessageMetadata(partition_key="k", payload_size=3).SerializeToString()
    assert item == len(md).to_bytes(4, "big") + md + b"abc"


@given(items, st.data())
def test_damaged_batches_only_raise_batch_format_error(messages, data):
    batch = bytearray(join_batch(messages))
    if batch:
        for _ in range(data.draw(st.integers(1, 3))):
            batch[data.draw(st.integers(0, len(batch) - 1))] = data.draw(st.integers(0, 255))
    count = data.draw(st.one_of(st.none(), st.integers(-1, 25)))
    try:
        split_batch(bytes(batch), count)
    except BatchFormatError:
        pass


def test_count_mismatch_is_an_error() -> None:
    batch = join_batch([(pb.SingleMessageMetadata(), b"a"), (pb.SingleMessageMetadata(), b"b")])
    with pytest.raises(BatchFormatError, match="bytes after the 1 messages"):
        split_batch(batch, 1)
    with pytest.raises(BatchFormatError, match="truncated before message 2"):
        split_batch(batch, 3)
    with pytest.raises(BatchFormatError, match="overruns"):
        split_batch(batch[:-1])
