"""Bundle splits and load reports: ``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/split`` and
``/admin/v2/broker-stats/load-report`` and ``/topics`` (Pulsar's paths, query parameters and JSON names).

A split runs at the bundle's owner: another broker answers 307 there (as bundle unload does); an unowned
bundle is first acquired by whichever broker the lookup picks.
"""

from __future__ import annotations

import json
import time

from aiohttp import web

from config_store.brokers import BrokerRegistration

from ..bundle_split import split_bundle
from ..bundles import RANGE_EQUALLY_DIVIDE, parse_bundle_range
from .body import query_bool
from .context import AdminContext, redirect_location
from .errors import bad_request, not_found
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .topics import namespace_topics

routes = web.RouteTableDef()

_MAX_BUNDLES_DEFAULT = 128




@routes.put("/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split")
async def split(request: web.Request) -> web.Response:
    """Splits a bundle in two at its owner (``unload``: unload both halves; ``splitAlgorithmName``:
    ``range_equally_divide`` (default) or ``topic_count_equally_divide``). 412 when it cannot be split."""
    ctx: AdminContext = request.app[CONTEXT]
    tenant, namespace = _names(request)
    await ctx.policies(tenant, namespace)
    unload = query_bool(request, "unload")
    authoritative = query_bool(request, "authoritative")
    algorithm = request.query.get("splitAlgorithmName") or RANGE_EQUALLY_DIVIDE
    name = request.match_info["bundle"]
    try:
        parse_bundle_range(name)
    except ValueError as e:
        raise bad_request(str(e)) from None
    bundles = await ctx.ownership.namespace_bundles(tenant, namespace)
    bundle = bundles.get(name)
    if bundle is None:
        raise not_found(f"Namespace {tenant}/{namespace} has no bundle {name!r} "
                        f"(bundles: {', '.join(b.name for b in bundles.bundles)})")
    if bundle not in ctx.ownership.owned_bundles():
        result = await ctx.ownership.lookup_bundle(bundle, authoritative=authoritative)
        if not result.is_self:
            raise web.HTTPTemporaryRedirect(redirect_location(request, result.http_url, authoritative=result.redirect,
                                                              base_url_tls=result.http_url_tls))
    topics = [t for t in await namespace_topics(ctx, tenant, namespace, "persistent")
              if ctx.ownership.cached_bundle_of(t) == bundle]
    if ctx.service is not None:
        topics += [t for t in ctx.service.topics()
                   if t.startswith("non-persistent://") and ctx.ownership.cached_bundle_of(t) == bundle]
    max_bundles = ctx.load_manager.settings.max_bundles if ctx.load_manager is not None else _MAX_BUNDLES_DEFAULT
    await split_bundle(ctx.ownership, ctx.configuration, bundle, algorithm=algorithm, unload=unload,
                       max_bundles=max_bundles, topics=topics)
    return web.Response(status=204)


@routes.get("/admin/v2/broker-stats/load-report")
async def load_report(request: web.Request) -> web.Response:
    """This broker's load report as Pulsar's ``LocalBrokerData`` JSON (what ``/brokers/<id>`` holds, measured
    now): URLs, ``msgRateIn/Out``, ``msgThroughputIn/Out``, counts, ``bundles`` and ``lastStats``."""
    ctx: AdminContext = request.app[CONTEXT]
    me = ctx.ownership
    reg = BrokerRegistration(broker_id=me.broker_id, pulsar_service_url=me.pulsar_url, web_service_url=me.http_url,
                             cluster=me.cluster, instance=me.instance, pulsar_service_url_tls=me.pulsar_url_tls,
                             web_service_url_tls=me.http_url_tls, load=me.current_load(),
                             last_update_ms=int(time.time() * 1000))
    out = json.loads(reg.to_json())
    out.pop("version", None)
    out["loadReportType"] = "LocalBrokerData"
    return web.json_response(out)


@routes.get("/admin/v2/broker-stats/topics")
async def topics_stats(request: web.Request) -> web.Response:
    """The stats of every topic served here, as Pulsar nests them: namespace -> bundle -> domain -> topic."""
    ctx: AdminContext = request.app[CONTEXT]
    service = ctx.require_service()
    out: dict[str, dict] = {}
    for name, topic in list(service.topics().items()):
        bundle = ctx.ownership.cached_bundle_of(name)
        if bundle is None:
            continue
        try:
            stats = topic.stats().to_json()
        except Exception:  # closing under us
            continue
        domain = name.split("://", 1)[0]
        out.setdefault(bundle.namespace_name, {}).setdefault(bundle.name, {}).setdefault(domain, {})[name] = stats
    return web.json_response(out)
