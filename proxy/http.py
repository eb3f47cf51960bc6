"""The proxy's HTTP side: the admin REST API and the HTTP lookup, forwarded to the region's brokers, and the
proxy's own ``/metrics`` and ``/health`` (Pulsar's ``AdminProxyHandler`` and proxy web service).

A request under ``/admin/`` or ``/lookup/`` goes to a registered broker's web address (round robin), with its
method, path, query, headers (less the hop-by-hop ones) and body (at most ``http_request_body_max_bytes``:
larger is 413). A broker answers a topic call it does not own with a redirect to the owner: the proxy follows
it itself, since the client cannot reach brokers, but only to the web address of a registered broker of the
region; a redirect elsewhere is answered 502. Answers come back byte for byte (not decompressed). A broker
that cannot be reached is 503, one that does not answer in time 504; the body is Pulsar's ``{"reason": ...}``.

Authentication (Pulsar's ``AdminProxyHandler``): with authentication on, a forwarded request must carry
``Authorization: Bearer <token>`` or, on HTTPS, a trusted client certificate; without, it is answered 401 and
counted in ``magnetar_proxy_auth_failures_total``. The broker then gets the proxy's own credentials instead of
the client's, and the client's role in ``X-Original-Principal``. A client's own ``X-Original-Principal`` is
never passed on (it would be a forged one), authentication on or off.
"""

from __future__ import annotations

import logging
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Optional

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from magnetar.auth.errors import AuthenticationError
from magnetar.auth.providers import AuthenticationService

from .directory import BrokerDirectory
from .errors import BrokerUnavailableError
from .metrics import ProxyStats

__all__ = ["ForwardingSettings", "make_app"]

log = logging.getLogger("proxy.http")

_HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "trailers", "transfer-encoding", "upgrade", "host", "content-length"))
ORIGINAL_PRINCIPAL = "X-Original-Principal"  # Pulsar's header naming the client a proxy acts for
_REDIRECTS = frozenset((301, 302, 303, 307, 308))
_MAX_REDIRECTS = 5

HealthCheck = Callable[[], tuple[bool, str]]


@dataclass(frozen=True)
class ForwardingSettings:
    """How requests are forwarded.

    Attributes:
        session: the client towards brokers (made with ``auto_decompress=False``: bodies pass as they are).
        timeout_s: how long a broker may take to answer.
        authentication: decides a client's role (None: authentication is off).
        proxy_headers: the proxy's own credentials towards brokers, as headers (called per request).
        ssl_context: for brokers' ``https://`` addresses.
        stats: where refused requests are counted.
    """

    session: aiohttp.ClientSession
    timeout_s: float
    stats: ProxyStats
    authentication: Optional[AuthenticationService] = None
    proxy_headers: Callable[[], dict[str, str]] = dict
    ssl_context: Optional[ssl.SSLContext] = None


def _reason(status: int, text: str) -> web.Response:
    return web.json_response({"reason": text}, status=status)


def _request_headers(request: web.Request, *, role: Optional[str], forwarding: ForwardingSettings) -> CIMultiDict:
    dropped = _HOP_BY_HOP | {ORIGINAL_PRINCIPAL.lower()}
    if forwarding.authentication is not None:
        dropped |= {"authorization"}  # the proxy authenticates itself to the broker
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in dropped)
    if forwarding.authentication is not None:
        headers.update(forwarding.proxy_headers())
        if role is not None:
            headers[ORIGINAL_PRINCIPAL] = role
    peer = request.remote or ""
    prior = request.headers.get("X-Forwarded-For")
    headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    headers["X-Forwarded-Proto"] = request.scheme
    if request.host:
        headers["X-Forwarded-Host"] = request.host
    return headers


def _response_headers(headers) -> CIMultiDict:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _HOP_BY_HOP)


def make_app(*, directory: BrokerDirectory, forwarding: ForwardingSettings, registry: CollectorRegistry,
             health: HealthCheck, body_max_bytes: int) -> web.Application:
    """The aiohttp application of the proxy's web ports."""

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(registry)
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    async def health_check(request: web.Request) -> web.Response:
        ok, reason = health()
        return web.Response(status=200 if ok else 503, text=reason + "\n")

    def authenticate(request: web.Request) -> Optional[str]:
        """The client's role (None when authentication is off); raises AuthenticationError."""
        service = forwarding.authentication
        if service is None:
            return None
        transport = request.transport
        peer_certificate = transport.get_extra_info("peercert") if transport is not None else None
        return service.authenticate_http(request.headers.get("Authorization"), peer_certificate or None).role

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            role = authenticate(request)
        except AuthenticationError as e:
            forwarding.stats.auth_failures[e.reason] += 1
            log.info("%s %s refused (%s): %s", request.method, request.rel_url, e.reason, e)
            return _reason(401, str(e))
        try:
            url = directory.next_web_url() + str(request.rel_url)
        except BrokerUnavailableError as e:
            return _reason(503, str(e))
        method = request.method
        body = await request.read() if request.can_read_body else None
        headers = _request_headers(request, role=role, forwarding=forwarding)
        timeout = aiohttp.ClientTimeout(total=forwarding.timeout_s)
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                tls = forwarding.ssl_context if url.startswith("https:") else None
                async with forwarding.session.request(method, url, headers=headers, data=body, allow_redirects=False,
                                                      timeout=timeout, ssl=tls if tls is not None else True) as answer:
                    location = answer.headers.get("Location")
                    if answer.status in _REDIRECTS and location:
                        target = urllib.parse.urljoin(url, location)
                        if not directory.is_registered_web_url(target):
                            log.warning("broker redirected %s %s to %s, not a registered broker", method,
                                        request.rel_url, target)
                            return _reason(502, f"a broker redirected to {target}, which is not a broker of this "
                                                f"region")
                        if answer.status == 303:
                            method, body = "GET", None
                        url = target
                        continue
                    payload = await answer.read()
                    return web.Response(status=answer.status, body=payload,
                                        headers=_response_headers(answer.headers))
        except TimeoutError:
            return _reason(504, f"the broker did not answer within {forwarding.timeout_s:g} s")
        except aiohttp.ClientError as e:
            return _reason(503, f"cannot reach a broker: {e}")
        return _reason(502, f"more than {_MAX_REDIRECTS} redirects")

    app = web.Application(client_max_size=body_max_bytes)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health_check)
    app.router.add_get("/status.html", health_check)  # Pulsar's proxy health page
    app.router.add_route("*", "/admin/{tail:.*}", forward)
    app.router.add_route("*", "/lookup/{tail:.*}", forward)
    return app
