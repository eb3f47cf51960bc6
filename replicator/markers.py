"""Replicated-subscription markers: the internal entries that link positions across clusters (pure).

A marker is a stored entry like any other (``[0x0e01][crc32c][metadata_size][MessageMetadata][payload]``,
what a SEND's ``Frame.entry`` holds), whose metadata names the producer ``pulsar.marker``, sequence id 0 and
a ``marker_type``, and whose payload is one of the marker messages of ``pulsar_api.proto``. Dispatchers never
deliver markers; replicators carry them like data, honouring ``replicate_to``:

* snapshot request (type 10, ``ReplicatedSubscriptionsSnapshotRequest``): no ``replicate_to``, so it
  reaches every remote cluster;
* snapshot response (11, ``ReplicatedSubscriptionsSnapshotResponse``): ``replicate_to`` = the asking cluster;
* snapshot (12, ``ReplicatedSubscriptionsSnapshot``): ``replicate_to`` = the local cluster, so it never
  leaves it;
* update (13, ``ReplicatedSubscriptionsUpdate``): no ``replicate_to``, every remote cluster.

Positions travel as ``MarkersMessageIdData`` (two uint64s); a position's ``-1`` entry id ("before the first
entry of the ledger") is carried as its two's complement, as Pulsar's message ids do.
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping, Optional, Sequence, Union

from google.protobuf.message import DecodeError

from broker.managed_ledger.api import Position
from magnetar.protocol import pb
from magnetar.protocol.compression import decompress
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import encode_entry

__all__ = [
    "MARKER_PRODUCER_NAME",
    "MarkerMessage",
    "cluster_message_ids",
    "cluster_positions",
    "decode_marker",
    "encode_marker_entry",
    "marker_id_to_position",
    "position_to_marker_id",
    "snapshot",
    "snapshot_request",
    "snapshot_response",
    "update",
]

MARKER_PRODUCER_NAME = "pulsar.marker"

MarkerMessage = Union[
    pb.ReplicatedSubscriptionsSnapshotRequest,
    pb.ReplicatedSubscriptionsSnapshotResponse,
    pb.ReplicatedSubscriptionsSnapshot,
    pb.ReplicatedSubscriptionsUpdate,
]

_MESSAGE_BY_TYPE: dict[int, type] = {
    pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST: pb.ReplicatedSubscriptionsSnapshotRequest,
    pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE: pb.ReplicatedSubscriptionsSnapshotResponse,
    pb.REPLICATED_SUBSCRIPTION_SNAPSHOT: pb.ReplicatedSubscriptionsSnapshot,
    pb.REPLICATED_SUBSCRIPTION_UPDATE: pb.ReplicatedSubscriptionsUpdate,
}
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


# ------------------------------------------------------------------------------------------ entries


def encode_marker_entry(
    marker_type: int,
    message: MarkerMessage,
    *,
    replicate_to: Sequence[str] = (),
    publish_time_ms: Optional[int] = None,
) -> bytes:
    """A whole stored entry carrying ``message`` as a marker of ``marker_type``.

    Args:
        marker_type: a ``pb.MarkerType`` value; it must match the message's class.
        message: the marker payload.
        replicate_to: the clusters replicators may carry the marker to (empty: every cluster).
        publish_time_ms: defaults to now.

    Raises:
        ValueError: ``marker_type`` is not a replicated-subscription marker or does not fit ``message``.
        google.protobuf.message.EncodeError: a required field of ``message`` is unset (a bug in the caller).
    """
    expected = _MESSAGE_BY_TYPE.get(marker_type)
    if expected is None or not isinstance(message, expected):
        raise ValueError(f"marker type {marker_type} does not carry a {type(message).__name__}")
    metadata = pb.MessageMetadata(
        producer_name=MARKER_PRODUCER_NAME,
        sequence_id=0,
        publish_time=int(time.time() * 1000) if publish_time_ms is None else publish_time_ms,
        marker_type=marker_type,
        replicate_to=list(replicate_to),
    )
    return encode_entry(metadata, message.SerializeToString())


def decode_marker(metadata: pb.MessageMetadata, payload: bytes) -> MarkerMessage:
    """The marker message of a replicated-subscription marker entry.

    Raises:
        ProtocolError: the entry is not a marker, its type is not one of the four replicated-subscription
            markers, or its payload does not parse as that type's message.
    """
    if not metadata.HasField("marker_type"):
        raise ProtocolError("entry is not a marker (its metadata has no marker_type)")
    cls = _MESSAGE_BY_TYPE.get(metadata.marker_type)
    if cls is None:
        raise ProtocolError(f"marker type {metadata.marker_type} is not a replicated-subscription marker")
    if metadata.compression != pb.NONE:  # Pulsar never compresses markers; accept it anyway
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    name = pb.MarkerType.Name(metadata.marker_type)
    try:
        message = cls.FromString(payload)
    except DecodeError as exc:
        raise ProtocolError(f"undecodable {name} marker ({len(payload)} bytes): {exc}") from None
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise ProtocolError(f"{name} marker lacks required fields: {missing}")
    return message


# ------------------------------------------------------------------------------------------ positions


def _signed(value: int) -> int:
    return value - _U64 if value > _I64_MAX else value


def position_to_marker_id(position: Position) -> pb.MarkersMessageIdData:
    """A position as markers carry it (negative ids as their two's complement)."""
    return pb.MarkersMessageIdData(ledger_id=position.ledger_id % _U64, entry_id=position.entry_id % _U64)


def marker_id_to_position(mid: pb.MarkersMessageIdData) -> Position:
    """Reverses :func:`position_to_marker_id`."""
    return Position(_signed(mid.ledger_id), _signed(mid.entry_id))


def cluster_message_ids(clusters: Mapping[str, Position]) -> list[pb.ClusterMessageId]:
    """``{cluster: position}`` as marker fields, sorted by cluster name (so equal maps encode equally)."""
    return [pb.ClusterMessageId(cluster=c, message_id=position_to_marker_id(p)) for c, p in sorted(clusters.items())]


def cluster_positions(ids: Iterable[pb.ClusterMessageId]) -> dict[str, Position]:
    """Reverses :func:`cluster_message_ids` (the last entry wins if a cluster repeats)."""
    return {c.cluster: marker_id_to_position(c.message_id) for c in ids}


# ------------------------------------------------------------------------------------------ messages


def snapshot_request(snapshot_id: str, source_cluster: str) -> pb.ReplicatedSubscriptionsSnapshotRequest:
    return pb.ReplicatedSubscriptionsSnapshotRequest(snapshot_id=snapshot_id, source_cluster=source_cluster)


def snapshot_response(snapshot_id: str, cluster: str, position: Position) -> pb.ReplicatedSubscriptionsSnapshotResponse:
    return pb.ReplicatedSubscriptionsSnapshotResponse(
        snapshot_id=snapshot_id,
        cluster=pb.ClusterMessageId(cluster=cluster, message_id=position_to_marker_id(position)),
    )


def snapshot(snapshot_id: str, local: Position, clusters: Mapping[str, Position]) -> pb.ReplicatedSubscriptionsSnapshot:
    return pb.ReplicatedSubscriptionsSnapshot(
        snapshot_id=snapshot_id,
        local_message_id=position_to_marker_id(local),
        clusters=cluster_message_ids(clusters),
    )


def update(subscription_name: str, clusters: Mapping[str, Position]) -> pb.ReplicatedSubscriptionsUpdate:
    return pb.ReplicatedSubscriptionsUpdate(subscription_name=subscription_name, clusters=cluster_message_ids(clusters))
