"""The ledger storage interface: what a bookie's gRPC service needs from storage, apart from how it is stored.

As BookKeeper's ``LedgerStorage`` stands apart from ``DbLedgerStorage``, :class:`LedgerStorage` is all
:mod:`bookie.service` knows of storage; the process entry point (:mod:`bookie.server`) constructs the
implementation, :class:`bookie.storage.Storage` (journal + write cache + entry logs + LMDB index), and hands
it in. Tests can serve the gRPC face over another implementation.

What every implementation guarantees:

* an add (:meth:`LedgerStorage.add`) is answered OK only once its entries are durable; a refused request
  stores nothing of what it refuses (see :class:`bookie.adds.AddTicket`);
* a fence or a delete is durable when its coroutine returns; a fenced ledger refuses normal adds for good,
  recovery adds still pass;
* reads never return a record that fails its check: such an entry comes back INTERNAL;
* after :meth:`LedgerStorage.close` (or while closing) changes raise :class:`StorageClosedError`.

Only value types and the interface live here (no I/O), so the service depends on nothing else of storage.
"""

from __future__ import annotations

import abc
import pathlib
from typing import AsyncIterator, NamedTuple, Sequence

from magnetar.proto import bookie_pb2

from .adds import AddTicket
from .errors import BookieUnavailableError

__all__ = ["LacInfo", "LedgerStorage", "ReadResult", "StorageClosedError", "StorageObserver"]


class StorageClosedError(BookieUnavailableError):
    """The storage no longer accepts changes: the bookie is shutting down (answered UNAVAILABLE)."""


class LacInfo(NamedTuple):
    """What a bookie knows of a ledger's end (ReadLastAddConfirmed, FenceLedger)."""

    last_add_confirmed: int
    last_entry_id: int
    fenced: bool
    known: bool


class ReadResult(NamedTuple):
    """One entry of a read."""

    entry_id: int
    status: int  # OK, NO_SUCH_ENTRY or INTERNAL (bookie_pb2.Status)
    last_add_confirmed: int
    payload: bytes


class StorageObserver:
    """Metrics hooks an implementation calls (no-ops here; :class:`bookie.metrics.BookieMetrics` fills them).

    ``on_sync`` and ``on_sync_failed`` run on the journal's force thread (it is also the journal's observer),
    ``on_flush_yield`` on the storage thread, the others on the event loop.
    """

    def on_sync(self, seconds: float, entries: int, records: int, nbytes: int) -> None:
        pass

    def on_sync_failed(self, seconds: float) -> None:
        pass

    def on_stages(self, queue_s: float, write_s: float, force_wait_s: float, fsync_s: float) -> None:
        """See :meth:`bookie.journal.JournalObserver.on_stages`."""

    def on_flush(self, entries: int, nbytes: int, seconds: float) -> None:
        pass

    def on_flush_yield(self, seconds: float, idle: bool) -> None:
        """An entry-log write, fsync or index commit waited ``seconds`` for a busy journal; ``idle``: the
        journal went idle (False: the wait timed out and the I/O went ahead anyway)."""

    def on_gc_reclaimed(self, nbytes: int) -> None:
        pass

    def on_corrupt_read(self) -> None:
        pass


class LedgerStorage(abc.ABC):
    """A bookie's ledger storage, as its gRPC service uses it. Owned by the event loop.

    Attributes:
        read_only: normal adds are refused READ_ONLY (recovery adds still pass); set by
            :meth:`set_read_only`.
    """

    read_only: bool

    # -- lifecycle -----------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def start(self) -> None:
        """Recovers what was durable (e.g. replays a journal) and starts background work. Idempotent."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Completes what was accepted, makes everything durable and stops. Idempotent."""

    # -- what the bookie reports ----------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def ledger_count(self) -> int:
        """Ledgers held (deleted ones not counted)."""

    @property
    @abc.abstractmethod
    def data_dir(self) -> pathlib.Path:
        """Where the data lives (free disk space is measured there)."""

    @property
    @abc.abstractmethod
    def entry_max_size_bytes(self) -> int:
        """Larger entries are refused TOO_LARGE."""

    @abc.abstractmethod
    def set_read_only(self, read_only: bool, reason: str = "") -> None:
        """Turns refusing normal adds on or off (``reason`` goes into the refusals)."""

    # -- entries -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def has_room(self) -> bool:
        """Whether an add may be accepted now (:meth:`wait_for_room` would not wait)."""

    @abc.abstractmethod
    async def wait_for_room(self) -> None:
        """Backpressure: returns once an add may be accepted without overrunning the storage's memory."""

    @abc.abstractmethod
    def add(self, request: bookie_pb2.AddRequest, raw: bytes) -> AddTicket:
        """Accepts an AddRequest without waiting (``raw``: its serialized bytes, which may be stored as
        they are). The ticket's answer, or its awaited waiter, says how it ended."""

    @abc.abstractmethod
    def read_entries(self, ledger_id: int, entry_ids: Sequence[int]) -> AsyncIterator[list[ReadResult]]:
        """Yields the requested entries in order, in chunks; entries not held come back NO_SUCH_ENTRY."""

    @abc.abstractmethod
    def read_lac(self, ledger_id: int) -> LacInfo:
        """The ledger's last-add-confirmed (the highest of the piggybacked and the explicit LAC) and last
        entry held here (-1 when none)."""

    @abc.abstractmethod
    def explicit_lac(self, ledger_id: int) -> int:
        """The explicit LAC the writer last sent (-1 when none)."""

    @abc.abstractmethod
    def write_lac(self, ledger_id: int, lac: int) -> LacInfo:
        """Keeps the writer's explicit LAC (the highest, clamped to the last entry held; a ledger not held
        is left alone) and answers like :meth:`read_lac`."""

    # -- ledgers -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def fence(self, ledger_id: int) -> LacInfo:
        """Fences the ledger durably (also one never seen, so a late add is refused); ``known`` in the
        answer says whether the ledger was held before."""

    @abc.abstractmethod
    async def delete_ledger(self, ledger_id: int) -> bool:
        """Forgets the ledger durably; True when it was held."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Checkpoint: makes everything accepted so far durable in the long-term store, so that recovery
        no longer needs the journal before this point."""
