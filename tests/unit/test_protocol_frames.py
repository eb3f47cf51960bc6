"""Frame codec: round trips under any fragmentation, damage detection, limits, splicing, real-client bytes."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol import (
    ChecksumError,
    FrameDecoder,
    FrameTooLargeError,
    ProtocolError,
    add_broker_entry_metadata,
    command_body,
    compression,
    encode_command,
    encode_entry,
    encode_message_frame_from_entry,
    encode_message_frame_header,
    encode_payload_command,
    parse_entry,
    pb,
    split_batch,
    split_broker_entry_metadata,
    wrap,
)

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
u32 = st.integers(min_value=0, max_value=(1 << 32) - 1)
text = st.text(max_size=40)
key_values = st.lists(st.builds(pb.KeyValue, key=text, value=text), max_size=4)

message_ids = st.builds(pb.MessageIdData, ledgerId=u64, entryId=u64)
simple_commands = st.one_of(
    st.just(wrap(pb.CommandPing())),
    st.just(wrap(pb.CommandPong())),
    st.builds(lambda c, p: wrap(pb.CommandFlow(consumer_id=c, messagePermits=p)), u64, u32),
    st.builds(
        lambda c, ids: wrap(pb.CommandAck(consumer_id=c, ack_type=pb.CommandAck.Individual, message_id=ids)),
        u64,
        st.lists(message_ids, max_size=5),
    ),
    st.builds(
        lambda t, s, c, r: wrap(pb.CommandSubscribe(topic=t, subscription=s, subType=1, consumer_id=c, request_id=r)),
        text, text, u64, u64,
    ),
    st.builds(lambda r, m: wrap(pb.CommandError(request_id=r, error=pb.ServiceNotReady, message=m)), u64, text),
    st.builds(lambda r, t: wrap(pb.CommandLookupTopic(request_id=r, topic=t, advertised_listener_name="")), u64, text),
)
metadatas = st.builds(
    pb.MessageMetadata,
    producer_name=text,
    sequence_id=u64,
    publish_time=u64,
    properties=key_values,
    partition_key=st.one_of(st.none(), text),
    replicated_from=st.one_of(st.none(), text),
    num_messages_in_batch=st.one_of(st.none(), st.integers(min_value=1, max_value=1000)),
    compression=st.sampled_from([0, 1, 2, 3, 4]),
    marker_type=st.one_of(st.none(), st.sampled_from([10, 11, 12, 13])),
)
bems = st.one_of(st.none(), st.builds(pb.BrokerEntryMetadata, broker_timestamp=u64, index=u64))
payloads = st.binary(max_size=4096)


@st.composite
def payload_frames(draw):
    if draw(st.booleans()):
        cmd = wrap(pb.CommandSend(producer_id=draw(u64), sequence_id=draw(u64), num_messages=draw(st.integers(1, 500))))
    else:
        cmd = wrap(pb.CommandMessage(consumer_id=draw(u64), message_id=draw(message_ids)))
    return cmd, draw(metadatas), draw(payloads), draw(bems)


frames_specs = st.lists(st.one_of(simple_commands.map(lambda c: (c, None, None, None)), payload_frames()), max_size=8)


def encode(spec) -> bytes:
    cmd, metadata, payload, bem = spec
    if metadata is None:
        return encode_command(cmd)
    return encode_payload_command(cmd, metadata, payload, broker_entry_metadata=bem)


def feed_in_chunks(decoder: FrameDecoder, stream: bytes, cuts: list[int]) -> list:
    frames, start = [], 0
    for cut in sorted(set(cuts)) + [len(stream)]:
        frames += decoder.feed(stream[start:cut])
        start = cut
    return frames


def check_same(frame, spec) -> None:
    cmd, metadata, payload, bem = spec
    assert frame.command == cmd
    assert frame.checksum_ok
    if metadata is None:
        assert frame.metadata is None and frame.payload is None and frame.entry is None
    else:
        assert frame.metadata == metadata and frame.payload == payload
        assert frame.broker_entry_metadata == bem
        assert parse_entry(frame.entry) == (metadata, payload, None)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(frames_specs, st.data())
def test_round_trip_under_any_fragmentation(specs, data):
    stream = b"".join(encode(spec) for spec in specs)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=20))
    decoder = FrameDecoder()
    frames = feed_in_chunks(decoder, stream, cuts)
    assert len(frames) == len(specs)
    for frame, spec in zip(frames, specs):
        check_same(frame, spec)
    assert decoder.buffered_bytes == 0


@given(frames_specs)
def test_byte_at_a_time(specs):
    stream = b"".join(encode(spec) for spec in specs)
    decoder = FrameDecoder()
    frames = [f for i in range(len(stream)) for f in decoder.feed(stream[i : i + 1])]
    assert [f.command for f in frames] == [spec[0] for spec in specs]


@given(st.one_of(simple_commands.map(lambda c: (c, None, None, None)), payload_frames()), st.data())
def test_truncation_never_yields_a_frame(spec, data):
    encoded = encode(spec)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    decoder = FrameDecoder()
    assert decoder.feed(encoded[:cut]) == []
    assert decoder.buffered_bytes == cut
    [frame] = decoder.feed(encoded[cut:])
    check_same(frame, spec)


@given(payload_frames(), st.data())
def test_checksum_mismatch_is_reported_not_raised(spec, data):
    cmd, metadata, payload, bem = spec
    encoded = bytearray(encode_payload_command(cmd, metadata, payload))
    covered_from = 4 + 4 + len(cmd.SerializeToString()) + 6  # the checksum covers metadata_size onwards
    index = data.draw(st.integers(min_value=covered_from, max_value=len(encoded) - 1))
    encoded[index] ^= 1 << data.draw(st.integers(0, 7))
    [frame] = FrameDecoder().feed(bytes(encoded))  # CRC32C catches every single-bit error
    assert not frame.checksum_ok
    assert frame.command == cmd  # the broker can still answer SEND_ERROR ChecksumError for this sequence id
    with pytest.raises(ChecksumError):
        parse_entry(frame.entry)


def test_bad_stored_checksum() -> None:
    cmd = wrap(pb.CommandSend(producer_id=1, sequence_id=7))
    md = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    encoded = bytearray(encode_payload_command(cmd, md, b"payload"))
    encoded[8 + len(cmd.SerializeToString()) + 2] ^= 0xFF  # first byte of the stored CRC
    [frame] = FrameDecoder().feed(bytes(encoded))
    assert not frame.checksum_ok and frame.metadata == md and frame.payload == b"payload"


@given(st.binary(max_size=512), st.data())
def test_garbage_only_ever_raises_protocol_error(garbage, data):
    decoder = FrameDecoder(frame_size_bytes_max=4096, require_checksum=data.draw(st.booleans()))
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(garbage)), max_size=5))
    try:
        feed_in_chunks(decoder, garbage, cuts)
    except ProtocolError:
        pass


@given(frames_specs, st.data())
def test_damaged_streams_only_ever_raise_protocol_error(specs, data):
    stream = bytearray(b"".join(encode(spec) for spec in specs))
    if not stream:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(stream) - 1))
        stream[index] = data.draw(st.integers(0, 255))
    decoder = FrameDecoder(frame_size_bytes_max=64 * 1024)
    try:
        feed_in_chunks(decoder, bytes(stream), data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    except ProtocolError as exc:
        assert all(f.command is not None for f in exc.frames)


def test_errors_are_typed_and_say_what_is_wrong() -> None:
    ping = encode_command(wrap(pb.CommandPing()))
    cases = {
        b"\x00\x00\x00\x02\x00\x00": "too short",
        struct.pack(">II", 6, 10) + b"\x08\x12": "exceeds the frame",
        struct.pack(">II", 7, 3) + b"\xff\xff\xff": "undecodable command",
        struct.pack(">II", 4, 0): "lacks required fields: type",
        struct.pack(">II", 6, 2) + b"\x08\x12": "PING command without its ping field",
        struct.pack(">II", 10, len(ping) - 8) + ping[8:] + b"x": "1 unexpected bytes after a PING",
        encode_command(wrap(pb.CommandSend(producer_id=1, sequence_id=1))): "without metadata and payload",
    }
    for stream, expected in cases.items():
        with pytest.raises(ProtocolError, match=expected):
            FrameDecoder().feed(stream)


def test_bad_magic_and_optional_checksum() -> None:
    cmd = wrap(pb.CommandSend(producer_id=1, sequence_id=1))
    body = cmd.SerializeToString()
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2).SerializeToString()
    tail = struct.pack(">I", len(md)) + md + b"data"
    frame = struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail
    with pytest.raises(ProtocolError, match="bad magic"):
        FrameDecoder().feed(frame)
    [decoded] = FrameDecoder(require_checksum=False).feed(frame)
    assert decoded.checksum_ok and decoded.payload == b"data" and decoded.entry == tail


def test_oversize_is_rejected_before_buffering_and_decoder_stops() -> None:
    decoder = FrameDecoder(frame_size_bytes_max=1024)
    with pytest.raises(FrameTooLargeError, match="exceeds the maximum of 1024"):
        decoder.feed(struct.pack(">I", 1021))  # 1025 bytes with the size prefix
    assert decoder.buffered_bytes == 0
    with pytest.raises(ProtocolError, match="earlier protocol error"):
        decoder.feed(encode_command(wrap(pb.CommandPing())))
    assert len(FrameDecoder(frame_size_bytes_max=1024).feed(struct.pack(">I", 1020) + b"\x00" * 3)) == 0


def test_default_limit_is_five_mib_plus_ten_kib() -> None:
    limit = 5 * 1024 * 1024 + 10 * 1024
    FrameDecoder().feed(struct.pack(">I", limit - 4))
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(struct.pack(">I", limit - 3))


def test_frames_before_an_error_are_handed_over() -> None:
    ping = encode_command(wrap(pb.CommandPing()))
    with pytest.raises(ProtocolError) as info:
        FrameDecoder().feed(ping + ping + struct.pack(">II", 4, 0))
    assert [f.command.type for f in info.value.frames] == [pb.BaseCommand.PING] * 2


def test_large_frame_in_small_chunks_is_linear() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    payload = bytes(5 * 1024 * 1024 - 200)
    encoded = encode_payload_command(wrap(pb.CommandSend(producer_id=1, sequence_id=1)), md, payload)
    decoder = FrameDecoder()
    started = time.perf_counter()
    frames = [f for i in range(0, len(encoded), 1024) for f in decoder.feed(encoded[i : i + 1024])]
    elapsed = time.perf_counter() - started
    assert len(frames) == 1 and frames[0].payload == payload
    assert elapsed < 2.0, f"5 MiB in 1 KiB chunks took {elapsed:.2f}s: buffering is not linear"


# --- splicing stored entries into MESSAGE frames -------------------------------------------------------


@given(metadatas, payloads, bems, message_ids)
def test_entry_splice(metadata, payload, bem, message_id):
    send = wrap(pb.CommandSend(producer_id=3, sequence_id=4))
    [received] = FrameDecoder().feed(encode_payload_command(send, metadata, payload))
    stored = received.entry if bem is None else add_broker_entry_metadata(received.entry, bem)
    assert split_broker_entry_metadata(stored) == (bem, received.entry)
    assert parse_entry(stored) == (metadata, payload, bem)

    message = wrap(pb.CommandMessage(consumer_id=9, message_id=message_id))
    spliced = encode_message_frame_from_entry(message, stored)
    assert spliced == encode_payload_command(message, metadata, payload, broker_entry_metadata=bem)
    assert encode_message_frame_header(message, len(stored)) + stored == spliced
    [frame] = FrameDecoder().feed(spliced)
    assert (frame.command, frame.metadata, frame.payload) == (message, metadata, payload)
    assert frame.broker_entry_metadata == bem
    assert frame.checksum_ok and frame.entry == received.entry

    stripped = encode_message_frame_from_entry(message, stored, strip_broker_entry_metadata=True)
    assert stripped == encode_payload_command(message, metadata, payload)


def test_encode_entry_matches_received_entry() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5, partition_key="k")
    [frame] = FrameDecoder().feed(encode_payload_command(wrap(pb.CommandSend(producer_id=1, sequence_id=1)), md, b"x"))
    assert encode_entry(md, b"x") == frame.entry
    bem = pb.BrokerEntryMetadata(index=3)
    assert encode_entry(md, b"x", broker_entry_metadata=bem) == add_broker_entry_metadata(frame.entry, bem)


def test_wrap_and_command_body() -> None:
    cmd = wrap(pb.CommandFlow(consumer_id=1, messagePermits=1000))
    assert cmd.type == pb.BaseCommand.FLOW and command_body(cmd).messagePermits == 1000
    with pytest.raises(TypeError):
        wrap(pb.MessageMetadata())


# --- bytes captured from pulsar-client 3.13 (C++ core 4.2.0) against a codec-only test server ----------

CLIENT_CONNECT = bytes.fromhex(
    "0000002900000025080212210a1150756c7361722d4350502d76342e322e3020142a046e6f6e65520408011001"
)
CLIENT_SEND = bytes.fromhex(
    "0000004b0000000808063204080010000e01fbd67c4f000000270a06676f6c64656e100018c5dfb7a2a03422060a016b1201"
    "7632056b65792d316080d095ffbc3168656c6c6f206d61676e65746172"
)
CLIENT_BATCHED_LZ4_SEND = bytes.fromhex(
    "000000740000000a080632060801100018030e017167425b0000001c0a06676f6c64656e100018c6dfb7a2a03432026b30"
    "40014890015803ff060000000812026b3018244000626174636865642d3009000803300054311824400127001f31090008"
    "03300054321824400227001f32090003506865642d32"
)


def test_decodes_real_client_connect() -> None:
    [frame] = FrameDecoder().feed(CLIENT_CONNECT)
    connect = frame.command.connect
    assert connect.client_version == "Pulsar-CPP-v4.2.0" and connect.protocol_version == 20
    assert connect.auth_method_name == "none"
    assert connect.feature_flags.supports_auth_refresh and connect.feature_flags.supports_broker_entry_metadata
    assert encode_command(frame.command) == CLIENT_CONNECT


def test_decodes_real_client_send_and_reencodes_it_byte_for_byte() -> None:
    [frame] = FrameDecoder().feed(CLIENT_SEND)
    assert frame.checksum_ok and frame.payload == b"hello magnetar"
    md = frame.metadata
    assert (md.producer_name, md.partition_key, md.event_time) == ("golden", "key-1", 1700000000000)
    assert {kv.key: kv.value for kv in md.properties} == {"k": "v"}
    assert not md.HasField("num_messages_in_batch")
    assert encode_payload_command(frame.command, md, frame.payload) == CLIENT_SEND


def test_decodes_real_client_batched_lz4_send() -> None:
    [frame] = FrameDecoder().feed(CLIENT_BATCHED_LZ4_SEND)
    assert frame.checksum_ok and frame.command.send.num_messages == 3
    md = frame.metadata
    assert md.compression == pb.LZ4 and md.num_messages_in_batch == 3
    assert encode_payload_command(frame.command, md, frame.payload) == CLIENT_BATCHED_LZ4_SEND
    raw = compression.decompress(md.compression, frame.payload, md.uncompressed_size)
    messages = split_batch(raw, md.num_messages_in_batch)
    assert [m.payload for m in messages] == [f"batched-{i}".encode() * 4 for i in range(3)]
    assert [m.metadata.partition_key for m in messages] == ["k0", "k1", "k2"]
