"""``/admin/v2/clusters``: the regions registered in the configuration store (Pulsar ``ClusterData``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from config_store import ClusterData, NodeExistsError, NotFoundError
from config_store.configuration import check_name
from config_store.errors import InvalidMetadataError

from .body import expect_object, expect_str, read_json
from .errors import bad_request, conflict, not_found, precondition_failed
from .keys import CONTEXT

routes = web.RouteTableDef()

# JSON name -> ClusterData attribute. Other ClusterData fields of Pulsar are accepted and ignored (Pulsar's
# JSON mapper ignores unknown properties too), so pulsar-admin's full bodies work.
_FIELDS = {"serviceUrl": "service_url", "serviceUrlTls": "service_url_tls",
           "brokerServiceUrl": "broker_service_url", "brokerServiceUrlTls": "broker_service_url_tls"}


def cluster_json(data: ClusterData) -> dict[str, Any]:
    return {name: getattr(data, attr) for name, attr in _FIELDS.items()}


def _cluster_name(request: web.Request) -> str:
    name = request.match_info["cluster"]
    try:
        return check_name("cluster", name)
    except InvalidMetadataError as e:
        raise bad_request(str(e)) from None


def _parse_cluster_data(body: Any) -> dict[str, str]:
    obj = expect_object(body, "the cluster data")
    values = {}
    for name, attr in _FIELDS.items():
        if name in obj:
            value = expect_str(obj[name], name, nullable=True)
            if value and "://" not in value:
                raise bad_request(f"{name} must be a URL like http://host:8080 or pulsar://host:6650, got {value!r}")
            values[attr] = value
    return values


@routes.get("/admin/v2/clusters")
async def list_clusters(request: web.Request) -> web.Response:
    return web.json_response(await request.app[CONTEXT].configuration.list_clusters())


@routes.get("/admin/v2/clusters/{cluster}")
async def get_cluster(request: web.Request) -> web.Response:
    name = _cluster_name(request)
    try:
        data = (await request.app[CONTEXT].configuration.get_cluster(name)).value
    except NotFoundError:
        raise not_found(f"Cluster {name} does not exist") from None
    return web.json_response(cluster_json(data))


@routes.put("/admin/v2/clusters/{cluster}")
async def create_cluster(request: web.Request) -> web.Response:
    name = _cluster_name(request)
    values = _parse_cluster_data(await read_json(request))
    try:
        await request.app[CONTEXT].configuration.create_cluster(name, ClusterData(**values))
    except NodeExistsError:
        raise conflict(f"Cluster {name} already exists") from None
    return web.Response(status=204)


@routes.post("/admin/v2/clusters/{cluster}")
async def update_cluster(request: web.Request) -> web.Response:
    name = _cluster_name(request)
    values = _parse_cluster_data(await read_json(request))

    def apply(old: ClusterData) -> ClusterData:
        for attr, value in values.items():
            setattr(old, attr, value)
        return old

    try:
        await request.app[CONTEXT].configuration.update_cluster(name, apply)
    except NotFoundError:
        raise not_found(f"Cluster {name} does not exist") from None
    return web.Response(status=204)


@routes.delete("/admin/v2/clusters/{cluster}")
async def delete_cluster(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    name = _cluster_name(request)
    if name == ctx.cluster:
        raise precondition_failed(f"Cluster {name} is the cluster this broker serves; it cannot be deleted")
    try:
        await ctx.configuration.delete_cluster(name)
    except NotFoundError:
        raise not_found(f"Cluster {name} does not exist") from None
    return web.Response(status=204)
