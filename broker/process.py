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

SIGTERM / SIGINT shut down cleanly within ``shutdown_grace_ms``: ``/health`` turns 503, the registration
goes (nobody assigns this broker a bundle any more), every owned bundle is unloaded (its topics are closed,
clients are told to reconnect and look up again, which sends them to another broker) and released, then
the service, the HTTP server, the managed ledgers, the ledger client and the stores close; exit code 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import signal
import socket
import sys
from typing import Any, Optional

from aiohttp import web
from prometheus_client import CollectorRegistry

from config_store import (ClusterData, ConfigurationStore, KazooMetadataStore, MetadataStore, NodeExistsError,
                          NotFoundError, Policies, RegionStore, TenantInfo)
from config_store.brokers import BrokerLoad
from magnetar.errors import MagnetarError
from observability.runtime import RuntimeMetrics, tune_runtime
from magnetar.topic_name import DEFAULT_NAMESPACE, PUBLIC_TENANT, TopicName

from .admin import AdminContext, make_app
from .bundles import NamespaceBundle, bundles_data, default_boundaries, topic_hash
from .config import BrokerConfig
from .load_balance import ResourceWeights, SplitThresholds
from .load_manager import LoadManager, LoadManagerSettings
from .load_report import measure_load
from .lookup_http import routes as lookup_routes
from .ownership import BundleOwnership

log = logging.getLogger("broker.process")

_UNLOAD_CONCURRENCY = 32


class BrokerError(MagnetarError):
    """The broker process cannot start (its message says why)."""


class BrokerProcess:
    """One running broker in this process. ``await start()``, then ``await close()`` (idempotent).

    Attributes (valid after start): ``broker_id``, ``port`` (binary protocol), ``http_port``,
    ``pulsar_url``, ``http_url``, ``ownership``, ``service``.
    """

    def __init__(self, config: BrokerConfig, *, registry: Optional[CollectorRegistry] = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
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
        self._runner: Optional[web.AppRunner] = None
        self._http_socket: Optional[socket.socket] = None
        self._state = "new"
        self.runtime_metrics: Optional[RuntimeMetrics] = None

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://{self.config.advertised_host}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.config.advertised_host}:{self.http_port}"

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state != "new":
            raise BrokerError(f"a broker that is {self._state} cannot be started")
        self._state = "starting"
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        config.endpoints_path.unlink(missing_ok=True)  # a stale file must not look like this run's
        await self._open_stores()
        await self._open_storage()
        self._bind_http()
        self.broker_id = config.effective_broker_id(self.http_port)
        _set_log_prefix(self.broker_id)
        self.ownership = BundleOwnership(
            local_store=self.local_store, configuration=self.configuration, broker_id=self.broker_id,
            cluster=config.cluster, default_bundles=config.default_namespace_bundles,
            load_report_interval_ms=config.load_report_interval_ms, weights=_weights(config), registry=self.registry)
        await self._start_service()
        self.ownership.set_unloader(self._unload_bundle_topics)
        self.ownership.set_load_source(self._measure_load)
        if config.bootstrap:
            await bootstrap(self.configuration, cluster=config.cluster,
                            http_url=config.cluster_service_url or self.http_url,
                            pulsar_url=config.cluster_broker_service_url or self.pulsar_url,
                            default_bundles=config.default_namespace_bundles)
        await self.ownership.start(pulsar_url=self.pulsar_url, http_url=self.http_url)
        self.load_manager = LoadManager(ownership=self.ownership, configuration=self.configuration,
                                        local_store=self.local_store, settings=_load_manager_settings(config))
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

    async def _open_storage(self) -> None:
        from bookie.client import LedgerClient, LedgerClientConfig
        from broker.managed_ledger.config import ManagedLedgerConfig
        from broker.managed_ledger.factory import ManagedLedgerFactory

        c = self.config
        region = RegionStore(self.local_store)
        self.ledger_client = LedgerClient(region, config=LedgerClientConfig(
            ensemble_size=c.managed_ledger_ensemble_size, write_quorum_size=c.managed_ledger_write_quorum,
            ack_quorum_size=c.managed_ledger_ack_quorum))
        await self.ledger_client.start()
        self.ml_factory = ManagedLedgerFactory(self.ledger_client, self.local_store, config=ManagedLedgerConfig(
            ensemble_size=c.managed_ledger_ensemble_size, write_quorum_size=c.managed_ledger_write_quorum,
            ack_quorum_size=c.managed_ledger_ack_quorum,
            max_entries_per_ledger=c.managed_ledger_max_entries_per_ledger,
            max_size_per_ledger_bytes=c.managed_ledger_max_ledger_size_bytes,
            max_ledger_rollover_time_s=c.managed_ledger_max_ledger_rollover_time_ms / 1000,
            cursor_persist_interval_ms=c.managed_ledger_cursor_persist_interval_ms))

    async def _start_service(self) -> None:
        from broker.service import BrokerService
        from broker.service.config import ServiceConfig

        c = self.config
        settings: dict[str, Any] = {"host": c.bind_host, "port": c.port, "advertised_address": c.advertised_host,
                                    "max_message_size_bytes": c.max_message_size_bytes}
        # The broker-wide deduplication default (namespaces whose policy is unset) is the service's to apply.
        settings["deduplication_enabled"] = c.deduplication_enabled
        settings["delayed_delivery_enabled"] = c.delayed_delivery_enabled
        settings.update(delayed_delivery_tick_time_ms=c.delayed_delivery_tick_time_ms,
                        delayed_delivery_max_delay_ms=c.delayed_delivery_max_delay_ms,
                        delete_inactive_topics_enabled=c.delete_inactive_topics_enabled,
                        delete_inactive_topics_frequency_s=c.delete_inactive_topics_frequency_ms / 1000,
                        delete_inactive_topics_mode=c.delete_inactive_topics_mode,
                        delete_inactive_topics_max_inactive_duration_s=(
                            c.delete_inactive_topics_max_inactive_duration_ms / 1000),
                        compaction_monitor_interval_s=c.compaction_monitor_interval_ms / 1000,
                        subscription_pattern_max_length=c.subscription_pattern_max_length,
                        topic_list_watchers_enabled=c.topic_list_watchers_enabled)
        settings.update(backlog_quota_check_enabled=c.backlog_quota_check_enabled,
                        backlog_quota_check_interval_s=c.backlog_quota_check_interval_ms / 1000,
                        backlog_quota_default_limit_bytes=c.backlog_quota_default_limit_bytes,
                        backlog_quota_default_limit_s=c.backlog_quota_default_limit_s,
                        backlog_quota_default_policy=c.backlog_quota_default_policy)
        settings.update({name: getattr(c, name) for name in (  # broker-wide default rate limits
            "dispatch_throttling_rate_per_topic_in_msg", "dispatch_throttling_rate_per_topic_in_byte",
            "dispatch_throttling_rate_per_subscription_in_msg", "dispatch_throttling_rate_per_subscribe_in_byte",
            "max_publish_rate_per_topic_in_messages", "max_publish_rate_per_topic_in_bytes")})
        self.service = BrokerService(
            config=ServiceConfig(**settings),
            ml_factory=self.ml_factory, configuration_store=self.configuration, ownership=self.ownership,
            cluster_name=c.cluster, registry=self.registry, replication=self._replication())
        try:
            await self.service.start()
        except OSError as e:
            raise BrokerError(f"cannot listen on {c.bind_host}:{c.port} (binary protocol): {e.strerror or e}") from None
        self.port = self.service.port
        log.info("binary protocol on %s:%d (advertised %s)", c.bind_host, self.port, self.pulsar_url)

    def _replication(self) -> Any:
        """Geo-replication (the ``replicator`` room), wired in here as DESIGN §2 asks; None when disabled."""
        if not self.config.replication_enabled:
            return None
        from replicator import ReplicationService, ReplicationSettings

        c = self.config
        return ReplicationService(self.configuration, local_cluster=c.cluster, settings=ReplicationSettings(
            read_batch_max=c.replication_read_batch_max, pending_max=c.replication_pending_max,
            backoff_max_s=c.replication_backoff_max_ms / 1000,
            snapshot_interval_s=c.replicated_subscriptions_snapshot_interval_ms / 1000,
            snapshot_timeout_s=c.replicated_subscriptions_snapshot_timeout_ms / 1000))

    def _bind_http(self) -> None:
        c = self.config
        sock = socket.socket(socket.AF_INET6 if ":" in c.bind_host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((c.bind_host, c.http_port))
        except OSError as e:
            sock.close()
            raise BrokerError(f"cannot bind HTTP to {c.bind_host}:{c.http_port}: {e.strerror or e}") from None
        sock.listen(128)
        self._http_socket = sock
        self.http_port = sock.getsockname()[1]

    async def _start_http(self) -> None:
        ctx = AdminContext(
            cluster=self.config.cluster, configuration=self.configuration, region=RegionStore(self.local_store),
            brokers=self.ownership.registry, ownership=self.ownership, service=self.service,
            ml_factory=self.ml_factory, default_bundles=self.config.default_namespace_bundles,
            max_partitions_per_topic=self.config.max_partitions_per_topic, metrics_registry=self.registry,
            health=self.health, load_manager=self.load_manager)
        app = make_app(ctx, extra_routes=[lookup_routes],
                       client_max_size_bytes=self.config.http_request_body_max_bytes)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self._http_socket).start()
        log.info("admin, lookup and metrics on %s", self.http_url)

    async def close(self) -> None:
        """Unloads and releases every bundle, then closes everything (see the module docstring)."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        log.info("shutting down")
        if self.runtime_metrics is not None:
            self.runtime_metrics.close()
        grace_s = self.config.shutdown_grace_ms / 1000
        try:
            async with asyncio.timeout(grace_s):
                if self.load_manager is not None:
                    await self.load_manager.close()
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
        elif self._http_socket is not None:
            self._http_socket.close()
        for closer in (self.ml_factory, self.ledger_client):
            if closer is not None:
                try:
                    await closer.close()
                except Exception:
                    log.exception("error while closing %s", type(closer).__name__)
        for store in {id(s): s for s in (self.global_store, self.local_store) if s is not None}.values():
            await store.close()
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
                "http": self.http_url, "metrics": f"{self.http_url}/metrics", "pid": os.getpid()}
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
                    default_bundles: int) -> None:
    """Creates the cluster entry, tenant ``public`` and namespace ``public/default`` when missing.

    Every step is a create that tolerates NodeExists, so brokers starting together agree: the first
    creation wins and nothing is overwritten (an operator's cluster URLs stay as they were).
    """
    try:
        await configuration.create_cluster(cluster, ClusterData(service_url=http_url, broker_service_url=pulsar_url))
        log.info("registered cluster %s (%s, %s)", cluster, http_url, pulsar_url)
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


# -- process -----------------------------------------------------------------------------------------------


class _PrefixFilter(logging.Filter):
    prefix = "-"

    def filter(self, record: logging.LogRecord) -> bool:
        record.broker = self.prefix
        return True


_FILTER = _PrefixFilter()


def _set_log_prefix(broker_id: str) -> None:
    _FILTER.prefix = broker_id


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_FILTER)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s [%(broker)s] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("kazoo", "config_store.kazoo", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def serve(config: BrokerConfig) -> None:
    """Runs a broker until SIGTERM or SIGINT, then shuts it down cleanly."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = BrokerProcess(config)
    try:
        await broker.start()
        if os.environ.get("MAGNETAR_TUNE_GC", "1") != "0":
            tune_runtime()
        await stop.wait()
        log.info("signal received")
    finally:
        await broker.close()


def run(config_path: pathlib.Path | str) -> None:
    """Entry point of ``magnetar broker --config FILE``."""
    config = BrokerConfig.load(config_path)
    setup_logging(logging.DEBUG if os.environ.get("MAGNETAR_DEBUG") else logging.INFO)
    log.info("starting from %s (data_dir %s)", config_path, config.data_dir)
    try:
        asyncio.run(serve(config))
    except KeyboardInterrupt:
        pass
