"""The add port's frames, the length-prefixed AddRequest, the registration's optional ``addAddress`` and the
settings that choose the add transport (pure: no sockets)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from bookie.add_frames import (FRAME_MAX_BYTES, HEADER_BYTES, PREAMBLE, FrameBuffer, FrameError, body_length,
                               check_preamble, encode_frame, frame_header)
from bookie.client import LedgerClientConfig
from bookie.client import wire
from bookie.config import BookieConfig
from config_store import BookieRegistration
from magnetar.errors import ConfigError
from magnetar.proto import bookie_pb2


@given(st.binary(max_size=2000))
def test_frame_is_header_then_body(body) -> None:
    frame = encode_frame(body)
    assert len(frame) == HEADER_BYTES + len(body)
    assert body_length(frame[:HEADER_BYTES]) == len(body)
    assert frame[HEADER_BYTES:] == body


def test_lengths_over_the_limit_are_refused_both_ways() -> None:
    assert body_length(frame_header(FRAME_MAX_BYTES)) == FRAME_MAX_BYTES
    with pytest.raises(FrameError, match="at most"):
        frame_header(FRAME_MAX_BYTES + 1)
    with pytest.raises(FrameError, match=str(2**32 - 1)):
        body_length(b"\xff\xff\xff\xff")
    with pytest.raises(FrameError, match=str(FRAME_MAX_BYTES + 1)):
        body_length((FRAME_MAX_BYTES + 1).to_bytes(4, "big"))


def test_preamble_check() -> None:
    check_preamble(PREAMBLE)
    for bad in (b"", b"GET / HTTP/1.1\r\n"[:8], PREAMBLE[:-1] + b"\x00", b"\x00" * 8):
        with pytest.raises(FrameError, match="not an add connection"):
            check_preamble(bad)


entries = st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(-1, 2**62),
                             st.binary(max_size=300)), max_size=10)


@given(st.integers(0, 2**64 - 1), entries, st.booleans())
def test_length_prefixed_request_is_one_frame_of_the_same_request(request_id, items, recovery) -> None:
    framed = [wire.encode_entry(*item) for item in items]
    plain = wire.frame_add_request(request_id, framed, recovery=recovery)
    prefixed = wire.frame_add_request(request_id, framed, recovery=recovery, length_prefixed=True)
    assert prefixed == encode_frame(plain)
    parsed = bookie_pb2.AddRequest.FromString(prefixed[HEADER_BYTES:])
    assert parsed.request_id == request_id and len(parsed.entries) == len(items)


def test_registration_without_add_address_parses_and_old_bytes_are_unchanged() -> None:
    old = b'{"version": 1, "bookieId": "b1", "address": "h:3181", "httpAddress": "h:8000"}'
    reg = BookieRegistration.from_json(old)
    assert reg.add_address == "" and reg.address == "h:3181"
    assert "addAddress" not in json.loads(reg.to_json())  # a bookie without an add port writes what it wrote


def test_registration_add_address_round_trips_and_is_an_extra_key() -> None:
    reg = BookieRegistration(bookie_id="b1", address="h:3181", http_address="h:8000", add_address="h:3182")
    data = json.loads(reg.to_json())
    assert data["addAddress"] == "h:3182"
    assert BookieRegistration.from_json(reg.to_json()) == reg
    # A reader that knows only the older fields reads the same registration (unknown keys are ignored).
    data.pop("addAddress")
    assert BookieRegistration.from_json(json.dumps(data).encode()).address == "h:3181"


def test_add_address_must_be_a_string() -> None:
    from config_store import InvalidMetadataError

    with pytest.raises(InvalidMetadataError, match="addAddress"):
        BookieRegistration.from_json(b'{"version": 1, "bookieId": "b1", "address": "h:1", "addAddress": 7}')


def test_add_transport_and_add_port_settings_are_checked(tmp_path) -> None:
    assert LedgerClientConfig().add_transport == "tcp"
    assert LedgerClientConfig(add_transport="grpc").add_transport == "grpc"
    with pytest.raises(ConfigError, match="add_transport"):
        LedgerClientConfig(add_transport="udp")
    assert BookieConfig(data_dir=tmp_path).add_port == 0
    assert BookieConfig(data_dir=tmp_path, add_port=-1).add_port == -1
    for bad in (-2, 65536):
        with pytest.raises(ConfigError, match="add_port"):
            BookieConfig(data_dir=tmp_path, add_port=bad)


def test_broker_setting_reaches_the_ledger_client_config(tmp_path) -> None:
    from broker.config import BrokerConfig
    from magnetar.config import derive

    for transport in ("tcp", "grpc"):
        broker = BrokerConfig(data_dir=tmp_path, zookeeper="z:1", managed_ledger_add_transport=transport)
        assert derive(LedgerClientConfig, broker, prefix="managed_ledger_").add_transport == transport
    with pytest.raises(ConfigError, match="managed_ledger_add_transport"):
        BrokerConfig(data_dir=tmp_path, zookeeper="z:1", managed_ledger_add_transport="quic")


@given(st.lists(st.binary(max_size=700), max_size=12), st.lists(st.integers(1, 900), min_size=1, max_size=40))
def test_frame_buffer_gives_every_body_whole_however_the_bytes_are_cut(bodies, cuts) -> None:
    stream = b"".join(encode_frame(b) for b in bodies)
    buffer = FrameBuffer()
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += buffer.feed(stream[pos:pos + step])
        pos += step
        i += 1
    assert out == bodies and buffer.partial == 0
    buffer.feed(frame_header(5) + b"abc")
    assert buffer.partial == HEADER_BYTES + 3


def test_frame_buffer_refuses_a_length_over_the_limit() -> None:
    buffer = FrameBuffer()
    assert buffer.feed(encode_frame(b"ok")) == [b"ok"]
    with pytest.raises(FrameError, match="at most"):
        buffer.feed((FRAME_MAX_BYTES + 1).to_bytes(4, "big"))
