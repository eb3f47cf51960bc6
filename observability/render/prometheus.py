"""The little of Prometheus's HTTP API the renderer needs: ``/api/v1/query_range`` (and a reachability check).

Blocking ``urllib`` on purpose: the renderer is a command that asks a few dozen questions one after the other;
nothing else runs meanwhile. Queries are POSTed as a form (Prometheus accepts both), so a long expression is
never cut by a URL limit. Failures map to the renderer's errors here, at the edge: no answer at all is
:class:`PrometheusUnreachable`; an answer with ``"status": "error"`` (bad PromQL, execution error, timeout)
is :class:`QueryFailed` carrying Prometheus's own text.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, NamedTuple

from .errors import PrometheusUnreachable, QueryFailed, RenderInputError


class Series(NamedTuple):
    labels: dict[str, str]
    times: tuple[float, ...]  # seconds since the epoch
    values: tuple[float, ...]  # NaN and ±Inf kept as floats


class PrometheusClient:
    """Queries one Prometheus server.

    Args:
        url: its base URL (``http://host:9090``; a path prefix, as behind a proxy, is kept).
        timeout_s: per HTTP request; also sent as the query's ``timeout`` so Prometheus gives up first.
    """

    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise RenderInputError(f"--prometheus wants an http:// or https:// URL, not {url!r}")
        self.url = url.strip().rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, path: str, params: dict[str, str], *, expr: str = "") -> Any:
        if params:
            request = urllib.request.Request(
                f"{self.url}{path}", data=urllib.parse.urlencode(params).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            )
        else:  # the status endpoints answer GET only
            request = urllib.request.Request(f"{self.url}{path}", headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as err:  # Prometheus answers 400/422/503 with a JSON error body
            body = err.read()
            reason = _error_text(body) or f"HTTP {err.code} {err.reason}"
            if err.code == 404 or not expr:
                raise PrometheusUnreachable(f"{self.url}{path}: {reason} (is this a Prometheus server?)") from None
            raise QueryFailed(expr, reason) from None
        except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise PrometheusUnreachable(f"Prometheus at {self.url} is unreachable: {reason}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusUnreachable(
                f"{self.url}{path} did not answer JSON (is this a Prometheus server?)") from None
        if answer.get("status") != "success":
            raise QueryFailed(expr, str(answer.get("error") or answer))
        return answer.get("data")

    def check(self) -> str:
        """Raises :class:`PrometheusUnreachable` unless the server answers; returns its version."""
        data = self._call("/api/v1/status/buildinfo", {})
        return str((data or {}).get("version", "?"))

    def query_range(self, expr: str, *, start_s: float, end_s: float, step_s: float) -> list[Series]:
        """Every series ``expr`` yields from ``start_s`` to ``end_s`` every ``step_s`` seconds."""
        data = self._call("/api/v1/query_range", {
            "query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}",
            "timeout": f"{max(1.0, self.timeout_s - 1):g}s",
        }, expr=expr)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise QueryFailed(expr, f"expected a matrix, got {data!r:.200}")
        return [_series(item) for item in data.get("result") or ()]


    def query(self, expr: str) -> int:
        """How many series (or 1 for a scalar or string) ``expr`` yields now (an instant query)."""
        data = self._call("/api/v1/query", {"query": expr, "timeout": f"{max(1.0, self.timeout_s - 1):g}s"},
                          expr=expr)
        if not isinstance(data, dict):
            raise QueryFailed(expr, f"unexpected answer {data!r:.200}")
        if data.get("resultType") in ("scalar", "string"):
            return 1
        return len(data.get("result") or ())


def _series(item: dict[str, Any]) -> Series:
    points = item.get("values") or ()
    return Series(dict(item.get("metric") or {}), tuple(float(t) for t, _ in points),
                  tuple(float(v) for _, v in points))


def _error_text(body: bytes) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return body[:200].decode(errors="replace").strip()
    if isinstance(answer, dict) and answer.get("error"):
        kind = answer.get("errorType")
        return f"{kind}: {answer['error']}" if kind else str(answer["error"])
    return ""
