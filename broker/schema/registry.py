"""The schema registry: versions of each topic's schema, and the rules for adding one.

Stateless over :class:`config_store.SchemaStore` (every call reads the store), so any broker can serve any
topic's schemas and a version written by one broker is seen by the next call anywhere. Adding a version is
a create of the next version's node: of two brokers racing, the loser re-reads, finds the winner's version
(identical: it uses it) or checks compatibility against it, and tries the next number, up to
``put_attempts_max`` times.

A schema's history is every version stored; its *live* versions are those after the last deletion marker
(none when the latest version is a marker), Pulsar's ``trimDeletedSchemaAndGetList``. Only live versions are
served, matched and checked against.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from config_store import NodeExistsError, Policies, SchemaStore, StoredSchema, TopicPolicies
from magnetar.topic_name import TopicName

from . import compatibility
from .errors import (IncompatibleSchemaError, SchemaHistoryFullError, SchemaNotFoundError, SchemaStorageError,
                     SchemaTooLargeError)
from .types import DEFAULT_STRATEGY, SchemaData, Strategy, effective_strategy

log = logging.getLogger("broker.schema")

Version = tuple[int, SchemaData]

NO_SCHEMA_FOR_PRODUCER = "Producers cannot connect or send message without a schema to topics with a schema"
AUTO_UPDATE_DISABLED = "Schema not found and schema auto updating is disabled."


@dataclass(frozen=True)
class SchemaPolicy:
    """What applies to one topic's schemas (its own policies over its namespace's over the broker's defaults)."""

    strategy: Strategy = DEFAULT_STRATEGY
    allow_auto_update: bool = True
    validation_enforced: bool = False


@dataclass(frozen=True)
class SchemaDefaults:
    """The broker-wide defaults, as Pulsar's ``schemaCompatibilityStrategy`` (FULL),
    ``isAllowAutoUpdateSchemaEnabled`` (true) and ``schemaValidationEnforced`` (false)."""

    strategy: Strategy = DEFAULT_STRATEGY
    allow_auto_update: bool = True
    validation_enforced: bool = False

    def policy(self, policies: Optional[Policies], topic_policies: Optional[TopicPolicies] = None) -> SchemaPolicy:
        """The policy of a topic in a namespace with ``policies``: the topic's own strategy / validation flag
        (``topic_policies``; a partitioned topic's cover its partitions) when set and not UNDEFINED, else the
        namespace's, else these defaults (as Pulsar's ``PolicyHierarchyValue``)."""
        if policies is None:
            found = SchemaPolicy(self.strategy, self.allow_auto_update, self.validation_enforced)
        else:
            allow = policies.is_allow_auto_update_schema
            found = SchemaPolicy(strategy=effective_strategy(policies.schema_compatibility_strategy, self.strategy),
                                 allow_auto_update=self.allow_auto_update if allow is None else allow,
                                 validation_enforced=self.validation_enforced or policies.schema_validation_enforced)
        if topic_policies is None:
            return found
        enforced = topic_policies.schema_validation_enforced
        return dataclasses.replace(
            found, strategy=effective_strategy(topic_policies.schema_compatibility_strategy, found.strategy),
            validation_enforced=found.validation_enforced if enforced is None else enforced)


def schema_key(topic: TopicName) -> tuple[str, str, str]:
    """(tenant, namespace, encoded local name) of the schema a topic uses: a partition uses its partitioned
    topic's, and the domain takes no part (Pulsar's schema id ``tenant/namespace/topic``)."""
    base = topic.base if topic.is_partition else topic
    return base.tenant, base.namespace_portion, base.encoded_local_name


def schema_id(topic: TopicName) -> str:
    return "/".join(schema_key(topic))


def live_versions(history: Sequence[Version]) -> list[Version]:
    """The versions after the last deletion marker (see the module docstring)."""
    for i in range(len(history) - 1, -1, -1):
        if history[i][1].deleted:
            return list(history[i + 1:])
    return list(history)


class SchemaRegistry:
    """See the module docstring.

    Args:
        store: where versions live.
        defaults: the broker-wide policy defaults.
        schema_size_max_bytes: the largest definition accepted (ZooKeeper nodes are limited to ~1 MiB).
        properties_size_max_bytes: the largest total size of a schema's property keys and values.
        versions_max: the most versions (deletion markers included) a topic may hold.
        put_attempts_max: lost races tolerated when adding one version.
        clock_ms: wall-clock milliseconds for the versions' timestamps.
    """

    def __init__(self, store: SchemaStore, *, defaults: SchemaDefaults = SchemaDefaults(),
                 schema_size_max_bytes: int = 256 * 1024, properties_size_max_bytes: int = 64 * 1024,
                 versions_max: int = 1000, put_attempts_max: int = 16,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.store = store
        self.defaults = defaults
        self.schema_size_max_bytes = schema_size_max_bytes
        self.properties_size_max_bytes = properties_size_max_bytes
        self.versions_max = versions_max
        self.put_attempts_max = put_attempts_max
        self._clock_ms = clock_ms

    # ---------------------------------------------------------------------------------------------- reads

    async def history(self, topic: TopicName) -> list[Version]:
        """Every stored version of ``topic``'s schema, deletion markers included, oldest first."""
        stored = await self.store.versions(*schema_key(topic))
        return [(v, SchemaData(type=s.type, data=s.data, properties=dict(s.properties), timestamp_ms=s.timestamp_ms,
                               deleted=s.deleted)) for v, s in stored]

    async def live(self, topic: TopicName) -> list[Version]:
        return live_versions(await self.history(topic))

    async def has_schema(self, topic: TopicName) -> bool:
        return bool(await self.live(topic))

    async def get(self, topic: TopicName, version: Optional[int] = None) -> Version:
        """The latest live version (``version`` None) or that live version; SchemaNotFoundError otherwise."""
        live = await self.live(topic)
        if version is None:
            if not live:
                raise SchemaNotFoundError(f"Topic {schema_id(topic)} has no schema (none stored, or deleted)")
            return live[-1]
        for number, schema in live:
            if number == version:
                return number, schema
        raise SchemaNotFoundError(f"Topic {schema_id(topic)} has no schema version {version} "
                                  "(never stored, or deleted)")

    # ---------------------------------------------------------------------------------------------- writes

    async def put_if_absent(self, topic: TopicName, schema: SchemaData, strategy: Strategy) -> int:
        """The version of ``schema``: an identical live version's, else a new one if compatible under
        ``strategy`` (IncompatibleSchemaError otherwise). Nothing is stored when it fails."""
        self._check_new(schema)
        for _ in range(self.put_attempts_max):
            history = await self.history(topic)
            live = live_versions(history)
            found = compatibility.find_identical(live, schema)
            if found is not None:
                return found
            compatibility.check_producer(live, schema, strategy)
            version = await self._add(topic, history, schema)
            if version is not None:
                log.info("[%s] schema version %d added (%s)", schema_id(topic), version, schema.type)
                return version
        raise SchemaStorageError(f"adding a schema to {schema_id(topic)} lost {self.put_attempts_max} races in a "
                                 "row; retry")

    async def find_version(self, topic: TopicName, schema: SchemaData) -> Optional[int]:
        """The live version identical to ``schema``, or None."""
        return compatibility.find_identical(await self.live(topic), schema)

    async def delete(self, topic: TopicName, *, force: bool = False) -> int:
        """Deletes the schema: without ``force`` by adding a deletion marker (returns its version; the
        numbering goes on), with ``force`` by removing every version (returns the last one; numbering
        restarts at 0). SchemaNotFoundError when there is no live schema (or, with force, nothing at all)."""
        history = await self.history(topic)
        if force:
            if not history or not await self.store.delete_all(*schema_key(topic)):
                raise SchemaNotFoundError(f"Topic {schema_id(topic)} has no schema")
            log.info("[%s] schema deleted for good (%d versions)", schema_id(topic), len(history))
            return history[-1][0]
        for _ in range(self.put_attempts_max):
            if not live_versions(history):
                raise SchemaNotFoundError(f"Topic {schema_id(topic)} has no schema (none stored, or deleted)")
            version = await self._add(topic, history, SchemaData(type="NONE", deleted=True))
            if version is not None:
                log.info("[%s] schema deleted (marker version %d)", schema_id(topic), version)
                return version
            history = await self.history(topic)
        raise SchemaStorageError(f"deleting the schema of {schema_id(topic)} lost {self.put_attempts_max} races")

    async def _add(self, topic: TopicName, history: Sequence[Version], schema: SchemaData) -> Optional[int]:
        """Stores ``schema`` as the version after ``history``; None when another writer took that number."""
        if len(history) >= self.versions_max:
            raise SchemaHistoryFullError(f"topic {schema_id(topic)} holds {len(history)} schema versions, the "
                                         f"maximum: delete its schema for good (DELETE .../schema?force=true)")
        version = history[-1][0] + 1 if history else 0
        record = StoredSchema(type=schema.type, data=schema.data, properties=dict(schema.properties),
                              timestamp_ms=self._clock_ms(), deleted=schema.deleted)
        try:
            await self.store.add(*schema_key(topic), version, record)
        except NodeExistsError:
            return None
        return version

    def _check_new(self, schema: SchemaData) -> None:
        if len(schema.data) > self.schema_size_max_bytes:
            raise SchemaTooLargeError(f"the schema definition has {len(schema.data)} bytes, more than the maximum "
                                      f"of {self.schema_size_max_bytes}")
        size = sum(len(k.encode()) + len(v.encode()) for k, v in schema.properties.items())
        if size > self.properties_size_max_bytes:
            raise SchemaTooLargeError(f"the schema properties have {size} bytes, more than the maximum of "
                                      f"{self.properties_size_max_bytes}")
        compatibility.validate(schema)

    # ---------------------------------------------------------------------------------------------- rules

    async def check_compatibility(self, topic: TopicName, schema: SchemaData, strategy: Strategy) -> None:
        """Raises unless ``schema`` could be added (an identical one counts as compatible); stores nothing."""
        self._check_new(schema)
        live = await self.live(topic)
        if compatibility.find_identical(live, schema) is None:
            compatibility.check_producer(live, schema, strategy)

    async def version_for_producer(self, topic: TopicName, schema: Optional[SchemaData],
                                   policy: SchemaPolicy) -> Optional[int]:
        """The version a producer publishes with (None: no schema), adding ``schema`` when the policy allows,
        as Pulsar's ``tryAddSchema``: a producer without a schema is refused only when validation is
        enforced and the topic has one; with auto update off, only a schema already stored is accepted."""
        if schema is None:
            if policy.validation_enforced and await self.has_schema(topic):
                raise IncompatibleSchemaError(NO_SCHEMA_FOR_PRODUCER)
            return None
        if policy.allow_auto_update:
            return await self.put_if_absent(topic, schema, policy.strategy)
        self._check_new(schema)
        found = await self.find_version(topic, schema)
        if found is None:
            raise IncompatibleSchemaError(AUTO_UPDATE_DISABLED)
        return found

    async def check_for_consumer(self, topic: TopicName, schema: SchemaData, policy: SchemaPolicy, *,
                                 topic_idle: bool) -> None:
        """A consumer subscribing with ``schema``: checked against the topic's schema if it has one; stored as
        its first version if the topic is idle (no producers, no other consumers, no messages), as Pulsar's
        ``addSchemaIfIdleOrCheckCompatible``; refused on an active topic without a schema."""
        self._check_new(schema)
        live = await self.live(topic)
        if live:
            compatibility.check_consumer(live, schema, policy.strategy)
        elif topic_idle:
            await self.version_for_producer(topic, schema, policy)
        elif policy.strategy is not Strategy.ALWAYS_COMPATIBLE:
            raise IncompatibleSchemaError("Failed to add schema to an active topic with empty(BYTES) schema: "
                                          f"new schema type {schema.type}")
