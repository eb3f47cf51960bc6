"""Errors of Magnetar's asyncio client side of the binary protocol.

:class:`ClientError` is the root. A broker's ``ServerError`` code (in ERROR, SEND_ERROR, a failed LOOKUP or
PARTITIONED_METADATA answer) becomes one class here, chosen by :func:`error_from_server`, so callers catch
types, not numbers. ``retriable`` says what the producer and consumer do with it when they reconnect:

* retriable (``ServiceNotReady``, ``TooManyRequests``, ``PersistenceError``, ``MetadataError``, a lost
  connection, a timeout): look the topic up again and retry with backoff;
* final (``ProducerFenced``, ``TopicTerminated``, ``AuthorizationError``, ``NotAllowed`` ...): fail whatever
  is pending and stop.

``ProducerBusy`` / ``ConsumerBusy`` are final on the first attempt (someone else holds the name or the
exclusive subscription) but are retried on reconnection, because the broker may not yet have noticed that
the previous connection of the same producer is gone (as pulsar-client does).
"""

from __future__ import annotations

from magnetar.errors import MagnetarError
from magnetar.protocol import pb

__all__ = [
    "AlreadyClosedError",
    "AuthenticationError",
    "AuthorizationError",
    "ChecksumError",
    "ClientError",
    "ConnectError",
    "ConnectionClosedError",
    "ConsumerBusyError",
    "IncompatibleSchemaError",
    "InvalidServiceUrlError",
    "InvalidTopicNameError",
    "MessageTooLargeError",
    "MetadataError",
    "NotAllowedError",
    "PersistenceError",
    "ProducerBlockedQuotaExceededError",
    "ProducerBusyError",
    "ProducerFencedError",
    "RequestTimeoutError",
    "SendTimeoutError",
    "ServerError",
    "ServiceNotReadyError",
    "SubscriptionNotFoundError",
    "ConsumerNotFoundError",
    "TooManyLookupRedirectsError",
    "TooManyRequestsError",
    "TopicNotFoundError",
    "TopicTerminatedError",
    "UnsupportedVersionError",
    "error_from_server",
]


class ClientError(MagnetarError):
    """Root of every error the protocol client raises."""


class InvalidServiceUrlError(ClientError, ValueError):
    """A service URL that is not ``pulsar://host:port[,host:port...]`` or ``pulsar+ssl://...``."""


class ConnectError(ClientError):
    """The TCP/TLS connection or the CONNECT handshake failed (refused, unreachable, timed out)."""

    retriable = True


class ConnectionClosedError(ClientError):
    """The connection closed (by the broker, the network, a keep-alive timeout or a protocol error)
    while a request was outstanding."""

    retriable = True


class RequestTimeoutError(ClientError):
    """The broker did not answer a request within the operation timeout."""

    retriable = True


class SendTimeoutError(ClientError):
    """A send was not acknowledged within ``send_timeout_s`` (it may still have been persisted)."""

    retriable = True


class MessageTooLargeError(ClientError, ValueError):
    """A message (entry) exceeds the ``max_message_size`` the broker announced in CONNECTED."""


class AlreadyClosedError(ClientError):
    """The client, producer or consumer was closed (by the application, or after a final error)."""


class TooManyLookupRedirectsError(ClientError):
    """A LOOKUP kept being redirected beyond the configured number of hops."""

    retriable = True


class ServerError(ClientError):
    """An error code the broker sent.

    Attributes:
        code: the protocol's ``ServerError`` value.
    """

    code: int = pb.UnknownError

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def code_name(self) -> str:
        try:
            return pb.ServerError.Name(self.code)
        except ValueError:
            return f"ServerError({self.code})"


class MetadataError(ServerError):
    code = pb.MetadataError
    retriable = True


class PersistenceError(ServerError):
    code = pb.PersistenceError
    retriable = True


class AuthenticationError(ServerError):
    code = pb.AuthenticationError


class AuthorizationError(ServerError):
    code = pb.AuthorizationError


class ConsumerBusyError(ServerError):
    code = pb.ConsumerBusy


class ServiceNotReadyError(ServerError):
    code = pb.ServiceNotReady
    retriable = True


class ProducerBlockedQuotaExceededError(ServerError):
    code = pb.ProducerBlockedQuotaExceededError


class ChecksumError(ServerError):
    code = pb.ChecksumError


class UnsupportedVersionError(ServerError):
    code = pb.UnsupportedVersionError


class TopicNotFoundError(ServerError):
    code = pb.TopicNotFound


class SubscriptionNotFoundError(ServerError):
    code = pb.SubscriptionNotFound


class ConsumerNotFoundError(ServerError):
    code = pb.ConsumerNotFound


class TooManyRequestsError(ServerError):
    code = pb.TooManyRequests
    retriable = True


class TopicTerminatedError(ServerError):
    code = pb.TopicTerminatedError


class ProducerBusyError(ServerError):
    code = pb.ProducerBusy


class InvalidTopicNameError(ServerError):
    code = pb.InvalidTopicName


class IncompatibleSchemaError(ServerError):
    code = pb.IncompatibleSchema


class NotAllowedError(ServerError):
    code = pb.NotAllowedError


class ProducerFencedError(ServerError):
    code = pb.ProducerFenced


_BY_CODE: dict[int, type[ServerError]] = {
    cls.code: cls
    for cls in (
        MetadataError,
        PersistenceError,
        AuthenticationError,
        AuthorizationError,
        ConsumerBusyError,
        ServiceNotReadyError,
        ProducerBlockedQuotaExceededError,
        ChecksumError,
        UnsupportedVersionError,
        TopicNotFoundError,
        SubscriptionNotFoundError,
        ConsumerNotFoundError,
        TooManyRequestsError,
        TopicTerminatedError,
        ProducerBusyError,
        InvalidTopicNameError,
        IncompatibleSchemaError,
        NotAllowedError,
        ProducerFencedError,
    )
}
_BY_CODE[pb.ProducerBlockedQuotaExceededException] = ProducerBlockedQuotaExceededError


def error_from_server(code: int, message: str, *, context: str = "") -> ServerError:
    """The typed error for a broker's ``ServerError`` code; ``context`` (e.g. the topic) prefixes the text."""
    cls = _BY_CODE.get(code, ServerError)
    err = cls("", code=code)
    text = message or err.code_name
    err.args = (f"{context}: {err.code_name}: {text}" if context else f"{err.code_name}: {text}",)
    return err
