"""The HTTP lookup service (``/lookup/v2/topic/...``), so an ``http://`` service URL works in pulsar-client.

pulsar-client asks ``GET /admin/v2/<domain>/<tenant>/<ns>/<topic>/partitions`` first (answered by the admin
routes), then ``GET /lookup/v2/topic/<domain>/<tenant>/<ns>/<topic>`` and connects to the ``brokerUrl`` of
the answer (Pulsar's ``LookupData``: ``brokerUrl``, ``brokerUrlTls``, ``httpUrl``, ``httpUrlTls``,
``nativeUrl``). When the bundle is owned, the answer names the owner directly. When it is unowned and
another broker is chosen to own it, the answer is a 307 to that broker's lookup with
``authoritative=true``, so that broker acquires the bundle before answering (clients follow redirects,
up to their ``maxLookupRedirects``).
"""

from __future__ import annotations

from aiohttp import web

from .admin.body import topic_of
from .admin.context import redirect_location
from .admin.keys import CONTEXT

routes = web.RouteTableDef()

L = "/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
_TOPIC_SEGMENT = 7  # ['', 'lookup', 'v2', 'topic', domain, tenant, namespace, topic]


@routes.get(L)
async def lookup_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    authoritative = request.query.get("authoritative", "").lower() == "true"
    result = await ctx.lookup(str(topic), authoritative=authoritative)
    if result.redirect:
        raise web.HTTPTemporaryRedirect(redirect_location(request, result.http_url, authoritative=True))
    return web.json_response({
        "brokerUrl": result.broker_service_url,
        "brokerUrlTls": result.broker_service_url_tls,
        "httpUrl": result.http_url,
        "httpUrlTls": "",
        "nativeUrl": result.broker_service_url,
    })


@routes.get(L + "/bundle")
async def topic_bundle(request: web.Request) -> web.Response:
    """The bundle a topic belongs to, e.g. ``"0x40000000_0x80000000"`` (Pulsar's ``getNamespaceBundle``)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    bundle = await ctx.ownership.bundle_of(topic)
    return web.json_response(bundle.name)
