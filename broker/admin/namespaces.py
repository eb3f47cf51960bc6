"""``/admin/v2/namespaces``: namespaces and their policies (Pulsar ``Policies`` JSON names), bundles and
bundle unloading.

Policy writes are read-modify-write by compare-and-set in the configuration store, so two admins changing
different policies of one namespace at once both land. Brokers follow policy changes through watches.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from config_store import NodeExistsError, NotEmptyError, NotFoundError, Policies

from ..bundles import bundles_data, parse_bundles_data
from ..service.policies.backlog_quota import retention_conflict
from .body import ABSENT, expect_bool, expect_int, expect_object, expect_str_list, read_json
from .context import AdminContext, redirect_location
from .errors import RestError, bad_request, conflict, not_found, precondition_failed
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import set_namespace_policy
from .namespace_args import update_namespace as _update
from .replication import check_clusters, replication_clusters
from .tenants import tenant_name
from .topics import namespace_topics

routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
_INT32_MAX = (1 << 31) - 1


def policies_json(ctx: AdminContext, policies: Policies) -> dict[str, Any]:
    out = json.loads(policies.to_json())
    out.pop("version", None)
    if out.get("bundles") is None:
        out["bundles"] = ctx.default_bundles_data()
    return out


def _retention(obj: Any) -> tuple[int, int]:
    obj = expect_object(obj, "the retention policies")
    for key in ("retentionTimeInMinutes", "retentionSizeInMB"):
        if key not in obj:
            raise bad_request(f"retention policies need {key}")
    return (expect_int(obj["retentionTimeInMinutes"], "retentionTimeInMinutes", minimum=-1, maximum=_INT32_MAX),
            expect_int(obj["retentionSizeInMB"], "retentionSizeInMB", minimum=-1))


# ---------------------------------------------------------------------------------------------- namespaces


@routes.get("/admin/v2/namespaces/{tenant}")
async def list_namespaces(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant = tenant_name(request)
    try:
        await ctx.configuration.get_tenant(tenant)
    except NotFoundError:
        raise not_found(f"Tenant {tenant} does not exist") from None
    return web.json_response([f"{tenant}/{ns}" for ns in await ctx.configuration.list_namespaces(tenant)])


@routes.put(NS)
async def create_namespace(request: web.Request) -> web.Response:
    """Creates a namespace; the optional body is a Policies object (bundles, replication_clusters,
    deduplicationEnabled, message_ttl_in_seconds, retention_policies; other fields are ignored)."""
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    body = await read_json(request, required=False)
    obj = {} if body is ABSENT else expect_object(body, "the namespace policies")
    policies = Policies()
    bundles = obj.get("bundles")
    try:
        policies.bundles = bundles_data(parse_bundles_data(bundles)) if bundles is not None \
            else ctx.default_bundles_data()
    except ValueError as e:
        raise bad_request(str(e)) from None
    if obj.get("replication_clusters") is not None:
        policies.replication_clusters = expect_str_list(obj["replication_clusters"], "replication_clusters")
    if obj.get("deduplicationEnabled") is not None:
        policies.deduplication_enabled = expect_bool(obj["deduplicationEnabled"], "deduplicationEnabled")
    if obj.get("message_ttl_in_seconds") is not None:
        policies.message_ttl_in_seconds = expect_int(obj["message_ttl_in_seconds"], "message_ttl_in_seconds",
                                                     minimum=0, maximum=_INT32_MAX)
    if obj.get("retention_policies") is not None:
        policies.retention_time_in_minutes, policies.retention_size_in_mb = _retention(obj["retention_policies"])
    try:
        await ctx.configuration.get_tenant(tenant)
    except NotFoundError:
        raise not_found(f"Tenant {tenant} does not exist") from None
    if not policies.replication_clusters:
        policies.replication_clusters = [ctx.cluster]
    await check_clusters(ctx, tenant, policies.replication_clusters)
    try:
        await ctx.configuration.create_namespace(tenant, namespace, policies)
    except NodeExistsError:
        raise conflict(f"Namespace {tenant}/{namespace} already exists") from None
    except NotFoundError:
        raise not_found(f"Tenant {tenant} does not exist") from None
    return web.Response(status=204)


@routes.get(NS)
async def get_policies(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    return web.json_response(policies_json(ctx, await ctx.policies(tenant, namespace)))


@routes.delete(NS)
async def delete_namespace(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    await ctx.policies(tenant, namespace)
    topics = await namespace_topics(ctx, tenant, namespace)
    if topics:
        raise conflict(f"Cannot delete non empty namespace {tenant}/{namespace}: it has topics {topics[:10]}")
    try:
        await ctx.configuration.delete_namespace(tenant, namespace)
    except NotFoundError:
        raise not_found(f"Namespace {tenant}/{namespace} does not exist") from None
    except NotEmptyError as e:
        raise conflict(f"Cannot delete non empty namespace {tenant}/{namespace}: {e}") from None
    return web.Response(status=204)


@routes.get(NS + "/topics")
async def list_namespace_topics(request: web.Request) -> web.Response:
    """Every topic of the namespace (both domains unless ``mode`` says PERSISTENT or NON_PERSISTENT)."""
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    await ctx.policies(tenant, namespace)
    mode = request.query.get("mode", "PERSISTENT").upper()
    domains = {"PERSISTENT": ("persistent",), "NON_PERSISTENT": ("non-persistent",),
               "ALL": ("persistent", "non-persistent")}.get(mode)
    if domains is None:
        raise bad_request(f"mode must be PERSISTENT, NON_PERSISTENT or ALL, got {mode!r}")
    found: list[str] = []
    for domain in domains:
        found += await namespace_topics(ctx, tenant, namespace, domain)
    return web.json_response(found)


@routes.get(NS + "/bundles")
async def get_bundles(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    policies = await ctx.policies(tenant, namespace)
    return web.json_response(policies.bundles if policies.bundles is not None else ctx.default_bundles_data())


# ---------------------------------------------------------------------------------------------- policies


@routes.get(NS + "/deduplication")
async def get_deduplication(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return web.json_response((await ctx.policies(*_names(request))).deduplication_enabled)


@routes.post(NS + "/deduplication")
async def set_deduplication(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    enabled = expect_bool(await read_json(request), "the deduplication flag")

    await set_namespace_policy(ctx, tenant, namespace, "deduplication_enabled", enabled)
    return web.Response(status=204)


@routes.delete(NS + "/deduplication")
async def remove_deduplication(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)

    await set_namespace_policy(ctx, tenant, namespace, "deduplication_enabled", None)
    return web.Response(status=204)


@routes.get(NS + "/retention")
async def get_retention(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    p = await ctx.policies(*_names(request))
    return web.json_response({"retentionTimeInMinutes": p.retention_time_in_minutes,
                              "retentionSizeInMB": p.retention_size_in_mb})


@routes.post(NS + "/retention")
async def set_retention(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    minutes, mb = _retention(await read_json(request))

    def apply(p: Policies) -> Policies:
        for quota in p.backlog_quota_map.values():  # as Pulsar: retention must keep more than a backlog may hold
            reason = retention_conflict(quota, retention_time_minutes=minutes, retention_size_mb=mb)
            if reason is not None:
                raise precondition_failed(f"Retention Quota must exceed configured backlog quota for namespace: "
                                          f"{reason}")
        p.retention_time_in_minutes, p.retention_size_in_mb = minutes, mb
        return p

    await _update(ctx, tenant, namespace, apply)
    return web.Response(status=204)


@routes.delete(NS + "/retention")
async def remove_retention(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)

    def apply(p: Policies) -> Policies:
        p.retention_time_in_minutes, p.retention_size_in_mb = 0, 0
        return p

    await _update(ctx, tenant, namespace, apply)
    return web.Response(status=204)


@routes.get(NS + "/messageTTL")
async def get_message_ttl(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return web.json_response((await ctx.policies(*_names(request))).message_ttl_in_seconds)


@routes.post(NS + "/messageTTL")
async def set_message_ttl(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    seconds = expect_int(await read_json(request), "the message TTL (seconds)", minimum=0, maximum=_INT32_MAX)

    await set_namespace_policy(ctx, tenant, namespace, "message_ttl_in_seconds", seconds)
    return web.Response(status=204)


@routes.delete(NS + "/messageTTL")
async def remove_message_ttl(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)

    await set_namespace_policy(ctx, tenant, namespace, "message_ttl_in_seconds", None)
    return web.Response(status=204)


@routes.get(NS + "/replication")
async def get_replication(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return web.json_response((await ctx.policies(*_names(request))).replication_clusters)


@routes.post(NS + "/replication")
async def set_replication(request: web.Request) -> web.Response:
    """Sets the namespace's replication clusters (stored; the replicators follow it)."""
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    clusters = replication_clusters(await read_json(request))
    await ctx.policies(tenant, namespace)
    await check_clusters(ctx, tenant, clusters)

    def apply(p: Policies) -> Policies:
        p.replication_clusters = list(clusters)
        return p

    await _update(ctx, tenant, namespace, apply)
    return web.Response(status=204)


# ---------------------------------------------------------------------------------------------- unloading


@routes.put(NS + "/unload")
async def unload_namespace(request: web.Request) -> web.Response:
    """Unloads every owned bundle of the namespace, each at its owner."""
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    await ctx.policies(tenant, namespace)
    bundles = await ctx.ownership.namespace_bundles(tenant, namespace)
    owned = set(await ctx.brokers.owned_bundles(tenant, namespace))
    failures: list[str] = []
    limit = asyncio.Semaphore(ctx.fanout_concurrency)

    async def one(bundle_name: str) -> None:
        async with limit:
            url = f"{ctx.self_url()}/admin/v2/namespaces/{tenant}/{namespace}/{bundle_name}/unload"
            async with ctx.client().put(url) as response:
                if response.status >= 400:
                    failures.append(f"{bundle_name}: {response.status} {await response.text()}")

    await asyncio.gather(*(one(b.name) for b in bundles.bundles if b.name in owned))
    if failures:
        raise RestError(500, f"some bundles could not be unloaded: {'; '.join(failures)}")
    return web.Response(status=204)


@routes.put(NS + "/{bundle}/unload")
async def unload_bundle(request: web.Request) -> web.Response:
    """Unloads one bundle at its owner (307 there when another broker owns it; nothing if unowned)."""
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    await ctx.policies(tenant, namespace)
    bundles = await ctx.ownership.namespace_bundles(tenant, namespace)
    bundle = bundles.get(request.match_info["bundle"])
    if bundle is None:
        raise not_found(f"Namespace {tenant}/{namespace} has no bundle {request.match_info['bundle']!r} "
                        f"(bundles: {', '.join(b.name for b in bundles.bundles)})")
    if bundle in ctx.ownership.owned_bundles():
        await ctx.ownership.unload(bundle)
        return web.Response(status=204)
    owner = await ctx.brokers.get_owner(tenant, namespace, bundle.name)
    if owner is None or owner.value.broker_id == ctx.ownership.broker_id:
        return web.Response(status=204)  # nobody serves it (or we are releasing it already)
    raise web.HTTPTemporaryRedirect(redirect_location(request, owner.value.http_url, authoritative=False,
                                                      base_url_tls=owner.value.http_url_tls))


