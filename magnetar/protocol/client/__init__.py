"""Magnetar's own asyncio client side of Pulsar's binary protocol.

Applications use the official ``pulsar-client``; this client exists for what that one cannot do: the
replicator's producer (``Producer.send_entry`` keeps the origin's metadata, ``replicated_from`` included,
and payload bytes as they are), load generation with pre-built batches (``magnetar perf``), malformed
input (``Producer.send_raw_entry`` sends an entry byte for byte), and diagnostics (``Connection``,
``TopicListWatch``).

Layers, bottom up: ``commands`` / ``send_queue`` / ``acks`` / ``message`` / ``batch_builder`` are pure;
``connection`` alone moves bytes; ``lookup`` finds brokers and pools connections; ``handler`` is the
attach/reconnect state machine that ``producer`` and ``consumer`` share; ``client`` ties them together.
"""

from magnetar.protocol import MessageId

from .acks import AckTracker
from .auth import Auth
from .backoff import Backoff
from .batch_builder import BatchBuilder, BuiltBatch
from .client import Client
from .commands import CLIENT_VERSION, PROTOCOL_VERSION, message_metadata
from .connection import Connection, ConnectionState
from .consumer import Consumer, ConsumerState, InitialPosition, SubscriptionType
from .errors import (
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
    ClientError,
    ConnectError,
    ConnectionClosedError,
    ConsumerBusyError,
    MessageTooLargeError,
    NotAllowedError,
    PersistenceError,
    ProducerBusyError,
    ProducerFencedError,
    RequestTimeoutError,
    SendTimeoutError,
    ServerError,
    ServiceNotReadyError,
    TooManyLookupRedirectsError,
    TopicNotFoundError,
    TopicTerminatedError,
    error_from_server,
)
from .handler import HandlerState
from .lookup import ConnectionPool, LookupResult, LookupService
from .message import Message, unpack_entry
from .producer import AccessMode, Producer, ProducerState
from .send_queue import PendingSends, ReceiptOutcome
from .topic_list import TopicListUpdate, TopicListWatch
from .urls import ServiceUrl, parse_service_url

__all__ = [
    "CLIENT_VERSION",
    "PROTOCOL_VERSION",
    "AccessMode",
    "AckTracker",
    "AlreadyClosedError",
    "Auth",
    "AuthenticationError",
    "AuthorizationError",
    "Backoff",
    "BatchBuilder",
    "BuiltBatch",
    "Client",
    "ClientError",
    "ConnectError",
    "Connection",
    "ConnectionClosedError",
    "ConnectionPool",
    "ConnectionState",
    "Consumer",
    "ConsumerBusyError",
    "ConsumerState",
    "HandlerState",
    "InitialPosition",
    "LookupResult",
    "LookupService",
    "Message",
    "MessageId",
    "MessageTooLargeError",
    "NotAllowedError",
    "PendingSends",
    "PersistenceError",
    "Producer",
    "ProducerBusyError",
    "ProducerFencedError",
    "ProducerState",
    "ReceiptOutcome",
    "RequestTimeoutError",
    "SendTimeoutError",
    "ServerError",
    "ServiceNotReadyError",
    "ServiceUrl",
    "SubscriptionType",
    "TooManyLookupRedirectsError",
    "TopicNotFoundError",
    "TopicListUpdate",
    "TopicListWatch",
    "TopicTerminatedError",
    "error_from_server",
    "message_metadata",
    "parse_service_url",
    "unpack_entry",
]
