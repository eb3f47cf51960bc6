"""The auto-recovery process (``magnetar autorecovery --config autorecovery.toml``): an auditor candidate,
a replication worker and (when the auditor) the scrubber, with ``/metrics`` and ``/health``.

Run one or more per region (BookKeeper runs one in every bookie by default; here it is its own process
kind, so the bookie process stays a storage node): every process works as a replication worker, exactly one
is the elected auditor. ``endpoints.json`` in ``data_dir`` is written last, once it serves.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Optional

from prometheus_client import CollectorRegistry

from bookie.client import LedgerClient, LedgerClientConfig
from config_store import KazooMetadataStore, RegionStore
from magnetar import process_main
from observability import MetricsServer, serve_metrics
from observability.runtime import RuntimeMetrics, tune_runtime

from .auditor import Auditor
from .config import AutoRecoveryConfig
from .metrics import AutoRecoveryMetrics
from .model import Throttle
from .scrubber import Scrubber
from .underreplication import UnderReplicationStore
from .worker import ReplicationWorker

log = logging.getLogger("bookie.autorecovery")


class AutoRecoveryServer:
    """One auto-recovery process's parts. ``await start()``, then ``await close()`` (idempotent)."""

    def __init__(self, config: AutoRecoveryConfig, *, registry: Optional[CollectorRegistry] = None) -> None:
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.worker_id = config.worker_id or f"autorecovery-{os.getpid()}"
        self.metrics = AutoRecoveryMetrics(self.registry, self.worker_id)
        self.store: Optional[KazooMetadataStore] = None
        self.client: Optional[LedgerClient] = None
        self.auditor: Optional[Auditor] = None
        self.worker: Optional[ReplicationWorker] = None
        self._http: Optional[MetricsServer] = None
        self.runtime_metrics: Optional[RuntimeMetrics] = None
        self._closed = False

    async def start(self) -> None:
        c = self.config
        process_main.set_log_name(self.worker_id)
        c.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = KazooMetadataStore(c.zookeeper, session_timeout_ms=c.zk_session_timeout_ms)
        await self.store.start()
        region = RegionStore(self.store)
        ur = UnderReplicationStore(self.store)
        self.client = LedgerClient(region, config=LedgerClientConfig(read_timeout_s=c.read_timeout_ms / 1000))
        await self.client.start()

        def throttle() -> Throttle:
            return Throttle(entries_per_s=c.throttle_entries_per_s, bytes_per_s=c.throttle_bytes_per_s)

        scrubber = Scrubber(region, self.client, ur, self.metrics, throttle=throttle(),
                            batch_entries=c.copy_batch_entries)
        self.auditor = Auditor(region, ur, self.metrics, worker_id=self.worker_id,
                               grace_s=c.lost_bookie_grace_ms / 1000, interval_s=c.audit_interval_ms / 1000,
                               scrubber=scrubber, scrub_interval_s=c.scrub_interval_ms / 1000)
        self.worker = ReplicationWorker(region, self.client, ur, self.metrics, worker_id=self.worker_id,
                                        interval_s=c.worker_interval_ms / 1000,
                                        open_ledger_retry_s=c.open_ledger_retry_ms / 1000, throttle=throttle(),
                                        batch_entries=c.copy_batch_entries, parallel_ledgers=c.parallel_ledgers,
                                        open_ledger_fence_s=c.open_ledger_fence_ms / 1000)
        self.auditor.start()
        self.worker.start()
        self._http = serve_metrics(self.registry, c.bind_host, c.http_port, health=self._health)
        self.runtime_metrics = RuntimeMetrics(self.registry)
        self.runtime_metrics.start()
        self._write_endpoints()
        log.info("auto-recovery %s ready (metrics on http://%s:%d/metrics)", self.worker_id, c.bind_host,
                 self._http.port)

    def _health(self) -> tuple[bool, str]:
        if self.store is None or not self.store.connected:
            return False, "not connected to ZooKeeper"
        return True, "auditor" if self.auditor and self.auditor.is_leader else "worker"

    def _write_endpoints(self) -> None:
        path: pathlib.Path = self.config.endpoints_path
        data = {"worker_id": self.worker_id, "http": f"{self.config.bind_host}:{self._http.port}",
                "pid": os.getpid()}
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.runtime_metrics is not None:
            self.runtime_metrics.close()
        for part in (self.worker, self.auditor):
            if part is not None:
                await part.close()
        if self.client is not None:
            await self.client.close()
        if self.store is not None:
            await self.store.close()
        if self._http is not None:
            self._http.close()
        log.info("auto-recovery %s stopped", self.worker_id)

    async def __aenter__(self) -> "AutoRecoveryServer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def run(config_path: pathlib.Path) -> None:
    """Entry point of ``magnetar autorecovery --config FILE``."""
    process_main.run(config_path, settings=AutoRecoveryConfig, server=AutoRecoveryServer, log=log,
                     tune_runtime=tune_runtime)
