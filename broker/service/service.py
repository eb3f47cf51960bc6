"""``BrokerService``: the facade the broker process and the admin API use.

It owns the listener, the loaded topics and the periodic work (rates, message TTL). Topics load on
first use (``get_topic``): ownership is checked, the namespace's policies read (through a watching
``PoliciesCache``, so policy changes such as ``deduplication_enabled`` reach loaded topics), the managed
ledger opened and its durable cursors turned into subscriptions. Concurrent loads of one topic share one
attempt; a load waits for an unload of the same topic in progress.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from typing import TYPE_CHECKING, Optional

from broker.security import BrokerSecurity, SecuritySettings
from magnetar.config import derive
from magnetar.protocol import pb
from magnetar.topic_name import TopicName

from .policies import delayed_delivery as delayed_policy
from .policies.backlog_quota import BacklogQuotaMonitor, QuotaDefaults
from .config import ServiceConfig
from .policies.auto_compaction import CompactionMonitor
from .policies.inactive_topics import InactiveTopicMonitor
from .errors import (BrokerServiceError, MetadataError, ServiceNotReadyError, TopicNotFoundError, map_error, parse_topic,
                     topic_not_ready)
from .latency import BrokerLatency, storage_write_histogram
from .metrics import ServiceCollector
from .session.auth import CredentialRefresher
from .session.server import ProtocolServer
from .topics.nonpersistent.topic import NonPersistentTopic
from .topics.topic import Topic, TopicState
from .session.topic_list import namespace_topic_names
from .session.topic_list_watch import TopicListWatchService
from .tasks import spawn

if TYPE_CHECKING:
    import prometheus_client

    from broker.managed_ledger.api import ManagedLedgerFactory
    from broker.ownership_api import Ownership
    from config_store import ConfigurationStore, PoliciesCache, TopicPoliciesCache

    from .session.connection import Connection
    from .topics.replication import ReplicationProvider

log = logging.getLogger("broker.service")

Mode = pb.CommandGetTopicsOfNamespace


class BrokerService:
    """The binary-protocol service of one broker. See the module docstring."""

    def __init__(self, *, config: ServiceConfig, ml_factory: "ManagedLedgerFactory",
                 configuration_store: "Optional[ConfigurationStore]", ownership: "Ownership", cluster_name: str,
                 registry: "Optional[prometheus_client.CollectorRegistry]" = None,
                 replication: "Optional[ReplicationProvider]" = None,
                 security: Optional[BrokerSecurity] = None) -> None:
        self.config = config
        # who may connect and what they may do; the broker process shares one with its admin API
        self._owns_security = security is None
        settings = derive(SecuritySettings, config)  # the service's copies of broker.toml's security settings
        self.security = security if security is not None else BrokerSecurity(
            settings, configuration=configuration_store, registry=registry)
        self.ml_factory = ml_factory
        self.configuration_store = configuration_store
        self.ownership = ownership
        self.cluster_name = cluster_name
        self.registry = registry
        self.replication = replication
        self.port = config.port
        self._topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self._unloading: dict[str, asyncio.Task] = {}
        self._server = ProtocolServer(self, config.host, config.port)
        # the same protocol on the ports of advertised listeners (each connection is alike, whichever port)
        self._servers = [self._server, *(ProtocolServer(self, h, p) for h, p in config.extra_listen_addresses)]
        self._tls_server: Optional[ProtocolServer] = None
        if config.tls_port:
            from magnetar.auth.tls import ReloadingServerContext

            tls = ReloadingServerContext(settings.tls_settings())  # ConfigError now, for files that cannot be used
            self._tls_server = ProtocolServer(self, config.host, config.tls_port, tls=tls,
                                              handshake_timeout_s=config.tls_handshake_timeout_s)
            self._servers.append(self._tls_server)
        self.tls_port = 0
        self._refresher: Optional[CredentialRefresher] = None
        self._policies: "Optional[PoliciesCache]" = None
        self._topic_policies: "Optional[TopicPoliciesCache]" = None  # topic-level replication clusters
        self._producer_ids = itertools.count()
        self._instance = secrets.token_hex(3)
        self.publish_latency = BrokerLatency()
        self.storage_write_latency = storage_write_histogram()  # managed-ledger add to quorum ack, every topic
        self._tasks: set[asyncio.Task] = set()
        self._periodic: Optional[asyncio.Task] = None
        self._stopping = asyncio.Event()
        self._collector: Optional[ServiceCollector] = None
        self.backlog_quota_defaults = QuotaDefaults(limit_size_bytes=config.backlog_quota_default_limit_bytes,
                                                    limit_time_s=config.backlog_quota_default_limit_s,
                                                    policy=config.backlog_quota_default_policy)
        self.backlog_quota_monitor = BacklogQuotaMonitor(lambda: list(self.topics().values()),
                                                         interval_s=config.backlog_quota_check_interval_s)
        self.inactive_topic_monitor = InactiveTopicMonitor(lambda: list(self.topics().values()), self.delete_topic,
                                                           config=config,
                                                           interval_s=config.delete_inactive_topics_frequency_s)
        self.topic_list_watch = TopicListWatchService(ml_factory=ml_factory, configuration_store=configuration_store,
                                                      enabled=config.topic_list_watchers_enabled,
                                                      pattern_max_length=config.subscription_pattern_max_length)
        self.compaction_monitor = CompactionMonitor(lambda: list(self.topics().values()),
                                                    interval_s=config.compaction_monitor_interval_s)
        self._started = False
        self._closed = False

    # --------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.configuration_store is not None:
            self._policies = self.configuration_store.policies_cache()
            self._policies.add_listener(self._on_policies)
            self._topic_policies = self.configuration_store.topic_policies_cache()
            self._topic_policies.add_listener(self._on_topic_policies)
        self.port = await self._server.start()
        for server in self._servers[1:]:
            await server.start()  # OSError (cannot bind) goes to the caller, as for the main port
        if self._tls_server is not None:
            self.tls_port = self._tls_server.port
        if self.security.authentication_enabled:
            self._refresher = CredentialRefresher(lambda: self.connections,
                                                  interval_s=self.config.authentication_refresh_check_s)
            self._refresher.start()
        self._periodic = asyncio.get_running_loop().create_task(self._periodic_work(), name="broker periodic work")
        if self.config.backlog_quota_check_enabled:
            await self.backlog_quota_monitor.start()
        await self.inactive_topic_monitor.start()  # runs whatever the broker switch: namespaces may turn it on
        await self.compaction_monitor.start()
        if self.registry is not None:
            self._collector = ServiceCollector(self)
            self.registry.register(self._collector)

    async def close(self) -> None:
        """Stops accepting, unloads every topic (clients get CLOSE_PRODUCER / CLOSE_CONSUMER first, cursors
        are flushed), then closes the connections. Idempotent."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        for server in self._servers:
            server.stop_accepting()
        if self._periodic is not None:
            # Not cancelled mid-iteration: a cursor write cut short by a cancellation can leave the cursor's
            # idea of its metadata version stale (the write may still land), which fences it later.
            self._stopping.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._periodic), 30.0)
            except TimeoutError:
                self._periodic.cancel()
            await asyncio.gather(self._periodic, return_exceptions=True)
        await self.backlog_quota_monitor.close()
        await self.inactive_topic_monitor.close()
        await self.compaction_monitor.close()
        if self._refresher is not None:
            await self._refresher.close()
        results = await asyncio.gather(*(self.unload_topic(n) for n in list(self._topics)), return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):
                log.warning("unloading a topic at close failed: %s", r)
        await asyncio.gather(*(server.close() for server in self._servers))
        self.topic_list_watch.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._policies is not None:
            self._policies.close()
        if self._topic_policies is not None:
            self._topic_policies.close()
        if self._owns_security:
            self.security.close()
        if self.replication is not None:
            try:
                await self.replication.close()
            except Exception:
                log.exception("closing the replication clients failed")
        if self._collector is not None and self.registry is not None:
            try:
                self.registry.unregister(self._collector)
            except KeyError:
                pass

    async def __aenter__(self) -> "BrokerService":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def spawn(self, coro, name: str) -> asyncio.Task:
        return spawn(self._tasks, coro, name)

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_address or self.config.host}:{self.port}"

    @property
    def service_url_tls(self) -> str:
        """``pulsar+ssl://host:tls_port``, or "" without a TLS port."""
        return f"pulsar+ssl://{self.config.advertised_address or self.config.host}:{self.tls_port}" \
            if self.tls_port else ""

    def connection_closed(self, conn: "Connection") -> None:
        self.topic_list_watch.connection_closed(conn)  # the server keeps the connection registry

    @property
    def connections(self) -> set:
        return {conn for server in self._servers for conn in server.connections}

    def connection_counts(self) -> dict[str, int]:
        """Open connections, and those accepted / closed since the service started (every listening port)."""
        return {"active": sum(len(s.connections) for s in self._servers),
                "created": sum(s.created for s in self._servers), "closed": sum(s.closed for s in self._servers)}

    def generate_producer_name(self) -> str:
        """Unique across brokers and restarts (a random instance id), as dedup requires."""
        return f"{self.cluster_name}-{self._instance}-{next(self._producer_ids)}"

    # --------------------------------------------------------------------------------- topics

    def topics(self) -> dict[str, Topic]:
        return {name: t for name, t in self._topics.items() if t.state is TopicState.ACTIVE}

    async def get_topic(self, name: str, *, create: bool = True) -> Optional[Topic]:
        """The loaded topic ``name``, loading it (and creating its storage when ``create``) if needed.

        Returns None when the topic does not exist and ``create`` is False.

        Raises:
            InvalidTopicNameError, ServiceNotReadyError (not owned here, or closing), TopicNotFoundError
            (namespace missing), MetadataError, PersistenceError.
        """
        if self._closed:
            raise ServiceNotReadyError("the broker is shutting down")
        topic_name = parse_topic(name)
        key = str(topic_name)
        while True:
            topic = self._topics.get(key)
            if topic is not None and topic.state is TopicState.ACTIVE:
                return topic
            unloading = self._unloading.get(key)
            if unloading is not None:
                await asyncio.shield(unloading)
                continue
            if topic is not None:  # closing or being deleted by someone else: the client retries
                raise topic_not_ready(key, topic.state.value)
            loading = self._loading.get(key)
            if loading is not None:
                topic = await asyncio.shield(loading)
                if topic is None and create:
                    continue
                return topic
            break
        fut = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            topic = await self._load(topic_name, create=create)
        except BaseException as exc:
            fut.set_exception(map_error(exc) if isinstance(exc, Exception) else exc)
            fut.exception()  # retrieved: waiters re-raise it; nobody else must log it
            raise map_error(exc) if isinstance(exc, Exception) else exc
        else:
            fut.set_result(topic)
        finally:
            self._loading.pop(key, None)
        return topic

    async def _load(self, topic_name: TopicName, *, create: bool) -> Optional[Topic]:
        key = str(topic_name)
        if not await self.ownership.is_owned_by_me(key):
            raise ServiceNotReadyError(f"topic {key} is not served by this broker; look it up again")
        policies = None
        if self._policies is not None:
            try:
                policies = await self._policies.get(topic_name.tenant, topic_name.namespace_portion)
            except Exception as exc:
                raise MetadataError(f"reading the policies of namespace {topic_name.namespace} failed: {exc}") from exc
            if policies is None and self.config.require_namespace:
                raise TopicNotFoundError(f"namespace {topic_name.namespace} does not exist")
        if not topic_name.persistent:  # nothing stored: it exists only while loaded (topics/nonpersistent/topic.py)
            if not create:
                return None
            own = await self._own_topic_policies(topic_name)  # the topic's publish rate, when it has one
            if self._closed:
                raise ServiceNotReadyError("the broker is shutting down")
            await self._check_still_owned(key)
            self._topics[key] = NonPersistentTopic(self, topic_name, policies, own_topic_policies=own)
            log.info("[%s] loaded (non-persistent)", key)
            return self._topics[key]
        if not create and not await self.ml_factory.exists(topic_name.path):
            return None
        own_policies = await self._own_topic_policies(topic_name)
        topic_clusters = own_policies.replication_clusters if own_policies is not None else None
        ml = await self.ml_factory.open(topic_name.path)
        topic = Topic(self, topic_name, ml)
        topic.topic_backlog_quotas = own_policies.backlog_quota_map if own_policies is not None else None
        topic.own_topic_policies = own_policies
        try:
            await topic.initialize(policies, topic_clusters)
        except BaseException:
            await asyncio.shield(ml.close())
            raise
        if self._closed:
            await topic.close()
            raise ServiceNotReadyError("the broker is shutting down")
        try:
            await self._check_still_owned(key)
        except ServiceNotReadyError:
            await asyncio.shield(topic.close())
            raise
        self._topics[key] = topic  # no await since the check: a bundle unload from now on finds the topic
        log.info("[%s] loaded (%d subscriptions, dedup %s)", key, len(topic.subscriptions),
                 topic.dedup.stats_status())
        return topic

    async def _check_still_owned(self, key: str) -> None:
        """Ownership again, once a topic is loaded and before it is registered. A load takes awaits (the
        managed ledger opens, cursors recover); the topic's bundle may have been split or unloaded meanwhile,
        and that unload only closes topics already registered. A topic registered after it would be served
        here while another broker owns it, its clients split between two copies (Pulsar checks again too)."""
        if not await self.ownership.is_owned_by_me(key):
            log.info("[%s] its bundle moved while the topic was loading; not serving it", key)
            raise ServiceNotReadyError(f"topic {key} moved while it was being loaded; look it up again")

    async def unload_topic(self, name: str) -> bool:
        """Closes the topic here: clients are told to reconnect (they look it up again), cursors flushed,
        the managed ledger closed. Returns False when the topic was not loaded."""
        key = str(parse_topic(name))
        running = self._unloading.get(key)
        if running is not None:
            await asyncio.shield(running)
            return True
        loading = self._loading.get(key)
        if loading is not None:
            try:
                await asyncio.shield(loading)
            except BrokerServiceError:
                return False
        topic = self._topics.get(key)
        if topic is None:
            return False
        task = asyncio.get_running_loop().create_task(self._unload(key, topic), name=f"unload {key}")
        self._unloading[key] = task
        try:
            await asyncio.shield(task)
        finally:
            if task.done():
                self._unloading.pop(key, None)
        return True

    async def _unload(self, key: str, topic: Topic) -> None:
        try:
            await topic.close()
        finally:
            if self._topics.get(key) is topic:
                del self._topics[key]
            self._unloading.pop(key, None)
            log.info("[%s] unloaded", key)

    async def delete_topic(self, name: str, *, force: bool = False) -> None:
        """Deletes a topic's storage, then its own topic-level policies, as Pulsar's ``Topic.delete`` does (a
        topic created again under the name starts without them). Without ``force`` refuses while clients are
        connected (TopicBusyError), and a refused or failed delete leaves the policies. A partition's policies
        are its partitioned topic's, removed when the partitioned topic is deleted; only any stored under the
        partition's own name go with it. Inactive-topic deletion comes here too. Policies live in the store
        every region shares, so a topic replicated to other regions keeps them: deleting it here deletes
        only this region's copy (as Pulsar keeps a topic's global policies when one cluster deletes it).

        Raises:
            TopicNotFoundError: no such topic.
            MetadataError: the data is gone but the policies could not be removed.
        """
        topic = await self.get_topic(name, create=False)
        if topic is None:
            raise TopicNotFoundError(f"topic {parse_topic(name)} does not exist")
        key = topic.name
        try:
            await topic.delete(force=force)
        finally:
            if self._topics.get(key) is topic and topic.state is not TopicState.ACTIVE:
                del self._topics[key]
        log.info("[%s] deleted", key)
        if set(getattr(topic, "replication_clusters", ())) <= {self.cluster_name}:  # non-persistent: none
            await self._remove_own_topic_policies(topic.topic_name)

    async def _remove_own_topic_policies(self, topic_name: TopicName) -> None:
        if self.configuration_store is None:
            return
        from config_store.errors import MetadataError as StoreError, NotFoundError

        try:
            await self.configuration_store.delete_topic_policies(
                topic_name.tenant, topic_name.namespace_portion, str(topic_name.domain), topic_name.local_name)
        except NotFoundError:
            return  # it had none
        except StoreError as exc:
            raise MetadataError(f"topic {topic_name} was deleted but its topic-level policies were not removed "
                                f"({exc}); remove them with DELETE on each policy") from exc
        log.info("[%s] removed its topic-level policies", topic_name)

    # --------------------------------------------------------------------------------- lookups

    async def partitions_of(self, topic_name: TopicName) -> int:
        """Partition count from the configuration store (0 for a non-partitioned topic or a partition)."""
        if self.configuration_store is None or topic_name.is_partition:
            return 0
        from config_store.errors import InvalidMetadataError, MetadataError as StoreError, NotFoundError

        try:
            versioned = await self.configuration_store.get_partitioned_topic(
                topic_name.tenant, topic_name.namespace_portion, str(topic_name.domain), topic_name.local_name)
        except (NotFoundError, InvalidMetadataError):
            return 0
        except StoreError as exc:
            raise MetadataError(f"reading partitioned-topic metadata of {topic_name} failed: {exc}") from exc
        return versioned.value

    async def topics_of_namespace(self, tenant: str, namespace: str, mode: int = Mode.PERSISTENT) -> list[str]:
        """Topics of ``tenant/namespace`` in the domains ``mode`` names (PERSISTENT, NON_PERSISTENT or ALL):
        persistent ones stored (in the region's ZooKeeper, whichever broker created them), those loaded here, and
        the partitions of partitioned topics (``topic_list.namespace_topic_names``). Non-persistent topics store
        nothing, so only those loaded on this broker (and partitioned ones' partitions) are known."""
        domains = {Mode.PERSISTENT: ("persistent",), Mode.NON_PERSISTENT: ("non-persistent",)}.get(
            mode, ("persistent", "non-persistent"))
        names: set[str] = set()
        if "persistent" in domains:
            prefix = f"{tenant}/{namespace}/persistent"
            stored = [n if n.count("/") == 3 else f"{prefix}/{n}" for n in await self.ml_factory.list(prefix)]
            names |= namespace_topic_names(tenant, namespace, "persistent", managed_ledgers=stored)
        for key, topic in self._topics.items():
            name = topic.topic_name
            if name.tenant == tenant and name.namespace_portion == namespace and str(name.domain) in domains:
                names.add(key)
        if self.configuration_store is not None:
            from config_store.errors import MetadataError as StoreError, NotFoundError

            try:
                for domain in domains:
                    counts: dict[str, int] = {}
                    for local in await self.configuration_store.list_partitioned_topics(tenant, namespace, domain):
                        try:
                            counts[local] = (await self.configuration_store.get_partitioned_topic(
                                tenant, namespace, domain, local)).value
                        except NotFoundError:
                            continue  # deleted since listed
                    names |= namespace_topic_names(tenant, namespace, domain, partitioned=counts)
            except StoreError as exc:
                log.warning("listing partitioned topics of %s/%s failed: %s", tenant, namespace, exc)
        return sorted(names)

    # --------------------------------------------------------------------------------- policies, periodic work

    async def _own_topic_policies(self, topic_name: TopicName):
        """The topic-level policies (a partition follows its partitioned topic), if any are set."""
        if self._topic_policies is None:
            return None
        base = topic_name.base if topic_name.is_partition else topic_name
        try:
            policies = await self._topic_policies.get(base.tenant, base.namespace_portion, str(base.domain),
                                                      base.local_name)
        except Exception as exc:
            raise MetadataError(f"reading the topic policies of {base} failed: {exc}") from exc
        return policies

    def _on_topic_policies(self, tenant: str, namespace: str, domain: str, topic: str, policies) -> None:
        clusters = policies.replication_clusters if policies is not None else None
        for loaded in list(self._topics.values()):
            name = loaded.topic_name
            base = name.base if name.is_partition else name
            if (base.tenant, base.namespace_portion, str(base.domain), base.local_name) == (tenant, namespace, domain,
                                                                                      topic) \
                    and loaded.state is TopicState.ACTIVE:
                loaded.topic_backlog_quotas = policies.backlog_quota_map if policies is not None else None
                loaded.own_topic_policies = policies
                delayed_policy.policies_changed(loaded)
                loaded.rate_limits.refresh()
                loaded.spawn(loaded.set_topic_replication_clusters(clusters), f"topic policies {loaded.name}")

    def _on_policies(self, tenant: str, namespace: str, policies) -> None:
        for topic in list(self._topics.values()):
            if topic.topic_name.tenant == tenant and topic.topic_name.namespace_portion == namespace \
                    and topic.state is TopicState.ACTIVE:
                topic.spawn(topic.apply_policies(policies), f"policies {topic.name}")

    async def _periodic_work(self) -> None:
        interval = self.config.stats_update_interval_s
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), interval)
                return
            except TimeoutError:
                pass
            self.publish_latency.rotate()  # the publish latency quantiles describe one stats period
            for topic in list(self._topics.values()):
                if self._stopping.is_set():
                    return
                try:
                    topic.tick()
                    await topic.check_message_ttl()
                except Exception:
                    log.exception("[%s] periodic work failed", topic.name)

    async def check_backlog_quotas(self) -> None:
        """Runs one backlog quota check over every loaded topic now (tests, admin)."""
        await self.backlog_quota_monitor.check_all()

    def update_stats(self) -> None:
        """Closes the current rate window of every topic, and the publish latency's period, now (tests, admin)."""
        self.publish_latency.rotate()
        for topic in self._topics.values():
            topic.tick()
