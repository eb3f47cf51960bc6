"""What every client connection of a proxy shares: settings, limits, counters, and the ways to brokers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from magnetar.auth.providers import AuthenticationService
from magnetar.auth.tls import ReloadingServerContext

from .broker_client import BrokerClient
from .directory import BrokerDirectory
from .limits import ConnectionLimiter, RequestLimiter
from .lookups import LookupProxy
from .metrics import ProxyStats

if TYPE_CHECKING:
    from .connection import ProxyConnection

__all__ = ["ProxyContext"]


@dataclass
class ProxyContext:
    """Shared by a proxy's client connections (built by :class:`proxy.server.ProxyServer`).

    Attributes:
        directory: the region's registered brokers (lookups, the forwarding allow-list).
        broker_client: the proxy's credentials and TLS towards brokers.
        lookups: answers lookup commands by asking brokers.
        limiter: open connections, in total and per address.
        lookup_limiter: lookups being answered at once.
        stats: the counters behind ``/metrics``.
        server_tls: the TLS port's certificate (None: no TLS port).
        authentication: decides clients' roles (None: authentication is off, clients have no role).
        handshake_timeout_s, keep_alive_interval_s, broker_connect_timeout_s, refresh_check_s: from the settings.
        relay_buffer_bytes: write buffer high-water mark of each side of a forwarded connection.
        forward_credentials: pass the client's credentials to the broker (``original_auth_data``).
        connections: every open client connection (closed together at shutdown).
    """

    directory: BrokerDirectory
    broker_client: BrokerClient
    lookups: LookupProxy
    limiter: ConnectionLimiter
    lookup_limiter: RequestLimiter
    stats: ProxyStats
    server_tls: Optional[ReloadingServerContext]
    handshake_timeout_s: float
    keep_alive_interval_s: float
    broker_connect_timeout_s: float
    relay_buffer_bytes: int
    authentication: Optional[AuthenticationService] = None
    refresh_check_s: float = 60.0
    forward_credentials: bool = False
    connections: set["ProxyConnection"] = field(default_factory=set)

    @property
    def relayed_connections(self) -> int:
        from .handshake import ConnectionState  # noqa: PLC0415 (avoids a cycle at import time)

        return sum(1 for c in self.connections if c.state is ConnectionState.RELAYING)
