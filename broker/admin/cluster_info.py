"""``/admin/v2/brokers`` and ``/admin/v2/bookies``: who is alive in this region."""

from __future__ import annotations

from aiohttp import web

from config_store import NotFoundError

from .context import redirect_location
from .errors import not_found
from .keys import CONTEXT

routes = web.RouteTableDef()


@routes.get("/admin/v2/brokers/health")
async def health(request: web.Request) -> web.Response:
    """Pulsar's broker health check: ``ok`` when this broker serves."""
    ctx = request.app[CONTEXT]
    ok, reason = (True, "ok") if ctx.health is None else ctx.health()
    return web.Response(text="ok" if ok else reason, status=200 if ok else 503)


@routes.get("/admin/v2/brokers/{cluster}")
async def list_brokers(request: web.Request) -> web.Response:
    """The live brokers of a cluster as ``host:http-port`` (another cluster: 307 to its serviceUrl)."""
    ctx = request.app[CONTEXT]
    cluster = request.match_info["cluster"]
    if cluster != ctx.cluster:
        try:
            data = (await ctx.configuration.get_cluster(cluster)).value
        except NotFoundError:
            raise not_found(f"Cluster {cluster} does not exist") from None
        if not data.service_url:
            raise not_found(f"Cluster {cluster} has no serviceUrl to ask")
        raise web.HTTPTemporaryRedirect(redirect_location(request, data.service_url, authoritative=False,
                                                          base_url_tls=data.service_url_tls))
    brokers = await ctx.brokers.list_brokers()
    return web.json_response(sorted(b.web_address for b in brokers.values() if b.cluster in ("", ctx.cluster)))


@routes.get("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces")
async def owned_namespaces(request: web.Request) -> web.Response:
    """The bundles a broker owns, as Pulsar's ``NamespaceOwnershipStatus`` map (asked at that broker)."""
    ctx = request.app[CONTEXT]
    cluster, broker = request.match_info["cluster"], request.match_info["broker"]
    if cluster != ctx.cluster:
        raise not_found(f"Cluster {cluster} is not this broker's cluster ({ctx.cluster})")
    me = ctx.ownership
    if broker not in (me.broker_id, me.http_url.split("://", 1)[-1]):
        for reg in (await ctx.brokers.list_brokers()).values():
            if broker in (reg.broker_id, reg.web_address):
                raise web.HTTPTemporaryRedirect(redirect_location(request, reg.web_service_url, authoritative=False,
                                                                  base_url_tls=reg.web_service_url_tls))
        raise not_found(f"Broker {broker} is not alive in cluster {cluster}")
    return web.json_response({str(b): {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
                              for b in me.owned_bundles()})


@routes.get("/admin/v2/bookies/all")
async def list_bookies(request: web.Request) -> web.Response:
    """Every registered bookie of this region (Pulsar's ``BookiesClusterInfo``, with address and state)."""
    ctx = request.app[CONTEXT]
    writable = await ctx.region.list_bookies()
    read_only = await ctx.region.list_bookies(read_only=True)
    bookies = [{"bookieId": i, "address": r.address, "readOnly": False} for i, r in sorted(writable.items())]
    bookies += [{"bookieId": i, "address": r.address, "readOnly": True} for i, r in sorted(read_only.items())]
    return web.json_response({"bookies": bookies})
