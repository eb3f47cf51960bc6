"""The managed-ledger interfaces the rest of the broker codes against (as Pulsar's ``ManagedLedger`` and
``ManagedCursor`` interfaces stand apart from their implementations).

A topic is a managed ledger: an ordered list of ledgers (the last one open for writes, rolled over by
entries/size/time) plus named cursors. A cursor (one per durable subscription, one per remote region for
replication) is a mark-delete position plus the set of individually deleted ranges above it and the ack
sets of partly acknowledged batch entries, persisted at a limited rate, so a broker crash redelivers at most
what was acknowledged since the last persist. A managed ledger also stores string properties (e.g. the
topic epoch of exclusive producers).

Positions are ``(ledger_id, entry_id)`` and ordered. An entry is one ledger entry = one published batch.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Optional, Protocol, Sequence

from .errors import IndexNotEnabledError
from .errors import ManagedLedgerError  # noqa: F401  (the root the interfaces raise, defined in errors.py)


class Position(NamedTuple):
    """A place in a managed ledger. ``(ledger_id, -1)`` is "before the first entry of that ledger"."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    data: bytes


class InitialPosition(enum.Enum):
    LATEST = "latest"  # start after the last entry written when the cursor is created
    EARLIEST = "earliest"  # start at the first entry still retained


class ManagedCursor(abc.ABC):
    """A subscription's position in a managed ledger."""

    name: str
    durable: bool

    @property
    @abc.abstractmethod
    def mark_delete_position(self) -> Position:
        """Everything at or before this position is acknowledged (deleted)."""

    @property
    @abc.abstractmethod
    def read_position(self) -> Position:
        """The next position ``read_entries`` returns from."""

    @abc.abstractmethod
    async def read_entries(self, max_entries: int, *, max_bytes: Optional[int] = None) -> list[Entry]:
        """Reads up to ``max_entries`` from the read position (skipping individually deleted ones) and
        advances it. Returns [] when caught up (does not wait)."""

    @abc.abstractmethod
    async def wait_for_entries(self, timeout_s: Optional[float] = None) -> bool:
        """Waits until an entry is readable at the read position (True) or the timeout passes (False)."""

    @abc.abstractmethod
    async def mark_delete(self, position: Position, *, properties: Optional[dict[str, int]] = None) -> None:
        """Cumulative acknowledgement up to and including ``position`` (persisted, throttled)."""

    @abc.abstractmethod
    async def delete(self, positions: Sequence[Position]) -> None:
        """Individual acknowledgements; the mark-delete position advances over contiguous deleted ranges."""

    @abc.abstractmethod
    def is_deleted(self, position: Position) -> bool:
        """True if ``position`` is at/before mark-delete or individually deleted."""

    @abc.abstractmethod
    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        """Deleted ranges above mark-delete, as (exclusive start, inclusive end) pairs, ascending."""

    def batch_ack_sets(self) -> dict[Position, int]:
        """Partly acknowledged batch entries: position -> bit set of the members still unacknowledged (bit i =
        batch index i). This default stores none (implementations without stored state, e.g. test doubles)."""
        return {}

    async def delete_batch_indexes(self, ack_sets: Mapping[Position, int]) -> None:
        """Batch-index acknowledgements: position -> bit set of the members still unacknowledged, ANDed with
        what is recorded; an emptied set deletes the entry. This default records nothing (see above)."""

    @abc.abstractmethod
    def seek(self, position: Position) -> None:
        """Moves the read position (for redelivery: ``rewind`` is seek to mark-delete's successor)."""

    @abc.abstractmethod
    def rewind(self) -> None:
        """Read position back to the first entry after mark-delete that is not individually deleted."""

    @abc.abstractmethod
    async def reset(self, position: Position) -> None:
        """Resets mark-delete to just before ``position`` and clears deleted ranges (admin reset/seek)."""

    @abc.abstractmethod
    def backlog_entries(self) -> int:
        """Entries after mark-delete not individually deleted (the subscription backlog in entries)."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Persists the current state now (used on close/unload)."""


class ManagedLedger(abc.ABC):
    """A topic's storage: append entries, read them through cursors, trim what nobody needs."""

    name: str

    @abc.abstractmethod
    def add_entry_nowait(self, data: bytes, *, num_messages: Optional[int] = None,
                         on_done: Optional[Callable[["asyncio.Future[Position]"], None]] = None,  # noqa: F821
                         ) -> "asyncio.Future[Position]":  # noqa: F821
        """Appends one entry; the future resolves (in append order) once it is durable at Qa bookies.
        ``num_messages``: the entry's message count if the caller parsed its metadata (a hint for the
        broker entry index; implementations read it from ``data`` without it). ``on_done(future)``: called
        once the future is done, no later than its done callbacks (the bookie-backed ledger calls it in the
        turn of the event loop that resolved it: a publish's receipt need not wait for the next turn)."""

    @abc.abstractmethod
    async def add_entry(self, data: bytes) -> Position: ...

    @property
    @abc.abstractmethod
    def last_confirmed_position(self) -> Position:
        """The last durable entry (``(current_ledger, -1)`` when empty)."""

    @abc.abstractmethod
    async def open_cursor(
        self, name: str, *, initial_position: InitialPosition = InitialPosition.LATEST
    ) -> ManagedCursor:
        """Opens (or creates, persisted) a durable cursor."""

    @abc.abstractmethod
    def new_non_durable_cursor(self, start: Position, *, name: str = "") -> ManagedCursor:
        """A cursor kept only in memory (readers); reads start just after ``start``."""

    @abc.abstractmethod
    async def delete_cursor(self, name: str) -> None: ...

    @property
    @abc.abstractmethod
    def cursors(self) -> dict[str, ManagedCursor]: ...

    @abc.abstractmethod
    async def read_entry(self, position: Position) -> Entry: ...

    @abc.abstractmethod
    def first_position(self) -> Position:
        """The first retained entry's position."""

    @abc.abstractmethod
    def next_position(self, position: Position) -> Position:
        """The position after ``position`` (crossing into the next ledger when needed)."""

    @abc.abstractmethod
    def previous_position(self, position: Position) -> Position:
        """The last retained position before ``position``; entry id -1 (in the first ledger) when none is."""

    @abc.abstractmethod
    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        """How many entries lie in (start, end]."""

    @abc.abstractmethod
    async def find_position_by_publish_time(self, timestamp_ms: int, publish_time_of) -> Position:
        """The first entry whose publish time (``publish_time_of(entry_bytes)``) is >= timestamp_ms."""

    @property
    def next_index(self) -> int:
        """The broker entry index the next appended message gets (messages are numbered from 0 over the whole
        managed ledger; an entry stores the index of its last message). Read it just before
        ``add_entry_nowait`` to know that entry's base index. IndexNotEnabledError when the managed ledger
        adds no index (this default: test doubles); ``ManagedLedgerImpl`` documents the rest."""
        raise IndexNotEnabledError(f"[{getattr(self, 'name', '?')}] this managed ledger adds no broker entry index")

    async def find_position_by_index(self, index: int) -> Position:
        """The position of the entry holding message ``index`` (the first entry whose stored index is
        ``>= index``); see ``ManagedLedgerImpl.find_position_by_index`` for the end and trimmed cases. This
        default raises IndexNotEnabledError."""
        raise IndexNotEnabledError(f"[{getattr(self, 'name', '?')}] this managed ledger adds no broker entry index")

    @property
    @abc.abstractmethod
    def number_of_entries(self) -> int: ...

    @property
    @abc.abstractmethod
    def total_size(self) -> int:
        """Bytes of every retained entry (``pulsar_storage_size``)."""

    @abc.abstractmethod
    def internal_stats(self) -> dict:
        """Pulsar's internal-stats JSON for this ledger (entriesAddedCounter, numberOfEntries,
        totalSize, currentLedgerEntries, currentLedgerSize, lastConfirmedEntry, state, ledgers[], cursors{})."""

    @abc.abstractmethod
    async def trim(self) -> int:
        """Deletes ledgers every cursor has passed and retention no longer keeps; returns how many."""

    def set_retention(self, time_s: float, size_bytes: int) -> None:
        """How long and how much consumed data this managed ledger keeps from now on (-1: no limit of that
        kind), as a namespace's retention policy says; the next trim applies it. This default ignores it (test
        doubles keep everything until trimmed); ``ManagedLedgerImpl`` replaces its configuration's values."""

    @property
    def properties(self) -> dict[str, str]:
        """The managed ledger's properties (Pulsar's ``ManagedLedger.getProperties``). This default keeps them
        in the object only (test doubles); ``ManagedLedgerImpl`` stores them with its metadata."""
        return dict(getattr(self, "_default_properties", {}))

    async def set_properties(self, updates: Mapping[str, str]) -> None:
        """Merges ``updates`` into the properties and stores them before returning (see ``properties``)."""
        self._default_properties = {**getattr(self, "_default_properties", {}), **updates}

    @property
    def terminated(self) -> bool:
        """True once :meth:`terminate` was called (and, for a stored implementation, once it was stored)."""
        return getattr(self, "_terminated_at", None) is not None

    async def terminate(self) -> Position:
        """Terminates the managed ledger (Pulsar's topic termination): no more appends, ever; returns the
        position of the last entry. Idempotent. This default keeps the state in the object only (for
        implementations without stored state, e.g. test doubles); ``ManagedLedgerImpl`` stores it."""
        if getattr(self, "_terminated_at", None) is None:
            self._terminated_at = self.last_confirmed_position
        return self._terminated_at

    @abc.abstractmethod
    async def close(self) -> None:
        """Closes the current ledger and persists cursors (unload). Idempotent."""

    @abc.abstractmethod
    async def delete(self) -> None:
        """Deletes every ledger and cursor and the metadata (topic deletion)."""


class ListWatch(Protocol):
    """A live watch started by :meth:`ManagedLedgerFactory.watch_list`."""

    def cancel(self) -> None:
        """Stops the deliveries; idempotent."""


class ManagedLedgerFactory(abc.ABC):
    watches_list: bool = False
    """Whether :meth:`watch_list` is served (topic-list watchers need it)."""

    @abc.abstractmethod
    async def open(self, name: str, *, config: "object | None" = None) -> ManagedLedger:
        """Opens the managed ledger ``name`` (the topic's path form ``tenant/ns/persistent/topic``),
        recovering (fencing) its last ledger if another broker left it open, and starting a new ledger."""

    @abc.abstractmethod
    async def exists(self, name: str) -> bool: ...

    @abc.abstractmethod
    async def delete(self, name: str) -> None: ...

    @abc.abstractmethod
    async def list(self, prefix: str) -> list[str]:
        """Names of managed ledgers under ``tenant/ns/persistent``."""

    def watch_list(self, prefix: str, callback: Callable[[list[str]], Any]) -> ListWatch:
        """Calls ``callback(names)`` on the loop with what :meth:`list` returns, now and after every change made by
        any broker of the region (intermediate states may be coalesced). Served when :attr:`watches_list`."""
        raise NotImplementedError(f"{type(self).__name__} cannot watch its managed-ledger list")

    @abc.abstractmethod
    async def close(self) -> None: ...
