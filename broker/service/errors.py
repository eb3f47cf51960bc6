"""Errors of the binary-protocol service.

:class:`BrokerServiceError` is the root. Each class carries the policy a caller needs:

* ``server_error``: the protocol's ``ServerError`` code a client receives in ERROR / SEND_ERROR (pulsar-client
  maps it to its own result codes: ``ServiceNotReady`` and ``TooManyRequests`` are retried after a fresh
  lookup, ``ProducerBusy``/``ConsumerBusy``/``ProducerFenced``/``NotAllowedError`` are final);
* ``http_status``: what the admin REST API answers when the error reaches it (Pulsar's codes);
* ``retriable``: the same call may succeed later.

Errors of lower rooms (managed ledger, metadata store) are mapped here by :func:`map_error`, so a client
never sees a Python traceback, only a code and a message a person can act on.
"""

from __future__ import annotations

from magnetar.errors import MagnetarError
from magnetar.protocol import pb
from magnetar.topic_name import InvalidTopicNameError as _BadTopicName, TopicName

ServerError = pb.ServerError


class BrokerServiceError(MagnetarError):
    server_error: int = ServerError.UnknownError
    http_status: int = 500


class ServiceNotReadyError(BrokerServiceError):
    """The topic is loading, unloading, or not owned here: look it up again and retry."""

    server_error = ServerError.ServiceNotReady
    http_status = 503
    retriable = True


class TopicNotFoundError(BrokerServiceError):
    server_error = ServerError.TopicNotFound
    http_status = 404


class SubscriptionNotFoundError(BrokerServiceError):
    server_error = ServerError.SubscriptionNotFound
    http_status = 404


class SubscriptionAlreadyExistsError(BrokerServiceError):
    server_error = ServerError.NotAllowedError
    http_status = 409


class ConsumerNotFoundError(BrokerServiceError):
    server_error = ServerError.ConsumerNotFound
    http_status = 404


class InvalidTopicNameError(BrokerServiceError):
    server_error = ServerError.InvalidTopicName
    http_status = 412


class ProducerBusyError(BrokerServiceError):
    """Another producer holds the name or the topic's exclusive access."""

    server_error = ServerError.ProducerBusy
    http_status = 409


class ProducerFencedError(BrokerServiceError):
    """An exclusive producer was superseded (a newer topic epoch exists)."""

    server_error = ServerError.ProducerFenced
    http_status = 409


class ConsumerBusyError(BrokerServiceError):
    """Exclusive subscription already has a consumer, or the subscription is of another type."""

    server_error = ServerError.ConsumerBusy
    http_status = 409


class ConsumerAssignError(BrokerServiceError):
    server_error = ServerError.ConsumerAssignError
    http_status = 409


class NotAllowedError(BrokerServiceError):
    server_error = ServerError.NotAllowedError
    http_status = 405


class TopicBusyError(BrokerServiceError):
    """The topic (or subscription) has connected clients and ``force`` was not given."""

    server_error = ServerError.NotAllowedError
    http_status = 412


class TopicTerminatedError(BrokerServiceError):
    server_error = ServerError.TopicTerminatedError
    http_status = 409


class ChecksumMismatchError(BrokerServiceError):
    server_error = ServerError.ChecksumError
    http_status = 400


class MessageTooLargeError(BrokerServiceError):
    server_error = ServerError.NotAllowedError
    http_status = 413


class PersistenceError(BrokerServiceError):
    """Storage failed (bookies, managed ledger). The client reconnects and re-sends."""

    server_error = ServerError.PersistenceError
    http_status = 500
    retriable = True


class MetadataError(BrokerServiceError):
    server_error = ServerError.MetadataError
    http_status = 500
    retriable = True


def topic_not_ready(name: object, state: str) -> ServiceNotReadyError:
    """A topic closing, closed or deleted under a request: retriable. Worded "is being unloaded" as Pulsar's
    bundle-unload answer, because pulsar-client's C++ core closes the whole connection on any other
    ServiceNotReady message (``ClientConnectionAdaptor.h``), failing every producer and consumer on it."""
    return ServiceNotReadyError(f"topic {name} is being unloaded ({state}); retry")


class TooManyRequestsError(BrokerServiceError):
    server_error = ServerError.TooManyRequests
    http_status = 429
    retriable = True


class ProducerBlockedQuotaExceededError(BrokerServiceError):
    """The topic's backlog is over a ``producer_request_hold`` quota: no producer until consumers catch up
    (pulsar-client keeps a connected producer's messages pending and reconnects)."""

    server_error = ServerError.ProducerBlockedQuotaExceededError
    http_status = 412
    retriable = True


class ProducerBlockedQuotaExceededException(BrokerServiceError):
    """The topic's backlog is over a ``producer_exception`` quota: producers are refused (pulsar-client
    fails their pending messages)."""

    server_error = ServerError.ProducerBlockedQuotaExceededException
    http_status = 412


class UnsupportedError(BrokerServiceError):
    """A feature Magnetar does not serve (transactions, non-persistent topics)."""

    server_error = ServerError.NotAllowedError
    http_status = 501


class NotAuthorizedError(BrokerServiceError):
    """The connection's role (or the client a proxy acts for) may not do this (pulsar-client raises
    ``AuthorizationError``; Pulsar's ``Client is not authorized to ...``)."""

    server_error = ServerError.AuthorizationError
    http_status = 403


def map_error(exc: BaseException) -> BrokerServiceError:
    """Maps any exception to a BrokerServiceError (the original stays the ``__cause__``)."""
    if isinstance(exc, BrokerServiceError):
        return exc
    name = type(exc).__name__
    text = str(exc) or name
    mapped: BrokerServiceError
    try:
        from broker.managed_ledger.api import ManagedLedgerError
    except ImportError:  # pragma: no cover
        ManagedLedgerError = ()  # type: ignore[assignment]
    try:
        from config_store.errors import MetadataError as StoreMetadataError, NotFoundError
    except ImportError:  # pragma: no cover
        StoreMetadataError = NotFoundError = ()  # type: ignore[assignment]
    if isinstance(getattr(exc, "server_error", None), int):  # another room's error naming its protocol code
        mapped = BrokerServiceError(text)
        mapped.server_error = exc.server_error
        mapped.http_status = getattr(exc, "http_status", 500)
        mapped.retriable = bool(getattr(exc, "retriable", False))
    elif isinstance(exc, ManagedLedgerError):
        if "Terminated" in name:
            mapped = TopicTerminatedError(text)
        elif "Fenced" in name or "Closed" in name:
            mapped = ServiceNotReadyError(f"topic storage is being handed over: {text}")
        elif "NotFound" in name:
            mapped = TopicNotFoundError(text)
        elif "TooLarge" in name:
            mapped = MessageTooLargeError(text)
        else:
            mapped = PersistenceError(text)
    elif NotFoundError and isinstance(exc, NotFoundError):
        mapped = TopicNotFoundError(text)
    elif StoreMetadataError and isinstance(exc, StoreMetadataError):
        mapped = MetadataError(text)
    elif isinstance(exc, (TimeoutError, ConnectionError)):
        mapped = ServiceNotReadyError(f"{name}: {text}")
    else:
        mapped = BrokerServiceError(f"internal error ({name}): {text}")
    mapped.__cause__ = exc
    return mapped


def parse_topic(name: str) -> TopicName:
    """Parses a topic name from a client; InvalidTopicNameError (ours) when it is malformed."""
    try:
        return TopicName.parse(name)
    except _BadTopicName as exc:
        raise InvalidTopicNameError(str(exc)) from None
