"""Errors of the proxy room, rooted at :class:`ProxyError`; each knows the protocol code a client is answered with."""

from __future__ import annotations

from magnetar.errors import MagnetarError
from magnetar.protocol import pb


class ProxyError(MagnetarError):
    """Root of the proxy's errors.

    Attributes:
        server_error: the ``ServerError`` code a client is answered with.
    """

    server_error: int = pb.UnknownError


class ProxyStartError(ProxyError):
    """The proxy process cannot start (a port is taken, a certificate cannot be read...)."""


class TargetDeniedError(ProxyError):
    """A client named a ``proxy_to_broker_url`` that is not a broker registered in this region.

    Answered ServiceNotReady, as Pulsar's proxy answers a target its BrokerProxyValidator refuses.
    """

    server_error = pb.ServiceNotReady


class BrokerUnavailableError(ProxyError):
    """No broker could be reached (none registered, connection refused, handshake failed)."""

    server_error = pb.ServiceNotReady
    retriable = True


class BrokerCredentialsError(ProxyError):
    """The proxy's own credentials towards brokers cannot be loaded (``broker_client_auth_*``)."""

    server_error = pb.ServiceNotReady
