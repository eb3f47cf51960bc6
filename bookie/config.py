"""A bookie's settings: one typed, documented dataclass, loaded from TOML.

Units are the last word of every name (``_ms``, ``_bytes``). Unknown keys are an error (a typo must not
silently fall back to a default); missing keys take the defaults below. Loading is
:mod:`magnetar.config`'s, shared by every process kind.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from magnetar.config import TomlSettings
from magnetar.errors import ConfigError

_MiB = 1024 * 1024
_GiB = 1024 * _MiB


@dataclass(frozen=True)
class BookieConfig(TomlSettings):
    """Settings of one storage node.

    Attributes:
        data_dir: holds ``journal/`` (write-ahead journal files) and ``ledgers/`` (entry logs and the LMDB
            index), and ``endpoints.json`` (the bound addresses) once the bookie serves.
        bookie_id: the identity registered in ZooKeeper; default ``"<advertised_host>:<port>"``.
        bind_host: address the gRPC and HTTP servers bind.
        port: gRPC port; 0 picks a free one (logged and written to ``endpoints.json``).
        add_port: the add port (AddEntries over plain TCP, :mod:`bookie.add_listener`), bound on ``bind_host``
            and registered in ZooKeeper so ledger clients send their adds there rather than over gRPC;
            0 picks a free one, -1 turns it off (clients then add over gRPC).
        http_port: ``/metrics`` and ``/health`` port; 0 picks a free one.
        advertised_host: the host clients use to reach this bookie (registered in ZooKeeper).
        zookeeper: the region's local ZooKeeper connect string (``host:port[,host:port]/chroot``); empty runs
            without registration (storage tests).
        journal_sync: fdatasync the journal before acknowledging adds. Only benchmarks turn it off.
        journal_max_size_bytes: a journal file rolls over once it reaches this size.
        direct_io: write the journal and entry logs with ``O_DIRECT`` (past the page cache) where the file
            system allows it; buffered writes otherwise (:mod:`bookie.directio`).
        write_cache_max_bytes: bound of the in-memory write cache (active + flushing); a flush starts when the
            active half is full, and adds wait (backpressure) while both are.
        flush_interval_ms: the write cache is flushed to entry logs at least this often.
        entry_log_max_size_bytes: an entry log rolls over once it reaches this size.
        entry_log_write_bytes: flushes and compaction write entry logs in pieces of this size (a multiple of
            4096), so that a journal sync never queues behind more than one of them.
        flush_yield_max_ms: before each entry-log piece, each entry-log fsync and each index commit the
            storage thread waits for the journal to be idle (nothing queued, written or syncing), but at most
            this long, so a busy journal slows a flush without stopping it; 0 never waits.
        file_removal_step_bytes: the files the bookie deletes while serving (journal files wholly before a
            checkpoint, entry logs emptied by garbage collection) are shrunk this much at a time, each step
            after the same bounded wait for an idle journal, before they are unlinked, so that freeing their
            blocks never stalls a journal sync for long (:func:`bookie.directio.remove_in_steps`); 0 unlinks
            at once.
        entry_max_size_bytes: larger entries are refused with TOO_LARGE.
        disk_free_min_bytes: below this much free space the bookie turns read-only.
        disk_free_resume_bytes: above this much free space a read-only bookie turns writable again.
        disk_check_interval_ms: how often free space is measured.
        gc_interval_ms: how often entry-log garbage collection runs.
        gc_compaction_live_ratio: an entry log whose live bytes are below this fraction of its bytes is
            compacted (live entries rewritten, the file removed); 0 disables compaction.
        zk_session_timeout_ms: the ZooKeeper session timeout of the registration.
        grpc_max_message_bytes: larger gRPC messages are refused by gRPC with RESOURCE_EXHAUSTED.
        grpc_keepalive_interval_ms: the keepalive ping interval of ledger clients (their
            ``keepalive_interval_ms`` must not be shorter). The bookie accepts pings, with or without calls
            in flight, down to half of it; sooner ones are strikes, and gRPC closes a connection after
            three with GOAWAY ``too_many_pings``.
        read_threads: threads serving catch-up reads from entry logs.
        shutdown_grace_ms: on SIGTERM, how long in-flight requests may take to finish.
    """

    kind = "bookie"  # names it in error messages (not a setting: no annotation)

    data_dir: pathlib.Path
    bookie_id: str = ""
    bind_host: str = "127.0.0.1"
    port: int = 3181
    add_port: int = 0
    http_port: int = 0
    advertised_host: str = "127.0.0.1"
    zookeeper: str = ""
    journal_sync: bool = True
    journal_max_size_bytes: int = 256 * _MiB
    direct_io: bool = True
    write_cache_max_bytes: int = 64 * _MiB
    flush_interval_ms: int = 1000
    entry_log_max_size_bytes: int = 256 * _MiB
    entry_log_write_bytes: int = 256 * 1024
    flush_yield_max_ms: float = 5.0
    file_removal_step_bytes: int = 2 * _MiB
    entry_max_size_bytes: int = 5 * _MiB + 1024
    disk_free_min_bytes: int = 1 * _GiB
    disk_free_resume_bytes: int = 2 * _GiB
    disk_check_interval_ms: int = 1000
    gc_interval_ms: int = 10000
    gc_compaction_live_ratio: float = 0.5
    zk_session_timeout_ms: int = 10000
    grpc_max_message_bytes: int = 64 * _MiB
    grpc_keepalive_interval_ms: int = 10000
    read_threads: int = 4
    shutdown_grace_ms: int = 5000

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", pathlib.Path(self.data_dir))
        self.validate()

    # -- derived ---------------------------------------------------------------------------------------

    @property
    def journal_dir(self) -> pathlib.Path:
        return self.data_dir / "journal"

    @property
    def ledgers_dir(self) -> pathlib.Path:
        return self.data_dir / "ledgers"

    @property
    def endpoints_path(self) -> pathlib.Path:
        return self.data_dir / "endpoints.json"

    def effective_bookie_id(self, port: int) -> str:
        """The configured id, or ``advertised_host:port`` (with the bound port when ``port`` was 0)."""
        return self.bookie_id or f"{self.advertised_host}:{port}"

    def validate(self) -> None:
        """Raises ConfigError naming the first inconsistent setting."""
        for name in ("port", "http_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                raise ConfigError(f"{name} must be in 0..65535, not {value}")
        if not -1 <= self.add_port <= 65535:
            raise ConfigError(f"add_port must be in 0..65535, or -1 (no add port), not {self.add_port}")
        positive = (
            "journal_max_size_bytes",
            "write_cache_max_bytes",
            "flush_interval_ms",
            "entry_log_max_size_bytes",
            "entry_max_size_bytes",
            "disk_check_interval_ms",
            "gc_interval_ms",
            "zk_session_timeout_ms",
            "grpc_max_message_bytes",
            "grpc_keepalive_interval_ms",
            "read_threads",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        if self.entry_log_write_bytes <= 0 or self.entry_log_write_bytes % 4096:
            raise ConfigError(f"entry_log_write_bytes must be a positive multiple of 4096, not "
                              f"{self.entry_log_write_bytes}")
        for name in ("disk_free_min_bytes", "disk_free_resume_bytes", "shutdown_grace_ms", "flush_yield_max_ms",
                     "file_removal_step_bytes"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative")
        if self.disk_free_resume_bytes < self.disk_free_min_bytes:
            raise ConfigError(
                f"disk_free_resume_bytes ({self.disk_free_resume_bytes}) must be >= "
                f"disk_free_min_bytes ({self.disk_free_min_bytes})"
            )
        if not 0.0 <= self.gc_compaction_live_ratio < 1.0:
            raise ConfigError("gc_compaction_live_ratio must be in [0, 1)")
        if self.entry_max_size_bytes + 4096 > self.grpc_max_message_bytes:
            raise ConfigError("entry_max_size_bytes must leave room under grpc_max_message_bytes")
        if self.entry_max_size_bytes > self.write_cache_max_bytes // 2:
            raise ConfigError("write_cache_max_bytes must hold at least two maximal entries")
        if not self.bind_host or not self.advertised_host:
            raise ConfigError("bind_host and advertised_host must not be empty")
        if str(self.data_dir) == "":
            raise ConfigError("data_dir must not be empty")

