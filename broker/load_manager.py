"""The broker's load-balancing background work: automatic bundle splits and load shedding.

Theory of operation
-------------------
* **Automatic split** (every broker, its own bundles): every ``split_interval_s`` the broker measures its
  owned bundles (:meth:`BundleOwnership.current_load`) and splits, with ``range_equally_divide``, each one
  :func:`broker.load_balance.bundles_to_split` names (over a ``loadBalancerNamespaceBundleMax*`` threshold,
  namespace under its maximum bundles); with ``auto_unload`` the halves are unloaded so that lookups place
  them by load, as Pulsar's ``loadBalancerAutoUnloadSplitBundlesEnabled``.
* **Shedding** (one broker: the leader): Pulsar elects a leader broker to shed load. Here the leader is
  whoever holds the ephemeral node ``/loadbalance/leader`` (Pulsar's path) in the region's ZooKeeper; each
  broker tries to create it on every shedding tick, so when the leader dies (its session ends, the node
  goes) another takes over within one interval. The leader reads every live broker's load report, asks
  :func:`broker.load_balance.bundles_to_shed` (ThresholdShedder) which bundles to move, and unloads each
  at its owner through the admin API (``PUT .../{bundle}/unload``; the owner closes the topics, clients
  look up again and the lookup places the bundle on a less loaded broker). Shed bundles are remembered for
  the grace period and not chosen again meanwhile; that memory lives in the leader only (a new leader
  starts without it, as in Pulsar).

Lifecycle: ``await start()`` after ownership started; ``await close()`` (idempotent) cancels the tasks,
gives up the leadership and closes the HTTP client. A failing round is logged and the next one runs.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

import aiohttp

from config_store import ConfigurationStore, MetadataError, MetadataStore, NodeExistsError
from config_store.brokers import BrokerLoad

from .bundle_split import split_bundle
from .load_balance import ResourceWeights, SplitThresholds, bundles_to_shed, bundles_to_split, namespace_of
from .ownership import BundleOwnership
from .ownership_errors import OwnershipError

__all__ = ["LEADER_PATH", "LoadManager", "LoadManagerSettings"]

log = logging.getLogger("broker.load_manager")

LEADER_PATH = "/loadbalance/leader"
_MIB = 1024 * 1024


class _State(enum.Enum):
    NEW = "new"
    STARTED = "started"
    CLOSED = "closed"


@dataclass(frozen=True)
class LoadManagerSettings:
    """What the load manager does and how often (see :class:`broker.config.BrokerConfig` for each)."""

    auto_split_enabled: bool = True
    auto_unload_split_bundles: bool = True
    split_interval_s: float = 60.0
    thresholds: SplitThresholds = SplitThresholds()
    max_bundles: int = 128
    shedding_enabled: bool = True
    shedding_interval_s: float = 60.0
    shedding_grace_period_s: float = 1800.0
    shedding_threshold: float = 0.10
    history_fraction: float = 0.9
    min_unload_throughput_bytes_s: float = 10.0 * _MIB
    weights: ResourceWeights = field(default_factory=ResourceWeights)


class LoadManager:
    """Automatic splits of this broker's bundles and, while it leads, load shedding (module docstring).

    Args:
        ownership: this broker's bundle ownership (load reports, splits, unloads).
        configuration: the global configuration store (namespace boundaries).
        local_store: the region's ZooKeeper (leader election, broker load reports).
        settings: intervals and thresholds.
        clock: monotonic seconds (tests may swap it).
        http_session: makes the HTTP client that asks other brokers to unload bundles (the broker's own
            credentials: ``broker/client_credentials.py``); default: a plain one.
        prefer_tls: call other brokers at their ``https://`` URL when they registered one.
    """

    def __init__(self, *, ownership: BundleOwnership, configuration: ConfigurationStore, local_store: MetadataStore,
                 settings: LoadManagerSettings = LoadManagerSettings(),
                 clock: Callable[[], float] = time.monotonic,
                 http_session: Optional[Callable[..., aiohttp.ClientSession]] = None, prefer_tls: bool = False) -> None:
        self._http_session = http_session
        self._prefer_tls = prefer_tls
        self.ownership = ownership
        self.configuration = configuration
        self.settings = settings
        self._store = local_store
        self._clock = clock
        self._history: dict[str, float] = {}
        self._recently_unloaded: dict[str, float] = {}
        self._leader_version: Optional[int] = None  # of our /loadbalance/leader node while we lead
        self._tasks: list[asyncio.Task] = []
        self._http: Optional[aiohttp.ClientSession] = None
        self._state = _State.NEW
        self.splits = 0
        self.sheds = 0

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Starts the periodic tasks the settings enable. Idempotent."""
        if self._state is not _State.NEW:
            return
        self._state = _State.STARTED
        s = self.settings
        if s.auto_split_enabled:
            self._tasks.append(self._spawn(self._every(s.split_interval_s, self.split_round), "auto-split"))
        if s.shedding_enabled:
            self._http = (self._http_session(timeout_s=30.0) if self._http_session is not None
                          else aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)))
            self._tasks.append(self._spawn(self._every(s.shedding_interval_s, self.shedding_round), "shedding"))

    async def close(self) -> None:
        """Stops the tasks, gives up the leadership, closes the HTTP client. Idempotent."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self._resign()
        if self._http is not None:
            await self._http.close()

    async def __aenter__(self) -> "LoadManager":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=f"load-manager:{name}")
        task.add_done_callback(self._task_done)
        return task

    @staticmethod
    def _task_done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("load manager task %s died", task.get_name(), exc_info=task.exception())

    async def _every(self, interval_s: float, round_fn: Callable[[], Awaitable[Any]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if not self.ownership.started:
                continue
            try:
                await round_fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("load balancing round %s failed; the next one runs in %.1fs",
                              getattr(round_fn, "__name__", "?"), interval_s)

    # ------------------------------------------------------------------------------------------ splitting

    async def split_round(self) -> int:
        """Splits the owned bundles over a threshold; returns how many were split."""
        load = self.ownership.current_load()
        counts: dict[str, int] = {}
        for ns in {namespace_of(s.bundle) for s in load.bundle_stats}:
            tenant, namespace = ns.split("/", 1)
            try:
                counts[ns] = len((await self.ownership.namespace_bundles(tenant, namespace)).bundles)
            except OwnershipError:
                counts[ns] = self.settings.max_bundles  # unknown: do not split it this round
        done = 0
        for key, reason in bundles_to_split(load.bundle_stats, bundle_counts=counts,
                                            thresholds=self.settings.thresholds, max_bundles=self.settings.max_bundles):
            tenant, namespace, name = key.split("/", 2)
            try:
                bundle = (await self.ownership.namespace_bundles(tenant, namespace)).get(name)
                if bundle is None:
                    continue
                log.info("bundle %s is over a threshold (%s): splitting it", key, reason)
                await split_bundle(self.ownership, self.configuration, bundle,
                                   unload=self.settings.auto_unload_split_bundles,
                                   max_bundles=self.settings.max_bundles)
                done += 1
                self.splits += 1
            except OwnershipError as e:
                log.info("bundle %s: not split: %s", key, e)
        return done

    # ------------------------------------------------------------------------------------------ shedding

    @property
    def is_leader(self) -> bool:
        return self._leader_version is not None

    async def _elect(self) -> bool:
        """True if this broker holds ``/loadbalance/leader`` (creating it when nobody does)."""
        me = self.ownership
        try:
            current = await self._store.get(LEADER_PATH)
            if current is None:
                data = json.dumps({"brokerId": me.broker_id, "serviceUrl": me.http_url, "instance": me.instance})
                try:
                    await self._store.create(LEADER_PATH, data.encode(), ephemeral=True, make_parents=True)
                except NodeExistsError:
                    self._leader_version = None
                    return False
                log.info("this broker is now the load-balancing leader")
                current = await self._store.get(LEADER_PATH)
                if current is None:
                    self._leader_version = None
                    return False
            holder = json.loads(current.value)
        except (MetadataError, ValueError) as e:
            log.warning("leader election: %s", e)
            self._leader_version = None
            return False
        mine = isinstance(holder, dict) and holder.get("instance") == me.instance
        self._leader_version = current.version if mine else None
        return mine

    async def _resign(self) -> None:
        if self._leader_version is None:
            return
        try:
            await self._store.delete(LEADER_PATH, expected_version=self._leader_version)
        except MetadataError:
            pass  # gone already, or goes with the session
        self._leader_version = None

    async def leader(self) -> Optional[dict]:
        """Who leads (``brokerId``, ``serviceUrl``), or None."""
        current = await self._store.get(LEADER_PATH)
        if current is None:
            return None
        holder = json.loads(current.value)
        return {"brokerId": holder.get("brokerId", ""), "serviceUrl": holder.get("serviceUrl", "")}

    async def shedding_round(self) -> dict[str, list[str]]:
        """If this broker leads: unloads what the ThresholdShedder picks; returns it per broker."""
        if not await self._elect():
            return {}
        now = self._clock()
        grace_s = self.settings.shedding_grace_period_s
        self._recently_unloaded = {b: t for b, t in self._recently_unloaded.items() if now - t < grace_s}
        brokers = await self.ownership.registry.list_brokers()
        regs = {b: r for b, r in brokers.items() if not r.cluster or r.cluster == self.ownership.cluster}
        loads: dict[str, BrokerLoad] = {b: r.load for b, r in regs.items()}
        if self.ownership.broker_id in loads:
            loads[self.ownership.broker_id] = self.ownership.current_load()
        self._history = {b: v for b, v in self._history.items() if b in loads}
        s = self.settings
        chosen, self._history = bundles_to_shed(
            loads, history=self._history, threshold=s.shedding_threshold, history_fraction=s.history_fraction,
            min_throughput_bytes_s=s.min_unload_throughput_bytes_s, recently_unloaded=self._recently_unloaded,
            weights=s.weights)
        for broker_id, bundles in chosen.items():
            for key in bundles:
                log.info("shedding bundle %s off broker %s (scores: %s)", key, broker_id,
                         ", ".join(f"{b}={v:.2f}" for b, v in sorted(self._history.items())))
                reg = regs[broker_id]
                url = reg.web_service_url_tls if self._prefer_tls and reg.web_service_url_tls else reg.web_service_url
                if await self._unload_at(broker_id, url, key):
                    self._recently_unloaded[key] = self._clock()
                    self.sheds += 1
        return chosen

    async def _unload_at(self, broker_id: str, http_url: str, key: str) -> bool:
        tenant, namespace, name = key.split("/", 2)
        if broker_id == self.ownership.broker_id:
            bundle = (await self.ownership.namespace_bundles(tenant, namespace)).get(name)
            return bundle is not None and await self.ownership.unload(bundle)
        if self._http is None or not http_url:
            return False
        url = f"{http_url.rstrip('/')}/admin/v2/namespaces/{tenant}/{namespace}/{name}/unload"
        try:
            async with self._http.put(url) as response:
                if response.status < 300:
                    return True
                log.warning("shedding %s: %s answered %d %s", key, broker_id, response.status,
                            (await response.text())[:200])
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            log.warning("shedding %s: cannot reach %s: %s", key, broker_id, e)
        return False
