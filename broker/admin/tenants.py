"""``/admin/v2/tenants``: tenants and who may use them (Pulsar ``TenantInfo``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from config_store import NodeExistsError, NotEmptyError, NotFoundError, TenantInfo
from config_store.configuration import check_name
from config_store.errors import InvalidMetadataError

from .body import ABSENT, expect_object, expect_str_list, read_json
from .errors import bad_request, conflict, not_found, precondition_failed
from .keys import CONTEXT

routes = web.RouteTableDef()


def tenant_json(info: TenantInfo) -> dict[str, Any]:
    return {"adminRoles": list(info.admin_roles), "allowedClusters": list(info.allowed_clusters)}


def tenant_name(request: web.Request) -> str:
    name = request.match_info["tenant"]
    try:
        return check_name("tenant", name)
    except InvalidMetadataError as e:
        raise bad_request(str(e)) from None


async def _parse_tenant_info(request: web.Request, body: Any, *, default: TenantInfo) -> TenantInfo:
    """TenantInfo from a body; allowed clusters must exist (412, as Pulsar)."""
    ctx = request.app[CONTEXT]
    if body is ABSENT:
        obj: dict[str, Any] = {}
    else:
        obj = expect_object(body, "the tenant info")
    roles = expect_str_list(obj["adminRoles"], "adminRoles") if "adminRoles" in obj else default.admin_roles
    clusters = (expect_str_list(obj["allowedClusters"], "allowedClusters") if "allowedClusters" in obj
                else default.allowed_clusters)
    if not clusters:
        raise precondition_failed("allowedClusters can not be empty")
    known = set(await ctx.configuration.list_clusters())
    missing = sorted(set(clusters) - known)
    if missing:
        raise precondition_failed(f"Clusters {missing} do not exist")
    return TenantInfo(admin_roles=roles, allowed_clusters=clusters)


@routes.get("/admin/v2/tenants")
async def list_tenants(request: web.Request) -> web.Response:
    return web.json_response(await request.app[CONTEXT].configuration.list_tenants())


@routes.get("/admin/v2/tenants/{tenant}")
async def get_tenant(request: web.Request) -> web.Response:
    name = tenant_name(request)
    try:
        info = (await request.app[CONTEXT].configuration.get_tenant(name)).value
    except NotFoundError:
        raise not_found(f"Tenant {name} does not exist") from None
    return web.json_response(tenant_json(info))


@routes.put("/admin/v2/tenants/{tenant}")
async def create_tenant(request: web.Request) -> web.Response:
    """Creates a tenant; without a body (or without allowedClusters) it may use this broker's cluster."""
    ctx = request.app[CONTEXT]
    name = tenant_name(request)
    info = await _parse_tenant_info(request, await read_json(request, required=False),
                                    default=TenantInfo(allowed_clusters=[ctx.cluster]))
    try:
        await ctx.configuration.create_tenant(name, info)
    except NodeExistsError:
        raise conflict(f"Tenant {name} already exists") from None
    return web.Response(status=204)


@routes.post("/admin/v2/tenants/{tenant}")
async def update_tenant(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    name = tenant_name(request)
    body = await read_json(request)
    try:
        current = (await ctx.configuration.get_tenant(name)).value
    except NotFoundError:
        raise not_found(f"Tenant {name} does not exist") from None
    info = await _parse_tenant_info(request, body, default=current)
    try:
        await ctx.configuration.update_tenant(name, lambda _old: TenantInfo(list(info.admin_roles),
                                                                             list(info.allowed_clusters)))
    except NotFoundError:
        raise not_found(f"Tenant {name} does not exist") from None
    return web.Response(status=204)


@routes.delete("/admin/v2/tenants/{tenant}")
async def delete_tenant(request: web.Request) -> web.Response:
    name = tenant_name(request)
    try:
        await request.app[CONTEXT].configuration.delete_tenant(name)
    except NotFoundError:
        raise not_found(f"Tenant {name} does not exist") from None
    except NotEmptyError as e:
        raise conflict(f"The tenant still has active namespaces: {e}") from None
    return web.Response(status=204)
