"""Topic ownership through namespace bundles, as Pulsar does it.

Theory of operation
-------------------
A namespace is cut into *bundles*: ranges of a 32-bit hash space. A topic belongs to the bundle whose
range holds ``crc32(complete topic name)`` (Pulsar hashes with Guava's CRC32 the same way). The boundaries
live in the namespace's policies (``"bundles": {"boundaries": ["0x00000000", ...], "numBundles": n}``);
a namespace without them gets the broker default (4 bundles), pinned into its policies by compare-and-set
the first time a broker needs them, so every broker agrees.
The bundle arithmetic itself is pure and lives in :mod:`broker.bundles`; the errors (each with the
answer a client gets) in :mod:`broker.ownership_errors`.

A bundle is served by exactly one broker: its owner holds the ephemeral node
``/namespace/<tenant>/<ns>/<bundle>`` in the region's ZooKeeper (``config_store.BrokerRegistry``). A
lookup for a topic:

* bundle owned (by anyone) -> Connect to the owner (authoritative), as Pulsar answers;
* owner record ``disabled`` (its owner is unloading it) -> :class:`ServiceUnitNotReadyError` (retriable);
* unowned -> choose the least-loaded live broker from the ``/brokers/*`` load reports
  (:func:`broker.load_balance.choose_broker`: lowest score over message rates and throughput, then
  fewest bundles, ties broken by a per-bundle hash, so equal brokers split bundles evenly); if that is
  this broker, or the request is *authoritative* (a redirected client: the broker that redirected it
  chose us), create the ephemeral node: winning the create is acquiring, losing it means someone else
  did, so read again; otherwise answer Redirect (authoritative) to the chosen broker, which acquires when
  the client asks it. A broker that wins the create then re-reads the namespace's boundaries from the
  configuration store (not its cache): if the bundle was split meanwhile, it lets go and answers "not
  ready", so a broker with stale boundaries never owns a range that overlaps the halves.

Advertised listeners. A lookup may name a listener (:mod:`broker.listeners`); the answer then carries the
owner's URLs for it, read from the ownership record (which holds the owner's listeners, as Pulsar's
``NamespaceEphemeralData`` does) or, for a redirect, from the chosen broker's registration. A broker
without that listener fails the lookup with :class:`~.ownership_errors.UnknownListenerError` (Pulsar:
``ServiceNotReady`` naming the listener), checked before this broker acquires anything for it.

Acquiring, splitting and unloading bundles, and losing them with the ZooKeeper session, are the half of
this class in :mod:`broker.bundle_claims` (:class:`~broker.bundle_claims.BundleClaims`, which it inherits).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import Any, Awaitable, Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge

from config_store import (ConfigurationStore, EphemeralRegistration, InvalidMetadataError, MetadataError,
                          MetadataStore, NotFoundError, Policies)
from config_store.brokers import AdvertisedListener, BrokerLoad, BrokerRegistration, BrokerRegistry, BundleStats
from magnetar.topic_name import TopicName

from . import metrics_names as names
from .bundle_claims import BundleClaims, OwnedBundle, OwnershipState, Unloader
from .bundles import NamespaceBundle, NamespaceBundles, bundles_data, default_boundaries, parse_bundles_data
from .load_balance import ResourceWeights, choose_broker
from .ownership_api import LookupResult, Ownership, listener_urls
from .ownership_errors import NamespaceNotFoundError, OwnershipError, ServiceUnitNotReadyError

log = logging.getLogger("broker.ownership")

LoadSource = Callable[[], BrokerLoad]


class BundleOwnership(BundleClaims, Ownership):
    """Namespace-bundle ownership in the region's ZooKeeper (see the module docstring).

    Lifecycle: construct, wire ``set_unloader`` / ``set_load_source``, ``await start(urls...)`` (registers
    ``/brokers/<broker_id>``), serve lookups, ``await close()`` (deregisters, unloads and releases every
    owned bundle; idempotent).

    Args:
        local_store: the region's metadata store (ownership and broker registrations).
        configuration: the global configuration store (namespace policies: bundle boundaries).
        broker_id: this broker's id under ``/brokers``.
        cluster: the region this broker serves.
        default_bundles: bundles of a namespace whose policies name none.
        load_report_interval_ms: how often the load report is refreshed when it changed.
        weights: how much each resource counts when placing a bundle by load.
        registry: where the ownership metrics go (a fresh one if None).
    """

    _ATTEMPTS_MAX = 8

    def __init__(self, *, local_store: MetadataStore, configuration: ConfigurationStore, broker_id: str,
                 cluster: str, default_bundles: int = 4, load_report_interval_ms: int = 5000,
                 weights: ResourceWeights = ResourceWeights(),
                 registry: Optional[CollectorRegistry] = None) -> None:
        default_boundaries(default_bundles)  # validates
        self.broker_id = broker_id
        self.cluster = cluster
        self.instance = uuid.uuid4().hex
        self.default_bundles = default_bundles
        self.load_report_interval_s = load_report_interval_ms / 1000
        self.weights = weights
        self.pulsar_url = ""
        self.pulsar_url_tls = ""
        self.http_url = ""
        self.http_url_tls = ""
        self.listeners: tuple[AdvertisedListener, ...] = ()
        self.protocols: tuple[tuple[str, str], ...] = ()
        self._store = local_store
        self._configuration = configuration
        self._registry = BrokerRegistry(local_store)
        self._policies = None
        self._bundles: dict[tuple[str, str], NamespaceBundles] = {}
        self._owned: dict[NamespaceBundle, OwnedBundle] = {}
        self._locks: dict[NamespaceBundle, asyncio.Lock] = {}
        self._registration: Optional[EphemeralRegistration] = None
        self._published: Optional[BrokerLoad] = None
        self._unloader: Optional[Unloader] = None
        self._load_source: Optional[LoadSource] = None
        self._tasks: set[asyncio.Task] = set()
        self._state = OwnershipState.NEW
        registry = registry if registry is not None else CollectorRegistry()
        self._m_owned = Gauge(names.OWNED_BUNDLES, "Namespace bundles this broker owns", registry=registry)
        self._m_owned.set_function(lambda: sum(1 for o in self._owned.values() if not o.releasing))
        self._m_lookups = Counter(names.LOOKUPS, "Topic lookups answered, by answer", ["answer"], registry=registry)
        self._m_released = Counter(names.BUNDLES_RELEASED, "Bundles released, by reason", ["reason"],
                                   registry=registry)
        self._m_acquired = Counter(names.BUNDLES_ACQUIRED, "Bundles acquired", registry=registry)

    # ------------------------------------------------------------------------------------------ wiring

    def set_unloader(self, unloader: Unloader) -> None:
        """``await unloader(bundle)`` closes every topic of ``bundle`` this broker serves (clients are
        told to reconnect); called when a bundle is unloaded or lost."""
        self._unloader = unloader

    def set_load_source(self, source: LoadSource) -> None:
        """``source()`` measures this broker's load (topics, producers, ...); bundles are counted here."""
        self._load_source = source

    @property
    def registry(self) -> BrokerRegistry:
        return self._registry

    @property
    def started(self) -> bool:
        return self._state is OwnershipState.STARTED

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self, *, pulsar_url: str, http_url: str, pulsar_url_tls: str = "", http_url_tls: str = "",
                    listeners: tuple[AdvertisedListener, ...] = (),
                    protocols: tuple[tuple[str, str], ...] = ()) -> None:
        """Publishes ``/brokers/<broker_id>`` (with ``listeners``, this broker's advertised listeners, and
        ``protocols``, the other protocols' addresses such as ``kafka``) and starts serving lookups. Idempotent."""
        if self._state is OwnershipState.STARTED:
            return
        if self._state is not OwnershipState.NEW:
            raise OwnershipError("a closed BundleOwnership cannot be restarted")
        self.pulsar_url, self.http_url = pulsar_url, http_url
        self.pulsar_url_tls, self.http_url_tls = pulsar_url_tls, http_url_tls
        self.listeners = tuple(listeners)
        self.protocols = tuple(protocols)
        self._policies = self._configuration.policies_cache()
        self._policies.add_listener(self._on_policies)
        self._store.add_session_listener(self._on_session)
        load = self._measure()
        self._registration = await self._registry.register(self._registration_of(load))
        self._published = load
        self._state = OwnershipState.STARTED
        self._spawn(self._report_loop(), "load-report")
        log.info("broker %s registered (%s, %s), instance %s", self.broker_id, pulsar_url, http_url, self.instance)

    async def close(self) -> None:
        """Deregisters, unloads and releases every owned bundle, stops background work. Idempotent."""
        if self._state in (OwnershipState.CLOSING, OwnershipState.CLOSED):
            return
        if self._state is OwnershipState.NEW:
            self._state = OwnershipState.CLOSED
            return
        self._state = OwnershipState.CLOSING
        if self._registration is not None:
            try:
                await self._registration.close()  # nobody assigns us a bundle from now on
            except MetadataError as e:
                log.warning("could not remove /brokers/%s: %s (it goes with the session)", self.broker_id, e)
        for _ in range(3):
            owned = [b for b, o in self._owned.items() if not o.releasing]
            if not owned:
                break
            log.info("releasing %d bundle(s): %s", len(owned), ", ".join(str(b) for b in sorted(owned)))
            await asyncio.gather(*(self._unload(b, reason="shutdown") for b in owned))
        self._store.remove_session_listener(self._on_session)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._policies is not None:
            self._policies.close()
        self._state = OwnershipState.CLOSED

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=f"ownership:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("ownership task %s died", task.get_name(), exc_info=task.exception())

    # ------------------------------------------------------------------------------------------ bundles

    async def namespace_bundles(self, tenant: str, namespace: str) -> NamespaceBundles:
        """The namespace's bundles (pinning the default boundaries into its policies if it has none).

        Raises:
            NamespaceNotFoundError: the namespace does not exist.
        """
        key = (tenant, namespace)
        cached = self._bundles.get(key)
        if cached is not None:
            return cached
        if self._state is OwnershipState.CLOSED or self._policies is None:
            raise ServiceUnitNotReadyError("the broker is not serving lookups" + (
                " any more" if self._state is OwnershipState.CLOSED else " yet"))
        try:
            policies = await self._policies.get(tenant, namespace)
        except InvalidMetadataError as e:
            raise NamespaceNotFoundError(f"namespace {tenant}/{namespace}: {e}") from None
        except MetadataError as e:
            raise ServiceUnitNotReadyError(f"namespace {tenant}/{namespace}: policies unavailable: {e}") from None
        if policies is None:
            raise NamespaceNotFoundError(f"namespace {tenant}/{namespace} does not exist")
        if policies.bundles is None:
            policies = await self._pin_default_bundles(tenant, namespace)
        try:
            bundles = NamespaceBundles(tenant, namespace, parse_bundles_data(policies.bundles))
        except ValueError as e:
            raise OwnershipError(f"namespace {tenant}/{namespace}: unusable bundles in its policies: {e}") from None
        self._bundles[key] = bundles
        return bundles

    async def _pin_default_bundles(self, tenant: str, namespace: str) -> Policies:
        def pin(p: Policies) -> Policies:
            if p.bundles is None:
                p.bundles = bundles_data(default_boundaries(self.default_bundles))
            return p

        try:
            versioned = await self._configuration.update_namespace_policies(tenant, namespace, pin)
        except NotFoundError:
            raise NamespaceNotFoundError(f"namespace {tenant}/{namespace} does not exist") from None
        except MetadataError as e:
            raise ServiceUnitNotReadyError(f"namespace {tenant}/{namespace}: cannot pin its bundles: {e}") from None
        log.info("namespace %s/%s had no bundles: pinned %s", tenant, namespace, versioned.value.bundles)
        return versioned.value

    async def bundle_of(self, topic: str | TopicName) -> NamespaceBundle:
        """The bundle ``topic`` belongs to (InvalidTopicNameError, NamespaceNotFoundError)."""
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        bundles = await self.namespace_bundles(name.tenant, name.namespace_portion)
        return bundles.for_topic(name)

    def cached_bundle_of(self, topic: str | TopicName) -> NamespaceBundle | None:
        """The bundle of ``topic`` if its namespace's bundles are known here (no I/O), else None."""
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        bundles = self._bundles.get((name.tenant, name.namespace_portion))
        return None if bundles is None else bundles.for_topic(name)

    def owned_bundles(self) -> list[NamespaceBundle]:
        """The bundles this broker serves right now (not those being released), sorted."""
        return sorted(b for b, o in self._owned.items() if not o.releasing)

    def _on_policies(self, tenant: str, namespace: str, policies: Policies | None) -> None:
        self._bundles.pop((tenant, namespace), None)
        if policies is None:
            doomed = [b for b in self._owned if b.tenant == tenant and b.namespace == namespace]
            for bundle in doomed:
                self._spawn(self._unload(bundle, reason="namespace_deleted"), f"unload:{bundle}")

    # ------------------------------------------------------------------------------------------ Ownership

    async def is_owned_by_me(self, topic: str) -> bool:
        if self._state is not OwnershipState.STARTED:
            return False
        try:
            bundle = await self.bundle_of(topic)
        except (NamespaceNotFoundError, ServiceUnitNotReadyError):
            return False
        owned = self._owned.get(bundle)
        return owned is not None and not owned.releasing

    async def lookup(self, topic: str, *, authoritative: bool = False, listener_name: str = "") -> LookupResult:
        """Where ``topic`` is served (see the module docstring), with the server's URLs for
        ``listener_name`` ("" = its default ones); acquires its bundle when this broker is the one to serve it.

        Raises:
            InvalidTopicNameError, NamespaceNotFoundError, ServiceUnitNotReadyError (retriable),
            UnknownListenerError.
        """
        if self._state in (OwnershipState.NEW, OwnershipState.CLOSED):
            raise ServiceUnitNotReadyError("the broker is not serving lookups" + (
                " any more" if self._state is OwnershipState.CLOSED else " yet"))
        try:
            result = await self._lookup(await self.bundle_of(topic), authoritative, listener_name)
        except OwnershipError:
            self._m_lookups.labels("error").inc()
            raise
        self._m_lookups.labels("redirect" if result.redirect else "connect").inc()
        return result

    async def lookup_bundle(self, bundle: NamespaceBundle, *, authoritative: bool = False,
                            listener_name: str = "") -> LookupResult:
        """Like :meth:`lookup`, for a bundle rather than a topic (admin calls on a bundle at its owner)."""
        if self._state in (OwnershipState.NEW, OwnershipState.CLOSED):
            raise ServiceUnitNotReadyError("the broker is not serving lookups" + (
                " any more" if self._state is OwnershipState.CLOSED else " yet"))
        return await self._lookup(bundle, authoritative, listener_name)

    async def _lookup(self, bundle: NamespaceBundle, authoritative: bool, listener_name: str) -> LookupResult:
        for _ in range(self._ATTEMPTS_MAX):
            owned = self._owned.get(bundle)
            if owned is not None:
                if owned.releasing:
                    raise ServiceUnitNotReadyError(f"bundle {bundle} is being unloaded; retry")
                return self._self_result(listener_name)
            try:
                current = await self._registry.get_owner(bundle.tenant, bundle.namespace, bundle.name)
            except MetadataError as e:
                raise ServiceUnitNotReadyError(f"bundle {bundle}: ownership unavailable: {e}") from None
            if current is not None:
                owner = current.value
                if owner.broker_id == self.broker_id:
                    if owner.instance == self.instance:
                        # Our own node: either an acquisition finishing right now, or one being released.
                        async with self._lock(bundle):
                            if bundle in self._owned:
                                continue
                        raise ServiceUnitNotReadyError(f"bundle {bundle} is being released; retry")
                    await self._drop_stale(bundle, current.version, owner)
                    continue
                if owner.disabled:
                    raise ServiceUnitNotReadyError(f"bundle {bundle} is being unloaded by {owner.broker_id}; retry")
                url, url_tls = listener_urls(owner.advertised_listeners, listener_name,
                                             default=(owner.native_url, owner.native_url_tls), broker=owner.broker_id)
                return LookupResult(is_self=False, broker_service_url=url, broker_service_url_tls=url_tls,
                                    http_url=owner.http_url, authoritative=True, redirect=False,
                                    http_url_tls=owner.http_url_tls)
            # Unowned: assign it.
            if self._state is not OwnershipState.STARTED:
                target = await self._choose_broker(bundle, exclude_self=True)
            elif authoritative:
                target = None
            else:
                target = await self._choose_broker(bundle, exclude_self=False)
            if target is None:
                self._self_result(listener_name)  # an unknown listener fails before anything is acquired
                if await self._acquire(bundle):
                    return self._self_result(listener_name)
                continue  # lost the race or closing: read again
            url, url_tls = listener_urls(target.advertised_listeners, listener_name,
                                         default=(target.pulsar_service_url, target.pulsar_service_url_tls),
                                         broker=target.broker_id)
            return LookupResult(is_self=False, broker_service_url=url, broker_service_url_tls=url_tls,
                                http_url=target.web_service_url, authoritative=True, redirect=True,
                                http_url_tls=target.web_service_url_tls)
        raise ServiceUnitNotReadyError(f"bundle {bundle}: ownership kept changing; retry")

    def _self_result(self, listener_name: str = "") -> LookupResult:
        url, url_tls = listener_urls(self.listeners, listener_name, default=(self.pulsar_url, self.pulsar_url_tls),
                                     broker=self.broker_id)
        return LookupResult(is_self=True, broker_service_url=url, broker_service_url_tls=url_tls,
                            http_url=self.http_url, authoritative=True, redirect=False, http_url_tls=self.http_url_tls)

    async def _choose_broker(self, bundle: NamespaceBundle, *, exclude_self: bool) -> BrokerRegistration | None:
        """The least-loaded live broker of this region; None means this broker."""
        try:
            brokers = await self._registry.list_brokers()
        except MetadataError as e:
            raise ServiceUnitNotReadyError(f"cannot list the live brokers: {e}") from None
        loads: dict[str, BrokerLoad] = {}
        for broker_id, reg in brokers.items():
            if reg.cluster and reg.cluster != self.cluster:
                continue
            if broker_id == self.broker_id:
                continue
            loads[broker_id] = reg.load
        if not exclude_self and self._state is OwnershipState.STARTED:
            loads[self.broker_id] = self._measure()
        if not loads:
            raise ServiceUnitNotReadyError(f"no live broker can serve bundle {bundle}; retry")
        chosen = choose_broker(loads, bundle, weights=self.weights)
        return None if chosen == self.broker_id else brokers[chosen]

    # ------------------------------------------------------------------------------------------ load

    def current_load(self) -> BrokerLoad:
        """This broker's load report as it would be published now."""
        return self._measure()

    def _measure(self) -> BrokerLoad:
        load = BrokerLoad()
        if self._load_source is not None:
            try:
                load = self._load_source()
            except Exception:
                log.exception("load measurement failed")
        owned = {str(b) for b, o in self._owned.items() if not o.releasing}
        stats = {s.bundle: s for s in load.bundle_stats if s.bundle in owned}
        stats.update({key: BundleStats(bundle=key) for key in owned - stats.keys()})
        return dataclasses.replace(load, num_bundles=len(owned),
                                   bundle_stats=tuple(sorted(stats.values(), key=lambda s: s.bundle)))

    def _registration_of(self, load: BrokerLoad) -> BrokerRegistration:
        return BrokerRegistration(
            broker_id=self.broker_id, pulsar_service_url=self.pulsar_url, web_service_url=self.http_url,
            cluster=self.cluster, instance=self.instance, pulsar_service_url_tls=self.pulsar_url_tls,
            web_service_url_tls=self.http_url_tls, advertised_listeners=self.listeners,
            protocols=self.protocols, load=load,
            last_update_ms=int(time.time() * 1000))

    async def publish_load(self, *, force: bool = False) -> None:
        """Writes the load report to ``/brokers/<id>`` if it changed (or ``force``)."""
        if self._registration is None or self._state is not OwnershipState.STARTED:
            return
        for key in {(b.tenant, b.namespace) for b in self._owned} - self._bundles.keys():
            try:  # topics are counted per bundle only where the boundaries are cached
                await self.namespace_bundles(*key)
            except OwnershipError:
                pass
        load = self._measure()
        if load == self._published and not force:
            return
        try:
            await self._registration.update(self._registration_of(load).to_json())
            self._published = load
        except MetadataError as e:
            log.warning("could not publish the load report: %s", e)

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.load_report_interval_s)
            await self.publish_load()
