"""``/metrics`` and ``/health`` over HTTP for any Magnetar process (stdlib server, one daemon thread).

A scrape must never wait on the process's event loop, so the server runs on its own thread and reads
the registry directly (prometheus_client is thread-safe). ``/health`` answers 200 ``ok`` or, when the
process's health callback says otherwise, 503 with the reason.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = logging.getLogger("observability.http")

HealthCheck = Callable[[], tuple[bool, str]]


class MetricsServer:
    """A running metrics endpoint; ``close()`` stops it (idempotent)."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.host, self.port = server.server_address[:2]
        self._closed = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve_metrics(
    registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0, *, health: Optional[HealthCheck] = None
) -> MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics`` (port 0: a free one, see ``.port``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                try:
                    body = encoder(registry)
                except Exception as err:  # a broken collector must not kill the endpoint
                    log.exception("metrics collection failed")
                    self._send(500, f"metrics collection failed: {err}\n".encode(), "text/plain")
                    return
                self._send(200, body, content_type)
            elif path in ("/health", "/healthz"):
                ok, reason = (True, "ok") if health is None else health()
                self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: try /metrics or /health\n", "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args) -> None:  # scrapes every few seconds: keep stderr quiet
            log.debug("%s " + fmt, self.address_string(), *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), name="metrics-http", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
