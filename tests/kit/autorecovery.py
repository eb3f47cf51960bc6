"""Real ``magnetar autorecovery`` processes for tests (same conventions as :mod:`tests.kit.bookies`)."""

from __future__ import annotations

import pathlib
from typing import Any

from .server import ServerProcess

# Fast enough for tests: a gone bookie is lost after 3 s; scans every 2 s; sessions expire after 4 s.
FAST: dict[str, Any] = {"lost_bookie_grace_ms": 3000, "audit_interval_ms": 2000, "worker_interval_ms": 500,
                        "open_ledger_retry_ms": 1000, "zk_session_timeout_ms": 4000, "read_timeout_ms": 3000}


class AutoRecoveryProcess(ServerProcess):
    """One auto-recovery process; its ``worker_id`` is ``name``."""

    port_keys = ("http_port",)

    def __init__(self, name: str, base_dir: pathlib.Path, zk_connect: str, **overrides: Any) -> None:
        super().__init__("autorecovery", "worker_id", name, base_dir, {"zookeeper": zk_connect, **FAST}, overrides)
        self.settings.pop("advertised_host", None)  # not a setting of this kind
        self.write_config()
        self.worker_id = self.id

    @property
    def metrics_url(self) -> str:
        return f"{self.http_url}/metrics"

    def healthy(self) -> bool:
        return self.answers_health()


def start_autorecovery(n: int, tmp_path: pathlib.Path, zk_connect: str, **overrides: Any) -> list[AutoRecoveryProcess]:
    base = pathlib.Path(tmp_path) / "autorecovery"
    procs = [AutoRecoveryProcess(f"autorecovery-{i}", base, zk_connect, **overrides) for i in range(1, n + 1)]
    for p in procs:
        p.start(wait=False)
    for p in procs:
        p.wait_healthy(timeout_s=60)
    return procs
