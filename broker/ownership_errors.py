"""The errors of topic ownership and lookup (:mod:`broker.ownership`), with the answer each one gets.

A failed LOOKUP carries the class's ``server_error``; the admin REST API answers its ``http_status``
(:mod:`broker.admin.errors` maps them). :class:`ServiceUnitNotReadyError` is the retriable one: the
bundle is moving, or nobody can serve it right now.
"""

from __future__ import annotations

from magnetar.errors import MagnetarError
from magnetar.protocol import pb

__all__ = ["BundleNotFoundError", "NamespaceNotFoundError", "OwnershipError", "ServiceUnitNotReadyError",
           "UnknownListenerError"]

ServerError = pb.ServerError


class OwnershipError(MagnetarError):
    """Root of ownership and lookup errors.

    Like the service's errors, each class names the protocol ``server_error`` a client receives in a
    failed LOOKUP and the ``http_status`` the REST API answers.
    """

    server_error: int = ServerError.UnknownError
    http_status: int = 500


class NamespaceNotFoundError(OwnershipError):
    """The topic's namespace does not exist in the configuration store."""

    server_error = ServerError.TopicNotFound
    http_status = 404


class BundleNotFoundError(OwnershipError):
    """No bundle of the namespace has that name."""

    server_error = ServerError.TopicNotFound
    http_status = 404


class ServiceUnitNotReadyError(OwnershipError):
    """The bundle cannot be served right now (being unloaded, no broker available, this broker closing,
    metadata store unreachable). Clients retry their lookup (Pulsar's ``ServiceNotReady``)."""

    server_error = ServerError.ServiceNotReady
    http_status = 503
    retriable = True


class UnknownListenerError(OwnershipError):
    """The lookup named an advertised listener the serving broker does not have.

    Pulsar answers a LOOKUP for it ``ServiceNotReady`` with a message naming the listener (pulsar-client then
    retries until its operation timeout); so does Magnetar. Not a :class:`ServiceUnitNotReadyError`: waiting
    does not help, so the HTTP lookup does not wait it out (503 at once).
    """

    server_error = ServerError.ServiceNotReady
    http_status = 503
