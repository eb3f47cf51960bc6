"""The write path of a managed ledger: pipelined appends, in-order completion, rollover, fencing.

Theory of operation. ``add`` hands the entry to the current ledger's writer at once (many adds in flight)
and returns a future. Completions are taken strictly in send order from ``_pending``, so positions resolve
in append order. They are taken when the writer says it settled adds (``WriteHandle.on_settled``, once per
bookie answer, in the turn of the event loop that read it) and each add's ``on_done`` runs as its future
resolves: a publish's receipt is written without waiting for done callbacks, each a turn later. When the
current ledger is full (entries, bytes or age, see ``ledger_full``) a rollover task closes it - which waits
for its in-flight adds - and asks the owner for a new ledger; adds arriving meanwhile wait in ``_queued`` and
go to the new ledger in order. So positions are ordered across ledgers too.

Any write failure (the ledger fenced by another broker's recovery, bookies gone) fails every pending and
queued add with a clear error and moves to FENCED, where adds fail at once: entries after the failure point
may or may not be stored, and only a reopen (which recovers the ledger) establishes a well-defined end. A
failure to *create* a ledger is different: nothing was written, the queued adds fail (retriable), the owner
hears of them (``on_unsent_failed``, so it can give their broker entry indexes out again) and the next add
tries again (NO_LEDGER).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from typing import Awaitable, Callable, Optional

from bookie.client import WriteHandle
from bookie.errors import BookieError, LedgerFencedError
from config_store import MetadataError

from .api import Position
from .config import ManagedLedgerConfig
from .errors import ManagedLedgerClosedError, ManagedLedgerError, ManagedLedgerFencedError, ManagedLedgerWriteError

log = logging.getLogger(__name__)


class AppendState(enum.Enum):
    WRITING = "writing"  # a ledger is open for writes
    ROLLING_OVER = "rolling-over"  # closing the full ledger and creating the next; adds queue
    NO_LEDGER = "no-ledger"  # creating a ledger failed; the next add tries again
    FENCED = "fenced"  # a write failed or another broker took over: adds fail at once
    CLOSED = "closed"


OnDone = Callable[["asyncio.Future[Position]"], None]


class _Add:
    __slots__ = ("data", "future", "ledger_id", "wfut", "tag", "on_done")

    def __init__(self, data: bytes, future: asyncio.Future, tag: object = None,
                 on_done: Optional[OnDone] = None) -> None:
        self.data = data
        self.future = future
        self.tag = tag
        self.on_done = on_done
        self.ledger_id = -1
        self.wfut: Optional[asyncio.Future] = None


def _tell(op: _Add) -> None:
    """Runs the add's ``on_done`` now, in the turn its future was resolved (a done callback would run a turn
    later); its bug is logged, never raised into the write path."""
    if op.on_done is not None:
        try:
            op.on_done(op.future)
        except Exception:  # noqa: BLE001
            log.exception("on_done of an append failed")


def _fail(ops: list[_Add], error: BaseException) -> None:
    for op in ops:
        if not op.future.done():
            op.future.set_exception(error)
            op.future.exception()  # the caller may have dropped the future: no "never retrieved" noise
            _tell(op)


class AppendPipeline:
    """Owned by one managed ledger, which supplies ledgers and learns of confirmed entries.

    Args:
        create_ledger: creates a ledger and records it in the managed ledger's metadata (compare-and-set).
        on_confirmed: ``[(position, data), ...]`` confirmed, in order (called once per batch of completions).
        on_ledger_closed: a full ledger was closed by a rollover (its writer, now read-only).
        on_rolled_over: a new ledger is in use (trimming may free the old ones).
        on_unsent_failed: ``[tag, ...]`` of queued adds that failed without being sent to any ledger (no
            ledger could be created), in append order; they are the last adds made.
    """

    def __init__(self, name: str, config: ManagedLedgerConfig, *,
                 create_ledger: Callable[[], Awaitable[WriteHandle]],
                 on_confirmed: Callable[[list[tuple[Position, bytes]]], None],
                 on_ledger_closed: Callable[[WriteHandle], None], on_rolled_over: Callable[[], None],
                 on_unsent_failed: Callable[[list], None] = lambda tags: None) -> None:
        self._name = name
        self._config = config
        self._create_ledger = create_ledger
        self._on_confirmed = on_confirmed
        self._on_ledger_closed = on_ledger_closed
        self._on_rolled_over = on_rolled_over
        self._on_unsent_failed = on_unsent_failed
        self.state = AppendState.NO_LEDGER
        self.error: Optional[ManagedLedgerError] = None
        self.writer: Optional[WriteHandle] = None
        self.closing_writer: Optional[WriteHandle] = None
        self.ledger_created_ms = 0
        self._created_s = 0.0
        self._sent_entries = 0
        self._sent_bytes = 0
        self._pending: collections.deque[_Add] = collections.deque()
        self._queued: collections.deque[_Add] = collections.deque()
        self._rollover_task: Optional[asyncio.Task] = None

    @property
    def pending_count(self) -> int:
        return len(self._pending) + len(self._queued)

    def start(self, writer: WriteHandle) -> None:
        """Starts writing to ``writer``'s ledger (the first one, created while opening)."""
        self._use(writer)
        self.state = AppendState.WRITING

    def _use(self, writer: WriteHandle) -> None:
        self.writer = writer
        writer.on_settled = self._process_completions  # completions taken in the turn the bookies answered
        self._created_s = time.monotonic()
        self.ledger_created_ms = int(time.time() * 1000)
        self._sent_entries = self._sent_bytes = 0

    # -- adding ------------------------------------------------------------------------------------------

    def add(self, data: bytes, tag: object = None, on_done: Optional[OnDone] = None) -> "asyncio.Future[Position]":
        """Appends ``data``; the future resolves to its position (or fails). ``on_done(future)``, when given,
        runs as soon as the future is done, in the same turn of the event loop."""
        if self.state is AppendState.FENCED:
            raise ManagedLedgerFencedError(f"[{self._name}] managed ledger is fenced: {self.error}")
        if self.state is AppendState.CLOSED:
            raise ManagedLedgerClosedError(f"[{self._name}] managed ledger is closed: no appends")
        op = _Add(data, asyncio.get_running_loop().create_future(), tag, on_done)
        if self.state is AppendState.WRITING:
            self._send(op)
        else:
            self._queued.append(op)
            if self.state is AppendState.NO_LEDGER:
                self._start_rollover()
        return op.future

    def _send(self, op: _Add) -> None:
        writer = self.writer
        op.ledger_id = writer.ledger_id
        self._pending.append(op)
        try:
            op.wfut = writer.add_nowait(op.data)
        except BookieError as e:  # the writer failed before we heard of it
            self._write_failed(e)
            return
        if op.wfut.done():  # settled before it was ours to take (never seen): take it a turn later
            asyncio.get_running_loop().call_soon(self._process_completions)
        self._sent_entries += 1
        self._sent_bytes += len(op.data)
        if self.ledger_full():
            self._start_rollover()

    def ledger_full(self) -> bool:
        """True when the current ledger should be rolled over (never before ``min_ledger_rollover_time_s``)."""
        c = self._config
        age_s = time.monotonic() - self._created_s
        if age_s < c.min_ledger_rollover_time_s:
            return False
        if self._sent_entries >= c.max_entries_per_ledger or self._sent_bytes >= c.max_size_per_ledger_bytes:
            return True
        return self._sent_entries > 0 and age_s >= c.max_ledger_rollover_time_s

    def check_rollover(self) -> None:
        """Starts a rollover if the current ledger is full by age (called periodically)."""
        if self.state is AppendState.WRITING and self.ledger_full():
            self._start_rollover()

    def _process_completions(self) -> None:
        confirmed: list[tuple[Position, bytes]] = []
        pending = self._pending
        while pending and pending[0].wfut is not None and pending[0].wfut.done():
            op = pending[0]
            error = (ManagedLedgerWriteError(f"[{self._name}] append cancelled") if op.wfut.cancelled()
                     else op.wfut.exception())
            if error is not None:
                self._write_failed(error)
                break
            pending.popleft()
            position = Position(op.ledger_id, op.wfut.result())
            confirmed.append((position, op.data))
            if not op.future.done():
                op.future.set_result(position)
                _tell(op)
        if confirmed:
            self._on_confirmed(confirmed)

    # -- failures ----------------------------------------------------------------------------------------

    def _write_failed(self, cause: BaseException) -> None:
        if isinstance(cause, ManagedLedgerError):
            error = cause
        elif isinstance(cause, LedgerFencedError):
            error = ManagedLedgerFencedError(
                f"[{self._name}] ledger was fenced: another broker has opened this managed ledger; "
                f"no more appends here ({cause})")
        else:
            error = ManagedLedgerWriteError(f"[{self._name}] append failed ({cause}); the managed ledger is fenced "
                                            "and must be reopened")
        if error is not cause:
            error.__cause__ = cause
        self.fence(error)

    def fence(self, error: ManagedLedgerError) -> None:
        """Stops all appending: every pending and queued add fails with ``error``, later adds fail at once.
        Idempotent (the first error is kept)."""
        if self.state not in (AppendState.FENCED, AppendState.CLOSED):
            log.warning("[%s] fenced: %s", self._name, error)
            self.state = AppendState.FENCED
            self.error = error
        ops = list(self._pending) + list(self._queued)
        self._pending.clear()
        self._queued.clear()
        _fail(ops, error)

    # -- rollover ----------------------------------------------------------------------------------------

    def _start_rollover(self) -> None:
        if self._rollover_task is not None and not self._rollover_task.done():
            return
        self.state = AppendState.ROLLING_OVER
        self._rollover_task = asyncio.get_running_loop().create_task(self._rollover(),
                                                                     name=f"ml-rollover:{self._name}")
        self._rollover_task.add_done_callback(self._rollover_done)

    def _rollover_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("[%s] rollover task died", self._name, exc_info=task.exception())

    async def _rollover(self) -> None:
        old = self.writer
        if old is not None:
            self.closing_writer, self.writer = old, None
            try:
                await old.close()  # waits for its in-flight adds
            except (BookieError, MetadataError) as e:  # its pending adds failed: a write failure
                self._process_completions()
                self._write_failed(e)
                return
            finally:
                self._process_completions()
                if self.state is not AppendState.FENCED:
                    self._on_ledger_closed(old)
                self.closing_writer = None
            if self.state is AppendState.FENCED:
                return
        try:
            writer = await self._create_ledger()
        except (LedgerFencedError, ManagedLedgerFencedError) as e:
            self._write_failed(e)
            return
        except (BookieError, MetadataError, ManagedLedgerError) as e:
            if self.state is AppendState.ROLLING_OVER:
                log.warning("[%s] rollover could not create a ledger: %s", self._name, e)
                self.state = AppendState.NO_LEDGER
                queued, self._queued = list(self._queued), collections.deque()
                _fail(queued, ManagedLedgerWriteError(f"[{self._name}] no ledger to write to: {e}"))
                if queued:
                    self._on_unsent_failed([op.tag for op in queued])
            return
        self._use(writer)
        if self.state is not AppendState.ROLLING_OVER:
            return  # fenced meanwhile; the owner's close() closes the writer
        self.state = AppendState.WRITING
        self._rollover_task = None  # this one is done: a full ledger below starts the next rollover
        while self._queued and self.state is AppendState.WRITING:
            self._send(self._queued.popleft())
        self._on_rolled_over()

    # -- closing -----------------------------------------------------------------------------------------

    async def close(self, error: Optional[ManagedLedgerError] = None) -> Optional[WriteHandle]:
        """Lets a running rollover finish, then closes the current ledger after its in-flight adds (unless
        fenced) and returns its writer (None if there was none or it failed). Queued adds fail."""
        if self._rollover_task is not None:
            await asyncio.gather(self._rollover_task, return_exceptions=True)
        writer, self.writer = self.writer, None
        fenced = self.state is AppendState.FENCED
        if self.state is not AppendState.FENCED:
            self.state = AppendState.CLOSED
        closed: Optional[WriteHandle] = None
        if writer is not None and not fenced:
            try:
                await writer.close()
                closed = writer
            except BookieError as e:
                log.warning("[%s] closing ledger %d: %s", self._name, writer.ledger_id, e)
            self._process_completions()
        ops = list(self._pending) + list(self._queued)
        self._pending.clear()
        self._queued.clear()
        _fail(ops, error or ManagedLedgerClosedError(f"[{self._name}] managed ledger closed"))
        return closed

    async def abort(self) -> None:
        """Cancels a running rollover (used when an open fails or on shutdown without a graceful close)."""
        if self._rollover_task is not None:
            self._rollover_task.cancel()
            await asyncio.gather(self._rollover_task, return_exceptions=True)
