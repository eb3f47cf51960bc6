"""Errors of the REST API and their mapping to HTTP answers (Pulsar's codes, ``{"reason": ...}`` bodies).

Handlers raise :class:`RestError` for what they decide themselves; errors of lower rooms are mapped here
at the boundary, by policy rather than by call site:

* metadata store: NotFound 404, NodeExists / NotEmpty / BadVersion 409, InvalidMetadata 400,
  unavailable 503;
* ownership: namespace not found 404, not ready 503;
* the binary-protocol service's errors carry their own ``http_status``;
* anything else is a 500 whose reason names the error (and is logged with its traceback).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Awaitable, Callable

from aiohttp import web

from config_store import (BadVersionError, InvalidMetadataError, MetadataError, MetadataUnavailableError,
                          NodeExistsError, NotEmptyError, NotFoundError)
from magnetar.errors import MagnetarError
from magnetar.topic_name import InvalidTopicNameError

from ..ownership_errors import BundleNotFoundError, NamespaceNotFoundError, ServiceUnitNotReadyError

log = logging.getLogger("broker.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RestError(MagnetarError):
    """An HTTP error answer: ``status`` and a ``reason`` a person can act on."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def bad_request(reason: str) -> RestError:
    return RestError(400, reason)


def not_found(reason: str) -> RestError:
    return RestError(404, reason)


def conflict(reason: str) -> RestError:
    return RestError(409, reason)


def precondition_failed(reason: str) -> RestError:
    return RestError(412, reason)


def error_response(status: int, reason: str, *, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"reason": reason}, status=status, headers=headers)


def status_of(exc: BaseException) -> int:
    """The HTTP status an exception of a lower room maps to (500 when unknown)."""
    if isinstance(exc, RestError):
        return exc.status
    if isinstance(exc, (NotFoundError, NamespaceNotFoundError, BundleNotFoundError)):
        return 404
    if isinstance(exc, (NodeExistsError, NotEmptyError, BadVersionError)):
        return 409
    if isinstance(exc, (InvalidMetadataError, InvalidTopicNameError)):
        return 400
    if isinstance(exc, (MetadataUnavailableError, ServiceUnitNotReadyError)):
        return 503
    status = getattr(exc, "http_status", None)
    if isinstance(status, int) and 400 <= status <= 599:
        return status
    if isinstance(exc, MetadataError) or (isinstance(exc, MagnetarError) and exc.retriable):
        return 503
    return 500


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as JSON ``{"reason": ...}`` with its status; redirects pass through."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        if exc.status == 404 and request.match_info.route.resource is None:
            reason = f"no such API: {request.method} {request.rel_url.path}"
        if exc.status == 405:
            reason = f"method {request.method} is not allowed on {request.rel_url.path}"
        if exc.status == 413:
            reason = f"the request body is too large (max {request.client_max_size} bytes)"
        return error_response(exc.status, reason, headers={k: v for k, v in exc.headers.items()
                                                           if k.lower() == "allow"})
    except RestError as exc:
        return error_response(exc.status, exc.reason)
    except Exception as exc:  # every other failure is mapped by policy, never shown as a traceback
        status = status_of(exc)
        if status >= 500 and status != 503:
            log.exception("%s %s failed", request.method, request.rel_url)
        else:
            log.info("%s %s: %d %s", request.method, request.rel_url, status, exc)
        headers = {"Retry-After": "1"} if status == 503 else None
        return error_response(status, str(exc) or type(exc).__name__, headers=headers)


def metrics_middleware(requests: Any, seconds: Any) -> Any:
    """Counts requests by method, route and status (``magnetar_broker_http_requests_total``)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            requests.labels(request.method, route, str(status)).inc()
            seconds.labels(route).observe(time.perf_counter() - started)

    return middleware


def json_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
