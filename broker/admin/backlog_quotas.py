"""Backlog quotas over REST, at Pulsar's paths and with its JSON (``BacklogQuota``: ``limitSize`` bytes,
``limitTime`` seconds, ``policy``; ``limit`` is the old name of ``limitSize``):

* ``POST|DELETE /admin/v2/namespaces/{tenant}/{namespace}/backlogQuota?backlogQuotaType=...`` and
  ``GET .../backlogQuotaMap`` (the namespace's ``backlog_quota_map``);
* ``POST|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/backlogQuota?backlogQuotaType=...`` and
  ``GET .../backlogQuotaMap?applied=`` (the topic's own quotas, overriding its namespace's type by type).

``backlogQuotaType`` is ``destination_storage`` (the default) or ``message_age``. A malformed body is a 400
naming the field; a quota at or above the namespace's retention (size or time) is a 412, as in Pulsar; in
both cases nothing is stored. Writes are read-modify-write by compare-and-set, like every other policy.
"""

from __future__ import annotations

from typing import Any, Callable

from aiohttp import web

from config_store import BacklogQuota, Policies, TopicPolicies
from config_store.models import BACKLOG_QUOTA_POLICIES, BACKLOG_QUOTA_TYPES
from magnetar.topic_name import TopicName

from ..service.policies.backlog_quota import QuotaDefaults, QuotaType, effective_quota, retention_conflict
from .body import expect_int, expect_object, query_bool, read_json, topic_of
from .context import AdminContext
from .errors import bad_request, precondition_failed
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import own_topic_policies, update_topic_policies
from .namespace_args import update_namespace as _update_namespace


routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


# ---------------------------------------------------------------------------------------------- parsing


def parse_backlog_quota(body: Any) -> BacklogQuota:
    """A BacklogQuota from a request body; 400 naming the field when it is malformed. A limit left out is
    -1 (none); ``limitSize`` wins over ``limit`` when both are given."""
    obj = expect_object(body, "the backlog quota")
    size = -1
    for key in ("limit", "limitSize"):  # later wins
        if obj.get(key) is not None:
            size = expect_int(obj[key], key, minimum=-1, maximum=_INT64_MAX)
    limit_time = -1
    if obj.get("limitTime") is not None:
        limit_time = expect_int(obj["limitTime"], "limitTime", minimum=-1, maximum=_INT32_MAX)
    policy = obj.get("policy")
    if policy is None:
        raise bad_request(f"the backlog quota needs a policy: one of {', '.join(BACKLOG_QUOTA_POLICIES)}")
    if not isinstance(policy, str) or policy not in BACKLOG_QUOTA_POLICIES:
        raise bad_request(f"policy must be one of {', '.join(BACKLOG_QUOTA_POLICIES)}, got {policy!r}")
    return BacklogQuota(limit_size_bytes=size, limit_time_s=limit_time, policy=policy)


def quota_type_of(request: web.Request) -> str:
    """The ``backlogQuotaType`` query parameter (default ``destination_storage``)."""
    value = request.query.get("backlogQuotaType", "destination_storage")
    if value not in BACKLOG_QUOTA_TYPES:
        raise bad_request(f"backlogQuotaType must be one of {', '.join(BACKLOG_QUOTA_TYPES)}, got {value!r}")
    return value


def quota_map_json(quotas: dict[str, BacklogQuota] | None) -> dict[str, Any]:
    return {t: q.to_dict() for t, q in sorted((quotas or {}).items())}


def _check_retention(quota: BacklogQuota, policies: Policies) -> None:
    reason = retention_conflict(quota, retention_time_minutes=policies.retention_time_in_minutes,
                                retention_size_mb=policies.retention_size_in_mb)
    if reason is not None:
        raise precondition_failed(f"Backlog Quota exceeds configured retention quota for namespace: {reason}; "
                                  "increase the retention and retry")


def _defaults(ctx: AdminContext) -> QuotaDefaults:
    return getattr(ctx.service, "backlog_quota_defaults", None) or QuotaDefaults()


# ---------------------------------------------------------------------------------------------- namespaces


@routes.get(NS + "/backlogQuotaMap")
async def get_namespace_backlog_quotas(request: web.Request) -> web.Response:
    """The namespace's quotas by type (``{}`` when none is set: the broker's defaults apply)."""
    ctx = request.app[CONTEXT]
    return web.json_response(quota_map_json((await ctx.policies(*_names(request))).backlog_quota_map))


@routes.post(NS + "/backlogQuota")
async def set_namespace_backlog_quota(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    quota_type = quota_type_of(request)
    quota = parse_backlog_quota(await read_json(request))
    _check_retention(quota, await ctx.policies(tenant, namespace))

    def apply(p: Policies) -> Policies:
        _check_retention(quota, p)  # again on what is written: retention may have changed meanwhile
        p.backlog_quota_map = {**p.backlog_quota_map, quota_type: quota}
        return p

    await _update_namespace(ctx, tenant, namespace, apply)
    return web.Response(status=204)


@routes.delete(NS + "/backlogQuota")
async def remove_namespace_backlog_quota(request: web.Request) -> web.Response:
    """Removes the namespace's quota of that type (204 whether or not one was set)."""
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    quota_type = quota_type_of(request)

    def apply(p: Policies) -> Policies:
        p.backlog_quota_map = {t: q for t, q in p.backlog_quota_map.items() if t != quota_type}
        return p

    await _update_namespace(ctx, tenant, namespace, apply)
    return web.Response(status=204)


# ---------------------------------------------------------------------------------------------- topics


async def _own_quotas(ctx: AdminContext, topic: TopicName) -> dict[str, BacklogQuota] | None:
    own = await own_topic_policies(ctx, topic)
    return None if own is None else own.backlog_quota_map


async def _set_topic_quotas(ctx: AdminContext, topic: TopicName,
                            fn: Callable[[dict[str, BacklogQuota]], dict[str, BacklogQuota]]) -> None:
    def apply(p: TopicPolicies) -> TopicPolicies:
        quotas = fn(dict(p.backlog_quota_map or {}))
        p.backlog_quota_map = quotas or None  # none left: nothing set at topic level
        return p

    await update_topic_policies(ctx, topic, apply)


@routes.get(T + "/backlogQuotaMap")
async def get_topic_backlog_quotas(request: web.Request) -> web.Response:
    """The topic's own quotas by type; with ``applied=true`` the quota each type applies (topic, else
    namespace, else the broker's default). The topic need not exist yet."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    namespace_policies = await ctx.policies(topic.tenant, topic.namespace_portion)
    own = await _own_quotas(ctx, topic)
    if not query_bool(request, "applied"):
        return web.json_response(quota_map_json(own))
    defaults = _defaults(ctx)
    return web.json_response({t.value: effective_quota(t, own, namespace_policies.backlog_quota_map,
                                                       defaults).to_dict() for t in QuotaType})


@routes.post(T + "/backlogQuota")
async def set_topic_backlog_quota(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    quota_type = quota_type_of(request)
    quota = parse_backlog_quota(await read_json(request))
    _check_retention(quota, await ctx.policies(topic.tenant, topic.namespace_portion))
    await _set_topic_quotas(ctx, topic, lambda quotas: {**quotas, quota_type: quota})
    return web.Response(status=204)


@routes.delete(T + "/backlogQuota")
async def remove_topic_backlog_quota(request: web.Request) -> web.Response:
    """Removes the topic's quota of that type: the namespace's applies again (204 if none was set)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    quota_type = quota_type_of(request)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    await _set_topic_quotas(ctx, topic, lambda quotas: {t: q for t, q in quotas.items() if t != quota_type})
    return web.Response(status=204)
