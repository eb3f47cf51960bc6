"""The HTTP lookup service (``/lookup/v2/topic/...``), so an ``http://`` service URL works in pulsar-client.

pulsar-client asks ``GET /admin/v2/<domain>/<tenant>/<ns>/<topic>/partitions`` first (answered by the admin
routes), then ``GET /lookup/v2/topic/<domain>/<tenant>/<ns>/<topic>`` and connects to the ``brokerUrl`` of
the answer (Pulsar's ``LookupData``: ``brokerUrl``, ``brokerUrlTls``, ``httpUrl``, ``httpUrlTls``,
``nativeUrl``). When the bundle is owned, the answer names the owner directly. When it is unowned and
another broker is chosen to own it, the answer is a 307 to that broker's lookup with
``authoritative=true``, so that broker acquires the bundle before answering (clients follow redirects,
up to their ``maxLookupRedirects``).

An advertised listener is asked for with the ``listenerName`` query parameter or, when that is absent, the
``X-Pulsar-ListenerName`` header (Pulsar's Java client sends the header); the answer's ``brokerUrl`` and
``brokerUrlTls`` are then that listener's, and a redirect carries ``listenerName`` on to the next broker.
A listener the broker does not have answers 503 with a reason naming it.
"""

from __future__ import annotations

from aiohttp import web
from yarl import URL

from .admin.body import topic_of
from .admin.context import redirect_location
from .admin.keys import CONTEXT

routes = web.RouteTableDef()

L = "/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
_TOPIC_SEGMENT = 7  # ['', 'lookup', 'v2', 'topic', domain, tenant, namespace, topic]
LISTENER_NAME_PARAM = "listenerName"
LISTENER_NAME_HEADER = "X-Pulsar-ListenerName"


@routes.get(L)
async def lookup_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    authoritative = request.query.get("authoritative", "").lower() == "true"
    listener_name = request.query.get(LISTENER_NAME_PARAM) or request.headers.get(LISTENER_NAME_HEADER, "")
    result = await ctx.lookup(str(topic), authoritative=authoritative, listener_name=listener_name)
    if result.redirect:
        location = redirect_location(request, result.http_url, authoritative=True, base_url_tls=result.http_url_tls)
        if listener_name and LISTENER_NAME_PARAM not in request.query:
            location = str(URL(location).update_query({LISTENER_NAME_PARAM: listener_name}))
        raise web.HTTPTemporaryRedirect(location)
    return web.json_response({
        "brokerUrl": result.broker_service_url,
        "brokerUrlTls": result.broker_service_url_tls,
        "httpUrl": result.http_url,
        "httpUrlTls": result.http_url_tls,
        "nativeUrl": result.broker_service_url,
    })


@routes.get(L + "/bundle")
async def topic_bundle(request: web.Request) -> web.Response:
    """The bundle a topic belongs to, e.g. ``"0x40000000_0x80000000"`` (Pulsar's ``getNamespaceBundle``)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    bundle = await ctx.ownership.bundle_of(topic)
    return web.json_response(bundle.name)
