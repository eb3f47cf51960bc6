"""Writing a ledger: striping, ack quorums, in-order acknowledgement and ensemble changes.

Theory of operation. ``add_nowait`` numbers the entry, encodes it once and hands it to the BookieClient of
each bookie in its write set; the bookies' answers arrive through ``_on_result``. An entry is *done* once Qa
of the bookies in its (current) write set have it durably; entries are acknowledged strictly in entry order,
so the writer's last-add-confirmed (LAC) is the highest entry whose predecessors are all done. Every entry
carries the LAC at the time it was sent, which is how readers and recovery learn what is committed.

When a bookie of the current ensemble fails (stream error, timeout, read-only, internal error), the writer
performs an *ensemble change*: it swaps the failed bookie for a fresh writable one in the same slot, records
the new ensemble in the ledger metadata starting at LAC + 1 with a compare-and-set, and re-sends every entry
above the LAC whose write set now includes the newcomer. New adds wait while the change is in progress.
A lost compare-and-set means someone else touched the metadata: if the ledger is no longer OPEN, a recovery
has fenced this writer and it fails with LedgerFencedError. A FENCED answer from a bookie means the same.

Explicit LAC (BookKeeper's ``explicitLacInterval``). Bookies learn the LAC from the adds that carry it, so
after the last add of a burst they know the LAC one add behind the writer. When the writer's LAC has moved
past the highest LAC its adds carried, one background task waits ``explicit_lac_interval_ms``; if adds are
still flowing (a newer LAC went out with them meanwhile) it waits another interval, otherwise it sends the
LAC to every bookie of the current ensemble (WriteLastAddConfirmed), a hint that needs no quorum: a failure
is only logged. The task exists only while such a LAC is pending, is cancelled when the handle closes or
fails, and sends nothing once the handle is no longer OPEN (nor for a recovery writer, which closes the
ledger right away).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
from typing import TYPE_CHECKING, Callable, Optional

from bookie.errors import BookieError, EntryTooLargeError, LedgerFencedError
from config_store import BadVersionError, LedgerMetadata, LedgerState
from magnetar.proto import bookie_pb2

from .bookie_client import entry_error
from .errors import LedgerClosedError, LedgerStateError, NotEnoughBookiesError
from .placement import replace_bookies, write_set
from .wire import encode_entry

if TYPE_CHECKING:
    from .ledger_client import LedgerClient

log = logging.getLogger(__name__)

Status = bookie_pb2.Status
_FATAL_STATUSES = {Status.INVALID_ARGUMENT, Status.TOO_LARGE, Status.ENTRY_CONFLICT}


class HandleState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class _Add:
    __slots__ = ("entry_id", "size", "framed", "write_set", "sent_to", "acked", "future", "done")

    def __init__(self, entry_id: int, size: int, framed: bytes, future: asyncio.Future) -> None:
        self.entry_id = entry_id
        self.size = size
        self.framed = framed
        self.write_set: list[str] = []
        self.sent_to: set[str] = set()
        self.acked: set[str] = set()
        self.future = future
        self.done = False


class WriteHandle:
    """The single writer of one ledger. Obtain it from ``LedgerClient.create_ledger``."""

    def __init__(
        self,
        client: "LedgerClient",
        metadata: LedgerMetadata,
        metadata_version: int,
        *,
        recovery: bool = False,
        next_entry_id: int = 0,
        last_add_confirmed: int = -1,
        length: int = 0,
    ) -> None:
        self._client = client
        self._md = metadata
        self._md_version = metadata_version
        self._recovery = recovery
        self.ledger_id = metadata.ledger_id
        self._qw = metadata.write_quorum_size
        self._qa = metadata.ack_quorum_size
        self._ensemble = list(metadata.ensembles[-1][1])
        self._next_entry_id = next_entry_id
        self._lac = last_add_confirmed
        self._length = length
        self._pending: collections.deque[_Add] = collections.deque()
        self._by_id: dict[int, _Add] = {}
        self._held: list[_Add] = []
        self._failed_bookies: set[str] = set()
        self._ever_failed: set[str] = set()
        self._change_task: Optional[asyncio.Task] = None
        self._lac_told = last_add_confirmed  # the highest LAC an add carried or an explicit LAC sent
        self._lac_task: Optional[asyncio.Task] = None
        self.explicit_lacs_sent = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self.state = HandleState.OPEN
        self._error: Optional[BaseException] = None
        self.ensemble_changes = 0
        # Called on the event loop right after this handle resolved or failed one or more add futures (once per
        # run of them), so that the owner can take its completions in the same turn instead of one done
        # callback (a turn of the loop) later. It must not raise; an error is logged.
        self.on_settled: Optional[Callable[[], None]] = None  # see _on_result and _fail

    # -- public -------------------------------------------------------------------------------------------

    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        return self._length

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def add_nowait(self, payload: bytes) -> "asyncio.Future[int]":
        """Starts an add and returns a future of its entry id, resolved once Qa bookies have it and every
        earlier entry is acknowledged. Futures resolve in entry order."""
        if self.state is not HandleState.OPEN:
            if self._error is not None:
                raise self._error
            raise LedgerClosedError(f"ledger {self.ledger_id} is {self.state.value}: no more adds")
        max_size = self._client.config.entry_max_size_bytes
        if len(payload) > max_size:
            raise EntryTooLargeError(
                f"entry of {len(payload)} bytes exceeds the maximum of {max_size} bytes (ledger {self.ledger_id})"
            )
        entry_id = self._next_entry_id
        self._next_entry_id += 1
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        add = _Add(entry_id, len(payload), encode_entry(self.ledger_id, entry_id, self._lac, payload), future)
        self._lac_told = max(self._lac_told, self._lac)
        self._pending.append(add)
        self._by_id[entry_id] = add
        self._drained.clear()
        if self._change_task is not None and not self._change_task.done():
            self._held.append(add)
        else:
            self._send(add)
        return future

    async def add(self, payload: bytes) -> int:
        """Adds one entry and waits until it is acknowledged; returns its entry id."""
        return await self.add_nowait(payload)

    async def close(self) -> None:
        """Waits for every pending add, then records the ledger as CLOSED at its LAC (compare-and-set).

        Raises the handle's error if it failed (e.g. LedgerFencedError when a recovery took over).
        """
        if self.state is HandleState.CLOSED:
            return
        if self.state is HandleState.OPEN:
            self.state = HandleState.CLOSING
        await self._stop_lac_task()
        await self._drained.wait()
        if self._error is not None:
            self.state = HandleState.CLOSED
            raise self._error
        closed = self._md.closed(self._lac, self._length)
        try:
            self._md_version = await self._client.region.write_ledger(closed, expected_version=self._md_version)
            self._md = closed
        except BadVersionError:
            current = await self._client.region.read_ledger(self.ledger_id)
            md = current.value
            self.state = HandleState.CLOSED
            if md.state is LedgerState.CLOSED and md.last_entry_id == self._lac:
                self._md, self._md_version = md, current.version
                return
            raise LedgerFencedError(
                f"ledger {self.ledger_id} was taken over by a recovery (metadata state {md.state.value}, "
                f"last entry {md.last_entry_id}); this writer's LAC is {self._lac}"
            )
        self.state = HandleState.CLOSED

    # -- sending and answers ------------------------------------------------------------------------------

    def _send(self, add: _Add) -> None:
        add.write_set = write_set(self._ensemble, self._qw, add.entry_id)
        self._send_missing(add)

    def _send_missing(self, add: _Add) -> None:
        for bookie_id in add.write_set:
            if bookie_id in add.sent_to:
                continue
            add.sent_to.add(bookie_id)
            try:
                bookie = self._client.bookie_client(bookie_id)
            except BookieError as err:
                self._bookie_failed(bookie_id, str(err))
                continue
            bookie.add(add.framed, add.entry_id, self._on_result, recovery=self._recovery)

    def _on_result(self, bookie_id: str, entry_id: int, status: int, message: str) -> Optional[Callable[[], None]]:
        """One bookie's answer for one entry. Returns what the bookie client calls once it has passed on every
        answer of the response (so that the owner hears of a response's entries once, not once each)."""
        add = self._by_id.get(entry_id)
        if add is None or add.done or bookie_id not in add.write_set:
            return None  # already acknowledged, or an answer from a bookie that was replaced meanwhile
        if status == Status.OK:
            add.acked.add(bookie_id)
            if len(add.acked) >= self._qa:
                add.done = True
                if self._complete_in_order():
                    return self._tell_settled
        elif status == Status.FENCED:
            self._fail(
                LedgerFencedError(
                    f"ledger {self.ledger_id} is fenced (bookie {bookie_id}): another client recovered it; "
                    "this writer can add no more entries"
                )
            )
        elif status in _FATAL_STATUSES:
            self._fail(entry_error(bookie_id, status, message))
        else:
            # The bookie cannot take it (down, read-only, failing): it must leave the ensemble.
            add.sent_to.discard(bookie_id)
            self._bookie_failed(bookie_id, message or Status.Name(status))
        return None

    def _complete_in_order(self) -> bool:
        """Resolves the done adds at the head, in entry order; True if it resolved any."""
        pending = self._pending
        settled = False
        while pending and pending[0].done:
            add = pending.popleft()
            del self._by_id[add.entry_id]
            self._lac = add.entry_id
            self._length += add.size
            add.framed = b""
            if not add.future.done():
                add.future.set_result(add.entry_id)
                settled = True
        if not pending:
            self._drained.set()
        if self._lac > self._lac_told:
            self._schedule_explicit_lac()
        return settled

    def _tell_settled(self) -> None:
        if self.on_settled is not None:
            try:
                self.on_settled()
            except Exception:  # noqa: BLE001 - the owner's bug must not break the bookie client's reader
                log.exception("[ledger %d] on_settled failed", self.ledger_id)

    # -- explicit LAC --------------------------------------------------------------------------------------

    def _schedule_explicit_lac(self) -> None:
        interval_ms = self._client.config.explicit_lac_interval_ms
        if interval_ms <= 0 or self._recovery or self.state is not HandleState.OPEN:
            return
        if self._lac_task is None or self._lac_task.done():
            self._lac_task = asyncio.get_running_loop().create_task(
                self._explicit_lac(interval_ms / 1000), name=f"explicit-lac-{self.ledger_id}"
            )

    async def _explicit_lac(self, interval_s: float) -> None:
        """Sends the LAC once adds stopped carrying it for an interval (see the module docstring)."""
        while self.state is HandleState.OPEN and self._lac > self._lac_told:
            told_before = self._lac_told
            await asyncio.sleep(interval_s)
            if self.state is not HandleState.OPEN or self._lac <= self._lac_told:
                return
            if self._lac_told > told_before:
                continue  # adds are flowing and carry the LAC along: look again an interval later
            lac = self._lac_told = self._lac
            ensemble = list(self._ensemble)
            self.explicit_lacs_sent += 1
            results = await asyncio.gather(*(self._write_lac(b, lac) for b in ensemble), return_exceptions=True)
            for bookie_id, result in zip(ensemble, results):
                if isinstance(result, BaseException):
                    log.info("[ledger %d] explicit LAC %d not taken by bookie %s: %s", self.ledger_id, lac,
                             bookie_id, result)

    async def _write_lac(self, bookie_id: str, lac: int) -> None:
        await self._client.bookie_client(bookie_id).write_lac(self.ledger_id, lac)

    async def _stop_lac_task(self) -> None:
        task, self._lac_task = self._lac_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _fail(self, error: BaseException) -> None:
        if self.state is HandleState.FAILED:
            return
        log.warning("[ledger %d] writer failed: %s", self.ledger_id, error)
        self.state = HandleState.FAILED
        self._error = error
        if self._lac_task is not None:
            self._lac_task.cancel()  # close() awaits it
        for add in self._pending:
            if not add.future.done():
                add.future.set_exception(error)
                add.future.exception()  # mark retrieved: a caller may have dropped the future
        self._pending.clear()
        self._by_id.clear()
        self._held.clear()
        self._drained.set()
        self._tell_settled()

    # -- ensemble change ----------------------------------------------------------------------------------

    def _bookie_failed(self, bookie_id: str, reason: str) -> None:
        if self.state is HandleState.FAILED or bookie_id not in self._ensemble:
            return
        if bookie_id not in self._failed_bookies:
            log.warning("[ledger %d] bookie %s failed: %s", self.ledger_id, bookie_id, reason)
        self._failed_bookies.add(bookie_id)
        if self._change_task is None or self._change_task.done():
            self._change_task = asyncio.get_running_loop().create_task(
                self._change_ensemble(), name=f"ensemble-change-{self.ledger_id}"
            )

    async def _change_ensemble(self) -> None:
        try:
            for _attempt in range(self._client.config.ensemble_change_attempts_max):
                failed = self._failed_bookies & set(self._ensemble)
                if not failed:
                    break
                writable = self._client.writable_bookies()
                new_ensemble = replace_bookies(self._ensemble, failed, writable, exclude=self._ever_failed)
                if new_ensemble is None:
                    raise NotEnoughBookiesError(
                        f"ledger {self.ledger_id}: no writable bookie can replace {sorted(failed)} "
                        f"(writable: {sorted(writable)}, ensemble: {self._ensemble})"
                    )
                first = self._lac + 1
                changed = self._md.with_ensemble(first, new_ensemble)
                try:
                    version = await self._client.region.write_ledger(changed, expected_version=self._md_version)
                except BadVersionError:
                    current = await self._client.region.read_ledger(self.ledger_id)
                    if current.value.state is not self._md.state or current.value.state is LedgerState.CLOSED:
                        raise LedgerFencedError(
                            f"ledger {self.ledger_id} changed state to {current.value.state.value} under its "
                            "writer: another client is recovering it"
                        ) from None
                    raise LedgerStateError(
                        f"ledger {self.ledger_id}: metadata changed under its writer (version "
                        f"{self._md_version} -> {current.version})"
                    ) from None
                log.info(
                    "[ledger %d] ensemble change at entry %d: %s -> %s", self.ledger_id, first, self._ensemble, new_ensemble
                )
                self._md, self._md_version = changed, version
                self._ensemble = list(new_ensemble)
                self._failed_bookies -= failed
                self._ever_failed |= failed
                self.ensemble_changes += 1
                held = set(id(a) for a in self._held)
                self._held.clear()
                for add in list(self._pending):
                    if id(add) in held:
                        self._send(add)
                        continue
                    new_ws = write_set(self._ensemble, self._qw, add.entry_id)
                    add.write_set = new_ws
                    add.acked &= set(new_ws)
                    add.sent_to &= set(new_ws)
                    self._send_missing(add)
            else:
                raise NotEnoughBookiesError(f"ledger {self.ledger_id}: ensemble change did not settle")
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # noqa: BLE001 - any failure here fails the writer, visibly
            self._fail(err)
        finally:
            # Adds that arrived while the last attempt was finishing must not be left unsent.
            if self.state is not HandleState.FAILED and self._held:
                held, self._held = self._held, []
                for add in held:
                    self._send(add)
