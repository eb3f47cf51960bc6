"""Hand-framed AddRequests parse back as the generated protobuf message."""

from hypothesis import given, strategies as st

from bookie.client import wire
from magnetar.proto import bookie_pb2

entries = st.lists(
    st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(-1, 2**62), st.binary(max_size=300)),
    max_size=20,
)


@given(st.integers(0, 2**64 - 1), entries, st.booleans())
def test_framed_request_round_trips(request_id, items, recovery) -> None:
    framed = [wire.encode_entry(*item) for item in items]
    parsed = bookie_pb2.AddRequest.FromString(wire.frame_add_request(request_id, framed, recovery=recovery))
    assert parsed.request_id == request_id
    assert parsed.recovery == recovery
    assert [(e.ledger_id, e.entry_id, e.last_add_confirmed, e.payload) for e in parsed.entries] == items


@given(st.integers(0, 2**64 - 1))
def test_varint_matches_protobuf(value) -> None:
    assert wire.varint(value) == bookie_pb2.AddRequest(request_id=value).SerializeToString()[1:] or value == 0


def test_last_add_confirmed_below_minus_one_is_refused() -> None:
    try:
        wire.encode_entry(1, 2, -2, b"x")
    except ValueError as err:
        assert "-2" in str(err)
    else:
        raise AssertionError("a last add confirmed of -2 was framed")


def test_framed_entry_is_what_protobuf_would_send() -> None:
    # non-zero fields in field order: byte for byte the generated serializer's output
    body = bookie_pb2.Entry(ledger_id=7, entry_id=300, last_add_confirmed=299, payload=b"abc").SerializeToString()
    assert wire.encode_entry(7, 300, 299, b"abc") == b"\x12" + wire.varint(len(body)) + body
