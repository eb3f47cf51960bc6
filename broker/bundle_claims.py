"""Claiming and letting go of namespace bundles: this broker's ownership nodes
``/namespace/<tenant>/<ns>/<bundle>`` in the region's ZooKeeper.

The half of :class:`broker.ownership.BundleOwnership` that creates and deletes those nodes (the theory of
operation of lookups is in :mod:`broker.ownership`): acquiring a bundle a lookup assigns here, splitting
one, unloading one, and forgetting them all when the ZooKeeper session is lost. :class:`BundleClaims` is a
part of ``BundleOwnership`` (which inherits it), not a class of its own: it works on the ownership's owned
map, broker registry, configuration store, lifecycle state, unloader and metrics.

Splitting a bundle (:meth:`BundleClaims.split`, driven by :mod:`broker.bundle_split`), as Pulsar's
``splitAndOwnBundle``: the owner acquires both halves (nobody looks them up yet: they are not in the
boundaries), commits the new boundaries by compare-and-set, switches its own bundle cache to them, then
deletes the old bundle's node. Its topics stay loaded: they now belong to halves it owns. With ``unload``
the halves are then unloaded like any bundle, so the next lookups place them by load.

Unloading a bundle (admin, shutdown, namespace deletion) follows Pulsar's order: mark the owner record
disabled (lookups answer "not ready" instead of sending clients here), unload its topics (clients are
disconnected and look up again), then delete the node. On shutdown the broker first removes its
``/brokers/<id>`` registration so nobody assigns it new bundles, then unloads everything it owns.

Losing ownership. When the ZooKeeper session is LOST every ephemeral node of this broker is gone, so the
owned map is cleared at once (``is_owned_by_me`` turns False before any other coroutine runs) and the
topics of those bundles are unloaded through the unloader the process wires in; the next lookup assigns
the bundles again (possibly here). A broker that dies loses its nodes with its session; the next owner's
managed-ledger open fences the old ledgers.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from config_store import BadVersionError, MetadataError, NotFoundError, SessionEvent
from config_store.brokers import BundleOwner

from .bundles import NamespaceBundle, NamespaceBundles, default_boundaries, parse_bundles_data
from .ownership_errors import ServiceUnitNotReadyError

__all__ = ["BundleClaims", "OwnedBundle", "OwnershipState", "SplitCommit", "Unloader"]

log = logging.getLogger("broker.ownership")


class OwnershipState(enum.Enum):
    """The lifecycle of a :class:`broker.ownership.BundleOwnership`."""

    NEW = "new"
    STARTED = "started"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass
class OwnedBundle:
    """A bundle this broker holds the ownership node of."""

    bundle: NamespaceBundle
    version: int  # of our ownership node, for compare-and-set
    acquired_at_s: float
    releasing: bool = False
    splitting: bool = False


Unloader = Callable[[NamespaceBundle], Awaitable[Any]]
SplitCommit = Callable[[], Awaitable[list[int]]]


class BundleClaims:
    """Acquiring, splitting, unloading and losing bundles, for :class:`broker.ownership.BundleOwnership`
    (see the module docstring)."""

    _RELEASE_ATTEMPTS_MAX = 5

    # ------------------------------------------------------------------------------------------ acquiring

    def _lock(self, bundle: NamespaceBundle) -> asyncio.Lock:
        lock = self._locks.get(bundle)
        if lock is None:
            lock = self._locks[bundle] = asyncio.Lock()
        return lock

    async def _acquire(self, bundle: NamespaceBundle, *, verify: bool = True) -> bool:
        async with self._lock(bundle):
            if bundle in self._owned:
                return not self._owned[bundle].releasing
            if self._state is not OwnershipState.STARTED:
                return False
            owner = BundleOwner(broker_id=self.broker_id, native_url=self.pulsar_url, http_url=self.http_url,
                                instance=self.instance, native_url_tls=self.pulsar_url_tls,
                                http_url_tls=self.http_url_tls, advertised_listeners=self.listeners)
            try:
                won = await self._registry.try_acquire(bundle.tenant, bundle.namespace, bundle.name, owner)
            except MetadataError as e:
                raise ServiceUnitNotReadyError(f"bundle {bundle}: cannot acquire: {e}") from None
            if not won:
                return False
            if verify:
                await self._verify_or_let_go(bundle)
            self._owned[bundle] = OwnedBundle(bundle, version=0, acquired_at_s=time.monotonic())
        self._m_acquired.inc()
        log.info("acquired bundle %s", bundle)
        if self._state is not OwnershipState.STARTED:  # close() began while we were creating the node
            await self._unload(bundle, reason="shutdown")
            return False
        await self.publish_load()
        return True

    async def _still_a_bundle(self, bundle: NamespaceBundle) -> bool:
        """Whether ``bundle`` is one of its namespace's bundles in the configuration store right now (read
        past the cache: a split elsewhere may not have reached our watch yet)."""
        try:
            policies = (await self._configuration.get_namespace_policies(bundle.tenant, bundle.namespace)).value
            bounds = (parse_bundles_data(policies.bundles) if policies.bundles is not None
                      else default_boundaries(self.default_bundles))
        except NotFoundError:
            return False
        except (MetadataError, ValueError) as e:
            raise ServiceUnitNotReadyError(f"bundle {bundle}: cannot check the namespace's bundles: {e}") from None
        return NamespaceBundles(bundle.tenant, bundle.namespace, bounds).get(bundle.name) is not None

    async def _verify_or_let_go(self, bundle: NamespaceBundle) -> None:
        """After winning ``bundle``'s node: keeps it only if the bundle still exists (see the module
        docstring); otherwise deletes the node again and raises ServiceUnitNotReadyError."""
        try:
            if await self._still_a_bundle(bundle):
                return
            reason = f"bundle {bundle} was split; look up again"
        except ServiceUnitNotReadyError as e:
            reason = str(e)
        self._bundles.pop((bundle.tenant, bundle.namespace), None)
        try:
            await self._registry.release(bundle.tenant, bundle.namespace, bundle.name, expected_version=0)
        except MetadataError as e:
            log.warning("bundle %s: could not delete the node just created: %s (it goes with our session)", bundle, e)
        raise ServiceUnitNotReadyError(reason)

    async def _drop_stale(self, bundle: NamespaceBundle, version: int, owner: BundleOwner) -> None:
        """Deletes an ownership node left by an earlier incarnation of this broker (same id, another
        instance: its session has not expired yet, but that process is gone)."""
        log.info("bundle %s: removing the ownership node of our previous instance %s", bundle, owner.instance)
        try:
            await self._registry.release(bundle.tenant, bundle.namespace, bundle.name, expected_version=version)
        except BadVersionError:
            pass  # changed meanwhile: the caller reads it again
        except MetadataError as e:
            raise ServiceUnitNotReadyError(f"bundle {bundle}: cannot remove a stale owner: {e}") from None

    # ------------------------------------------------------------------------------------------ unloading

    async def unload(self, bundle: NamespaceBundle) -> bool:
        """Unloads ``bundle`` if this broker owns it: its topics are closed (clients reconnect and look
        up again) and the ownership is released. False if this broker did not own it."""
        return await self._unload(bundle, reason="unload")

    async def split(self, bundle: NamespaceBundle, point: int, *, commit: SplitCommit,
                    unload: bool) -> tuple[NamespaceBundle, NamespaceBundle]:
        """Splits ``bundle`` (owned here) at hash ``point`` (see the module docstring).

        ``await commit()`` writes the new boundaries to the namespace's policies (compare-and-set) and
        returns them; if it raises, the halves are let go and ``bundle`` stays as it was (unless the
        boundaries did change, which is checked).

        Raises:
            ServiceUnitNotReadyError: ``bundle`` is not served here, is moving, or a half is owned.
        """
        owned = self._owned.get(bundle)
        if owned is None or owned.releasing or owned.splitting or self._state is not OwnershipState.STARTED:
            raise ServiceUnitNotReadyError(f"bundle {bundle} is not served by this broker right now; retry")
        halves = (NamespaceBundle(bundle.tenant, bundle.namespace, bundle.lower, point),
                  NamespaceBundle(bundle.tenant, bundle.namespace, point, bundle.upper))
        owned.splitting = True
        adopted: list[NamespaceBundle] = []
        try:
            for half in halves:
                if not await self._acquire(half, verify=False):
                    raise ServiceUnitNotReadyError(f"bundle {half} is owned elsewhere; cannot split {bundle}")
                adopted.append(half)
            boundaries = await commit()
        except BaseException:
            landed = False
            if adopted:
                try:
                    landed = not await self._still_a_bundle(bundle)
                except ServiceUnitNotReadyError:
                    pass
            if not landed:
                owned.splitting = False
                for half in adopted:  # no topic maps to a half yet: this only deletes its node
                    await self._unload(half, reason="split_failed")
                raise
            boundaries = None
            log.warning("bundle %s: the split's answer was lost but the new boundaries are stored", bundle)
        key = (bundle.tenant, bundle.namespace)
        if boundaries is not None:
            self._bundles[key] = NamespaceBundles(bundle.tenant, bundle.namespace, boundaries)
        else:
            self._bundles.pop(key, None)
        owned.releasing = True
        try:
            await self._release_node(owned)
        finally:
            if self._owned.get(bundle) is owned:
                del self._owned[bundle]
            self._locks.pop(bundle, None)
        self._m_released.labels("split").inc()
        log.info("split bundle %s into %s and %s%s", bundle, halves[0].name, halves[1].name,
                 "; unloading both" if unload else "")
        if unload:
            if boundaries is None:
                await self.namespace_bundles(*key)
            await asyncio.gather(*(self._unload(half, reason="split") for half in halves))
        else:
            await self.publish_load()
        return halves

    async def _unload(self, bundle: NamespaceBundle, *, reason: str) -> bool:
        owned = self._owned.get(bundle)
        if owned is None or owned.releasing or owned.splitting:
            return False
        owned.releasing = True
        b = bundle
        try:
            try:
                current = await self._registry.get_owner(b.tenant, b.namespace, b.name)
                if current is not None and current.value.instance == self.instance:
                    owned.version = await self._registry.set_disabled(b.tenant, b.namespace, b.name, current.value,
                                                                      expected_version=current.version)
            except MetadataError as e:
                log.warning("bundle %s: could not mark it disabled: %s", bundle, e)
            if self._unloader is not None:
                try:
                    await self._unloader(bundle)
                except Exception:
                    log.exception("bundle %s: unloading its topics failed", bundle)
            await self._release_node(owned)
        finally:
            if self._owned.get(bundle) is owned:
                del self._owned[bundle]
            self._locks.pop(bundle, None)
        self._m_released.labels(reason).inc()
        log.info("released bundle %s (%s)", bundle, reason)
        if self._state is OwnershipState.STARTED:
            await self.publish_load()
        return True

    async def _release_node(self, owned: OwnedBundle) -> None:
        b = owned.bundle
        delay_s = 0.1
        for attempt in range(1, self._RELEASE_ATTEMPTS_MAX + 1):
            try:
                await self._registry.release(b.tenant, b.namespace, b.name, expected_version=owned.version)
                return
            except BadVersionError:
                log.warning("bundle %s: the ownership node changed under us; leaving it", b)
                return
            except MetadataError as e:
                if not e.retriable or attempt == self._RELEASE_ATTEMPTS_MAX:
                    log.warning("bundle %s: could not delete the ownership node: %s (it goes with our session)", b, e)
                    return
                await asyncio.sleep(delay_s)
                delay_s *= 2

    def _on_session(self, event: SessionEvent) -> None:
        if event is not SessionEvent.LOST or not self._owned:
            return
        lost = [o.bundle for o in self._owned.values()]
        self._owned.clear()  # synchronously: nothing is served as ours from this point on
        self._m_released.labels("session_lost").inc(len(lost))
        log.warning("ZooKeeper session lost: %d bundle(s) are no longer ours: %s", len(lost),
                    ", ".join(str(b) for b in sorted(lost)))
        self._spawn(self._unload_lost(lost), "unload-lost")

    async def _unload_lost(self, bundles: list[NamespaceBundle]) -> None:
        if self._unloader is not None:
            for bundle in bundles:
                try:
                    await self._unloader(bundle)
                except Exception:
                    log.exception("bundle %s: unloading its topics after the session loss failed", bundle)
        await self.publish_load()
