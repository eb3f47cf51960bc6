"""The broker's HTTP server: admin REST (``/admin/v2``), lookup (added by the process), ``/metrics`` and
``/health``, one aiohttp application (served on the HTTP port and, with ``web_tls_port``, over HTTPS).

Every request passes the metrics, the error mapping and then authentication and authorization
(``access.py``) before its handler."""

from __future__ import annotations

import contextlib
from typing import Iterable

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram

from .. import metrics_names as names
from ..service.exposition import exposition_chunks
from . import backlog_quotas, cluster_info, clusters, namespaces, tenants, topics
from . import load_balancing
from . import rate_limits, schemas
from . import compaction_threshold, delayed_delivery, inactive_topics, permissions
from .access import access_middleware
from .context import AdminContext
from .errors import error_middleware, metrics_middleware
from .keys import CONTEXT

_MODULES = (clusters, tenants, namespaces, topics, backlog_quotas, cluster_info, load_balancing, schemas, rate_limits,
            delayed_delivery, inactive_topics, compaction_threshold, permissions)


async def _metrics(request: web.Request) -> web.StreamResponse:
    """Streams the exposition family by family (a broker with many topics answers tens of megabytes; see
    ``service/exposition.py``)."""
    response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE_LATEST})
    await response.prepare(request)
    async with contextlib.aclosing(exposition_chunks(request.app[CONTEXT].metrics_registry)) as chunks:
        async for chunk in chunks:
            await response.write(chunk)
    await response.write_eof()
    return response


async def _health(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    ok, reason = (True, "ok") if ctx.health is None else ctx.health()
    return web.Response(text=reason + "\n", status=200 if ok else 503)


def make_app(ctx: AdminContext, *, extra_routes: Iterable[web.RouteTableDef] = (),
             client_max_size_bytes: int = 1024 * 1024) -> web.Application:
    """The application; its HTTP client (for fan-out and forwarding) opens on startup and closes on cleanup."""
    requests = Counter(names.HTTP_REQUESTS, "HTTP requests served, by method, route and status",
                       ["method", "route", "status"], registry=ctx.metrics_registry)
    seconds = Histogram(names.HTTP_REQUEST_SECONDS, "HTTP request latency, by route", ["route"],
                        registry=ctx.metrics_registry)
    app = web.Application(middlewares=[metrics_middleware(requests, seconds), error_middleware,
                                       access_middleware(ctx.security)],
                          client_max_size=client_max_size_bytes)
    app[CONTEXT] = ctx
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/health", _health)
    for module in _MODULES:
        app.add_routes(module.routes)
    for table in extra_routes:
        app.add_routes(table)

    async def client_lifecycle(app: web.Application):
        if ctx.client_credentials is not None:  # this broker's own credentials on its calls to brokers
            ctx.http = ctx.client_credentials.http_session(timeout_s=30.0)
        else:
            ctx.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        yield
        await ctx.http.close()

    app.cleanup_ctx.append(client_lifecycle)
    return app
