"""Replicated-subscription markers: stored-entry bytes, round trips, junk input, positions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.managed_ledger.api import Position
from broker.service.topics.entries import entry_info, entry_payload, peek_metadata
from magnetar.protocol import FrameDecoder, ProtocolError, encode_payload_command, parse_entry, pb, wrap
from replicator import markers
from replicator.markers import decode_marker, encode_marker_entry, marker_id_to_position, position_to_marker_id

i64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
positions = st.builds(Position, i64, i64)
names = st.text(min_size=1, max_size=20)
cluster_maps = st.dictionaries(names, positions, max_size=4)

requests = st.builds(markers.snapshot_request, names, names)
responses = st.builds(markers.snapshot_response, names, names, positions)
snapshots = st.builds(markers.snapshot, names, positions, cluster_maps)
updates = st.builds(markers.update, names, cluster_maps)
TYPE_OF = {
    pb.ReplicatedSubscriptionsSnapshotRequest: pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST,
    pb.ReplicatedSubscriptionsSnapshotResponse: pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE,
    pb.ReplicatedSubscriptionsSnapshot: pb.REPLICATED_SUBSCRIPTION_SNAPSHOT,
    pb.ReplicatedSubscriptionsUpdate: pb.REPLICATED_SUBSCRIPTION_UPDATE,
}
any_marker = st.one_of(requests, responses, snapshots, updates)


def _marker_type(message) -> int:
    return TYPE_OF[type(message)]


@given(any_marker, st.lists(names, max_size=3), st.integers(min_value=0, max_value=(1 << 63)))
def test_marker_entry_round_trip(message, replicate_to, publish_time_ms):
    entry = encode_marker_entry(_marker_type(message), message, replicate_to=replicate_to,
                                publish_time_ms=publish_time_ms)
    parsed = parse_entry(entry)  # checksum verified
    md = parsed.metadata
    assert (md.producer_name, md.sequence_id, md.publish_time) == ("pulsar.marker", 0, publish_time_ms)
    assert md.marker_type == _marker_type(message)
    assert list(md.replicate_to) == replicate_to
    assert decode_marker(md, parsed.payload) == message


def test_marker_entry_is_what_a_send_stores():
    """The bytes equal ``Frame.entry`` of a SEND carrying the same metadata and payload, which is what the broker
    stores for a published entry; the dispatch path sees a marker and finds its payload."""
    message = markers.snapshot("s1", Position(3, 4), {"b": Position(7, 8)})
    entry = encode_marker_entry(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT, message, replicate_to=["a"], publish_time_ms=5)
    md = peek_metadata(entry)
    send = wrap(pb.CommandSend(producer_id=1, sequence_id=0, num_messages=1, marker=True))
    (frame,) = FrameDecoder().feed(encode_payload_command(send, md, message.SerializeToString()))
    assert frame.entry == entry
    info = entry_info(entry)
    assert info.marker and info.num_messages == 1
    assert decode_marker(info.metadata, entry_payload(entry)) == message


def test_publish_time_defaults_to_now():
    entry = encode_marker_entry(pb.REPLICATED_SUBSCRIPTION_UPDATE, markers.update("s", {}))
    assert peek_metadata(entry).publish_time > 1_600_000_000_000


def test_encode_refuses_a_type_that_does_not_fit():
    with pytest.raises(ValueError, match="does not carry"):
        encode_marker_entry(pb.REPLICATED_SUBSCRIPTION_UPDATE, markers.snapshot_request("s", "a"))
    with pytest.raises(ValueError):
        encode_marker_entry(pb.TXN_COMMIT, markers.snapshot_request("s", "a"))


def _metadata(marker_type=None) -> pb.MessageMetadata:
    md = pb.MessageMetadata(producer_name="pulsar.marker", sequence_id=0, publish_time=1)
    if marker_type is not None:
        md.marker_type = marker_type
    return md


def test_decode_refuses_non_markers_and_unknown_types():
    with pytest.raises(ProtocolError, match="not a marker"):
        decode_marker(_metadata(), b"")
    with pytest.raises(ProtocolError, match="TXN|20|not a replicated"):
        decode_marker(_metadata(pb.TXN_COMMITTING), b"")
    with pytest.raises(ProtocolError, match="99"):
        decode_marker(_metadata(99), b"")


def test_decode_refuses_a_marker_without_required_fields():
    with pytest.raises(ProtocolError, match="lacks required fields.*snapshot_id"):
        decode_marker(_metadata(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST), b"")


@given(st.sampled_from(sorted(TYPE_OF.values())), st.binary(max_size=64))
def test_decode_junk_raises_protocol_error_or_parses(marker_type, junk):
    try:
        message = decode_marker(_metadata(marker_type), junk)
    except ProtocolError:
        return
    assert message.IsInitialized()


def test_decode_junk_bytes():
    with pytest.raises(ProtocolError, match="undecodable REPLICATED_SUBSCRIPTION_UPDATE"):
        decode_marker(_metadata(pb.REPLICATED_SUBSCRIPTION_UPDATE), b"\xff\xff\xff")


def test_decode_accepts_a_compressed_marker():
    message = markers.update("sub", {"b": Position(1, 2)})
    raw = message.SerializeToString()
    from magnetar.protocol import compress

    md = _metadata(pb.REPLICATED_SUBSCRIPTION_UPDATE)
    md.compression = pb.ZLIB
    md.uncompressed_size = len(raw)
    assert decode_marker(md, compress(pb.ZLIB, raw)) == message


@given(positions)
def test_position_round_trip(position):
    mid = position_to_marker_id(position)
    assert 0 <= mid.ledger_id < 1 << 64 and 0 <= mid.entry_id < 1 << 64
    assert marker_id_to_position(pb.MarkersMessageIdData.FromString(mid.SerializeToString())) == position


def test_before_first_entry_travels_as_twos_complement():
    assert position_to_marker_id(Position(5, -1)).entry_id == (1 << 64) - 1


@given(cluster_maps)
def test_cluster_positions_round_trip(clusters):
    ids = markers.cluster_message_ids(clusters)
    assert [c.cluster for c in ids] == sorted(clusters)
    assert markers.cluster_positions(ids) == clusters
