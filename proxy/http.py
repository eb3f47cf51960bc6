"""The proxy's HTTP side: the admin REST API and the HTTP lookup, forwarded to the region's brokers, and the
proxy's own ``/metrics`` and ``/health`` (Pulsar's ``AdminProxyHandler`` and proxy web service).

A request under ``/admin/`` or ``/lookup/`` goes to a registered broker's web address (round robin), with its
method, path, query, headers (less the hop-by-hop ones) and body (at most ``http_request_body_max_bytes``:
larger is 413). A broker answers a topic call it does not own with a redirect to the owner: the proxy follows
it itself, since the client cannot reach brokers, but only to the web address of a registered broker of the
region; a redirect elsewhere is answered 502. Answers come back byte for byte (not decompressed). A broker
that cannot be reached is 503, one that does not answer in time 504; the body is Pulsar's ``{"reason": ...}``.
"""

from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass
from typing import Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from .directory import BrokerDirectory
from .errors import BrokerUnavailableError

__all__ = ["ForwardingSettings", "make_app"]

log = logging.getLogger("proxy.http")

_HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "trailers", "transfer-encoding", "upgrade", "host", "content-length"))
_REDIRECTS = frozenset((301, 302, 303, 307, 308))
_MAX_REDIRECTS = 5

HealthCheck = Callable[[], tuple[bool, str]]


@dataclass(frozen=True)
class ForwardingSettings:
    """How requests are forwarded.

    Attributes:
        session: the client towards brokers (made with ``auto_decompress=False``: bodies pass as they are).
        timeout_s: how long a broker may take to answer.
    """

    session: aiohttp.ClientSession
    timeout_s: float


def _reason(status: int, text: str) -> web.Response:
    return web.json_response({"reason": text}, status=status)


def _request_headers(request: web.Request) -> CIMultiDict:
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP)
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

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            url = directory.next_web_url() + str(request.rel_url)
        except BrokerUnavailableError as e:
            return _reason(503, str(e))
        method = request.method
        body = await request.read() if request.can_read_body else None
        headers = _request_headers(request)
        timeout = aiohttp.ClientTimeout(total=forwarding.timeout_s)
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                async with forwarding.session.request(method, url, headers=headers, data=body, allow_redirects=False,
                                                      timeout=timeout) as answer:
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
