"""Kafka's request/response framing (pure: never imports asyncio).

Theory of operation
-------------------
Every Kafka request is a frame ``int32 size`` + ``size`` bytes: a request header (``int16 api_key``,
``int16 api_version``, ``int32 correlation_id``, nullable ``string client_id``; a *flexible* version adds
tagged fields after it, header v2) and the body of that API at that version. The answer is ``int32 size`` +
a response header (``int32 correlation_id``; tagged fields too for flexible versions, except ApiVersions,
whose response header is always v0 so that a client that does not know the broker yet can read it) + body.

The bodies are aiokafka's ``Struct`` classes (``aiokafka.protocol``): one class per (api key, version), the
request class naming its response class (``RESPONSE_TYPE``). :data:`REQUESTS` indexes them; versions
aiokafka lacks are defined with its ``Schema`` types in :mod:`broker.kafka.schemas`.

Errors: :class:`FrameError` means the connection cannot go on (a header that cannot be read, an API key or
version this broker does not speak, a body that does not parse); Kafka brokers close the connection in those
cases, except ApiVersions at an unknown version, answered (v0) with UNSUPPORTED_VERSION and the versions the
broker supports so the client can pick one.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import struct
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Optional

from aiokafka.protocol.api import RequestStruct

from magnetar.errors import MagnetarError

from . import schemas

__all__ = ["ErrorCode", "FrameError", "RequestHeader", "REQUESTS", "API_VERSIONS_KEY", "parse_header",
           "decode_request", "encode_response", "frame_size"]

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
_MODULES = ("produce", "fetch", "offset", "metadata", "commit", "coordination", "group", "admin", "transaction")


class ErrorCode(enum.IntEnum):
    """Kafka's error codes (the protocol specification's table), those this broker answers."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    INVALID_CONFIG = 40
    UNSUPPORTED_COMPRESSION_TYPE = 76
    THROTTLING_QUOTA_EXCEEDED = 89


API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
             10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
             15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
             20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 32: "DescribeConfigs",
             36: "SaslAuthenticate", 37: "CreatePartitions", 42: "DeleteGroups"}


class FrameError(MagnetarError, ValueError):
    """A request that cannot be answered: the connection is closed (nothing was changed)."""


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    flexible: bool


def _index() -> dict[tuple[int, int], type]:
    table: dict[tuple[int, int], type] = {}
    for name in _MODULES:
        module = importlib.import_module(f"aiokafka.protocol.{name}")
        for obj in vars(module).values():
            if (inspect.isclass(obj) and issubclass(obj, RequestStruct) and obj is not RequestStruct
                    and hasattr(obj, "API_VERSION")):
                table[(obj.API_KEY, obj.API_VERSION)] = obj
    for obj in schemas.REQUESTS:
        table[(obj.API_KEY, obj.API_VERSION)] = obj
    return table


#: (api key, version) -> the request Struct class (aiokafka's, plus :mod:`broker.kafka.schemas`).
REQUESTS: dict[tuple[int, int], type] = _index()


def frame_size(prefix: bytes) -> int:
    """The size announced by a frame's 4-byte prefix (may be negative: the caller refuses it)."""
    return _SIZE.unpack(prefix)[0]


def parse_header(frame: bytes, *, flexible_of: "Optional[callable]" = None) -> tuple[RequestHeader, int]:
    """Reads the request header of ``frame`` (without its size prefix): (header, offset of the body).

    Whether the header has tagged fields depends on the (api key, version) being flexible; an unknown pair
    is read as header v1, as Kafka does for ApiVersions at a version it does not know.

    Raises:
        FrameError: fewer bytes than a header, or a client id that overruns the frame.
    """
    if len(frame) < _HEADER.size:
        raise FrameError(f"a request of {len(frame)} bytes has no complete header")
    api_key, api_version, correlation_id, client_len = _HEADER.unpack_from(frame)
    offset = _HEADER.size
    client_id = ""
    if client_len >= 0:
        if offset + client_len > len(frame):
            raise FrameError("the request header's client id overruns the frame")
        try:
            client_id = frame[offset:offset + client_len].decode("utf-8")
        except UnicodeDecodeError:
            raise FrameError("the request header's client id is not UTF-8") from None
        offset += client_len
    elif client_len != -1:
        raise FrameError(f"the request header's client id has a negative length {client_len}")
    cls = REQUESTS.get((api_key, api_version))
    flexible = bool(cls is not None and getattr(cls, "FLEXIBLE_VERSION", False))
    if flexible:  # an unknown version is read as header v1: ApiVersions is answered from that, others refused
        offset = _skip_tagged_fields(frame, offset)
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible), offset


def _read_uvarint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(data):
            raise FrameError("a tagged field overruns the frame")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 28:
            raise FrameError("a varint in the request header is too long")


def _skip_tagged_fields(data: bytes, offset: int) -> int:
    count, offset = _read_uvarint(data, offset)
    for _ in range(count):
        _tag, offset = _read_uvarint(data, offset)
        size, offset = _read_uvarint(data, offset)
        offset += size
        if offset > len(data):
            raise FrameError("a tagged field overruns the frame")
    return offset


def decode_request(header: RequestHeader, frame: bytes, offset: int) -> Any:
    """The body of ``frame`` from ``offset`` as the Struct of (api key, version).

    Raises:
        FrameError: an unknown (api key, version) or a body that does not parse.
    """
    cls = REQUESTS.get((header.api_key, header.api_version))
    if cls is None:
        raise FrameError(f"unsupported api key {header.api_key} version {header.api_version}")
    buffer = BytesIO(frame)
    buffer.seek(offset)
    try:
        return cls.decode(buffer)
    except Exception as exc:  # aiokafka raises struct.error, ValueError, UnicodeDecodeError, ...
        raise FrameError(f"malformed body of api key {header.api_key} v{header.api_version}: "
                         f"{type(exc).__name__}: {exc}") from None


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """The size-prefixed answer to ``header``: response header (v1 for flexible versions other than
    ApiVersions) and ``response`` encoded."""
    head = _SIZE.pack(header.correlation_id)
    if header.flexible and header.api_key != API_VERSIONS_KEY:
        head += b"\x00"  # no tagged fields
    body = response.encode()
    return _SIZE.pack(len(head) + len(body)) + head + body
