"""The proxy process: ``magnetar proxy --config proxy.toml``.

Start-up order (each step needs the one before):

1. the TLS certificate and the proxy's credentials towards brokers are loaded (a bad file stops the start with
   a message naming it);
2. the region's ZooKeeper is opened and the registered brokers are read (:class:`proxy.directory.BrokerDirectory`);
3. the binary-protocol listeners start (``tls_port``, ``port``), then the web ports (``web_port``,
   ``web_tls_port``), and ``<data_dir>/endpoints.json`` is written last, when ``/health`` turns 200.

SIGTERM / SIGINT: the listeners stop, open connections are closed (flushing what they have queued) within
``shutdown_grace_ms``, then the broker connections of lookups, the HTTP server and the store close; exit code 0.

The global configuration store (``configuration_store``) is opened only with ``authorization_enabled``: the
namespace permissions and tenant admins that lookups are checked against live there.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Any, Optional

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from config_store import ConfigurationStore, KazooMetadataStore, MetadataError, MetadataStore
from magnetar import process_main
from magnetar.auth.providers import AuthenticationService
from magnetar.auth.tls import ReloadingServerContext
from magnetar.errors import ConfigError
from observability.runtime import RuntimeMetrics, tune_runtime

from .authorization import LookupAuthorizer
from .broker_client import BrokerClient
from .config import ProxyConfig
from .context import ProxyContext
from .directory import BrokerDirectory
from .errors import ProxyStartError
from .http import ForwardingSettings, make_app
from .limits import ConnectionLimiter, RequestLimiter
from .lookups import LookupProxy
from .memory import HeapTrimmer
from .metrics import ProxyCollector, ProxyStats
from .scheduling import request_slice
from .server import ProxyServer
from .tls import server_tls

__all__ = ["ProxyProcess", "run"]

log = logging.getLogger("proxy.process")


class ProxyProcess:
    """One running proxy in this process. ``await start()``, then ``await close()`` (idempotent).

    Attributes (valid after start): ``port``, ``tls_port``, ``web_port``, ``web_tls_port`` (bound; 0: not
    served), ``ctx`` (the shared state of the connections), ``directory``.
    """

    def __init__(self, config: ProxyConfig, *, registry: Optional[CollectorRegistry] = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
        self.port = self.tls_port = self.web_port = self.web_tls_port = 0
        self.store: Optional[MetadataStore] = None
        self.global_store: Optional[MetadataStore] = None
        self.authentication: Optional[AuthenticationService] = None
        self.authorizer: Optional[LookupAuthorizer] = None
        self.broker_client: Optional[BrokerClient] = None
        self.directory: Optional[BrokerDirectory] = None
        self.lookups: Optional[LookupProxy] = None
        self.server: Optional[ProxyServer] = None
        self.ctx: Optional[ProxyContext] = None
        self.server_tls: Optional[ReloadingServerContext] = None
        self.stats = ProxyStats()
        self._http_session: Optional[aiohttp.ClientSession] = None
        self._runner: Optional[web.AppRunner] = None
        self.runtime_metrics: Optional[RuntimeMetrics] = None
        self.heap_trimmer: Optional[HeapTrimmer] = None
        self._state = "new"

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state != "new":
            raise ProxyStartError(f"a proxy that is {self._state} cannot be started")
        self._state = "starting"
        config = self.config
        try:
            config.data_dir.mkdir(parents=True, exist_ok=True)
            config.endpoints_path.unlink(missing_ok=True)  # a stale file must not look like this run's
            if config.serves_tls:
                try:
                    self.server_tls = server_tls(config)
                except ConfigError as e:
                    raise ProxyStartError(f"cannot load the proxy's certificate: {e}") from None
            self.authentication = config.authentication_service()
            self.broker_client = BrokerClient.from_config(config)
            self.store = KazooMetadataStore(config.zookeeper, session_timeout_ms=config.zk_session_timeout_ms)
            await self.store.start()
            self.directory = BrokerDirectory(self.store, tls_enabled_with_broker=config.tls_enabled_with_broker)
            await self.directory.start()
            if config.authorization_enabled:
                await self._open_configuration_store()
            self.lookups = LookupProxy(directory=self.directory, broker_client=self.broker_client,
                                       timeout_s=config.lookup_timeout_ms / 1000,
                                       connect_timeout_s=config.broker_connect_timeout_ms / 1000,
                                       max_redirects=config.max_lookup_redirects, stats=self.stats,
                                       authorizer=self.authorizer)
            self.ctx = ProxyContext(
                directory=self.directory, broker_client=self.broker_client, lookups=self.lookups,
                limiter=ConnectionLimiter(max_total=config.max_concurrent_inbound_connections,
                                          max_per_ip=config.max_concurrent_inbound_connections_per_ip),
                lookup_limiter=RequestLimiter(config.max_concurrent_lookup_requests), stats=self.stats,
                server_tls=self.server_tls, handshake_timeout_s=config.handshake_timeout_ms / 1000,
                keep_alive_interval_s=config.keep_alive_interval_ms / 1000,
                broker_connect_timeout_s=config.broker_connect_timeout_ms / 1000,
                relay_buffer_bytes=config.relay_buffer_bytes, authentication=self.authentication,
                refresh_check_s=config.authentication_refresh_check_ms / 1000,
                forward_credentials=config.forward_authorization_credentials)
            ctx = self.ctx
            ProxyCollector(self.stats, active_connections=lambda: ctx.limiter.active,
                           relayed_connections=lambda: ctx.relayed_connections).register(self.registry)
            self.server = ProxyServer(self.ctx, host=config.bind_host, port=config.port, tls_port=config.tls_port)
            await self.server.start()
            self.port, self.tls_port = self.server.port, self.server.tls_port
            await self._start_http()
        except MetadataError as e:
            await self.close()
            raise ProxyStartError(f"cannot read the region's brokers from {config.zookeeper}: {e}") from None
        except ConfigError as e:
            await self.close()
            raise ProxyStartError(str(e)) from None
        except BaseException:
            await self.close()
            raise
        self._write_endpoints()
        self.runtime_metrics = RuntimeMetrics(self.registry)
        self.runtime_metrics.start()
        stats, limiter = self.stats, self.ctx.limiter
        self.heap_trimmer = HeapTrimmer(closed_connections=lambda: stats.new_connections - limiter.active,
                                        after_closed=config.heap_trim_after_closed_connections,
                                        check_interval_s=config.heap_trim_check_interval_ms / 1000)
        self.heap_trimmer.start()
        if config.event_loop_slice_us:
            log.info("event loop's scheduler slice: %s µs", request_slice(config.event_loop_slice_us) or "unknown")
        self._state = "started"
        log.info("proxy ready: %s (cluster %s)", ", ".join(self.urls()), config.cluster)

    async def _start_http(self) -> None:
        config = self.config
        if not config.web_port and not config.web_tls_port:
            return
        self._http_session = aiohttp.ClientSession(auto_decompress=False)
        assert self.broker_client is not None
        forwarding = ForwardingSettings(session=self._http_session, timeout_s=config.http_timeout_ms / 1000,
                                        stats=self.stats, authentication=self.authentication,
                                        proxy_headers=self.broker_client.http_headers,
                                        ssl_context=self.broker_client.ssl_context)
        app = make_app(directory=self.directory, registry=self.registry, health=self.health, forwarding=forwarding,
                       body_max_bytes=config.http_request_body_max_bytes)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        for port, tls in ((config.web_port, False), (config.web_tls_port, True)):
            if not port:
                continue
            context = self.server_tls.serving_context() if tls and self.server_tls is not None else None
            site = web.TCPSite(self._runner, config.bind_host, port, ssl_context=context, reuse_address=True)
            try:
                await site.start()
            except OSError as e:
                raise ProxyStartError(f"cannot listen on {config.bind_host}:{port} (HTTP{'S' if tls else ''}): "
                                      f"{e.strerror or e}") from None
            if tls:
                self.web_tls_port = port
            else:
                self.web_port = port
            log.info("admin, lookup and metrics over HTTP%s on %s:%d", "S" if tls else "", config.bind_host, port)

    async def close(self) -> None:
        """Closes everything (see the module docstring); idempotent."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        if self.runtime_metrics is not None:
            self.runtime_metrics.close()
        if self.heap_trimmer is not None:
            await self.heap_trimmer.close()
        grace_s = self.config.shutdown_grace_ms / 1000
        if self.server is not None:
            await self.server.close(grace_s=grace_s)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http_session is not None:
            await self._http_session.close()
        if self.lookups is not None:
            await self.lookups.close()
        if self.authorizer is not None:
            self.authorizer.close()
        if self.directory is not None:
            await self.directory.close()
        for store in {id(s): s for s in (self.global_store, self.store) if s is not None}.values():
            await store.close()
        self._state = "closed"
        log.info("proxy stopped")

    async def __aenter__(self) -> "ProxyProcess":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _open_configuration_store(self) -> None:
        config = self.config
        if config.configuration_store_connect == config.zookeeper:
            self.global_store = self.store
        else:
            self.global_store = KazooMetadataStore(config.configuration_store_connect,
                                                   session_timeout_ms=config.zk_session_timeout_ms)
            await self.global_store.start()
        self.authorizer = LookupAuthorizer(ConfigurationStore(self.global_store), superusers=config.superuser_roles)

    # -- wiring ------------------------------------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        if self._state != "started":
            return False, self._state
        if self.store is not None and not self.store.connected:
            return False, "ZooKeeper connection lost"
        brokers = len(self.directory.brokers) if self.directory is not None else 0
        return True, f"ok ({brokers} broker(s) registered)"

    def urls(self) -> list[str]:
        host = self.config.advertised_host
        found = []
        for scheme, port in (("pulsar+ssl", self.tls_port), ("pulsar", self.port), ("https", self.web_tls_port),
                             ("http", self.web_port)):
            if port:
                found.append(f"{scheme}://{host}:{port}")
        return found

    def _write_endpoints(self) -> None:
        host = self.config.advertised_host
        data: dict[str, Any] = {"cluster": self.config.cluster, "pid": os.getpid()}
        for key, scheme, port in (("pulsar_ssl", "pulsar+ssl", self.tls_port), ("pulsar", "pulsar", self.port),
                                  ("https", "https", self.web_tls_port), ("http", "http", self.web_port)):
            if port:
                data[key] = f"{scheme}://{host}:{port}"
        web_base = data.get("http") or data.get("https")
        if web_base:
            data["metrics"] = f"{web_base}/metrics"
        path = self.config.endpoints_path
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)


# -- process -----------------------------------------------------------------------------------------------


def run(config_path: pathlib.Path | str) -> None:
    """Entry point of ``magnetar proxy --config FILE``: runs a proxy until SIGTERM or SIGINT, then shuts it down
    cleanly (:mod:`magnetar.process_main`)."""
    process_main.run(config_path, settings=ProxyConfig, server=ProxyProcess, log=log, name="proxy",
                     quiet=("aiohttp.access", "magnetar.protocol.client"), tune_runtime=tune_runtime)
