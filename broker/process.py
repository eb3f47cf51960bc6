"""The broker process: ``magnetar broker --config broker.toml``.

Start-up order (each step needs the one before):

1. both metadata stores (the region's ZooKeeper; the global configuration store, the same session when
   they are the same ZooKeeper), the ledger client (watches the region's bookies) and the managed-ledger
   factory;
2. the HTTP socket is bound first, so a broker with ``http_port = 0`` knows its id (``host:http-port``)
   before it registers anything; then the binary-protocol service starts (its port is known after);
3. bootstrap, compare-and-set safe when brokers start together: the cluster entry, tenant ``public`` and
   namespace ``public/default`` are created when missing (as Pulsar standalone does);
4. bundle ownership starts (registers ``/brokers/<id>`` with its URLs and load report), the HTTP server
   starts serving, ``<data_dir>/endpoints.json`` is written last, and ``/health`` turns 200.

Security (``broker/security.py``) is built before anything serves: one :class:`BrokerSecurity` (its token key
read now, a bad one fails the start) shared by the binary protocol and the admin API, and the broker's own
credentials towards other brokers (``broker/client_credentials.py``) for its admin calls and replicators.
With ``tls_port`` / ``web_tls_port`` the registration, bundle ownership records and the bootstrapped cluster
entry carry the TLS URLs (``pulsar+ssl://``, ``https://``) as well.

SIGTERM / SIGINT shut down cleanly within ``shutdown_grace_ms``: ``/health`` turns 503, the registration
goes (nobody assigns this broker a bundle any more), every owned bundle is unloaded (its topics are closed,
clients are told to reconnect and look up again, which sends them to another broker) and released, then
the service, the HTTP server, the managed ledgers, the ledger client and the stores close; exit code 0.
A metadata store without a connection fails the shutdown's calls at once rather than holding each for its
deadline (``MetadataStore.fail_fast``), so a broker whose ZooKeeper is gone exits in a second or two.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import pathlib
import socket
from typing import Any, Optional

from aiohttp import web
from prometheus_client import CollectorRegistry

from config_store import (ClusterData, ConfigurationStore, KazooMetadataStore, MetadataStore, NodeExistsError,
                          NotFoundError, Policies, RegionStore, TenantInfo)
from config_store.brokers import BrokerLoad, listeners_to_json
from config_store.metrics import SessionEventsCollector, process_stores
from magnetar import process_main
from magnetar.config import derive
from magnetar.errors import MagnetarError
from observability.runtime import RuntimeMetrics, tune_runtime
from magnetar.topic_name import DEFAULT_NAMESPACE, PUBLIC_TENANT, TopicName

from .admin import AdminContext, make_app
from .bundles import NamespaceBundle, bundles_data, default_boundaries, topic_hash
from .client_credentials import BrokerClientCredentials
from .config import BrokerConfig
from .listeners import internal_listener, listen_addresses
from .load_balance import ResourceWeights, SplitThresholds
from .load_manager import LoadManager, LoadManagerSettings
from .load_report import measure_load
from .lookup_http import routes as lookup_routes
from .ownership import BundleOwnership
from .security import BrokerSecurity
from .service.exposition import ExpositionRegistry

log = logging.getLogger("broker.process")

_UNLOAD_CONCURRENCY = 32

# The settings of inner rooms are derived from broker.toml's by magnetar.config.derive: a field takes the
# broker setting of the same name (after the prefix given there; ``_ms`` converted to ``_s`` and back), so a
# setting added to both flows with no code here. Only the names that differ are listed.
_SERVICE_RENAMES = {"host": "bind_host", "advertised_address": "advertised_host"}
_QUORUM_RENAMES = {"write_quorum_size": "managed_ledger_write_quorum", "ack_quorum_size": "managed_ledger_ack_quorum"}
_MANAGED_LEDGER_RENAMES = {**_QUORUM_RENAMES, "max_size_per_ledger_bytes": "managed_ledger_max_ledger_size_bytes",
                           "broker_entry_metadata_interceptors": "broker_entry_metadata_interceptors"}
_REPLICATION_RENAMES = {"snapshot_interval_s": "replicated_subscriptions_snapshot_interval_ms",
                        "snapshot_timeout_s": "replicated_subscriptions_snapshot_timeout_ms",
                        "keep_alive_interval_s": "keep_alive_interval_ms"}


class BrokerError(MagnetarError):
    """The broker process cannot start (its message says why)."""


class BrokerProcess:
    """One running broker in this process. ``await start()``, then ``await close()`` (idempotent).

    Attributes (valid after start): ``broker_id``, ``port`` (binary protocol), ``http_port``,
    ``pulsar_url``, ``http_url``, ``ownership``, ``service``.
    """

    def __init__(self, config: BrokerConfig, *, registry: Optional[CollectorRegistry] = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else ExpositionRegistry()
        self.broker_id = ""
        self.port = 0
        self.http_port = 0
        self.local_store: Optional[MetadataStore] = None
        self.global_store: Optional[MetadataStore] = None
        self.configuration: Optional[ConfigurationStore] = None
        self.ledger_client: Any = None
        self.ml_factory: Any = None
        self.ownership: Optional[BundleOwnership] = None
        self.load_manager: Optional[LoadManager] = None
        self.service: Any = None
        self.kafka: Any = None  # the Kafka listener (broker/kafka/), when kafka_listeners is set
        self._runner: Optional[web.AppRunner] = None
        self._http_socket: Optional[socket.socket] = None
        self._https_socket: Optional[socket.socket] = None
        self.https_port = 0
        self.security: Optional[BrokerSecurity] = None
        self.client_credentials: Optional[BrokerClientCredentials] = None
        self._state = "new"
        self.runtime_metrics: Optional[RuntimeMetrics] = None
        self._session_events: Optional[SessionEventsCollector] = None  # ZooKeeper session events (/metrics)

    @property
    def pulsar_url(self) -> str:
        """The default ``pulsar://`` URL: the internal listener's when there are advertised listeners."""
        listener = internal_listener(self.config.listeners, self.config.internal_listener_name)
        return listener.broker_service_url if listener else f"pulsar://{self.config.advertised_host}:{self.port}"

    @property
    def pulsar_url_tls(self) -> str:
        """The internal listener's ``pulsar+ssl://`` URL, else ``tls_port``'s, else ""."""
        listener = internal_listener(self.config.listeners, self.config.internal_listener_name)
        if listener is not None and listener.broker_service_url_tls:
            return listener.broker_service_url_tls
        tls_port = self.service.tls_port if self.service is not None else 0
        return f"pulsar+ssl://{self.config.advertised_host}:{tls_port}" if tls_port else ""

    @property
    def http_url(self) -> str:
        return f"http://{self.config.advertised_host}:{self.http_port}"

    @property
    def http_url_tls(self) -> str:
        return f"https://{self.config.advertised_host}:{self.https_port}" if self.https_port else ""

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state != "new":
            raise BrokerError(f"a broker that is {self._state} cannot be started")
        self._state = "starting"
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        config.endpoints_path.unlink(missing_ok=True)  # a stale file must not look like this run's
        await self._open_stores()
        self._build_security()
        await self._open_storage()
        self._bind_http()
        self.broker_id = config.effective_broker_id(self.http_port)
        process_main.set_log_name(self.broker_id)
        self.ownership = BundleOwnership(
            local_store=self.local_store, configuration=self.configuration, broker_id=self.broker_id,
            cluster=config.cluster, default_bundles=config.default_namespace_bundles,
            load_report_interval_ms=config.load_report_interval_ms, weights=_weights(config), registry=self.registry)
        await self._start_service()
        await self._start_kafka()
        self.ownership.set_unloader(self._unload_bundle_topics)
        self.ownership.set_load_source(self._measure_load)
        if config.bootstrap:
            await bootstrap(self.configuration, cluster=config.cluster,
                            http_url=config.cluster_service_url or self.http_url,
                            pulsar_url=config.cluster_broker_service_url or self.pulsar_url,
                            http_url_tls=config.cluster_service_url_tls or self.http_url_tls,
                            pulsar_url_tls=config.cluster_broker_service_url_tls or self.pulsar_url_tls,
                            default_bundles=config.default_namespace_bundles)
        await self.ownership.start(pulsar_url=self.pulsar_url, http_url=self.http_url,
                                   pulsar_url_tls=self.pulsar_url_tls, http_url_tls=self.http_url_tls,
                                   listeners=config.listeners,
                                   protocols=self.kafka.registration() if self.kafka is not None else ())
        self.load_manager = LoadManager(ownership=self.ownership, configuration=self.configuration,
                                        local_store=self.local_store, settings=_load_manager_settings(config),
                                        http_session=self.client_credentials.http_session,
                                        prefer_tls=self.client_credentials.tls)
        await self.load_manager.start()
        await self._start_http()
        self._write_endpoints()
        self.runtime_metrics = RuntimeMetrics(self.registry)
        self.runtime_metrics.start()
        self._state = "started"
        log.info("broker %s ready: %s %s (cluster %s)", self.broker_id, self.pulsar_url, self.http_url, config.cluster)

    async def _open_stores(self) -> None:
        config = self.config
        self.local_store = KazooMetadataStore(config.zookeeper, session_timeout_ms=config.zk_session_timeout_ms)
        await self.local_store.start()
        if config.configuration_store_connect == config.zookeeper:
            self.global_store = self.local_store
        else:
            self.global_store = KazooMetadataStore(config.configuration_store_connect,
                                                   session_timeout_ms=config.zk_session_timeout_ms)
            await self.global_store.start()
        self.configuration = ConfigurationStore(self.global_store)
        self._session_events = SessionEventsCollector(process_stores(self.local_store, self.global_store),
                                                      cluster=config.cluster)
        self.registry.register(self._session_events)

    def _build_security(self) -> None:
        """Authentication, authorization and the broker's own credentials; BrokerError for settings that
        cannot work (a token key that cannot be read, a missing certificate)."""
        try:
            self.security = BrokerSecurity(self.config, configuration=self.configuration, registry=self.registry)
            self.client_credentials = BrokerClientCredentials(self.config.broker_client_settings())
        except MagnetarError as e:
            raise BrokerError(f"security settings: {e}") from None

    async def _open_storage(self) -> None:
        from bookie.client import LedgerClient, LedgerClientConfig
        from broker.managed_ledger.config import ManagedLedgerConfig
        from broker.managed_ledger.factory import ManagedLedgerFactory

        c = self.config
        region = RegionStore(self.local_store)
        self.ledger_client = LedgerClient(region, config=derive(
            LedgerClientConfig, c, prefix="managed_ledger_", renames=_QUORUM_RENAMES))
        await self.ledger_client.start()
        self.ml_factory = ManagedLedgerFactory(self.ledger_client, self.local_store, config=derive(
            ManagedLedgerConfig, c, prefix="managed_ledger_", renames=_MANAGED_LEDGER_RENAMES))

    async def _start_service(self) -> None:
        from broker.service import BrokerService
        from broker.service.config import ServiceConfig

        c = self.config
        extra = tuple(await asyncio.to_thread(listen_addresses, c.listeners, port=c.port, bind_host=c.bind_host))
        self.service = BrokerService(
            config=dataclasses.replace(derive(ServiceConfig, c, renames=_SERVICE_RENAMES),
                                       extra_listen_addresses=extra),
            ml_factory=self.ml_factory, configuration_store=self.configuration, ownership=self.ownership,
            cluster_name=c.cluster, registry=self.registry, replication=self._replication(),
            security=self.security)
        try:
            await self.service.start()
        except OSError as e:
            extra = "".join(f", {h}:{p}" for h, p in self.service.config.extra_listen_addresses)
            tls = f", {c.bind_host}:{c.tls_port} (TLS)" if c.tls_port else ""
            raise BrokerError(f"cannot listen on {c.bind_host}:{c.port}{extra}{tls} (binary protocol): "
                              f"{e.strerror or e}") from None
        self.port = self.service.port
        log.info("binary protocol on %s:%d (advertised %s%s)", c.bind_host, self.port, self.pulsar_url,
                 f", {self.pulsar_url_tls}" if self.pulsar_url_tls else "")

    async def _start_kafka(self) -> None:
        """The Kafka listener (``kafka_listeners``), with the consumer-group coordinator when that room exists."""
        kafka_config = dataclasses.replace(self.config.kafka_config(), advertised_host=self.config.advertised_host)
        if not kafka_config.enabled:
            return
        from broker.kafka.server import KafkaServer

        groups = None
        try:
            from broker.kafka.groups import GroupCoordinator
        except ImportError:
            GroupCoordinator = None
        if GroupCoordinator is not None:
            groups = GroupCoordinator(self.service, kafka_config)
        self.kafka = KafkaServer(self.service, kafka_config, broker_id=self.broker_id, cluster=self.config.cluster,
                                 registry=self.ownership.registry, http_session=self.client_credentials.http_session,
                                 admin_url=self.http_url, groups=groups, metrics_registry=self.registry)
        try:
            await self.kafka.start()
        except OSError as e:
            raise BrokerError(f"cannot listen on {kafka_config.listeners} (Kafka): {e.strerror or e}") from None
        log.info("Kafka protocol on %s", ", ".join(l.url() for l in self.kafka.advertised()))

    def _replication(self) -> Any:
        """Geo-replication (the ``replicator`` room), wired in here as DESIGN §2 asks; None when disabled."""
        if not self.config.replication_enabled:
            return None
        from replicator import ReplicationService, ReplicationSettings

        credentials = self.client_credentials
        return ReplicationService(self.configuration, local_cluster=self.config.cluster, settings=derive(
            ReplicationSettings, self.config, prefix="replication_", renames=_REPLICATION_RENAMES),
            auth=credentials.protocol_auth(), ssl_context=credentials.ssl_context, prefer_tls=credentials.tls)

    def _bind_http(self) -> None:
        c = self.config
        self._http_socket = _bind(c.bind_host, c.http_port, "HTTP")
        self.http_port = self._http_socket.getsockname()[1]
        if c.web_tls_port:
            self._https_socket = _bind(c.bind_host, c.web_tls_port, "HTTPS")
            self.https_port = self._https_socket.getsockname()[1]

    async def _start_http(self) -> None:
        ctx = AdminContext(
            cluster=self.config.cluster, configuration=self.configuration, region=RegionStore(self.local_store),
            brokers=self.ownership.registry, ownership=self.ownership, service=self.service,
            ml_factory=self.ml_factory, default_bundles=self.config.default_namespace_bundles,
            max_partitions_per_topic=self.config.max_partitions_per_topic, metrics_registry=self.registry,
            health=self.health, load_manager=self.load_manager, security=self.security,
            client_credentials=self.client_credentials)
        app = make_app(ctx, extra_routes=[lookup_routes],
                       client_max_size_bytes=self.config.http_request_body_max_bytes)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self._http_socket).start()
        if self._https_socket is not None:
            await web.SockSite(self._runner, self._https_socket, ssl_context=self._web_tls_context()).start()
        log.info("admin, lookup and metrics on %s%s", self.http_url,
                 f" and {self.http_url_tls}" if self.http_url_tls else "")

    def _web_tls_context(self) -> Any:
        """The HTTPS port's context: the broker's certificate (reloaded when its files change), client
        certificates asked for when a trusted CA is configured."""
        from magnetar.auth.tls import ReloadingServerContext

        try:
            return ReloadingServerContext(self.config.tls_settings()).serving_context()
        except MagnetarError as e:
            raise BrokerError(f"web_tls_port: {e}") from None

    async def close(self) -> None:
        """Unloads and releases every bundle, then closes everything (see the module docstring)."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        log.info("shutting down")
        if self.runtime_metrics is not None:
            self.runtime_metrics.close()
        grace_s = self.config.shutdown_grace_ms / 1000
        # What the shutdown writes (a ledger's close, a release) is not worth waiting for a lost connection:
        # the broker's nodes are ephemeral, a ledger left open is recovered by the topic's next owner, and
        # cursor moves not recorded are redelivered. So a store without a connection fails calls at once.
        for store in {id(s): s for s in (self.global_store, self.local_store) if s is not None}.values():
            store.fail_fast()
        try:
            async with asyncio.timeout(grace_s):
                if self.load_manager is not None:
                    await self.load_manager.close()
                if self.kafka is not None:
                    await self.kafka.close()
                if self.ownership is not None:
                    await self.ownership.close()
                if self.service is not None:
                    await self.service.close()
        except TimeoutError:
            log.warning("clean shutdown took longer than %.1fs; closing the rest regardless", grace_s)
        except Exception:
            log.exception("error while unloading")
        if self._runner is not None:
            await self._runner.cleanup()
        else:
            for sock in (self._http_socket, self._https_socket):
                if sock is not None:
                    sock.close()
        if self.security is not None:
            self.security.close()
        for closer in (self.ml_factory, self.ledger_client):
            if closer is not None:
                try:
                    await closer.close()
                except Exception:
                    log.exception("error while closing %s", type(closer).__name__)
        for store in {id(s): s for s in (self.global_store, self.local_store) if s is not None}.values():
            await store.close()
        if self._session_events is not None:
            self.registry.unregister(self._session_events)
            self._session_events = None
        self._state = "closed"
        log.info("broker %s stopped", self.broker_id)

    async def __aenter__(self) -> "BrokerProcess":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- wiring ------------------------------------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        if self._state != "started":
            return False, self._state
        if self.local_store is not None and not self.local_store.connected:
            return False, "ZooKeeper connection lost"
        return True, "ok"

    async def _unload_bundle_topics(self, bundle: NamespaceBundle) -> None:
        """Closes every topic of ``bundle`` this broker serves (their clients reconnect elsewhere).

        Chosen by namespace and hash range, not through the bundle cache: a policies change (a split) may
        have emptied the cache, and the range is what the bundle is."""
        doomed = [name for name in list(self.service.topics()) if _in_bundle(name, bundle)]
        if not doomed:
            return
        limit = asyncio.Semaphore(_UNLOAD_CONCURRENCY)

        async def one(name: str) -> None:
            async with limit:
                try:
                    await self.service.unload_topic(name)
                except Exception:
                    log.exception("[%s] unload failed", name)

        await asyncio.gather(*(one(n) for n in doomed))
        log.info("bundle %s: unloaded %d topic(s)", bundle, len(doomed))

    def _measure_load(self) -> BrokerLoad:
        """Counts and rates of the topics served here, per bundle (see :mod:`broker.load_report`)."""
        if self.service is None:
            return BrokerLoad()
        return measure_load(self.service.topics(), self.ownership.cached_bundle_of,
                            connections=len(self.service.connections))

    def _write_endpoints(self) -> None:
        data = {"broker_id": self.broker_id, "cluster": self.config.cluster, "pulsar": self.pulsar_url,
                "http": self.http_url, "metrics": f"{self.http_url}/metrics", "pid": os.getpid(),
                "listeners": listeners_to_json(self.config.listeners)}
        if self.kafka is not None:
            data["kafka"] = [l.url() for l in self.kafka.advertised()]
        if self.pulsar_url_tls:
            data["pulsar_tls"] = self.pulsar_url_tls
        if self.http_url_tls:
            data["https"] = self.http_url_tls
        path = self.config.endpoints_path
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)


def _in_bundle(topic: str, bundle: NamespaceBundle) -> bool:
    try:
        name = TopicName.parse(topic)
    except MagnetarError:
        return False
    return ((name.tenant, name.namespace_portion) == (bundle.tenant, bundle.namespace)
            and bundle.contains(topic_hash(str(name))))


def _weights(c: BrokerConfig) -> ResourceWeights:
    return ResourceWeights(msg_rate_in=c.load_balancer_msg_rate_in_resource_weight,
                           msg_rate_out=c.load_balancer_msg_rate_out_resource_weight,
                           bandwidth_in=c.load_balancer_bandwidth_in_resource_weight,
                           bandwidth_out=c.load_balancer_bandwidth_out_resource_weight)


def _load_manager_settings(c: BrokerConfig) -> LoadManagerSettings:
    return LoadManagerSettings(
        auto_split_enabled=c.load_balancer_auto_bundle_split_enabled,
        auto_unload_split_bundles=c.load_balancer_auto_unload_split_bundles_enabled,
        split_interval_s=c.load_balancer_bundle_split_interval_ms / 1000,
        thresholds=SplitThresholds(max_topics=c.load_balancer_namespace_bundle_max_topics,
                                   max_sessions=c.load_balancer_namespace_bundle_max_sessions,
                                   max_msg_rate=c.load_balancer_namespace_bundle_max_msg_rate,
                                   max_bandwidth_mbytes=c.load_balancer_namespace_bundle_max_bandwidth_mbytes),
        max_bundles=c.load_balancer_namespace_maximum_bundles,
        shedding_enabled=c.load_balancer_shedding_enabled,
        shedding_interval_s=c.load_balancer_shedding_interval_ms / 1000,
        shedding_grace_period_s=c.load_balancer_shedding_grace_period_ms / 1000,
        shedding_threshold=c.load_balancer_broker_threshold_shedder_percentage / 100,
        history_fraction=c.load_balancer_history_resource_percentage,
        min_unload_throughput_bytes_s=c.load_balancer_bundle_unload_min_throughput_threshold_mbytes * 1024 * 1024,
        weights=_weights(c))


async def bootstrap(configuration: ConfigurationStore, *, cluster: str, http_url: str, pulsar_url: str,
                    default_bundles: int, http_url_tls: str = "", pulsar_url_tls: str = "") -> None:
    """Creates the cluster entry (with its TLS URLs, when there are), tenant ``public`` and namespace
    ``public/default`` when missing.

    Every step is a create that tolerates NodeExists, so brokers starting together agree: the first
    creation wins and nothing is overwritten (an operator's cluster URLs stay as they were).
    """
    try:
        await configuration.create_cluster(cluster, ClusterData(
            service_url=http_url, broker_service_url=pulsar_url, service_url_tls=http_url_tls,
            broker_service_url_tls=pulsar_url_tls))
        log.info("registered cluster %s (%s)", cluster,
                 ", ".join(u for u in (http_url, pulsar_url, http_url_tls, pulsar_url_tls) if u))
    except NodeExistsError:
        pass
    try:
        await configuration.create_tenant(PUBLIC_TENANT, TenantInfo(allowed_clusters=[cluster]))
        log.info("created tenant %s", PUBLIC_TENANT)
    except NodeExistsError:
        # another region created it: this region's cluster joins its allowed clusters (several regions
        # sharing one configuration store may all use tenant public)
        def allow(info: TenantInfo) -> TenantInfo:
            if cluster not in info.allowed_clusters:
                info.allowed_clusters = [*info.allowed_clusters, cluster]
            return info
        try:
            await configuration.update_tenant(PUBLIC_TENANT, allow)
        except NotFoundError:
            pass
    policies = Policies(replication_clusters=[cluster], bundles=bundles_data(default_boundaries(default_bundles)))
    try:
        await configuration.create_namespace(PUBLIC_TENANT, DEFAULT_NAMESPACE, policies)
        log.info("created namespace %s/%s", PUBLIC_TENANT, DEFAULT_NAMESPACE)
    except NodeExistsError:
        pass
    except NotFoundError:  # the tenant was deleted between the two steps: leave it so
        log.warning("tenant %s vanished during bootstrap; %s/%s not created", PUBLIC_TENANT, PUBLIC_TENANT,
                    DEFAULT_NAMESPACE)


def _bind(host: str, port: int, what: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise BrokerError(f"cannot bind {what} to {host}:{port}: {e.strerror or e}") from None
    sock.listen(128)
    return sock


# -- process -----------------------------------------------------------------------------------------------


def run(config_path: pathlib.Path | str) -> None:
    """Entry point of ``magnetar broker --config FILE``: runs a broker until SIGTERM or SIGINT, then shuts it down
    cleanly (:mod:`magnetar.process_main`)."""
    process_main.run(config_path, settings=BrokerConfig, server=BrokerProcess, log=log,
                     quiet=("aiohttp.access",), tune_runtime=tune_runtime)
