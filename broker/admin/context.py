"""What the REST handlers work with, and the owner-forwarding rule every topic operation follows."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry
from yarl import URL

from config_store import ConfigurationStore, NotFoundError, Policies, RegionStore
from config_store.brokers import BrokerRegistry
from magnetar.topic_name import TopicName

from ..bundles import bundles_data, default_boundaries
from ..ownership import BundleOwnership
from ..ownership_api import LookupResult
from ..ownership_errors import ServiceUnitNotReadyError
from .errors import RestError, not_found

HealthCheck = Callable[[], tuple[bool, str]]


@dataclass
class AdminContext:
    """Everything the HTTP server of one broker serves from.

    Attributes:
        cluster: the region this broker serves.
        configuration: the global configuration store.
        region: the region's local store (bookies).
        brokers: live brokers and bundle ownership records.
        ownership: lookup, acquisition and unloading of bundles.
        service: the binary-protocol service (topics); None until it is wired (topic calls answer 503).
        ml_factory: lists managed ledgers (the topics of a namespace in this region); None: no listing.
        default_bundles: bundles of a namespace created without explicit ones.
        max_partitions_per_topic: bound of a partitioned topic's partition count.
        metrics_registry: what ``/metrics`` serves.
        health: ``/health``'s check.
        fanout_concurrency: parallel requests when a call spans the owners of many partitions or bundles.
        lookup_wait_s: how long a lookup may wait for a bundle that is not ready (see :meth:`lookup`).
        load_manager: bundle splits and load shedding (``broker.load_manager.LoadManager``); None: splits
            use the defaults (at most 128 bundles a namespace).
        security: authentication and authorization (``broker.security.BrokerSecurity``); None: everyone may
            do everything (tests of the routes alone).
        client_credentials: what this broker presents to brokers it calls (its own fan-out and unloads;
            ``broker.client_credentials``); None: nothing.
    """

    cluster: str
    configuration: ConfigurationStore
    region: RegionStore
    brokers: BrokerRegistry
    ownership: BundleOwnership
    service: Any = None
    ml_factory: Any = None
    default_bundles: int = 4
    max_partitions_per_topic: int = 4096
    metrics_registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    health: Optional[HealthCheck] = None
    fanout_concurrency: int = 16
    lookup_wait_s: float = 5.0
    http: Optional[aiohttp.ClientSession] = None
    load_manager: Any = None
    security: Any = None
    client_credentials: Any = None

    # -- helpers shared by the handlers ---------------------------------------------------------------------

    def require_service(self) -> Any:
        if self.service is None:
            raise RestError(503, "this broker does not serve topics yet")
        return self.service

    async def policies(self, tenant: str, namespace: str) -> Policies:
        """The namespace's policies; 404 if the namespace (or its tenant) does not exist."""
        try:
            return (await self.configuration.get_namespace_policies(tenant, namespace)).value
        except NotFoundError:
            raise not_found(f"Namespace {tenant}/{namespace} does not exist") from None

    async def partitions(self, topic: TopicName) -> int:
        """The partition count of ``topic`` (0: not a partitioned topic). A partition's own name is never a
        partitioned topic (such names are refused at creation), so it costs no metadata read."""
        if topic.is_partition:
            return 0
        try:
            return (await self.configuration.get_partitioned_topic(topic.tenant, topic.namespace_portion,
                                                                   topic.domain.value, topic.local_name)).value
        except NotFoundError:
            return 0

    async def served_topic(self, request: web.Request, topic: TopicName, *, create: bool = False) -> Any:
        """The service's Topic for an operation on one topic, at its owner: 307 to the owner from elsewhere
        (see :meth:`ensure_owner`), 404 if it does not exist (unless ``create``). The caller has checked the
        namespace."""
        service = self.require_service()
        await self.ensure_owner(request, topic)
        served = await service.get_topic(str(topic), create=create)
        if served is None:
            raise not_found(f"Topic {topic} not found")
        return served

    def default_bundles_data(self) -> dict[str, Any]:
        return bundles_data(default_boundaries(self.default_bundles))

    async def ensure_owner(self, request: web.Request, topic: TopicName) -> None:
        """Returns if this broker serves ``topic`` (acquiring its bundle if it is the one to); otherwise
        answers 307 to the owner (or to the broker chosen to own it, with ``authoritative=true``), the same
        method, path and query, as Pulsar does."""
        authoritative = request.query.get("authoritative", "").lower() == "true"
        result = await self.lookup(str(topic), authoritative=authoritative)
        if result.is_self:
            return
        raise web.HTTPTemporaryRedirect(redirect_location(request, result.http_url, authoritative=result.redirect,
                                                          base_url_tls=result.http_url_tls))

    async def lookup(self, topic: str, *, authoritative: bool, listener_name: str = "") -> LookupResult:
        """The ownership lookup, waiting out short "not ready" windows (a bundle being unloaded, a broker
        being chosen) for up to ``lookup_wait_s`` before failing with 503.

        HTTP clients cannot tell a transient 503 from a dead service: pulsar-client turns any HTTP error of
        a lookup into a fatal ConnectError, so the wait happens here rather than at the client.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lookup_wait_s
        delay_s = 0.05
        while True:
            try:
                return await self.ownership.lookup(topic, authoritative=authoritative, listener_name=listener_name)
            except ServiceUnitNotReadyError:
                if loop.time() + delay_s > deadline:
                    raise
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.5)

    def client(self) -> aiohttp.ClientSession:
        """The HTTP client of this broker's own calls to brokers (its credentials on every request)."""
        if self.http is None or self.http.closed:
            raise RestError(503, "the broker's HTTP client is not running")
        return self.http

    def self_url(self) -> str:
        """This broker's base URL for its own calls: the ``https://`` one when its client credentials use TLS
        (a client certificate travels only in a handshake), else the ``http://`` one."""
        tls = self.client_credentials is not None and self.client_credentials.tls
        return self.ownership.http_url_tls if tls and self.ownership.http_url_tls else self.ownership.http_url


def redirect_location(request: web.Request, base_url: str, *, authoritative: bool, base_url_tls: str = "") -> str:
    """``base_url`` + this request's raw path and query (plus ``authoritative=true`` when asked); a request
    that came over HTTPS goes on to ``base_url_tls`` when the target has one (its client certificate, if any,
    would not travel over plain HTTP)."""
    if request.secure and base_url_tls:
        base_url = base_url_tls
    if not base_url:
        raise RestError(503, "the owner broker has no HTTP address; retry")
    query = dict(request.rel_url.query)
    if authoritative:
        query["authoritative"] = "true"
    url = URL(base_url).with_path(request.rel_url.raw_path, encoded=True)
    return str(url.with_query(query) if query else url)
