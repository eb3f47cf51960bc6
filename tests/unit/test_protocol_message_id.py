"""Message ids: Pulsar's order, proto round trips, and pulsar-client's serialized form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import InvalidMessageIdError, MessageId, pb

i64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
index = st.integers(min_value=-1, max_value=(1 << 31) - 1)
ids = st.builds(MessageId, i64, i64, index, index, st.integers(min_value=0, max_value=1000))

# pulsar-client 3.13: _pulsar.MessageId(partition, ledger, entry, batch_index).serialize()
CLIENT_SERIALIZED = {
    MessageId.EARLIEST: "08ffffffffffffffffff0110ffffffffffffffffff01",
    MessageId.LATEST: "08ffffffffffffffff7f10ffffffffffffffff7f",
    MessageId(5, 7): "08051007",
    MessageId(5, 7, 3): "080510071803",
    MessageId(5, 7, 3, 9): "0805100718032009",
    MessageId(123456789, 0, -1, 2): "08959aef3a10002002",
}


@pytest.mark.parametrize("message_id", list(CLIENT_SERIALIZED), ids=str)
def test_serialized_form_matches_pulsar_client(message_id):
    assert message_id.serialize().hex() == CLIENT_SERIALIZED[message_id]
    assert MessageId.deserialize(bytes.fromhex(CLIENT_SERIALIZED[message_id])) == message_id


@given(ids)
def test_round_trips(message_id):
    assert MessageId.deserialize(message_id.serialize()) == message_id
    assert MessageId.from_proto(message_id.to_proto()) == message_id
    assert MessageId.from_proto(message_id.to_proto()).batch_size == message_id.batch_size


@given(ids, ids)
def test_order_is_ledger_entry_partition_batch(a, b):
    def key(m: MessageId) -> tuple[int, int, int, int]:
        return (m.ledger_id, m.entry_id, m.partition, m.batch_index)

    assert (a < b) == (key(a) < key(b))
    assert (a == b) == (key(a) == key(b))


def test_order_examples_and_helpers() -> None:
    assert MessageId.EARLIEST < MessageId(0, 0) < MessageId(0, 1) < MessageId(1, 0) < MessageId.LATEST
    assert MessageId(3, 4) < MessageId(3, 4, -1, 0) < MessageId(3, 4, -1, 1)
    batched = MessageId(3, 4, 2, 7, batch_size=10)
    assert batched == MessageId(3, 4, 2, 7) and hash(batched) == hash(MessageId(3, 4, 2, 7))
    assert batched.is_batched and batched.entry() == MessageId(3, 4, 2)
    assert str(batched) == "3:4:2:7" and str(MessageId(3, 4)) == "3:4:-1"


def test_to_proto_sets_only_what_differs_from_defaults() -> None:
    data = MessageId(1, 2).to_proto()
    assert not data.HasField("partition") and not data.HasField("batch_index") and not data.HasField("batch_size")
    target = pb.CommandSendReceipt(producer_id=1, sequence_id=1)
    MessageId(9, 8).to_proto(target.message_id)
    assert (target.message_id.ledgerId, target.message_id.entryId) == (9, 8)


@pytest.mark.parametrize("data", [b"\xff", b"\x08\x01", b"\x10\x01", b"\x08"])
def test_garbage_is_invalid_message_id(data):
    with pytest.raises(InvalidMessageIdError):
        MessageId.deserialize(data)
    with pytest.raises(ValueError):  # also a ValueError, for callers that expect one
        MessageId.deserialize(data)
