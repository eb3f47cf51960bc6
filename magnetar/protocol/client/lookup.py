"""Finding a topic's broker (LOOKUP, PARTITIONED_METADATA) and sharing connections to brokers.

A LOOKUP goes to the service URL (any broker, or the proxy). The answer is one of:

* ``Connect``: this URL owns the topic;
* ``Redirect``: ask that other broker (``authoritative`` tells it the redirect came from a broker that
  knows, so it must answer for itself instead of redirecting again); followed for at most
  ``max_redirects`` hops;
* ``Failed``: a ``ServerError`` code, raised as its typed error.

With ``proxy_through_service_url`` the client keeps talking to the service URL (the proxy) and names the
broker in CONNECT's ``proxy_to_broker_url``: the pool key is then (broker, proxy), so a proxy connection
for broker A is never used for broker B.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass

from magnetar.protocol import pb

from .auth import Auth
from .commands import CLIENT_VERSION
from .connection import Connection, ConnectionState
from .errors import AlreadyClosedError, TooManyLookupRedirectsError, error_from_server
from .urls import ServiceUrl, parse_service_url

__all__ = ["ConnectionPool", "LookupResult", "LookupService"]

log = logging.getLogger(__name__)

_LookupType = pb.CommandLookupTopicResponse


@dataclass(frozen=True, slots=True)
class LookupResult:
    """Where a topic is served.

    Attributes:
        logical_url: the owning broker.
        physical_url: where to open the socket (the proxy when going through one, else ``logical_url``).
    """

    logical_url: ServiceUrl
    physical_url: ServiceUrl


class ConnectionPool:
    """One connection per (broker, physical address), shared by every producer, consumer and lookup.

    Connections are created on first use; a closed one is replaced on the next :meth:`get`. A proxy keeps
    one pool per client role, each announcing that role as ``original_principal``.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        auth: Auth | None = None,
        connect_timeout_s: float = 10.0,
        operation_timeout_s: float = 30.0,
        keep_alive_interval_s: float = 30.0,
        client_version: str = CLIENT_VERSION,
        original_principal: str | None = None,
    ) -> None:
        self.ssl_context = ssl_context
        self.auth = auth
        self.connect_timeout_s = connect_timeout_s
        self.operation_timeout_s = operation_timeout_s
        self.keep_alive_interval_s = keep_alive_interval_s
        self.client_version = client_version
        self.original_principal = original_principal
        self._conns: dict[tuple[str, str], Connection] = {}
        self._retired: set[Connection] = set()
        self._closed = False

    def __len__(self) -> int:
        return sum(1 for c in self._conns.values() if c.state is not ConnectionState.CLOSED)

    def connections(self) -> list[Connection]:
        return [c for c in self._conns.values() if c.state is not ConnectionState.CLOSED]

    async def get(self, logical_url: str | ServiceUrl, physical_url: str | ServiceUrl | None = None) -> Connection:
        """A ready connection to ``logical_url`` (through ``physical_url`` when given).

        Raises:
            ConnectError, ServerError: as :meth:`Connection.start`.
            AlreadyClosedError: the pool is closed.
        """
        if self._closed:
            raise AlreadyClosedError("the client is closed")
        logical = parse_service_url(logical_url)
        physical = parse_service_url(physical_url) if physical_url is not None else logical
        key = (str(logical), str(physical))
        conn = self._conns.get(key)
        if conn is None or conn.state is ConnectionState.CLOSED:
            if conn is not None:
                self._retired.add(conn)
            self._reap()
            conn = Connection(
                physical,
                logical_url=logical,
                ssl_context=self.ssl_context,
                auth=self.auth,
                connect_timeout_s=self.connect_timeout_s,
                operation_timeout_s=self.operation_timeout_s,
                keep_alive_interval_s=self.keep_alive_interval_s,
                client_version=self.client_version,
                original_principal=self.original_principal,
            )
            self._conns[key] = conn
        try:
            return await conn.start()
        except BaseException:
            if self._conns.get(key) is conn:
                del self._conns[key]
                self._retired.add(conn)
            raise

    def _reap(self) -> None:
        """Forgets retired connections whose tasks have finished."""
        for conn in [c for c in self._retired if all(t.done() for t in c._tasks)]:
            self._retired.discard(conn)

    async def close(self) -> None:
        """Closes every connection (idempotent)."""
        self._closed = True
        conns = [*self._conns.values(), *self._retired]
        self._conns.clear()
        self._retired.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


class LookupService:
    """Binary-protocol lookups through a service URL.

    Args:
        pool: where connections come from.
        service_url: the broker(s) or proxy to ask.
        max_redirects: most Redirect answers followed for one lookup.
        listener_name: ``advertised_listener_name`` (empty: the broker's default listener).
    """

    def __init__(
        self,
        pool: ConnectionPool,
        service_url: str | ServiceUrl,
        *,
        max_redirects: int = 20,
        listener_name: str = "",
    ) -> None:
        self.pool = pool
        self.service_url = parse_service_url(service_url)
        self.max_redirects = max_redirects
        self.listener_name = listener_name

    async def service_connection(self) -> Connection:
        return await self.pool.get(self.service_url)

    async def lookup(self, topic: str) -> LookupResult:
        """Finds the broker serving ``topic``.

        Raises:
            ServerError: the lookup failed (``TopicNotFoundError``, ``ServiceNotReadyError``,
                ``AuthorizationError``...).
            TooManyLookupRedirectsError: more than ``max_redirects`` Redirect answers.
            ConnectError, ConnectionClosedError, RequestTimeoutError: the way there failed.
        """
        conn = await self.service_connection()
        authoritative = False
        for _ in range(self.max_redirects + 1):
            request = pb.CommandLookupTopic(
                topic=topic, authoritative=authoritative, advertised_listener_name=self.listener_name
            )
            answer = (await conn.request(request)).lookupTopicResponse
            if answer.response == _LookupType.Failed:
                raise error_from_server(answer.error, answer.message, context=f"lookup of {topic}")
            url = answer.brokerServiceUrlTls if self.service_url.tls else answer.brokerServiceUrl
            if not url:
                kind = "TLS " if self.service_url.tls else ""
                raise error_from_server(
                    pb.ServiceNotReady,
                    f"broker answered without a {kind}broker URL",
                    context=f"lookup of {topic}",
                )
            logical = parse_service_url(url)
            physical = self.service_url if answer.proxy_through_service_url else logical
            if answer.response == _LookupType.Connect:
                return LookupResult(logical, physical)
            log.debug("lookup of %s redirected to %s (authoritative=%s)", topic, logical, answer.authoritative)
            authoritative = answer.authoritative
            conn = await self.pool.get(logical, physical)
        raise TooManyLookupRedirectsError(f"lookup of {topic}: more than {self.max_redirects} redirects")

    async def partitioned_metadata(self, topic: str) -> int:
        """The number of partitions of ``topic`` (0: not a partitioned topic).

        Raises:
            ServerError: the broker's answer was Failed.
        """
        conn = await self.service_connection()
        answer = (await conn.request(pb.CommandPartitionedTopicMetadata(topic=topic))).partitionMetadataResponse
        if answer.HasField("response") and answer.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise error_from_server(answer.error, answer.message, context=f"partitioned metadata of {topic}")
        return answer.partitions
