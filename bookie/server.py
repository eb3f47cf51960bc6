"""The bookie process: configuration, storage, gRPC server, add port, metrics, disk monitor, ZooKeeper registration.

``run(config_path)`` is what ``magnetar bookie --config bookie.toml`` calls. Start-up order matters:
the gRPC port is bound first (so a ``port = 0`` bookie knows its id), the journal is replayed before the
server accepts a call, the disk is checked before registering (a full disk registers under readonly/),
and ``<data_dir>/endpoints.json`` is written last, once everything answers. SIGTERM / SIGINT shut down
cleanly: new adds are refused UNAVAILABLE, the registration goes, in-flight calls get
``shutdown_grace_ms``, the journal drains, the write cache is flushed, and the process exits 0.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Optional

import grpc
from prometheus_client import CollectorRegistry

from magnetar import process_main
from observability import MetricsServer, serve_metrics
from observability.runtime import RuntimeMetrics, tune_runtime

from .add_listener import AddListener
from .config import BookieConfig
from .disk import DiskMonitor
from .errors import BookieError
from .metrics import BookieMetrics
from .registration import Registration
from .service import BookieService
from .storage import Storage

log = logging.getLogger("bookie.server")


def server_options(config: BookieConfig) -> list[tuple[str, int]]:
    """The gRPC server arguments of a bookie.

    Keepalive (gRPC's ``doc/keepalive.md``): by default a gRPC server accepts a ping at most every
    5 minutes while calls are in flight and no data moves, and at most every 2 hours on a connection
    without calls; every sooner ping is a strike, and after ``max_ping_strikes`` (2) the server closes the
    connection with GOAWAY ``too_many_pings``. Ledger clients ping every ``grpc_keepalive_interval_ms``,
    with or without calls (``bookie.client.bookie_client.channel_options``), so the bookie permits pings
    without calls and down to half that interval: the half is slack for scheduling jitter, since strikes
    are only forgiven when the server sends data, and on an idle stream a few pings received a little
    early would otherwise add up to a GOAWAY over hours.
    """
    return [
        ("grpc.max_receive_message_length", config.grpc_max_message_bytes),
        ("grpc.max_send_message_length", config.grpc_max_message_bytes),
        ("grpc.so_reuseport", 0),  # two bookies must never share a port
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", config.grpc_keepalive_interval_ms // 2),
        ("grpc.http2.max_ping_strikes", 2),
    ]


class BookieServer:
    """One running bookie (in this process). ``await start()``, then ``await close()`` (idempotent)."""

    def __init__(self, config: BookieConfig, *, registry: Optional[CollectorRegistry] = None) -> None:
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.bookie_id = ""
        self.port = 0
        self.http_port = 0
        self.storage: Optional[Storage] = None
        self.service: Optional[BookieService] = None
        self.metrics: Optional[BookieMetrics] = None
        self._server: Optional[grpc.aio.Server] = None
        self._http: Optional[MetricsServer] = None
        self._add_listener: Optional[AddListener] = None
        self._disk: Optional[DiskMonitor] = None
        self._registration: Optional[Registration] = None
        self._zk_session = ""
        self._closed = False
        self.runtime_metrics: Optional[RuntimeMetrics] = None

    @property
    def address(self) -> str:
        return f"{self.config.advertised_host}:{self.port}"

    @property
    def add_address(self) -> str:
        """``host:port`` of the add port, "" when it is off."""
        if self._add_listener is None:
            return ""
        return f"{self.config.advertised_host}:{self._add_listener.port}"

    @property
    def http_address(self) -> str:
        return f"{self.config.advertised_host}:{self.http_port}"

    async def start(self) -> None:
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self._server = grpc.aio.server(options=server_options(config))
        try:
            self.port = self._server.add_insecure_port(f"{config.bind_host}:{config.port}")
        except RuntimeError as err:
            raise BookieError(f"cannot bind gRPC to {config.bind_host}:{config.port}: {err}") from None
        if not self.port:
            raise BookieError(f"cannot bind gRPC to {config.bind_host}:{config.port}")
        self.bookie_id = config.effective_bookie_id(self.port)
        process_main.set_log_name(self.bookie_id)
        self.metrics = BookieMetrics(self.registry, self.bookie_id)
        self.storage = Storage(config, observer=self.metrics)
        await self.storage.start()
        storage = self.storage
        self.metrics.bind(
            queue_depth=lambda: storage.journal.queue_depth,
            ledgers=lambda: storage.ledger_count,
            read_only=lambda: 1 if storage.read_only else 0,
            entry_logs=lambda: storage.entry_log_count,
            write_cache_bytes=lambda: storage.cached_bytes,
            entries=lambda: storage.entry_count,
            ledger_dir=config.ledgers_dir,
        )
        self.service = BookieService(storage, self.metrics, bookie_id=self.bookie_id)
        self._server.add_generic_rpc_handlers((self.service.handler(),))
        await self._server.start()
        log.info("gRPC BookieService listening on %s:%d (advertised %s)", config.bind_host, self.port, self.address)
        if config.add_port >= 0:
            keepalive_s = config.grpc_keepalive_interval_ms / 1000
            self._add_listener = AddListener(self.service, config.bind_host, config.add_port,
                                             keepalive_idle_s=keepalive_s, keepalive_timeout_s=keepalive_s)
            try:
                await self._add_listener.start()
            except OSError as err:
                raise BookieError(f"cannot bind the add port {config.bind_host}:{config.add_port}: "
                                  f"{err.strerror or err}") from None
            log.info("add port (AddEntries over TCP) listening on %s:%d (advertised %s)", config.bind_host,
                     self._add_listener.port, self.add_address)
        self._http = serve_metrics(self.registry, config.bind_host, config.http_port, health=self._health)
        self.http_port = self._http.port
        log.info("metrics on http://%s:%d/metrics", config.bind_host, self.http_port)
        self._disk = DiskMonitor(
            config.data_dir, min_bytes=config.disk_free_min_bytes, resume_bytes=config.disk_free_resume_bytes,
            interval_ms=config.disk_check_interval_ms, on_change=self._on_read_only, on_sample=self._on_disk_sample,
        )
        await self._disk.start()
        if config.zookeeper:
            self._registration = Registration(
                config.zookeeper, bookie_id=self.bookie_id, address=self.address, http_address=self.http_address,
                add_address=self.add_address,
                session_timeout_ms=config.zk_session_timeout_ms, on_session=self._on_zk_session,
            )
            await self._registration.start(read_only=self._disk.read_only)
        else:
            log.info("zookeeper is empty: running without registration")
        self._write_endpoints()
        self.runtime_metrics = RuntimeMetrics(self.registry)
        self.runtime_metrics.start()
        log.info("bookie %s ready", self.bookie_id)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        log.info("shutting down")
        if self.runtime_metrics is not None:
            self.runtime_metrics.close()
        if self.service is not None:
            self.service.closing = True
        if self._add_listener is not None:
            self._add_listener.stop_accepting()
        if self._disk is not None:
            await self._disk.close()
        if self._registration is not None:
            await self._registration.close()
        if self.service is not None:
            await self.service.drain(timeout_s=self.config.shutdown_grace_ms / 1000)
        if self._add_listener is not None:
            await self._add_listener.close(timeout_s=self.config.shutdown_grace_ms / 1000)
        if self._server is not None:
            await self._server.stop(self.config.shutdown_grace_ms / 1000)
        if self.storage is not None:
            await self.storage.close()
        if self._http is not None:
            self._http.close()
        log.info("bookie %s stopped", self.bookie_id)

    async def __aenter__(self) -> "BookieServer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- callbacks -----------------------------------------------------------------------------------------

    async def _on_read_only(self, read_only: bool, reason: str) -> None:
        self.storage.set_read_only(read_only, reason)
        if self._registration is not None:
            await self._registration.set_read_only(read_only)

    def _on_disk_sample(self, free: int, total: int) -> None:
        self.metrics.on_disk_sample(free, total)

    def _on_zk_session(self, session: str) -> None:
        self._zk_session = session
        if self.port:
            self._write_endpoints()

    def _health(self) -> tuple[bool, str]:
        if self.storage is None or self.storage.journal.failed is not None:
            return False, "journal failed" if self.storage else "starting"
        return True, "read-only" if self.storage.read_only else "ok"

    def _write_endpoints(self) -> None:
        data = {
            "bookie_id": self.bookie_id,
            "grpc": self.address,
            "http": self.http_address,
            "add": self.add_address,
            "pid": os.getpid(),
            "zk_session": self._zk_session,
        }
        path = self.config.endpoints_path
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)


# -- process -----------------------------------------------------------------------------------------------


def run(config_path: pathlib.Path) -> None:
    """Entry point of ``magnetar bookie --config FILE``: runs a bookie until SIGTERM or SIGINT, then shuts it down
    cleanly (:mod:`magnetar.process_main`)."""
    process_main.run(config_path, settings=BookieConfig, server=BookieServer, log=log, tune_runtime=tune_runtime)
