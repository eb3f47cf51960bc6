"""The global configuration store: clusters, tenants, namespaces (policies), partitioned topics and topic
policies.

Layout (Pulsar's, in the global ZooKeeper)::

    /admin/clusters/<cluster>                                  ClusterData
    /admin/tenants/<tenant>                                    TenantInfo
    /admin/policies/<tenant>/<namespace>                       Policies
    /admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>   {"version": 1, "partitions": N}
    /admin/topic-policies/<tenant>/<ns>/<domain>/<topic>       TopicPolicies (a topic's overrides)
    /admin/schemas/<tenant>/<ns>/<topic>/<version>             StoredSchema (config_store/schemas.py)

Guarantees: a create never replaces an existing entity (NodeExistsError); every update is a read-modify-write
by compare-and-set, retried on a lost race up to ``update_attempts_max`` times and then failed with
BadVersionError, so a concurrent update is never overwritten; a namespace needs its tenant, a partitioned
topic its namespace; a tenant (namespace) with namespaces (partitioned topics) is not deleted (NotEmptyError).
Topic policies need their namespace too, and go with it: deleting a namespace deletes its topic policies
(they are overrides, not entities); a TopicPolicies with nothing set is stored as no node at all.
Names are checked before any I/O. Cross-entity checks are not atomic (ZooKeeper multi-ops are not used), so
a create racing the deletion of its parent entity can leave an orphan, as in Pulsar.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from typing import Any, Callable, TypeVar

from .errors import (BadVersionError, InvalidMetadataError, MetadataUnavailableError, NodeExistsError,
                     NotEmptyError, NotFoundError)
from .models import ClusterData, PartitionedTopicMetadata, Policies, TenantInfo, TopicPolicies, Versioned
from .store import MetadataStore
from .watches import WatchHandle

log = logging.getLogger("config_store")

T = TypeVar("T")

CLUSTERS = "/admin/clusters"
TENANTS = "/admin/tenants"
POLICIES = "/admin/policies"
PARTITIONED_TOPICS = "/admin/partitioned-topics"
TOPIC_POLICIES = "/admin/topic-policies"
SCHEMAS = "/admin/schemas"  # topic schemas: config_store/schemas.py
DOMAINS = ("persistent", "non-persistent")

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-=:]+")  # Pulsar's NamedEntity charset: [-=:.\w]
_NAME_LEN_MAX = 255


def check_name(kind: str, name: str) -> str:
    """Returns ``name`` if it is a valid cluster/tenant/namespace/topic name, else InvalidMetadataError."""
    if (not isinstance(name, str) or not name or len(name) > _NAME_LEN_MAX or name in (".", "..")
            or not _NAME_RE.fullmatch(name)):
        raise InvalidMetadataError(f"invalid {kind} name {name!r}: use 1-{_NAME_LEN_MAX} letters, digits or "
                                   "'-', '_', '.', '=', ':' (no '/')")
    return name


def _check_domain(domain: str) -> str:
    if domain not in DOMAINS:
        raise InvalidMetadataError(f"invalid topic domain {domain!r}: expected one of {', '.join(DOMAINS)}")
    return domain


class ConfigurationStore:
    """Typed access to the global configuration store (see the module docstring for paths and guarantees)."""

    def __init__(self, store: MetadataStore, *, update_attempts_max: int = 16) -> None:
        self.store = store
        self.update_attempts_max = update_attempts_max

    # ------------------------------------------------------------------------------------------ generic

    async def _create(self, path: str, what: str, data: bytes) -> int:
        try:
            await self.store.create(path, data, make_parents=True)
        except NodeExistsError as e:
            raise NodeExistsError(f"{what} already exists ({path})") from e
        return 0

    async def _read(self, path: str, what: str, decode: Callable[[bytes], T]) -> Versioned[T]:
        versioned = await self.store.get(path)
        if versioned is None:
            raise NotFoundError(f"{what} does not exist ({path})")
        try:
            return Versioned(decode(versioned.value), versioned.version)
        except InvalidMetadataError as e:
            raise InvalidMetadataError(f"{path}: {e}") from None

    async def _update(self, path: str, what: str, decode: Callable[[bytes], T], fn: Callable[[T], T],
                      encode: Callable[[T], bytes]) -> Versioned[T]:
        for attempt in range(1, self.update_attempts_max + 1):
            current = await self._read(path, what, decode)
            new = fn(current.value)
            if new is None:
                raise InvalidMetadataError(f"update of {what}: the update function returned None")
            try:
                version = await self.store.set(path, encode(new), expected_version=current.version)
            except BadVersionError:
                log.debug("update of %s lost a race (attempt %d); re-reading", what, attempt)
                continue
            return Versioned(new, version)
        raise BadVersionError(f"update of {what} ({path}) lost {self.update_attempts_max} races in a row; giving up")

    async def _delete(self, path: str, what: str, expected_version: int) -> None:
        if await self.store.exists(path) is None:
            raise NotFoundError(f"{what} does not exist ({path})")
        try:
            await self.store.delete(path, expected_version=expected_version)
        except NotEmptyError as e:
            raise NotEmptyError(f"{what} still has children ({path})") from e

    async def _list(self, path: str) -> list[str]:
        return await self.store.children(path)

    # ------------------------------------------------------------------------------------------ clusters

    @staticmethod
    def cluster_path(name: str) -> str:
        return f"{CLUSTERS}/{check_name('cluster', name)}"

    async def create_cluster(self, name: str, data: ClusterData) -> int:
        """Registers a cluster (region); NodeExistsError if the name is taken. Returns the version (0)."""
        return await self._create(self.cluster_path(name), f"cluster '{name}'", data.to_json())

    async def get_cluster(self, name: str) -> Versioned[ClusterData]:
        return await self._read(self.cluster_path(name), f"cluster '{name}'", ClusterData.from_json)

    async def list_clusters(self) -> list[str]:
        return await self._list(CLUSTERS)

    async def update_cluster(self, name: str, fn: Callable[[ClusterData], ClusterData]) -> Versioned[ClusterData]:
        """Compare-and-set ``fn(old)``; ``fn`` may run several times (once per lost race)."""
        return await self._update(self.cluster_path(name), f"cluster '{name}'", ClusterData.from_json, fn,
                                  ClusterData.to_json)

    async def delete_cluster(self, name: str, *, expected_version: int = -1) -> None:
        await self._delete(self.cluster_path(name), f"cluster '{name}'", expected_version)

    # ------------------------------------------------------------------------------------------ tenants

    @staticmethod
    def tenant_path(name: str) -> str:
        return f"{TENANTS}/{check_name('tenant', name)}"

    async def create_tenant(self, name: str, info: TenantInfo) -> int:
        return await self._create(self.tenant_path(name), f"tenant '{name}'", info.to_json())

    async def get_tenant(self, name: str) -> Versioned[TenantInfo]:
        return await self._read(self.tenant_path(name), f"tenant '{name}'", TenantInfo.from_json)

    async def list_tenants(self) -> list[str]:
        return await self._list(TENANTS)

    async def update_tenant(self, name: str, fn: Callable[[TenantInfo], TenantInfo]) -> Versioned[TenantInfo]:
        return await self._update(self.tenant_path(name), f"tenant '{name}'", TenantInfo.from_json, fn,
                                  TenantInfo.to_json)

    async def watch_tenant(self, name: str, callback: Callable[[TenantInfo | None], Any], *,
                           timeout_s: float = 30.0) -> WatchHandle:
        """Like :meth:`watch_policies`, for a tenant (its ``adminRoles`` decide who administers it)."""
        return await self._watch_value(self.tenant_path(name), TenantInfo.from_json, callback, timeout_s=timeout_s)

    def tenants_cache(self) -> "TenantsCache":
        return TenantsCache(self)

    async def delete_tenant(self, name: str, *, expected_version: int = -1) -> None:
        """Deletes a tenant that has no namespace left (NotEmptyError otherwise)."""
        path = self.tenant_path(name)
        if await self.store.exists(path) is None:
            raise NotFoundError(f"tenant '{name}' does not exist ({path})")
        namespaces = await self.list_namespaces(name)
        if namespaces:
            raise NotEmptyError(f"tenant '{name}' still has namespaces: {', '.join(namespaces)}")
        try:
            await self.store.delete(f"{POLICIES}/{name}")  # the namespaces' parent; the atomic emptiness check
        except NotEmptyError as e:
            raise NotEmptyError(f"tenant '{name}' got a new namespace while being deleted") from e
        await self.store.delete(f"{PARTITIONED_TOPICS}/{name}", recursive=True)  # only empty folders remain
        await self.store.delete(f"{TOPIC_POLICIES}/{name}", recursive=True)  # likewise
        await self.store.delete(f"{SCHEMAS}/{name}", recursive=True)  # likewise
        await self._delete(path, f"tenant '{name}'", expected_version)

    # ------------------------------------------------------------------------------------------ namespaces

    @staticmethod
    def namespace_path(tenant: str, namespace: str) -> str:
        return f"{POLICIES}/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}"

    async def create_namespace(self, tenant: str, namespace: str, policies: Policies | None = None) -> int:
        """Creates ``tenant/namespace``; NotFoundError if the tenant does not exist."""
        path = self.namespace_path(tenant, namespace)
        if await self.store.exists(self.tenant_path(tenant)) is None:
            raise NotFoundError(f"tenant '{tenant}' does not exist ({self.tenant_path(tenant)})")
        return await self._create(path, f"namespace '{tenant}/{namespace}'", (policies or Policies()).to_json())

    async def get_namespace_policies(self, tenant: str, namespace: str) -> Versioned[Policies]:
        return await self._read(self.namespace_path(tenant, namespace), f"namespace '{tenant}/{namespace}'",
                                Policies.from_json)

    async def list_namespaces(self, tenant: str) -> list[str]:
        """The tenant's namespaces, as local names (``ns``, not ``tenant/ns``)."""
        return await self._list(f"{POLICIES}/{check_name('tenant', tenant)}")

    async def update_namespace_policies(self, tenant: str, namespace: str,
                                        fn: Callable[[Policies], Policies]) -> Versioned[Policies]:
        return await self._update(self.namespace_path(tenant, namespace), f"namespace '{tenant}/{namespace}'",
                                  Policies.from_json, fn, Policies.to_json)

    async def delete_namespace(self, tenant: str, namespace: str, *, expected_version: int = -1) -> None:
        """Deletes a namespace without partitioned topics (NotEmptyError otherwise)."""
        path = self.namespace_path(tenant, namespace)
        topics_root = f"{PARTITIONED_TOPICS}/{tenant}/{namespace}"
        for domain in DOMAINS:
            topics = await self.list_partitioned_topics(tenant, namespace, domain)
            if topics:
                raise NotEmptyError(f"namespace '{tenant}/{namespace}' still has partitioned topics: "
                                    f"{', '.join(f'{domain}://{tenant}/{namespace}/{t}' for t in topics)}")
        await self._delete(path, f"namespace '{tenant}/{namespace}'", expected_version)
        for domain in DOMAINS:
            await self._delete_if_empty(f"{topics_root}/{domain}")
        await self._delete_if_empty(topics_root)
        await self.store.delete(f"{TOPIC_POLICIES}/{tenant}/{namespace}", recursive=True)
        await self.store.delete(f"{SCHEMAS}/{tenant}/{namespace}", recursive=True)  # the topics' schemas go too

    async def _delete_if_empty(self, path: str) -> None:
        try:
            await self.store.delete(path)
        except NotEmptyError:
            pass

    async def watch_policies(self, tenant: str, namespace: str,
                             callback: Callable[[Policies | None], Any], *, timeout_s: float = 30.0) -> WatchHandle:
        """Calls ``callback(Policies | None)`` on the loop with the current policies (before returning) and
        after every change; None while the namespace does not exist. Corrupt values are logged, not
        delivered. Cancel the returned handle to stop."""
        return await self._watch_value(self.namespace_path(tenant, namespace), Policies.from_json, callback,
                                       timeout_s=timeout_s)

    async def _watch_value(self, path: str, decode: Callable[[bytes], T], callback: Callable[[T | None], Any], *,
                           timeout_s: float) -> WatchHandle:
        """Watches ``path``: ``callback(decode(value) | None)`` now (before returning) and after each change."""
        first = asyncio.Event()

        def on_data(versioned: Versioned[bytes] | None) -> Any:
            first.set()
            if versioned is None:
                return callback(None)
            try:
                value = decode(versioned.value)
            except InvalidMetadataError as e:
                log.error("ignoring corrupt value at %s (version %d): %s", path, versioned.version, e)
                return None
            return callback(value)

        handle = self.store.watch_data(path, on_data)
        try:
            async with asyncio.timeout(timeout_s):
                await first.wait()
        except TimeoutError:
            handle.cancel()
            raise MetadataUnavailableError(f"watch {path}: no answer within {timeout_s:g}s") from None
        return handle

    def policies_cache(self) -> "PoliciesCache":
        return PoliciesCache(self)

    # ------------------------------------------------------------------------------------------ topics

    @staticmethod
    def partitioned_topic_path(tenant: str, namespace: str, domain: str, topic: str) -> str:
        return (f"{PARTITIONED_TOPICS}/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}/"
                f"{_check_domain(domain)}/{check_name('topic', topic)}")

    async def create_partitioned_topic(self, tenant: str, namespace: str, domain: str, topic: str,
                                       partitions: int) -> int:
        """Creates a partitioned topic's metadata; NotFoundError if the namespace does not exist."""
        path = self.partitioned_topic_path(tenant, namespace, domain, topic)
        data = PartitionedTopicMetadata(partitions).to_json()
        ns_path = self.namespace_path(tenant, namespace)
        if await self.store.exists(ns_path) is None:
            raise NotFoundError(f"namespace '{tenant}/{namespace}' does not exist ({ns_path})")
        return await self._create(path, f"partitioned topic {domain}://{tenant}/{namespace}/{topic}", data)

    async def get_partitioned_topic(self, tenant: str, namespace: str, domain: str, topic: str) -> Versioned[int]:
        """The partition count."""
        path = self.partitioned_topic_path(tenant, namespace, domain, topic)
        v = await self._read(path, f"partitioned topic {domain}://{tenant}/{namespace}/{topic}",
                             PartitionedTopicMetadata.from_json)
        return Versioned(v.value.partitions, v.version)

    async def update_partitioned_topic(self, tenant: str, namespace: str, domain: str, topic: str,
                                       partitions: int | Callable[[int], int]) -> Versioned[int]:
        """Sets the partition count (an int, or ``fn(old) -> new``) by compare-and-set. The count may grow,
        never shrink (existing partitions hold data): InvalidMetadataError otherwise."""
        path = self.partitioned_topic_path(tenant, namespace, domain, topic)
        what = f"partitioned topic {domain}://{tenant}/{namespace}/{topic}"
        choose = partitions if callable(partitions) else (lambda _old: partitions)

        def fn(old: PartitionedTopicMetadata) -> PartitionedTopicMetadata:
            new = PartitionedTopicMetadata(choose(old.partitions))
            if new.partitions < old.partitions:
                raise InvalidMetadataError(
                    f"{what}: cannot shrink from {old.partitions} to {new.partitions} partitions")
            return new

        v = await self._update(path, what, PartitionedTopicMetadata.from_json, fn, PartitionedTopicMetadata.to_json)
        return Versioned(v.value.partitions, v.version)

    async def delete_partitioned_topic(self, tenant: str, namespace: str, domain: str, topic: str, *,
                                       expected_version: int = -1) -> None:
        path = self.partitioned_topic_path(tenant, namespace, domain, topic)
        await self._delete(path, f"partitioned topic {domain}://{tenant}/{namespace}/{topic}", expected_version)

    async def list_partitioned_topics(self, tenant: str, namespace: str, domain: str) -> list[str]:
        """Local topic names of the namespace's partitioned topics in ``domain``."""
        return await self._list(f"{PARTITIONED_TOPICS}/{check_name('tenant', tenant)}/"
                                f"{check_name('namespace', namespace)}/{_check_domain(domain)}")

    def watch_partitioned_topics(self, tenant: str, namespace: str, domain: str,
                                 callback: Callable[[dict[str, int]], Any]) -> "PartitionedTopicsWatch":
        """Calls ``callback({local name: partitions})`` on the loop with the namespace's partitioned topics in
        ``domain``, once all are read and again after every change (one created or deleted, partitions added).
        Cancel the returned handle to stop."""
        folder = (f"{PARTITIONED_TOPICS}/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}/"
                  f"{_check_domain(domain)}")
        return PartitionedTopicsWatch(self.store, folder, callback)

    # ------------------------------------------------------------------------------------------ topic policies

    @staticmethod
    def topic_policies_path(tenant: str, namespace: str, domain: str, topic: str) -> str:
        return (f"{TOPIC_POLICIES}/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}/"
                f"{_check_domain(domain)}/{check_name('topic', topic)}")

    async def get_topic_policies(self, tenant: str, namespace: str, domain: str,
                                 topic: str) -> Versioned[TopicPolicies]:
        """The topic's own policies; NotFoundError when it has none (the namespace's apply)."""
        path = self.topic_policies_path(tenant, namespace, domain, topic)
        return await self._read(path, f"topic policies of {domain}://{tenant}/{namespace}/{topic}",
                                TopicPolicies.from_json)

    async def set_topic_policies(self, tenant: str, namespace: str, domain: str, topic: str,
                                 policies: TopicPolicies | Callable[[TopicPolicies], TopicPolicies]
                                 ) -> Versioned[TopicPolicies]:
        """Stores the topic's policies (a value, or ``fn(old) -> new`` where ``old`` is an empty TopicPolicies
        when none are stored): created, or updated by compare-and-set, retried on a lost race up to
        ``update_attempts_max`` times. A result with nothing set deletes the node (version -1 is returned).
        NotFoundError if the namespace does not exist."""
        path = self.topic_policies_path(tenant, namespace, domain, topic)
        what = f"topic policies of {domain}://{tenant}/{namespace}/{topic}"
        choose = policies if callable(policies) else (lambda _old: copy.deepcopy(policies))
        for attempt in range(1, self.update_attempts_max + 1):
            current = await self.store.get(path)
            old = TopicPolicies() if current is None else self._decode(path, current.value, TopicPolicies.from_json)
            new = choose(old)
            if not isinstance(new, TopicPolicies):
                raise InvalidMetadataError(f"update of {what}: expected TopicPolicies, got {type(new).__name__}")
            try:
                return Versioned(new, await self._put_topic_policies(path, current, new, tenant, namespace))
            except (BadVersionError, NodeExistsError):
                pass
            except NotFoundError:
                if current is None:
                    raise  # the namespace does not exist
            log.debug("update of %s lost a race (attempt %d); re-reading", what, attempt)
        raise BadVersionError(f"update of {what} ({path}) lost {self.update_attempts_max} races in a row; giving up")

    async def _put_topic_policies(self, path: str, current: Versioned[bytes] | None, new: TopicPolicies,
                                  tenant: str, namespace: str) -> int:
        """One write of :meth:`set_topic_policies`; the new version (-1: nothing stored)."""
        if new.is_empty():
            if current is not None:
                await self.store.delete(path, expected_version=current.version)
            return -1
        if current is not None:
            return await self.store.set(path, new.to_json(), expected_version=current.version)
        ns_path = self.namespace_path(tenant, namespace)
        if await self.store.exists(ns_path) is None:
            raise NotFoundError(f"namespace '{tenant}/{namespace}' does not exist ({ns_path})")
        await self.store.create(path, new.to_json(), make_parents=True)
        return 0

    async def delete_topic_policies(self, tenant: str, namespace: str, domain: str, topic: str, *,
                                    expected_version: int = -1) -> None:
        """Deletes every topic-level policy of the topic; NotFoundError if it has none."""
        path = self.topic_policies_path(tenant, namespace, domain, topic)
        await self._delete(path, f"topic policies of {domain}://{tenant}/{namespace}/{topic}", expected_version)

    async def list_topic_policies(self, tenant: str, namespace: str, domain: str) -> list[str]:
        """Local names of the namespace's topics that have topic-level policies in ``domain``."""
        return await self._list(f"{TOPIC_POLICIES}/{check_name('tenant', tenant)}/"
                                f"{check_name('namespace', namespace)}/{_check_domain(domain)}")

    async def watch_topic_policies(self, tenant: str, namespace: str, domain: str, topic: str,
                                   callback: Callable[[TopicPolicies | None], Any], *,
                                   timeout_s: float = 30.0) -> WatchHandle:
        """Like :meth:`watch_policies`, for a topic's own policies (None while it has none)."""
        return await self._watch_value(self.topic_policies_path(tenant, namespace, domain, topic),
                                       TopicPolicies.from_json, callback, timeout_s=timeout_s)

    def topic_policies_cache(self) -> "TopicPoliciesCache":
        return TopicPoliciesCache(self)

    @staticmethod
    def _decode(path: str, data: bytes, decode: Callable[[bytes], T]) -> T:
        try:
            return decode(data)
        except InvalidMetadataError as e:
            raise InvalidMetadataError(f"{path}: {e}") from None


from .caches import PartitionedTopicsWatch, PoliciesCache, TenantsCache, TopicPoliciesCache  # noqa: E402 (they type-check against this module)
