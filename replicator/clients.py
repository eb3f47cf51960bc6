"""Connections to the remote clusters: one Magnetar asyncio client per remote cluster, shared by every
replicator of this broker.

A cluster's address is its ``brokerServiceUrl`` in the global configuration store (a multi-host
``pulsar://h1:p1,h2:p2`` reaches whichever broker answers). It is read again whenever a replicator asks
for a client, so re-registering a cluster (``magnetar admin clusters update``) moves later connections;
a client whose URL is no longer registered is closed once no replicator uses it (at broker shutdown).

A remote region with authentication on needs credentials: the clients present the broker's own
(``broker_client_auth_method`` / ``_params``: a token, refreshed when challenged, or a client certificate in
the ``ssl_context``) and, with ``prefer_tls`` (``broker_client_tls_enabled``), connect to the cluster's
``brokerServiceUrlTls`` (``pulsar+ssl://``, the server's certificate and host name verified before anything is
sent) when it registered one.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Optional

from magnetar.errors import MagnetarError
from magnetar.protocol.client import Auth, Client

if TYPE_CHECKING:
    from config_store import ConfigurationStore

log = logging.getLogger("replicator.clients")


class RemoteClusterError(MagnetarError):
    """A remote cluster is not registered, or has no broker service URL."""

    retriable = True


class RemoteClients:
    """Clients by (cluster, URL). ``await get(cluster)``; ``await close()`` at shutdown."""

    def __init__(self, configuration: "ConfigurationStore", *, operation_timeout_s: float = 30.0,
                 backoff_max_s: float = 5.0, auth: Optional[Auth] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, prefer_tls: bool = False,
                 keep_alive_interval_s: float = 30.0) -> None:
        self.configuration = configuration
        self.operation_timeout_s = operation_timeout_s
        self.keep_alive_interval_s = keep_alive_interval_s
        self.backoff_max_s = backoff_max_s
        self.auth = auth
        self.ssl_context = ssl_context
        self.prefer_tls = prefer_tls
        self._clients: dict[tuple[str, str], Client] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    async def service_url(self, cluster: str) -> str:
        try:
            data = (await self.configuration.get_cluster(cluster)).value
        except Exception as exc:
            raise RemoteClusterError(f"cluster {cluster!r} cannot be read from the configuration store: {exc}") \
                from exc
        if self.prefer_tls and data.broker_service_url_tls:
            url = data.broker_service_url_tls
        else:
            url = data.broker_service_url or data.broker_service_url_tls
        if not url:
            raise RemoteClusterError(f"cluster {cluster!r} has no brokerServiceUrl registered")
        return url

    async def get(self, cluster: str) -> Client:
        if self._closed:
            raise RemoteClusterError("the replication clients are closed")
        url = await self.service_url(cluster)
        async with self._lock:
            client = self._clients.get((cluster, url))
            if client is None:
                client = Client(url, operation_timeout_s=self.operation_timeout_s, backoff_max_s=self.backoff_max_s,
                                auth=self.auth, ssl_context=self.ssl_context,
                                keep_alive_interval_s=self.keep_alive_interval_s)
                self._clients[(cluster, url)] = client
                log.info("replication client for cluster %s at %s", cluster, url)
            return client

    async def close(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        results = await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                log.warning("closing a replication client failed: %s", result)
