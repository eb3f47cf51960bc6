"""Watched views of the configuration store: namespace policies, tenants and topic policies served from memory and
kept fresh by watches, and the watch over a namespace's partitioned topics. Made by ``ConfigurationStore``'s
``policies_cache()``, ``tenants_cache()``, ``topic_policies_cache()`` and ``watch_partitioned_topics()``.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any, Callable, Generic, Hashable, TypeVar

from .errors import InvalidMetadataError
from .models import PartitionedTopicMetadata, Policies, TenantInfo, TopicPolicies, Versioned
from .store import MetadataStore
from .watches import WatchHandle

if TYPE_CHECKING:
    from .configuration import ConfigurationStore

log = logging.getLogger("config_store")


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _WatchedCache(Generic[K, V]):
    """Values served from memory, kept fresh by watches (the shared part of the caches below).

    The first ``get`` of a key reads it and arms a watch; later calls cost no I/O and see every change
    within a watch round trip. At most ``entries_max`` keys are watched (least recently used dropped).
    Values handed out are copies: mutating one does not touch the cache.
    """

    _what = "cache"

    def __init__(self, config: ConfigurationStore, *, entries_max: int = 10_000) -> None:
        self._config = config
        self._entries_max = entries_max
        self._values: dict[K, V | None] = {}
        self._handles: dict[K, WatchHandle] = {}
        self._listeners: list[Callable[..., Any]] = []
        self._closed = False

    async def _watch(self, key: K, callback: Callable[[V | None], Any]) -> WatchHandle:
        raise NotImplementedError

    async def _get(self, key: K) -> V | None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        if key in self._handles:
            self._handles[key] = self._handles.pop(key)  # most recently used last
        else:
            handle = await self._watch(key, lambda v: self._on_change(key, v))
            if key in self._handles or self._closed:
                handle.cancel()  # a concurrent get() armed the same watch first
            else:
                self._handles[key] = handle
                while len(self._handles) > self._entries_max:
                    oldest = next(iter(self._handles))
                    self._handles.pop(oldest).cancel()
                    self._values.pop(oldest, None)
        return copy.deepcopy(self._values.get(key))

    def _get_cached(self, key: K) -> V | None:
        return copy.deepcopy(self._values.get(key))

    def add_listener(self, callback: Callable[..., Any]) -> None:
        """``callback(*key, value)`` on the loop after each change of a cached key (see the subclasses)."""
        self._listeners.append(callback)

    def _on_change(self, key: K, value: V | None) -> None:
        if self._closed:
            return
        self._values[key] = value
        for listener in list(self._listeners):
            try:
                listener(*key, copy.deepcopy(value))
            except Exception:
                log.exception("%s listener failed", self._what)

    def close(self) -> None:
        """Cancels every watch; idempotent."""
        self._closed = True
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self._values.clear()


class PoliciesCache(_WatchedCache[tuple[str, str], Policies]):
    """Namespace policies served from memory, kept fresh by watches (see :class:`_WatchedCache`).

    Listeners are called as ``callback(tenant, namespace, Policies | None)``.
    """

    _what = "policies cache"

    async def _watch(self, key: tuple[str, str], callback: Callable[[Policies | None], Any]) -> WatchHandle:
        return await self._config.watch_policies(*key, callback)

    async def get(self, tenant: str, namespace: str) -> Policies | None:
        """The namespace's policies, or None if it does not exist."""
        return await self._get((tenant, namespace))

    def get_cached(self, tenant: str, namespace: str) -> Policies | None:
        """What the cache holds right now (no I/O; None if unknown or absent)."""
        return self._get_cached((tenant, namespace))


class TenantsCache(_WatchedCache[str, TenantInfo]):
    """Tenants served from memory, kept fresh by watches (authorization reads their ``adminRoles``).

    Listeners are called as ``callback(tenant, TenantInfo | None)``.
    """

    _what = "tenants cache"

    async def _watch(self, key: str, callback: Callable[[TenantInfo | None], Any]) -> WatchHandle:
        return await self._config.watch_tenant(key, callback)

    async def get(self, tenant: str) -> TenantInfo | None:
        """The tenant, or None if it does not exist."""
        return await self._get(tenant)


class TopicPoliciesCache(_WatchedCache[tuple[str, str, str, str], TopicPolicies]):
    """Topics' own policies served from memory, kept fresh by watches (see :class:`_WatchedCache`).

    Keys are ``(tenant, namespace, domain, topic)`` with the topic's local name; a partitioned topic's
    policies are under its base name. Listeners are called as
    ``callback(tenant, namespace, domain, topic, TopicPolicies | None)``.
    """

    _what = "topic policies cache"

    async def _watch(self, key: tuple[str, str, str, str],
                     callback: Callable[[TopicPolicies | None], Any]) -> WatchHandle:
        return await self._config.watch_topic_policies(*key, callback)

    async def get(self, tenant: str, namespace: str, domain: str, topic: str) -> TopicPolicies | None:
        """The topic's own policies, or None if it has none."""
        return await self._get((tenant, namespace, domain, topic))

    def get_cached(self, tenant: str, namespace: str, domain: str, topic: str) -> TopicPolicies | None:
        """What the cache holds right now (no I/O; None if unknown or absent)."""
        return self._get_cached((tenant, namespace, domain, topic))


class PartitionedTopicsWatch:
    """A namespace's partitioned topics in one domain with their partition counts, followed by a children watch
    on their folder and a data watch on each one (see :meth:`ConfigurationStore.watch_partitioned_topics`).

    Deliveries wait until every listed topic's count has been read, so a callback never sees a topic without
    its count; a value that does not decode is logged and counts as no partitions.
    """

    def __init__(self, store: MetadataStore, folder: str, callback: Callable[[dict[str, int]], Any]) -> None:
        self._store = store
        self._folder = folder
        self._callback = callback
        self._listed: list[str] | None = None
        self._counts: dict[str, int | None] = {}  # None: the node is absent
        self._topic_watches: dict[str, WatchHandle] = {}
        self._cancelled = False
        self._children = store.watch_children(folder, self._on_children)

    def cancel(self) -> None:
        """Stops every watch; idempotent."""
        self._cancelled = True
        self._children.cancel()
        for handle in self._topic_watches.values():
            handle.cancel()
        self._topic_watches.clear()

    def _on_children(self, children: list[str]) -> None:
        if self._cancelled:
            return
        self._listed = list(children)
        for gone in [t for t in self._topic_watches if t not in children]:
            self._topic_watches.pop(gone).cancel()
            self._counts.pop(gone, None)
        for topic in children:
            if topic not in self._topic_watches:
                path = f"{self._folder}/{topic}"
                self._topic_watches[topic] = self._store.watch_data(
                    path, lambda versioned, topic=topic, path=path: self._on_topic(topic, path, versioned))
        self._deliver()

    def _on_topic(self, topic: str, path: str, versioned: Versioned[bytes] | None) -> None:
        if self._cancelled or topic not in self._topic_watches:
            return
        if versioned is None:
            self._counts[topic] = None  # deleted (the children watch drops it), or not created yet
        else:
            try:
                self._counts[topic] = PartitionedTopicMetadata.from_json(versioned.value).partitions
            except InvalidMetadataError as e:
                log.error("ignoring corrupt partitioned-topic metadata at %s (version %d): %s", path,
                          versioned.version, e)
                self._counts[topic] = 0
        self._deliver()

    def _deliver(self) -> None:
        if self._listed is None or any(t not in self._counts for t in self._listed):
            return  # wait for the counts of newly listed topics
        current = {t: self._counts[t] for t in self._listed}
        try:
            self._callback({t: n for t, n in current.items() if n is not None})
        except Exception:
            log.exception("partitioned-topics watch callback on %s failed", self._folder)
