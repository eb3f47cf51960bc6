"""Settings of auto-recovery (``magnetar autorecovery --config autorecovery.toml``): one typed dataclass.

Units are the last word of every name. Unknown keys are an error; missing keys take the defaults below.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from magnetar.config import TomlSettings
from magnetar.errors import ConfigError


@dataclass(frozen=True)
class AutoRecoveryConfig(TomlSettings):
    """Settings of one auto-recovery process (auditor candidate + replication worker + scrubber).

    Attributes:
        data_dir: holds ``endpoints.json`` once the process serves.
        zookeeper: the region's ZooKeeper (``host:port[/chroot]``), where ledgers and bookies are.
        worker_id: this process's id in locks and in the auditor election; default ``autorecovery-<pid>``.
        bind_host: address of the ``/metrics`` and ``/health`` server.
        http_port: its port; 0 picks a free one.
        lost_bookie_grace_ms: a bookie unregistered for this long is lost for good: its fragments are marked
            under-replicated (BookKeeper's ``lostBookieRecoveryDelay``). A bookie marked for decommission is
            marked at once.
        audit_interval_ms: how often the elected auditor scans every ledger's metadata (a change of the
            registered bookies also triggers a scan).
        worker_interval_ms: how often an idle worker looks for under-replicated ledgers to claim.
        open_ledger_retry_ms: a record of a ledger that is still OPEN or IN_RECOVERY is retried this much later
            (it is repaired once the ledger is closed, never under a live writer).
        open_ledger_fence_ms: a ledger still OPEN this long after a worker first found it under-replicated is
            recovered (fenced and closed, cutting off its writer if it has one) and then repaired, as
            BookKeeper's ``openLedgerRereplicationGracePeriod``; 0 (the default) never takes a ledger from
            its writer.
        throttle_entries_per_s: entries copied per second by this worker at most (0: unlimited).
        throttle_bytes_per_s: payload bytes copied per second by this worker at most (0: unlimited).
        copy_batch_entries: entries read and written per round trip.
        parallel_ledgers: ledgers one worker repairs at the same time (the throttle covers them all).
        scrub_interval_ms: how often the auditor reads back every fragment of every closed ledger from its
            bookies to find corrupt (CRC failure) and missing entries; 0 disables scrubbing.
        zk_session_timeout_ms: ZooKeeper session timeout (a dead worker's locks and a dead auditor's
            election node vanish after it).
        read_timeout_ms: a bookie read that takes longer moves on to another replica.
    """

    kind = "autorecovery"

    data_dir: pathlib.Path
    zookeeper: str
    worker_id: str = ""
    bind_host: str = "127.0.0.1"
    http_port: int = 0
    lost_bookie_grace_ms: int = 30_000
    audit_interval_ms: int = 60_000
    worker_interval_ms: int = 1_000
    open_ledger_retry_ms: int = 10_000
    open_ledger_fence_ms: int = 0
    throttle_entries_per_s: float = 0.0
    throttle_bytes_per_s: float = 50 * 1024 * 1024
    copy_batch_entries: int = 500
    parallel_ledgers: int = 4
    scrub_interval_ms: int = 0
    zk_session_timeout_ms: int = 10_000
    read_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", pathlib.Path(self.data_dir))
        self.validate()

    @property
    def endpoints_path(self) -> pathlib.Path:
        return self.data_dir / "endpoints.json"

    def validate(self) -> None:
        if not self.zookeeper.strip():
            raise ConfigError("zookeeper must name the region's ZooKeeper (host:port[/chroot])")
        if not 0 <= self.http_port <= 65535:
            raise ConfigError(f"http_port must be in 0..65535, not {self.http_port}")
        for name in ("audit_interval_ms", "worker_interval_ms", "open_ledger_retry_ms", "copy_batch_entries",
                     "parallel_ledgers", "zk_session_timeout_ms", "read_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        for name in ("lost_bookie_grace_ms", "open_ledger_fence_ms", "throttle_entries_per_s",
                     "throttle_bytes_per_s", "scrub_interval_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")
