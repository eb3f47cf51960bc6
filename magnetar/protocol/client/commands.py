"""Commands a client sends, built without I/O (as pulsar-client-go's ``commands.go``).

Each function returns a ``BaseCommand`` or the bytes of a frame; request ids are filled in by the
connection (:meth:`Connection.request`), which owns the counter.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from magnetar import __version__
from magnetar.protocol import MessageId, encode_command, encode_message_frame_header, encode_payload_command, pb, wrap

__all__ = [
    "CLIENT_VERSION",
    "PROTOCOL_VERSION",
    "ack_command",
    "connect_command",
    "encode_send",
    "encode_send_raw",
    "flow_frame",
    "key_values",
    "message_metadata",
    "now_ms",
]

PROTOCOL_VERSION = 20  # what pulsar-client 3.x announces
CLIENT_VERSION = f"magnetar-{__version__}"

BaseCommand = pb.BaseCommand


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (publish times, event times)."""
    return time.time_ns() // 1_000_000


def key_values(properties: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> list[pb.KeyValue]:
    if not properties:
        return []
    items = properties.items() if isinstance(properties, Mapping) else properties
    return [pb.KeyValue(key=str(k), value=str(v)) for k, v in items]


def connect_command(
    *,
    client_version: str = CLIENT_VERSION,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
    proxy_to_broker_url: str | None = None,
    protocol_version: int = PROTOCOL_VERSION,
    topic_watchers: bool = False,
    original_principal: str | None = None,
    original_auth: tuple[str, bytes] | None = None,
) -> pb.BaseCommand:
    """CONNECT as pulsar-client sends it (feature flags: auth refresh, broker entry metadata), announcing topic-list
    watchers too when ``topic_watchers`` (as Pulsar's Java client does). A proxy names the role its client
    authenticated as in ``original_principal`` (its own credentials being ``auth_*``) and may forward the
    client's credentials, ``original_auth`` = (method, data)."""
    connect = pb.CommandConnect(
        client_version=client_version,
        protocol_version=protocol_version,
        auth_method_name=auth_method_name or "none",
        feature_flags=pb.FeatureFlags(supports_auth_refresh=True, supports_broker_entry_metadata=True,
                                      supports_topic_watchers=topic_watchers),
    )
    if auth_data is not None:
        connect.auth_data = auth_data
    if proxy_to_broker_url:
        connect.proxy_to_broker_url = proxy_to_broker_url
    if original_principal:
        connect.original_principal = original_principal
    if original_auth is not None:
        connect.original_auth_method = original_auth[0]
        connect.original_auth_data = original_auth[1].decode("utf-8", "replace")  # a string in Pulsar's proto
    return wrap(connect)


def message_metadata(
    *,
    producer_name: str,
    sequence_id: int,
    publish_time_ms: int | None = None,
    key: str | None = None,
    properties: Mapping[str, str] | None = None,
    event_time_ms: int | None = None,
    ordering_key: bytes | None = None,
    replicate_to: Iterable[str] | None = None,
    deliver_at_time_ms: int | None = None,
) -> pb.MessageMetadata:
    """The ``MessageMetadata`` of one unbatched message, as pulsar-client fills it."""
    md = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=now_ms() if publish_time_ms is None else publish_time_ms,
    )
    if properties:
        md.properties.extend(key_values(properties))
    if key is not None:
        md.partition_key = key
    if event_time_ms:
        md.event_time = event_time_ms
    if ordering_key is not None:
        md.ordering_key = ordering_key
    if replicate_to:
        md.replicate_to.extend(replicate_to)
    if deliver_at_time_ms is not None:
        md.deliver_at_time = deliver_at_time_ms
    return md


def _send_command(
    producer_id: int,
    sequence_id: int,
    num_messages: int,
    highest_sequence_id: int | None,
    *,
    marker: bool = False,
    source_position: tuple[int, int] | None = None,
) -> pb.BaseCommand:
    send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    if source_position is not None:  # the replicator names the entry's position in its origin topic
        send.message_id.ledgerId, send.message_id.entryId = source_position
    # pulsar-client leaves num_messages out for a single message; a count of 1 means the same.
    if num_messages != 1:
        send.num_messages = num_messages
    if highest_sequence_id is not None and highest_sequence_id != sequence_id:
        send.highest_sequence_id = highest_sequence_id
    if marker:
        send.marker = True
    return wrap(send)


def encode_send(
    producer_id: int,
    sequence_id: int,
    metadata: pb.MessageMetadata,
    payload: bytes,
    *,
    num_messages: int = 1,
    highest_sequence_id: int | None = None,
    marker: bool = False,
    source_position: tuple[int, int] | None = None,
) -> bytes:
    """A SEND frame: command, then the entry (magic, CRC32C, metadata exactly as given, payload)."""
    cmd = _send_command(producer_id, sequence_id, num_messages, highest_sequence_id, marker=marker,
                        source_position=source_position)
    return encode_payload_command(cmd, metadata, payload)


def encode_send_raw(
    producer_id: int,
    sequence_id: int,
    entry: bytes,
    *,
    num_messages: int = 1,
    highest_sequence_id: int | None = None,
    marker: bool = False,
) -> list[bytes]:
    """A SEND frame around an already encoded entry (from ``0x0e01`` on), as two buffers for ``writelines``.

    The entry's bytes are sent as they are: nothing is re-encoded and the checksum is not recomputed, so a
    deliberately corrupt entry stays corrupt (malformed-input tests) and a stored entry travels unchanged.
    """
    cmd = _send_command(producer_id, sequence_id, num_messages, highest_sequence_id, marker=marker)
    return [encode_message_frame_header(cmd, len(entry)), entry]


def flow_frame(consumer_id: int, permits: int) -> bytes:
    return encode_command(wrap(pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits)))


def ack_command(
    consumer_id: int,
    message_ids: Iterable[MessageId],
    *,
    cumulative: bool = False,
    validation_error: int | None = None,
) -> pb.BaseCommand:
    ack = pb.CommandAck(
        consumer_id=consumer_id,
        ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
    )
    for mid in message_ids:
        mid.to_proto(ack.message_id.add())
    if validation_error is not None:
        ack.validation_error = validation_error
    return wrap(ack)
