"""What the metadata store holds, as typed values with a strict JSON codec.

Pure: no asyncio, no kazoo. Every stored value is a JSON object carrying a schema ``"version": 1``; decoding
rejects a missing or unknown schema version, a non-object, and any field of the wrong type with an
:class:`~config_store.errors.InvalidMetadataError` naming the field, so corrupt metadata is never handed to
a caller as data. Unknown extra fields are ignored (a newer writer may add some). Field names follow
Pulsar's JSON where Pulsar has one (``serviceUrl``, ``adminRoles``, ``replication_clusters``, ...).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .errors import InvalidMetadataError

T = TypeVar("T")

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value together with the ZooKeeper version it was read at (the token for compare-and-set)."""

    value: T
    version: int


# ---------------------------------------------------------------------------------------------- codec helpers


def _dumps(kind: str, fields: dict[str, Any]) -> bytes:
    return json.dumps({"version": SCHEMA_VERSION, **fields}, sort_keys=True, separators=(",", ":")).encode()


def _loads(kind: str, data: bytes) -> dict[str, Any]:
    """Parses one stored JSON object and checks its schema version."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidMetadataError(f"{kind}: expected bytes, got {type(data).__name__}")
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise InvalidMetadataError(f"{kind}: not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise InvalidMetadataError(f"{kind}: expected a JSON object, got {type(obj).__name__}")
    version = obj.get("version")
    if type(version) is not int:
        raise InvalidMetadataError(f"{kind}: missing or non-integer schema 'version' field")
    if version != SCHEMA_VERSION:
        raise InvalidMetadataError(f"{kind}: unsupported schema version {version} (this build reads {SCHEMA_VERSION})")
    return obj


_MISSING = object()


def _field(kind: str, obj: dict[str, Any], key: str, typ: type | tuple[type, ...], default: Any = _MISSING,
           *, nullable: bool = False) -> Any:
    """Reads ``obj[key]`` checked against ``typ``; bool is never accepted as int (JSON keeps them apart)."""
    if key not in obj:
        if default is _MISSING:
            raise InvalidMetadataError(f"{kind}: missing field '{key}'")
        return default() if callable(default) else default
    value = obj[key]
    if value is None and nullable:
        return None
    types = typ if isinstance(typ, tuple) else (typ,)
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        raise InvalidMetadataError(f"{kind}: field '{key}' must be {_type_name(types)}, got {type(value).__name__}")
    return value


def _type_name(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


def _str_list(kind: str, obj: dict[str, Any], key: str) -> list[str]:
    value = _field(kind, obj, key, list, list)
    if not all(isinstance(v, str) for v in value):
        raise InvalidMetadataError(f"{kind}: field '{key}' must be a list of strings")
    return list(value)


def _str_list_or_none(kind: str, obj: dict[str, Any], key: str) -> list[str] | None:
    """A list of strings, or None when the field is absent or null (a policy that is not set)."""
    value = _field(kind, obj, key, list, None, nullable=True)
    if value is not None and not all(isinstance(v, str) for v in value):
        raise InvalidMetadataError(f"{kind}: field '{key}' must be a list of strings")
    return None if value is None else list(value)


def _str_dict(kind: str, obj: dict[str, Any], key: str) -> dict[str, str]:
    value = _field(kind, obj, key, dict, dict)
    if not all(isinstance(v, str) for v in value.values()):
        raise InvalidMetadataError(f"{kind}: field '{key}' must map strings to strings")
    return dict(value)


# ---------------------------------------------------------------------------------------------- global store


@dataclass
class ClusterData:
    """A region (Pulsar: cluster) as registered in the global store: how to reach its brokers."""

    service_url: str = ""
    service_url_tls: str = ""
    broker_service_url: str = ""
    broker_service_url_tls: str = ""

    def to_json(self) -> bytes:
        return _dumps("ClusterData", {
            "serviceUrl": self.service_url,
            "serviceUrlTls": self.service_url_tls,
            "brokerServiceUrl": self.broker_service_url,
            "brokerServiceUrlTls": self.broker_service_url_tls,
        })

    @classmethod
    def from_json(cls, data: bytes) -> "ClusterData":
        k, o = "ClusterData", _loads("ClusterData", data)
        return cls(
            service_url=_field(k, o, "serviceUrl", str, ""),
            service_url_tls=_field(k, o, "serviceUrlTls", str, ""),
            broker_service_url=_field(k, o, "brokerServiceUrl", str, ""),
            broker_service_url_tls=_field(k, o, "brokerServiceUrlTls", str, ""),
        )


@dataclass
class TenantInfo:
    """A tenant: who administers it and in which regions its namespaces may live."""

    admin_roles: list[str] = field(default_factory=list)
    allowed_clusters: list[str] = field(default_factory=list)

    def to_json(self) -> bytes:
        return _dumps("TenantInfo", {"adminRoles": list(self.admin_roles),
                                     "allowedClusters": list(self.allowed_clusters)})

    @classmethod
    def from_json(cls, data: bytes) -> "TenantInfo":
        k, o = "TenantInfo", _loads("TenantInfo", data)
        return cls(admin_roles=_str_list(k, o, "adminRoles"), allowed_clusters=_str_list(k, o, "allowedClusters"))


BACKLOG_QUOTA_TYPES = ("destination_storage", "message_age")
"""Pulsar's ``BacklogQuotaType`` names: the size of a backlog, and the age of its oldest message."""
BACKLOG_QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
"""Pulsar's ``BacklogQuota.RetentionPolicy`` names: what a broker does to a topic over its quota."""
AUTH_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
"""Pulsar's ``AuthAction`` names: what a role may be granted on a namespace or a topic (``magnetar.auth.
authorization`` holds the same list; a test keeps them equal)."""
SCHEMA_COMPATIBILITY_STRATEGIES = ("UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD",
                                   "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
"""Pulsar's ``SchemaCompatibilityStrategy`` names (UNDEFINED: the broker's default, FULL)."""


@dataclass(frozen=True)
class BacklogQuota:
    """A backlog quota (Pulsar ``BacklogQuota``): ``-1`` leaves a limit off.

    A ``destination_storage`` quota is judged by its ``limit_size_bytes``, a ``message_age`` quota by its
    ``limit_time_s``; the other limit of each is stored but not used, as in Pulsar.
    """

    limit_size_bytes: int = -1
    limit_time_s: int = -1
    policy: str = "producer_request_hold"

    def to_dict(self) -> dict[str, Any]:
        """Pulsar's JSON: ``limit`` is the deprecated alias of ``limitSize``, still written for older readers."""
        return {"limit": self.limit_size_bytes, "limitSize": self.limit_size_bytes, "limitTime": self.limit_time_s,
                "policy": self.policy}

    @classmethod
    def from_dict(cls, kind: str, obj: Any) -> "BacklogQuota":
        if not isinstance(obj, dict):
            raise InvalidMetadataError(f"{kind}: a backlog quota must be an object, got {type(obj).__name__}")
        size = _field(kind, obj, "limitSize", int, None, nullable=True)
        if size is None:
            size = _field(kind, obj, "limit", int, -1)
        policy = _field(kind, obj, "policy", str, "producer_request_hold")
        if policy not in BACKLOG_QUOTA_POLICIES:
            raise InvalidMetadataError(f"{kind}: unknown backlog quota policy {policy!r}")
        return cls(limit_size_bytes=size, limit_time_s=_field(kind, obj, "limitTime", int, -1), policy=policy)


def _quota_map_json(quotas: dict[str, BacklogQuota]) -> dict[str, Any]:
    return {t: q.to_dict() for t, q in sorted(quotas.items())}


def _quota_map(kind: str, obj: dict[str, Any], key: str) -> dict[str, BacklogQuota] | None:
    """A map of quota type to BacklogQuota; None when absent or null."""
    value = _field(kind, obj, key, dict, None, nullable=True)
    if value is None:
        return None
    out = {}
    for quota_type, quota in value.items():
        if quota_type not in BACKLOG_QUOTA_TYPES:
            raise InvalidMetadataError(f"{kind}: unknown backlog quota type {quota_type!r} in '{key}'")
        out[quota_type] = BacklogQuota.from_dict(f"{kind}.{key}.{quota_type}", quota)
    return out


@dataclass(frozen=True)
class PublishRate:
    """A publish rate limit per topic (Pulsar ``PublishRate``): messages and bytes per second; a value
    ``<= 0`` leaves that limit off, as in Pulsar (``-1`` is its default)."""

    msgs_per_s: int = -1
    bytes_per_s: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {"publishThrottlingRateInMsg": self.msgs_per_s, "publishThrottlingRateInByte": self.bytes_per_s}

    @classmethod
    def from_dict(cls, kind: str, obj: Any) -> "PublishRate":
        if not isinstance(obj, dict):
            raise InvalidMetadataError(f"{kind}: a publish rate must be an object, got {type(obj).__name__}")
        return cls(msgs_per_s=_field(kind, obj, "publishThrottlingRateInMsg", int, -1),
                   bytes_per_s=_field(kind, obj, "publishThrottlingRateInByte", int, -1))


@dataclass(frozen=True)
class DispatchRate:
    """A dispatch rate limit (Pulsar ``DispatchRateImpl``): at most ``msgs_per_period`` messages and
    ``bytes_per_period`` bytes every ``period_s`` seconds (``<= 0``: that limit off). With
    ``relative_to_publish_rate`` the limits are added to the topic's current publish rate, as in Pulsar."""

    msgs_per_period: int = -1
    bytes_per_period: int = -1
    relative_to_publish_rate: bool = False
    period_s: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"dispatchThrottlingRateInMsg": self.msgs_per_period,
                "dispatchThrottlingRateInByte": self.bytes_per_period,
                "relativeToPublishRate": self.relative_to_publish_rate, "ratePeriodInSecond": self.period_s}

    @classmethod
    def from_dict(cls, kind: str, obj: Any) -> "DispatchRate":
        if not isinstance(obj, dict):
            raise InvalidMetadataError(f"{kind}: a dispatch rate must be an object, got {type(obj).__name__}")
        period = _field(kind, obj, "ratePeriodInSecond", int, 1)
        if period < 1:
            raise InvalidMetadataError(f"{kind}: ratePeriodInSecond must be >= 1, got {period}")
        return cls(msgs_per_period=_field(kind, obj, "dispatchThrottlingRateInMsg", int, -1),
                   bytes_per_period=_field(kind, obj, "dispatchThrottlingRateInByte", int, -1),
                   relative_to_publish_rate=_field(kind, obj, "relativeToPublishRate", bool, False),
                   period_s=period)


def _rate_map(kind: str, obj: dict[str, Any], key: str, decode) -> dict:
    """A map of cluster name to a rate (Pulsar keeps rate limits per cluster); empty when absent."""
    value = _field(kind, obj, key, dict, dict, nullable=True) or {}
    return {cluster: decode(f"{kind}.{key}.{cluster}", rate) for cluster, rate in value.items()}


def _rate_map_json(rates: dict) -> dict[str, Any]:
    return {cluster: rate.to_dict() for cluster, rate in sorted(rates.items())}


@dataclass(frozen=True)
class DelayedDeliveryPolicies:
    """A namespace's delayed delivery (Pulsar ``DelayedDeliveryPolicies``): ``active`` (off: messages with a
    deliver time are delivered at once), ``tick_time_ms`` (the tracker's timer fires at most this often) and
    ``max_delay_ms`` (> 0: a SEND whose deliver time is further than that past its publish time is refused)."""

    active: bool = True
    tick_time_ms: int = 1000
    max_delay_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"active": self.active, "tickTime": self.tick_time_ms, "maxDeliveryDelayInMillis": self.max_delay_ms}

    @classmethod
    def from_dict(cls, kind: str, obj: Any) -> "DelayedDeliveryPolicies":
        if not isinstance(obj, dict):
            raise InvalidMetadataError(f"{kind}: delayed delivery policies must be an object, got {type(obj).__name__}")
        return cls(active=_field(kind, obj, "active", bool, True),
                   tick_time_ms=_field(kind, obj, "tickTime", int, 1000),
                   max_delay_ms=_field(kind, obj, "maxDeliveryDelayInMillis", int, 0))


INACTIVE_TOPIC_DELETE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")
"""Pulsar's ``InactiveTopicDeleteMode`` names."""


@dataclass(frozen=True)
class InactiveTopicPolicies:
    """When an idle topic is deleted (Pulsar ``InactiveTopicPolicies``): ``delete_while_inactive`` switches it
    on, ``max_inactive_duration_s`` is how long it must have been idle, ``delete_mode`` what idle means about
    subscriptions (none at all, or all caught up)."""

    delete_mode: str = "delete_when_no_subscriptions"
    max_inactive_duration_s: int = 60
    delete_while_inactive: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"inactiveTopicDeleteMode": self.delete_mode, "maxInactiveDurationSeconds": self.max_inactive_duration_s,
                "deleteWhileInactive": self.delete_while_inactive}

    @classmethod
    def from_dict(cls, kind: str, obj: Any) -> "InactiveTopicPolicies":
        if not isinstance(obj, dict):
            raise InvalidMetadataError(f"{kind}: inactive topic policies must be an object, got {type(obj).__name__}")
        mode = _field(kind, obj, "inactiveTopicDeleteMode", str, "delete_when_no_subscriptions")
        if mode not in INACTIVE_TOPIC_DELETE_MODES:
            raise InvalidMetadataError(f"{kind}: unknown inactiveTopicDeleteMode {mode!r}")
        return cls(delete_mode=mode, max_inactive_duration_s=_field(kind, obj, "maxInactiveDurationSeconds", int, 60),
                   delete_while_inactive=_field(kind, obj, "deleteWhileInactive", bool, False))


def _optional_object(kind: str, obj: dict[str, Any], key: str, decode):
    value = _field(kind, obj, key, dict, None, nullable=True)
    return None if value is None else decode(f"{kind}.{key}", value)


@dataclass
class Policies:
    """A namespace's policies (Pulsar ``Policies``; only the fields Magnetar uses so far — add more freely).

    ``None`` means "not set at namespace level" (the broker default applies), as in Pulsar.

    Permissions are Pulsar's ``auth_policies``: ``auth_roles`` is its ``namespace_auth`` (role -> actions on
    every topic of the namespace), ``destination_auth`` grants on single topics, keyed by the full topic name
    (``persistent://t/ns/x``; a partitioned topic's name covers its partitions), ``subscription_auth_roles``
    the roles allowed to consume on a subscription name (none listed: any role with ``consume``). Actions are
    :data:`AUTH_ACTIONS`; an unknown one is corrupt metadata.
    """

    replication_clusters: list[str] = field(default_factory=list)
    deduplication_enabled: bool | None = None
    message_ttl_in_seconds: int | None = None
    retention_time_in_minutes: int = 0
    retention_size_in_mb: int = 0
    bundles: dict | None = None
    auth_roles: dict[str, list[str]] = field(default_factory=dict)  # Pulsar namespace_auth: role -> actions
    destination_auth: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # topic -> role -> actions
    subscription_auth_roles: dict[str, list[str]] = field(default_factory=dict)  # subscription -> roles
    backlog_quota_map: dict[str, BacklogQuota] = field(default_factory=dict)
    schema_compatibility_strategy: str = "UNDEFINED"
    is_allow_auto_update_schema: bool | None = None
    schema_validation_enforced: bool = False
    publish_max_message_rate: dict[str, PublishRate] = field(default_factory=dict)  # by cluster
    topic_dispatch_rate: dict[str, DispatchRate] = field(default_factory=dict)  # by cluster
    subscription_dispatch_rate: dict[str, DispatchRate] = field(default_factory=dict)  # by cluster
    delayed_delivery_policies: DelayedDeliveryPolicies | None = None
    inactive_topic_policies: InactiveTopicPolicies | None = None
    compaction_threshold: int | None = None  # bytes; compaction runs by itself above it (0: never)

    def to_json(self) -> bytes:
        return _dumps("Policies", {
            "compaction_threshold": self.compaction_threshold,
            "delayed_delivery_policies": (None if self.delayed_delivery_policies is None
                                          else self.delayed_delivery_policies.to_dict()),
            "inactive_topic_policies": (None if self.inactive_topic_policies is None
                                        else self.inactive_topic_policies.to_dict()),
            "publishMaxMessageRate": _rate_map_json(self.publish_max_message_rate),
            "topicDispatchRate": _rate_map_json(self.topic_dispatch_rate),
            "subscriptionDispatchRate": _rate_map_json(self.subscription_dispatch_rate),
            "schema_compatibility_strategy": self.schema_compatibility_strategy,
            "is_allow_auto_update_schema": self.is_allow_auto_update_schema,
            "schema_validation_enforced": self.schema_validation_enforced,
            "backlog_quota_map": _quota_map_json(self.backlog_quota_map),
            "replication_clusters": list(self.replication_clusters),
            "deduplicationEnabled": self.deduplication_enabled,
            "message_ttl_in_seconds": self.message_ttl_in_seconds,
            "retention_policies": {"retentionTimeInMinutes": self.retention_time_in_minutes,
                                   "retentionSizeInMB": self.retention_size_in_mb},
            "bundles": self.bundles,
            "auth_policies": {
                "namespace_auth": {r: list(a) for r, a in self.auth_roles.items()},
                "destination_auth": {t: {r: list(a) for r, a in grants.items()}
                                     for t, grants in self.destination_auth.items()},
                "subscription_auth_roles": {s: list(r) for s, r in self.subscription_auth_roles.items()},
            },
        })

    @classmethod
    def from_json(cls, data: bytes) -> "Policies":
        k, o = "Policies", _loads("Policies", data)
        retention = _field(k, o, "retention_policies", dict, dict, nullable=True) or {}
        auth = _field(k, o, "auth_policies", dict, dict, nullable=True) or {}
        ka = k + ".auth_policies"
        namespace_auth = _field(ka, auth, "namespace_auth", dict, dict, nullable=True) or {}
        auth_roles = _grants(f"{ka}.namespace_auth", namespace_auth)
        destination_auth: dict[str, dict[str, list[str]]] = {}
        for topic, grants in (_field(ka, auth, "destination_auth", dict, dict, nullable=True) or {}).items():
            if not isinstance(grants, dict):
                raise InvalidMetadataError(f"{ka}.destination_auth['{topic}'] must map roles to actions, "
                                           f"got {type(grants).__name__}")
            destination_auth[topic] = _grants(f"{ka}.destination_auth['{topic}']", grants)
        subscription_auth_roles: dict[str, list[str]] = {}
        for sub, roles in (_field(ka, auth, "subscription_auth_roles", dict, dict, nullable=True) or {}).items():
            if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
                raise InvalidMetadataError(f"{ka}.subscription_auth_roles['{sub}'] must be a list of strings")
            subscription_auth_roles[sub] = list(roles)
        return cls(
            replication_clusters=_str_list(k, o, "replication_clusters"),
            deduplication_enabled=_field(k, o, "deduplicationEnabled", bool, None, nullable=True),
            message_ttl_in_seconds=_field(k, o, "message_ttl_in_seconds", int, None, nullable=True),
            retention_time_in_minutes=_field(k + ".retention_policies", retention, "retentionTimeInMinutes", int, 0),
            retention_size_in_mb=_field(k + ".retention_policies", retention, "retentionSizeInMB", int, 0),
            bundles=_field(k, o, "bundles", dict, None, nullable=True),
            auth_roles=auth_roles,
            destination_auth=destination_auth,
            subscription_auth_roles=subscription_auth_roles,
            backlog_quota_map=_quota_map(k, o, "backlog_quota_map") or {},
            schema_compatibility_strategy=_schema_strategy(k, o),
            is_allow_auto_update_schema=_field(k, o, "is_allow_auto_update_schema", bool, None, nullable=True),
            schema_validation_enforced=_field(k, o, "schema_validation_enforced", bool, False),
            publish_max_message_rate=_rate_map(k, o, "publishMaxMessageRate", PublishRate.from_dict),
            topic_dispatch_rate=_rate_map(k, o, "topicDispatchRate", DispatchRate.from_dict),
            subscription_dispatch_rate=_rate_map(k, o, "subscriptionDispatchRate", DispatchRate.from_dict),
            delayed_delivery_policies=_optional_object(k, o, "delayed_delivery_policies",
                                                       DelayedDeliveryPolicies.from_dict),
            inactive_topic_policies=_optional_object(k, o, "inactive_topic_policies", InactiveTopicPolicies.from_dict),
            compaction_threshold=_field(k, o, "compaction_threshold", int, None, nullable=True),
        )


def _grants(kind: str, obj: dict[str, Any]) -> dict[str, list[str]]:
    """A map of role to actions (Pulsar ``Map<String, Set<AuthAction>>``); every action one of AUTH_ACTIONS."""
    out: dict[str, list[str]] = {}
    for role, actions in obj.items():
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            raise InvalidMetadataError(f"{kind}['{role}'] must be a list of strings")
        unknown = [a for a in actions if a not in AUTH_ACTIONS]
        if unknown:
            raise InvalidMetadataError(f"{kind}['{role}']: unknown action(s) {', '.join(map(repr, unknown))} "
                                       f"(expected {', '.join(AUTH_ACTIONS)})")
        out[role] = list(actions)
    return out


def _schema_strategy(kind: str, obj: dict[str, Any]) -> str:
    value = _field(kind, obj, "schema_compatibility_strategy", str, "UNDEFINED", nullable=True) or "UNDEFINED"
    if value not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise InvalidMetadataError(f"{kind}: unknown schema_compatibility_strategy {value!r}")
    return value


@dataclass
class TopicPolicies:
    """A topic's own policies, overriding its namespace's (Pulsar ``TopicPolicies``; only the fields Magnetar
    uses so far — add more freely).

    ``None`` means "not set at topic level": the namespace's policy applies, as in Pulsar. The policies of a
    partitioned topic are stored under its base name and cover every partition.
    """

    replication_clusters: list[str] | None = None
    backlog_quota_map: dict[str, BacklogQuota] | None = None
    delayed_delivery_enabled: bool | None = None
    delayed_delivery_tick_time_ms: int | None = None
    delayed_delivery_max_delay_ms: int | None = None
    compaction_threshold: int | None = None
    publish_rate: PublishRate | None = None  # Pulsar publishRate (one rate, not per cluster)
    dispatch_rate: DispatchRate | None = None  # Pulsar dispatchRate: the topic's subscriptions together
    subscription_dispatch_rate: DispatchRate | None = None  # Pulsar subscriptionDispatchRate: each subscription
    inactive_topic_policies: InactiveTopicPolicies | None = None
    schema_compatibility_strategy: str | None = None  # UNDEFINED counts as not set, as in Pulsar
    schema_validation_enforced: bool | None = None

    def is_empty(self) -> bool:
        """True when nothing is set at topic level (every field None)."""
        return all(getattr(self, f.name) is None for f in dataclasses.fields(self))

    def to_json(self) -> bytes:
        clusters = None if self.replication_clusters is None else list(self.replication_clusters)
        fields: dict[str, Any] = {"replicationClusters": clusters}
        if self.backlog_quota_map is not None:  # Pulsar's spelling, capital L included
            fields["backLogQuotaMap"] = _quota_map_json(self.backlog_quota_map)
        for key, value in (("delayedDeliveryEnabled", self.delayed_delivery_enabled),
                           ("delayedDeliveryTickTimeMillis", self.delayed_delivery_tick_time_ms),
                           ("delayedDeliveryMaxDelayInMillis", self.delayed_delivery_max_delay_ms),
                           ("compactionThreshold", self.compaction_threshold),
                           ("publishRate", None if self.publish_rate is None else self.publish_rate.to_dict()),
                           ("dispatchRate", None if self.dispatch_rate is None else self.dispatch_rate.to_dict()),
                           ("subscriptionDispatchRate", None if self.subscription_dispatch_rate is None
                            else self.subscription_dispatch_rate.to_dict()),
                           ("inactiveTopicPolicies", None if self.inactive_topic_policies is None
                            else self.inactive_topic_policies.to_dict()),
                           ("schemaCompatibilityStrategy", self.schema_compatibility_strategy),
                           ("schemaValidationEnforced", self.schema_validation_enforced)):
            if value is not None:
                fields[key] = value
        return _dumps("TopicPolicies", fields)

    @classmethod
    def from_json(cls, data: bytes) -> "TopicPolicies":
        k, o = "TopicPolicies", _loads("TopicPolicies", data)
        return cls(replication_clusters=_str_list_or_none(k, o, "replicationClusters"),
                   backlog_quota_map=_quota_map(k, o, "backLogQuotaMap"),
                   delayed_delivery_enabled=_field(k, o, "delayedDeliveryEnabled", bool, None, nullable=True),
                   delayed_delivery_tick_time_ms=_field(k, o, "delayedDeliveryTickTimeMillis", int, None,
                                                        nullable=True),
                   delayed_delivery_max_delay_ms=_field(k, o, "delayedDeliveryMaxDelayInMillis", int, None,
                                                        nullable=True),
                   compaction_threshold=_field(k, o, "compactionThreshold", int, None, nullable=True),
                   publish_rate=_optional_object(k, o, "publishRate", PublishRate.from_dict),
                   dispatch_rate=_optional_object(k, o, "dispatchRate", DispatchRate.from_dict),
                   subscription_dispatch_rate=_optional_object(k, o, "subscriptionDispatchRate",
                                                               DispatchRate.from_dict),
                   inactive_topic_policies=_optional_object(k, o, "inactiveTopicPolicies",
                                                            InactiveTopicPolicies.from_dict),
                   schema_compatibility_strategy=_topic_schema_strategy(k, o),
                   schema_validation_enforced=_field(k, o, "schemaValidationEnforced", bool, None, nullable=True))


def _topic_schema_strategy(kind: str, obj: dict[str, Any]) -> str | None:
    value = _field(kind, obj, "schemaCompatibilityStrategy", str, None, nullable=True)
    if value is not None and value not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise InvalidMetadataError(f"{kind}: unknown schemaCompatibilityStrategy {value!r}")
    return value


@dataclass(frozen=True)
class PartitionedTopicMetadata:
    """The partition count of a partitioned topic (Pulsar ``PartitionedTopicMetadata``)."""

    partitions: int

    def __post_init__(self) -> None:
        if type(self.partitions) is not int or self.partitions < 1:
            raise InvalidMetadataError(f"partitions must be a positive integer, got {self.partitions!r}")

    def to_json(self) -> bytes:
        return _dumps("PartitionedTopicMetadata", {"partitions": self.partitions})

    @classmethod
    def from_json(cls, data: bytes) -> "PartitionedTopicMetadata":
        k = "PartitionedTopicMetadata"
        return cls(partitions=_field(k, _loads(k, data), "partitions", int))
