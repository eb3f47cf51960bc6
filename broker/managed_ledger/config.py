"""Settings of the managed-ledger layer (one typed dataclass; units in the names)."""

from __future__ import annotations

from dataclasses import dataclass

from .interceptor import parse_interceptor_names


@dataclass(frozen=True)
class ManagedLedgerConfig:
    """How a managed ledger writes, rolls over, caches, persists cursors and trims.

    Attributes:
        ensemble_size, write_quorum_size, ack_quorum_size: E/Qw/Qa of every ledger it creates.
        max_entries_per_ledger, max_size_per_ledger_bytes, max_ledger_rollover_time_s: the current ledger
            is closed and a new one started when it reaches any of these (time only if it has entries).
        min_ledger_rollover_time_s: a ledger younger than this is not rolled over even when full.
        retention_time_s, retention_size_bytes: how long / how much consumed data is kept (Pulsar's
            semantics: -1 = no limit of that kind; both 0 = delete as soon as every durable cursor passed).
        cursor_persist_interval_ms: a cursor's state is written at most once per interval (plus on flush).
        entry_cache_max_bytes: bound of the tail cache serving caught-up cursors from memory.
        read_batch_max_entries: entries per bookie read call.
        trim_interval_s: how often trimming runs besides after each rollover.
        housekeeping_interval_s: how often the time-based rollover and the trim schedule are checked.
        broker_entry_metadata_interceptors: what broker entry metadata each appended entry gets
            (``broker.managed_ledger.interceptor``): ``"timestamp"`` and/or ``"index"``, or Pulsar's class
            names. None by default here (entries are stored as given); the broker turns both on.
    """

    ensemble_size: int = 3
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    max_entries_per_ledger: int = 50_000
    max_size_per_ledger_bytes: int = 1024 * 1024 * 1024
    max_ledger_rollover_time_s: float = 4 * 3600
    min_ledger_rollover_time_s: float = 0
    retention_time_s: float = 0
    retention_size_bytes: int = 0
    cursor_persist_interval_ms: int = 1000
    entry_cache_max_bytes: int = 64 * 1024 * 1024
    read_batch_max_entries: int = 100
    trim_interval_s: float = 60.0
    housekeeping_interval_s: float = 5.0
    broker_entry_metadata_interceptors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise ValueError(f"need 1 <= Qa <= Qw <= E, got E={self.ensemble_size} Qw={self.write_quorum_size} "
                             f"Qa={self.ack_quorum_size}")
        if self.max_entries_per_ledger < 1 or self.max_size_per_ledger_bytes < 1:
            raise ValueError("max_entries_per_ledger and max_size_per_ledger_bytes must be positive")
        if self.read_batch_max_entries < 1 or self.cursor_persist_interval_ms < 0:
            raise ValueError("read_batch_max_entries must be positive, cursor_persist_interval_ms >= 0")
        if self.housekeeping_interval_s <= 0 or self.trim_interval_s <= 0:
            raise ValueError("housekeeping_interval_s and trim_interval_s must be positive")
        parse_interceptor_names(self.broker_entry_metadata_interceptors)  # ValueError for an unknown name
