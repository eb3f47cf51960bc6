"""The Kafka listener of a broker: binds ``kafka_listeners``, accepts connections, routes requests.

Requests are routed by API key to the handler modules (``handlers/``), each declaring the versions it serves
(:meth:`KafkaServer.supported_versions`, what ApiVersions answers). Consumer-group keys go to the group
coordinator (``broker.kafka.groups``) when it is wired in. A version outside the declared range closes the
connection (Kafka's behaviour), except ApiVersions, answered with UNSUPPORTED_VERSION and the supported ranges.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Optional

from aiokafka.protocol.admin import ApiVersionResponse_v0
from prometheus_client import CollectorRegistry, Counter, Gauge

from broker import metrics_names as names

from .cluster import ClusterView, Node, format_listeners, node_id_of
from .codec import API_NAMES, API_VERSIONS_KEY, ErrorCode, FrameError, RequestHeader
from .config import KafkaConfig, KafkaListener
from .connection import KafkaConnection
from .context import RequestContext
from .handlers import HANDLERS
from .handlers.sasl import UNAUTHENTICATED_KEYS
from .topics import KafkaTopics

if TYPE_CHECKING:
    from broker.service import BrokerService

log = logging.getLogger("broker.kafka.server")

_WILDCARDS = ("", "0.0.0.0", "::")


class KafkaServer:
    """Serves Kafka's protocol for one broker. ``await start()``, ``await close()`` (idempotent)."""

    def __init__(self, service: "BrokerService", config: KafkaConfig, *, broker_id: str, cluster: str,
                 registry: Any, http_session: Any = None, admin_url: str = "", groups: Any = None,
                 metrics_registry: Optional[CollectorRegistry] = None) -> None:
        self.service = service
        self.config = config
        self.broker_id = broker_id
        self.node_id = node_id_of(broker_id)
        self.cluster_name = cluster
        self.topics = KafkaTopics(service, config)
        self.cluster = ClusterView(registry, cluster=cluster, broker_id=broker_id)
        self.http_session = http_session
        self.admin_url = admin_url
        self.groups = groups
        self.state: dict[str, Any] = {}  # handler families keep their per-broker state here (producer ids)
        self.bound: tuple[KafkaListener, ...] = ()
        self._servers: list[asyncio.Server] = []
        self._connections: set[KafkaConnection] = set()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        metrics = metrics_registry if metrics_registry is not None else CollectorRegistry()
        self._m_connections = Gauge(names.KAFKA_CONNECTIONS, "Open Kafka client connections", registry=metrics)
        self._m_connections.set_function(lambda: len(self._connections))
        self._m_requests = Counter(names.KAFKA_REQUESTS, "Kafka requests handled, by API", ["api"], registry=metrics)
        self._m_refused = Counter(names.KAFKA_REFUSED, "Kafka frames refused (malformed, unknown API or version, "
                                  "oversized, before authentication): each closed its connection", registry=metrics)

    # ---------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        bound = []
        try:
            for listener in self.config.bound_listeners():
                server = await asyncio.start_server(
                    lambda r, w, name=listener.name: self._accept(r, w, name), listener.host or None,
                    listener.port, reuse_address=True)
                self._servers.append(server)
                port = server.sockets[0].getsockname()[1]
                bound.append(dataclasses.replace(listener, port=port))
                log.info("Kafka listener %s on %s:%d", listener.name, listener.host, port)
        except OSError:
            await self.close()
            raise
        self.bound = tuple(bound)
        if self.groups is not None:
            await self.groups.start()

    def advertised(self) -> tuple[KafkaListener, ...]:
        """What clients are told: ``kafka_advertised_listeners``, else the bound listeners (a wildcard host
        replaced by the broker's advertised host)."""
        configured = self.config.advertised()
        if configured:
            return configured
        return tuple(dataclasses.replace(l, host=self.config.advertised_host if l.host in _WILDCARDS else l.host)
                     for l in self.bound)

    def registration(self) -> tuple[tuple[str, str], ...]:
        """The ``protocols`` entry of this broker's registration."""
        return (("kafka", format_listeners(self.advertised())),)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            await conn.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        if self.groups is not None:
            try:
                await self.groups.close()
            except Exception:
                log.exception("closing the group coordinator failed")
        for closer in self.state.values():
            close = getattr(closer, "close", None)
            if close is not None:
                await close()

    # ---------------------------------------------------------------------------------- connections

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener_name: str) -> None:
        if self._closed:
            writer.close()
            return
        conn = KafkaConnection(reader, writer, dispatch=self.dispatch, listener_name=listener_name,
                               max_request_size_bytes=self.config.max_request_size_bytes,
                               max_in_flight_requests=self.config.max_in_flight_requests,
                               on_unsupported=self.unsupported_answer)
        self._connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.serve()
            if conn.close_reason:
                self._m_refused.inc()
        except Exception:
            log.exception("[%s] connection failed", conn.peer)
        finally:
            self._connections.discard(conn)
            if task is not None:
                self._tasks.discard(task)

    @property
    def connections(self) -> set[KafkaConnection]:
        return self._connections

    # ---------------------------------------------------------------------------------- routing

    def supported_versions(self) -> dict[int, tuple[int, int]]:
        versions = {key: (low, high) for key, (low, high, _) in HANDLERS.items()}
        if self.groups is not None:
            versions.update(self.groups.supported_versions())
        return dict(sorted(versions.items()))

    def unsupported_answer(self, header: RequestHeader) -> Optional[Any]:
        """ApiVersions at a version this broker does not know: answered v0 with UNSUPPORTED_VERSION."""
        if header.api_key != API_VERSIONS_KEY:
            return None
        return ApiVersionResponse_v0(ErrorCode.UNSUPPORTED_VERSION,
                                     [(k, lo, hi) for k, (lo, hi) in self.supported_versions().items()])

    async def dispatch(self, header: RequestHeader, request: Any, ctx: RequestContext) -> Optional[Any]:
        key, version = header.api_key, header.api_version
        self._m_requests.labels(API_NAMES.get(key, str(key))).inc()
        conn = ctx.extra.get("connection")
        if conn is not None and conn.listener_name == "SASL_PLAINTEXT" and conn.principal is None \
                and key not in UNAUTHENTICATED_KEYS:
            raise FrameError(f"api key {key} before SASL authentication")
        entry = HANDLERS.get(key)
        if entry is not None:
            low, high, handler = entry
            if not low <= version <= high:
                raise FrameError(f"api key {key} version {version} is outside {low}..{high}")
            return await handler(self, request, ctx)
        if self.groups is not None:
            from .groups import GROUP_API_KEYS

            if key in GROUP_API_KEYS:
                low, high = self.groups.supported_versions().get(key, (0, -1))
                if not low <= version <= high:
                    raise FrameError(f"api key {key} version {version} is outside {low}..{high}")
                return await self.groups.handle(key, version, request, ctx)
        raise FrameError(f"api key {key} is not served")

    # ---------------------------------------------------------------------------------- helpers for handlers

    async def nodes(self, listener_name: str) -> list[Node]:
        nodes = await self.cluster.nodes(listener_name)
        if not any(n.node_id == self.node_id for n in nodes):
            me = next((l for l in self.advertised() if l.name == listener_name), None)
            if me is not None:  # before this broker's registration is read back
                nodes.append(Node(self.node_id, me.host, me.port, self.broker_id, ""))
        return nodes
