"""A client connection's life in the proxy, as a pure state table, plus the frames the proxy writes.

Theory of operation
-------------------

Pulsar's proxy (``ProxyConnection``) reads a client's CONNECT and then takes one of two roads, never both:

* **lookups** (CONNECT without ``proxy_to_broker_url``): the proxy answers CONNECTED itself and then serves
  LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE and GET_SCHEMA by asking the region's brokers. A LOOKUP
  is answered with the owner broker's URL and ``proxy_through_service_url = true``, so the client comes back
  through the proxy (its service URL) naming that broker in ``proxy_to_broker_url``;
* **forwarding** (CONNECT with ``proxy_to_broker_url``): the proxy checks the target is a registered broker of
  its region, connects to it, sends CONNECT *as the proxy* (its own credentials; the client's role as
  ``original_principal``), hands the broker's CONNECTED to the client and from then on copies bytes both ways
  without decoding frames.

States (Pulsar's names in brackets)::

    ACCEPTED            TCP accepted; TLS handshake running on a TLS port           [Init]
    AWAITING_CONNECT    the first frame must be CONNECT (its credentials decided)    [Init, Connecting]
    LOOKUPS             answering lookups                                            [ProxyLookupRequests]
    CONNECTING_BROKER   connecting to the named broker; client input waits           [ProxyConnectingToBroker]
    RELAYING            bytes spliced to the broker                                  [ProxyConnectionToBroker]
    CLOSED

Credentials are decided on CONNECT in one step (``tls`` and ``token`` need no more rounds). A lookup
connection whose credentials expire is sent AUTH_CHALLENGE and must answer AUTH_RESPONSE with fresh ones for the
same role; a forwarded connection cannot be challenged by the proxy (it no longer reads frames), so it is closed
when its credentials expire, unless the client's credentials are forwarded to the broker, which then refreshes
them itself.

Until the connection reaches LOOKUPS or RELAYING a handshake timer runs; a client that sends nothing, or not
a CONNECT, or too large a frame, is closed. In LOOKUPS any command other than the four lookups, PING, PONG and
AUTH_RESPONSE is a client bug (it should have connected with ``proxy_to_broker_url``): it is answered ERROR
NotAllowed and the connection closes, as Pulsar's proxy closes it.

Frames before RELAYING are split here without the decoder (:func:`split_frame`), so that whatever the client
sent after its CONNECT is forwarded to the broker byte for byte.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Optional

from magnetar import __version__
from magnetar.protocol import FrameDecoder, FrameTooLargeError, ProtocolError, encode_command, pb, wrap

__all__ = [
    "ALLOWED",
    "ConnectDecision",
    "ConnectionState",
    "HANDSHAKE_FRAME_BYTES_MAX",
    "LOOKUP_COMMANDS",
    "MIN_PROTOCOL_VERSION",
    "NO_REQUEST_ID",
    "PROXY_VERSION",
    "auth_challenge",
    "broker_connect",
    "connected",
    "decide_connect",
    "decode_one",
    "error",
    "lookup_connect",
    "lookup_failure",
    "rejection",
    "split_frame",
]

T = pb.BaseCommand
PROXY_VERSION = f"magnetar-proxy-{__version__}"
MAX_PROTOCOL_VERSION = 20
MIN_PROTOCOL_VERSION = 10  # Pulsar's proxy refuses clients older than v10 (they cannot go through a proxy)
# CONNECT, AUTH_RESPONSE and lookups are small; a frame larger than this before RELAYING is refused.
HANDSHAKE_FRAME_BYTES_MAX = 128 * 1024
# Pulsar answers errors that belong to no request (CONNECT's) with request id -1, an all-ones uint64.
NO_REQUEST_ID = (1 << 64) - 1
_U32 = struct.Struct(">I")


class ConnectionState(enum.Enum):
    ACCEPTED = "accepted"
    AWAITING_CONNECT = "awaiting-connect"
    LOOKUPS = "lookups"
    CONNECTING_BROKER = "connecting-broker"
    RELAYING = "relaying"
    CLOSED = "closed"


LOOKUP_COMMANDS = frozenset((T.LOOKUP, T.PARTITIONED_METADATA, T.GET_TOPICS_OF_NAMESPACE, T.GET_SCHEMA))

# Commands a client may send in each state where the proxy decodes frames.
ALLOWED: dict[ConnectionState, frozenset[int]] = {
    ConnectionState.AWAITING_CONNECT: frozenset((T.CONNECT,)),
    ConnectionState.LOOKUPS: LOOKUP_COMMANDS | {T.PING, T.PONG, T.AUTH_RESPONSE},
}

# Handshake states: the handshake timer runs in them.
HANDSHAKING = frozenset((ConnectionState.ACCEPTED, ConnectionState.AWAITING_CONNECT, ConnectionState.CONNECTING_BROKER))


# -- framing before the splice ----------------------------------------------------------------------------


def split_frame(buffer: bytearray, *, frame_bytes_max: int = HANDSHAKE_FRAME_BYTES_MAX) -> Optional[bytes]:
    """Removes and returns the first whole frame (size prefix included) of ``buffer``, or None if it has not
    all arrived.

    Raises:
        FrameTooLargeError: the frame announces more than ``frame_bytes_max`` bytes (checked before it arrives).
    """
    if len(buffer) < 4:
        return None
    size = 4 + _U32.unpack_from(buffer, 0)[0]
    if size > frame_bytes_max:
        raise FrameTooLargeError(f"frame of {size} bytes exceeds the {frame_bytes_max} bytes allowed before the "
                                 f"connection is forwarded")
    if len(buffer) < size:
        return None
    frame = bytes(buffer[:size])
    del buffer[:size]
    return frame


def decode_one(frame: bytes) -> pb.BaseCommand:
    """The command of one whole frame (from :func:`split_frame`).

    Raises:
        ProtocolError: the bytes are not a valid command frame.
    """
    frames = FrameDecoder(frame_size_bytes_max=max(len(frame), 8)).feed(frame)
    if len(frames) != 1:
        raise ProtocolError("expected exactly one frame")
    return frames[0].command


# -- CONNECT ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectDecision:
    """What a CONNECT asks for.

    Attributes:
        refusal: why the client is refused ("": accepted).
        protocol_version: the version the proxy speaks with this client (the lower of both).
        target: the ``proxy_to_broker_url`` ("": the client wants lookups).
    """

    refusal: str
    protocol_version: int
    target: str


def decide_connect(connect: pb.CommandConnect) -> ConnectDecision:
    """Reads a CONNECT (authentication is decided elsewhere)."""
    version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
    refusal = ""
    if connect.protocol_version < MIN_PROTOCOL_VERSION:
        refusal = (f"protocol version {connect.protocol_version} cannot go through a proxy "
                   f"(version {MIN_PROTOCOL_VERSION} or later is needed)")
    target = connect.proxy_to_broker_url if connect.HasField("proxy_to_broker_url") else ""
    if connect.HasField("proxy_to_broker_url") and not target:
        refusal = refusal or "proxy_to_broker_url is empty"
    if connect.HasField("original_principal"):
        # Only a proxy sends it to a broker; a client claiming a principal to the proxy is forging one.
        refusal = refusal or "a client may not set original_principal"
    return ConnectDecision(refusal, version, target)


def broker_connect(client: pb.CommandConnect, *, protocol_version: int, auth_method_name: str,
                   auth_data: bytes, original_principal: Optional[str], original_auth_method: str = "",
                   original_auth_data: bytes = b"") -> bytes:
    """The CONNECT the proxy sends a broker for a forwarded client: the client's version and feature flags
    (the client and the broker speak directly once spliced), the proxy's credentials, the client's role and,
    when the proxy forwards them, the client's own credentials."""
    cmd = pb.CommandConnect(client_version=client.client_version or PROXY_VERSION, protocol_version=protocol_version,
                            auth_method_name=auth_method_name or "none", proxy_version=PROXY_VERSION)
    if auth_data:
        cmd.auth_data = auth_data
    if client.HasField("feature_flags"):
        cmd.feature_flags.CopyFrom(client.feature_flags)
    if original_principal:
        cmd.original_principal = original_principal
    if original_auth_method:
        cmd.original_auth_method = original_auth_method
        cmd.original_auth_data = original_auth_data.decode("utf-8", "replace")  # a string field in Pulsar's proto
    return encode_command(wrap(cmd))


def auth_challenge(method: str, protocol_version: int) -> bytes:
    """AUTH_CHALLENGE asking a client for fresh credentials (``auth_data`` "refresh", as Pulsar asks)."""
    return encode_command(wrap(pb.CommandAuthChallenge(
        server_version=PROXY_VERSION, protocol_version=protocol_version,
        challenge=pb.AuthData(auth_method_name=method, auth_data=b"refresh"))))


def connected(protocol_version: int) -> bytes:
    """CONNECTED of a lookup connection (no topic-list watchers: clients poll through the proxy)."""
    return encode_command(wrap(pb.CommandConnected(server_version=PROXY_VERSION, protocol_version=protocol_version)))


def error(request_id: int, code: int, message: str) -> bytes:
    return encode_command(wrap(pb.CommandError(request_id=request_id, error=code, message=message)))


# -- lookup answers ---------------------------------------------------------------------------------------


def lookup_connect(request_id: int, broker_url: str) -> bytes:
    """A LOOKUP answered as Pulsar's proxy answers it: Connect, the owner's URL in both URL fields (whether the
    proxy reaches brokers over TLS is not the client's business), and ``proxy_through_service_url``."""
    Response = pb.CommandLookupTopicResponse
    return encode_command(wrap(Response(request_id=request_id, response=Response.Connect, authoritative=True,
                                        brokerServiceUrl=broker_url, brokerServiceUrlTls=broker_url,
                                        proxy_through_service_url=True)))


def lookup_failure(command_type: int, request_id: int, code: int, message: str) -> bytes:
    """The failed answer each lookup command expects."""
    if command_type == T.LOOKUP:
        Response = pb.CommandLookupTopicResponse
        return encode_command(wrap(Response(request_id=request_id, response=Response.Failed, error=code,
                                            message=message)))
    if command_type == T.PARTITIONED_METADATA:
        PResponse = pb.CommandPartitionedTopicMetadataResponse
        return encode_command(wrap(PResponse(request_id=request_id, response=PResponse.Failed, error=code,
                                             message=message)))
    if command_type == T.GET_SCHEMA:
        return encode_command(wrap(pb.CommandGetSchemaResponse(request_id=request_id, error_code=code,
                                                               error_message=message)))
    return error(request_id, code, message)


REJECTION_MESSAGE = "Too many concurrent lookup and partitionsMetadata requests"  # Pulsar's text


def rejection(command_type: int, request_id: int) -> bytes:
    """The answer to a lookup over ``max_concurrent_lookup_requests`` (TooManyRequests: the client retries)."""
    return lookup_failure(command_type, request_id, pb.TooManyRequests, REJECTION_MESSAGE)


def request_id_of(cmd: pb.BaseCommand) -> int:
    """The request id of a lookup command."""
    body = {T.LOOKUP: cmd.lookupTopic, T.PARTITIONED_METADATA: cmd.partitionMetadata,
            T.GET_TOPICS_OF_NAMESPACE: cmd.getTopicsOfNamespace, T.GET_SCHEMA: cmd.getSchema}.get(cmd.type)
    return body.request_id if body is not None else NO_REQUEST_ID
