"""Ledger storage of one bookie: journal + write cache + entry logs + LMDB index, and what it guarantees.

Theory of operation (the shape of BookKeeper's DbLedgerStorage):

* **Add.** On the event loop an AddRequest is validated once, its entries go into the *active* write cache
  (``ledger -> {entry -> (lac, payload)}``) and the request bytes become one journal record; the add is
  acknowledged when the journal's group fsync covering the record completes. Entries are cached *before*
  they are durable (as in BookKeeper), which is what lets a duplicate or conflicting add arriving while the
  first is still in flight be recognised; readers are protected by the writer's LAC, not by this.
* **Flush.** A flush (every ``flush_interval_ms``, or when the active cache holds half of
  ``write_cache_max_bytes``) swaps the active cache for an empty one on the event loop and notes the
  journal position written so far: every record before it was queued after its entries were cached, so
  the swapped-out cache covers it. The storage thread then appends the entries, sorted by (ledger, entry),
  to the current entry log, fsyncs, and commits one LMDB transaction with their locations, the dirty
  ledger states, deletions and that position as the new *checkpoint*; journal files before it are
  deleted. Until the commit, reads still find the entries in the *flushing* cache.
* **Read.** Caches first (on the loop), then the index and entry logs in the read pool; every record's
  CRC is checked, a bad one is answered INTERNAL, never returned as data.
* **Restart.** The journal is replayed from the checkpoint into the write cache (entries the index
  already holds are skipped, a torn tail is cut) before the bookie serves.
* **Delete / GC.** A delete is journaled, drops the ledger from the cache, and becomes a tombstone plus
  index-range deletion at the next flush; :mod:`bookie.gc` reclaims the entry-log space later.

Threads: the event loop owns every in-memory structure; one storage thread runs flushes and GC steps
(so they never race each other); a small pool serves entry-log reads; the journal has its own writer and force
threads.

Flush and replay live in :mod:`bookie.storage_flush` (``Storage`` inherits them); the per-ledger state in
:mod:`bookie.storage_state`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import pathlib
import time
from typing import AsyncIterator, Optional, Sequence

from magnetar.proto import bookie_pb2

from . import codec
from .adds import (CONFLICT, FENCED, INTERNAL, NO_SUCH_ENTRY, NO_SUCH_LEDGER, OK, OK_ANSWER, READ_ONLY, SHUTTING_DOWN,
                   AddAnswer, AddTicket, Refused, summarize, validate)
from .config import BookieConfig
from .entrylog import EntryLogWriter, list_entry_logs, read_indexed
from .errors import BookieError
from .gc import Action, GarbageCollector
from .index import Index
from .journal import Journal, JournalClosedError, Position
from .storage_flush import StorageFlush
from .ledger_storage import LacInfo, LedgerStorage, ReadResult, StorageClosedError, StorageObserver
from .storage_state import LedgerState, StorageState
from .writecache import WriteCache

log = logging.getLogger("bookie.storage")

READ_CHUNK_BYTES = 1024 * 1024
READ_CHUNK_ENTRIES = 8192
_DISK_RUN_MAX = 512


class Storage(StorageFlush, LedgerStorage):
    """A bookie's durable state, the :class:`LedgerStorage` its service uses. ``await start()`` replays the
    journal; ``await close()`` drains and flushes."""

    def __init__(self, config: BookieConfig, *, observer: Optional[StorageObserver] = None) -> None:
        self.config = config
        self.observer = observer or StorageObserver()
        self.ledgers_dir = config.ledgers_dir
        self.ledgers_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock_data_dir(config.data_dir)
        self.journal = Journal(
            config.journal_dir, max_file_size_bytes=config.journal_max_size_bytes, sync=config.journal_sync,
            direct_io=config.direct_io, observer=self.observer,
        )
        self.index = Index(self.ledgers_dir / "index")
        self.state = StorageState.NEW
        self.read_only = False
        self.read_only_reason = ""
        self._entry_max = config.entry_max_size_bytes
        self._cache_max = config.write_cache_max_bytes
        self._flush_trigger = max(1, config.write_cache_max_bytes // 2)
        self._ledgers: dict[int, LedgerState] = {}
        self._live_ledgers = 0
        self._cache = WriteCache()
        self._dirty: set[int] = set()
        self._pending_deletes: list[int] = []
        self._committed_deleted: set[int] = set()  # storage thread only
        self._storage_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bookie-storage")
        self._read_pool = concurrent.futures.ThreadPoolExecutor(config.read_threads, thread_name_prefix="bookie-read")
        # Deletes files nothing points into any more, in steps (see _remove_file), off the storage thread.
        self._removal_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bookie-remove")
        self._removing: set[pathlib.Path] = set()
        self._writer: Optional[EntryLogWriter] = None
        self._checkpoint: Optional[Position] = None  # the last one committed
        self._gc: Optional[GarbageCollector] = None
        self._flush_lock: Optional[asyncio.Lock] = None
        self._flush_wanted: Optional[asyncio.Event] = None
        self._room: Optional[asyncio.Event] = None
        self._tasks: list[asyncio.Task] = []
        self.entry_log_count = 0
        self.entry_count = 0  # entries in the index (flushed); set by the storage thread after each commit

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Loads the index, replays the journal from the checkpoint, starts the journal and background work."""
        if self.state is not StorageState.NEW:
            return
        loop = asyncio.get_running_loop()
        self._flush_lock = asyncio.Lock()
        self._flush_wanted = asyncio.Event()
        self._room = asyncio.Event()
        await loop.run_in_executor(self._storage_pool, self._open_sync)
        self.journal.start(loop)
        self.state = StorageState.OPEN
        self._tasks = [
            asyncio.create_task(self._flush_loop(), name="bookie-flush"),
            asyncio.create_task(self._gc_loop(), name="bookie-gc"),
        ]

    def _open_sync(self) -> None:
        for ledger_id, rec in self.index.load_ledgers().items():
            self._ledgers[ledger_id] = LedgerState(rec.fenced, rec.deleted, rec.last_add_confirmed, rec.last_entry_id)
            if rec.deleted:
                self._committed_deleted.add(ledger_id)
            else:
                self._live_ledgers += 1
        usage = self.index.load_log_usage()
        logs = list_entry_logs(self.ledgers_dir)
        for log_id, path in logs:
            if log_id not in usage:  # created by a flush that never committed: nothing points into it
                log.info("removing unreferenced entry log %s", path.name)
                path.unlink()
        first_log_id = max([log_id for log_id, _ in logs] + list(usage) + [0]) + 1
        self._writer = EntryLogWriter(
            self.ledgers_dir, first_log_id=first_log_id, max_size_bytes=self.config.entry_log_max_size_bytes,
            direct_io=self.config.direct_io, write_bytes=self.config.entry_log_write_bytes,
            pace=self._yield_to_journal,
        )
        self._gc = GarbageCollector(
            directory=self.ledgers_dir, index=self.index, writer=self._writer, deleted=self._committed_deleted,
            compaction_live_ratio=self.config.gc_compaction_live_ratio, remove=self._remove_file,
        )
        checkpoint = self._checkpoint = self.index.checkpoint()
        started = time.monotonic()
        count = 0
        for record in self.journal.replay(checkpoint):
            self._apply_replayed(record)
            count += 1
            if self._cache.active_bytes >= self._flush_trigger:
                self._flush_replayed(record.end)
        self.entry_log_count = len(list_entry_logs(self.ledgers_dir))
        self.entry_count = self.index.count_entries()
        log.info(
            "storage open: %d ledgers, %d journal records replayed from %s in %.2f s, %d bytes cached",
            self._live_ledgers, count, checkpoint, time.monotonic() - started, self._cache.active_bytes,
        )

    async def close(self) -> None:
        """Stops background work, drains the journal, flushes everything (checkpoint at the end). Idempotent."""
        if self.state in (StorageState.CLOSING, StorageState.CLOSED):
            return
        if self.state is StorageState.NEW:
            self.state = StorageState.CLOSED
            self.index.close()
            os.close(self._lock_fd)
            return
        self.state = StorageState.CLOSING
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.journal.close()
        try:
            await self.flush()
        finally:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._storage_pool, self._writer.close)
            self._storage_pool.shutdown(wait=True)
            self._read_pool.shutdown(wait=True)
            self._removal_pool.shutdown(wait=True)  # a removal under way finishes unpaced (the journal is closed)
            self.index.close()
            os.close(self._lock_fd)
            self.state = StorageState.CLOSED
            log.info("storage closed")

    async def __aenter__(self) -> "Storage":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def ledger_count(self) -> int:
        return self._live_ledgers

    @property
    def cached_bytes(self) -> int:
        return self._cache.total_bytes

    @property
    def data_dir(self) -> pathlib.Path:
        return self.config.data_dir

    @property
    def entry_max_size_bytes(self) -> int:
        return self._entry_max

    def set_read_only(self, read_only: bool, reason: str = "") -> None:
        self.read_only = read_only
        self.read_only_reason = reason

    def _new_ledger(self, ledger_id: int) -> LedgerState:
        state = self._ledgers[ledger_id] = LedgerState()
        self._live_ledgers += 1
        return state

    # -- adds ----------------------------------------------------------------------------------------------

    def has_room(self) -> bool:
        cache = self._cache
        return not (cache.active_bytes and cache.total_bytes >= self._cache_max)

    async def wait_for_room(self) -> None:
        """Backpressure: waits while the write cache (active + flushing) is full."""
        cache = self._cache
        while cache.active_bytes and cache.total_bytes >= self._cache_max:
            self._flush_wanted.set()
            self._room.clear()
            await self._room.wait()

    def add(self, request: bookie_pb2.AddRequest, raw: bytes) -> AddTicket:
        """Accepts an AddRequest (``raw``: its serialized bytes, journaled as they are when possible)."""
        if self.state is not StorageState.OPEN:
            return AddTicket(SHUTTING_DOWN)
        if not request.entries:
            return AddTicket(OK_ANSWER)
        try:
            add = validate(request, entry_max_size_bytes=self._entry_max)
        except Refused as refused:
            return AddTicket(refused.answer)
        if self.read_only and not request.recovery:
            # Recovery adds still pass (as BookKeeper's high-priority writes do): closing a ledger must not
            # fail because one bookie ran low on disk, and the threshold leaves room for them.
            return AddTicket((READ_ONLY, self.read_only_reason or "the bookie is read-only", None))
        if add.single_ledger:
            ticket = self._add_fast(request, raw, add)
            if ticket is not None:
                return ticket
        return self._add_general(request, raw, add)

    def _add_fast(self, request, raw, add) -> Optional[AddTicket]:
        """One ledger, every entry new (the common case): one dict update, the raw bytes journaled."""
        lid = add.ledger_ids[0]
        eids = add.entry_ids
        state = self._ledgers.get(lid)
        if state is None:
            state = self._new_ledger(lid)
        elif state.deleted or (state.fenced and not request.recovery) or eids[0] <= state.last_entry_id:
            return None
        self._cache.ledger(lid).update(zip(eids, add.values))
        state.last_entry_id = eids[-1]
        if add.max_lac > state.lac:
            state.lac = add.max_lac
        self._dirty.add(lid)
        self._account(add.nbytes)
        try:
            waiter = self.journal.append(codec.RecordType.ADD, raw, len(eids))
        except JournalClosedError:
            return AddTicket(SHUTTING_DOWN)
        return AddTicket(None, waiter, len(eids), add.nbytes)

    def _add_general(self, request, raw, add) -> AddTicket:
        lids, eids, vals, nbytes = add.ledger_ids, add.entry_ids, add.values, add.nbytes
        n = len(lids)
        statuses = [OK] * n
        keep: list[int] = []  # journaled: newly stored, or already cached with the same bytes
        verify: list[tuple[int, int, int, bytes]] = []  # found in entry logs: compare bytes off the loop
        recovery = request.recovery
        ledgers, cache, index = self._ledgers, self._cache, self.index
        cur = -1
        state = None
        ledger_status = OK
        a_l = f_l = None
        stored_bytes = 0
        for i in range(n):
            lid = lids[i]
            if lid != cur:
                cur = lid
                state = ledgers.get(lid)
                if state is None:
                    state = self._new_ledger(lid)
                if state.deleted:
                    ledger_status = NO_SUCH_LEDGER
                elif state.fenced and not recovery:
                    ledger_status = FENCED
                else:
                    ledger_status = OK
                    self._dirty.add(lid)
                a_l = cache.active.get(lid)
                f_l = cache.flushing.get(lid)
            if ledger_status:
                statuses[i] = ledger_status
                continue
            eid = eids[i]
            val = vals[i]
            if eid <= state.last_entry_id:
                existing = a_l.get(eid) if a_l is not None else None
                if existing is None and f_l is not None:
                    existing = f_l.get(eid)
                if existing is not None:
                    if existing[1] == val[1]:
                        keep.append(i)
                    else:
                        statuses[i] = CONFLICT
                    continue
                if index.get(lid, eid) is not None:
                    verify.append((i, lid, eid, val[1]))
                    continue
            if a_l is None:
                a_l = cache.ledger(lid)
            a_l[eid] = val
            stored_bytes += len(val[1])
            if eid > state.last_entry_id:
                state.last_entry_id = eid
            if val[0] > state.lac:
                state.lac = val[0]
            keep.append(i)
        self._account(stored_bytes)
        journaled = None
        try:
            if len(keep) == n:
                journaled = self.journal.append(codec.RecordType.ADD, raw, n)
            elif keep:
                entries = request.entries
                subset = bookie_pb2.AddRequest(entries=[entries[i] for i in keep])
                journaled = self.journal.append(codec.RecordType.ADD, subset.SerializeToString(), len(keep))
        except JournalClosedError:
            return AddTicket(SHUTTING_DOWN)
        if not verify:
            answer = summarize(statuses, lids, eids)
            if journaled is None:
                return AddTicket(answer, None, n, nbytes)
            return AddTicket(None, journaled, n, nbytes, then=answer)
        return AddTicket(None, asyncio.ensure_future(self._verify(journaled, statuses, verify, lids, eids)), n, nbytes)

    async def _verify(self, journaled, statuses, verify, lids, eids) -> AddAnswer:
        """Re-adds of entries already in entry logs: OK with identical bytes, ENTRY_CONFLICT otherwise."""
        if journaled is not None:
            await journaled
        for i, lid, eid, payload in verify:
            stored = await self._read_from_logs(lid, [eid], 0)
            result = stored[0]
            if result.status == OK:
                statuses[i] = OK if result.payload == payload else CONFLICT
            else:
                statuses[i] = result.status if result.status == INTERNAL else NO_SUCH_ENTRY
        return summarize(statuses, lids, eids)

    def _account(self, nbytes: int) -> None:
        self._cache.added(nbytes)
        if self._cache.active_bytes >= self._flush_trigger:
            self._flush_wanted.set()

    # -- fence, delete, LAC --------------------------------------------------------------------------------

    def _lac_info(self, ledger_id: int, known: Optional[bool] = None) -> LacInfo:
        state = self._ledgers.get(ledger_id)
        if state is None or state.deleted:
            return LacInfo(-1, -1, bool(state and state.fenced), bool(known))
        lac = max(state.lac, state.explicit_lac)
        return LacInfo(lac, state.last_entry_id, state.fenced, True if known is None else known)

    def read_lac(self, ledger_id: int) -> LacInfo:
        return self._lac_info(ledger_id)

    def explicit_lac(self, ledger_id: int) -> int:
        state = self._ledgers.get(ledger_id)
        return -1 if state is None or state.deleted else state.explicit_lac

    def write_lac(self, ledger_id: int, lac: int) -> LacInfo:
        """Raises the ledger's explicit LAC to ``lac``, clamped to the highest entry stored here.

        In memory only, like BookKeeper's explicit LAC without its journal record: it is a hint for readers of
        an open ledger, never needed for safety (recovery fences and reads the tail anyway), so it costs no
        fsync; after a restart the piggybacked LAC (at most one add behind) answers until the writer's next
        add or explicit LAC. Clamping keeps a bookie from calling confirmed an entry it cannot serve. A
        ledger not held here (never written, deleted) is left alone: a bad request creates no state.
        """
        self._check_open()
        state = self._ledgers.get(ledger_id)
        if state is None or state.deleted:
            return self._lac_info(ledger_id, False)
        clamped = min(lac, state.last_entry_id)
        if clamped > state.explicit_lac:
            state.explicit_lac = clamped
        return self._lac_info(ledger_id)

    async def fence(self, ledger_id: int) -> LacInfo:
        """Fences the ledger durably (a journal record synced) and answers like :meth:`read_lac`.

        ``known`` says whether the bookie knew the ledger *before* this fence; fencing an unknown ledger
        still records it (so that a late normal add is refused).
        """
        self._check_open()
        state = self._ledgers.get(ledger_id)
        known = state is not None and not state.deleted
        if state is None:
            state = self._new_ledger(ledger_id)
        if state.deleted or state.fenced:
            await self.journal.barrier()  # a concurrent fence may not be durable yet
        else:
            state.fenced = True
            self._dirty.add(ledger_id)
            await self.journal.append(codec.RecordType.FENCE, codec.encode_ledger_id(ledger_id))
        return self._lac_info(ledger_id, known)

    async def delete_ledger(self, ledger_id: int) -> bool:
        """Forgets the ledger (durably); True when it existed. Space comes back with garbage collection."""
        self._check_open()
        state = self._ledgers.get(ledger_id)
        if state is None:
            return False
        if state.deleted:
            await self.journal.barrier()
            return False
        self._apply_delete(ledger_id)
        await self.journal.append(codec.RecordType.DELETE, codec.encode_ledger_id(ledger_id))
        return True

    def _apply_delete(self, ledger_id: int) -> None:
        state = self._ledgers.get(ledger_id)
        if state is None:
            state = self._new_ledger(ledger_id)
        if state.deleted:
            return
        state.deleted = True
        self._live_ledgers -= 1
        self._dirty.add(ledger_id)
        self._pending_deletes.append(ledger_id)
        self._cache.drop_ledger(ledger_id)

    def _check_open(self) -> None:
        if self.state is not StorageState.OPEN:
            raise StorageClosedError("the bookie is shutting down")

    # -- reads ---------------------------------------------------------------------------------------------

    async def read_entries(self, ledger_id: int, entry_ids: Sequence[int]) -> AsyncIterator[list[ReadResult]]:
        """Yields the requested entries in order, in chunks of about 1 MiB (each at least one entry).

        Entries this bookie does not hold come back NO_SUCH_ENTRY; a record failing its check INTERNAL.
        """
        n = len(entry_ids)
        i = 0
        while i < n:
            out: list[ReadResult] = []
            size = 0
            while i < n and size < READ_CHUNK_BYTES and len(out) < READ_CHUNK_ENTRIES:
                state = self._ledgers.get(ledger_id)
                eid = entry_ids[i]
                if state is None or state.deleted or eid > state.last_entry_id:
                    out.append(ReadResult(eid, NO_SUCH_ENTRY, -1, b""))
                    i += 1
                    continue
                hit = self._cached(ledger_id, eid)
                if hit is not None:
                    out.append(ReadResult(eid, OK, hit[0], hit[1]))
                    size += len(hit[1])
                    i += 1
                    continue
                run = [eid]
                j = i + 1
                while j < n and len(run) < _DISK_RUN_MAX:
                    nxt = entry_ids[j]
                    if nxt > state.last_entry_id or self._cached(ledger_id, nxt) is not None:
                        break
                    run.append(nxt)
                    j += 1
                results = await self._read_from_logs(ledger_id, run, READ_CHUNK_BYTES - size)
                out.extend(results)
                size += sum(len(r.payload) for r in results)
                i += len(results)
            yield out

    def _cached(self, ledger_id: int, entry_id: int) -> Optional[tuple[int, bytes]]:
        return self._cache.get(ledger_id, entry_id)

    async def _read_from_logs(self, ledger_id: int, entry_ids: list[int], budget_bytes: int) -> list[ReadResult]:
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(
            self._read_pool, read_indexed, self.index, self.ledgers_dir, ledger_id, entry_ids, budget_bytes
        )
        if any(r.status == INTERNAL for r in results):
            self.observer.on_corrupt_read()
        return results

    # -- garbage collection ------------------------------------------------------------------------------

    async def _gc_loop(self) -> None:
        interval_s = self.config.gc_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.collect_garbage()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("entry-log garbage collection failed; will retry")

    async def collect_garbage(self) -> int:
        """One GC pass (removals and compactions, in short storage-thread steps); returns bytes reclaimed."""
        loop = asyncio.get_running_loop()
        pool = self._storage_pool
        steps = await loop.run_in_executor(pool, self._gc.plan)
        reclaimed = 0
        for step in steps:
            if self.state is not StorageState.OPEN:
                break
            if step.action is Action.REMOVE:
                freed = await loop.run_in_executor(pool, self._gc.remove, step.log_id)
            else:
                log.info("compacting entry log %d: %d of %d bytes live", step.log_id, step.live_bytes, step.total_bytes)
                freed = 0
                offset: Optional[int] = 0
                while offset is not None and self.state is StorageState.OPEN:
                    offset, delta = await loop.run_in_executor(pool, self._gc.compact_chunk, step.log_id, offset)
                    freed += delta
            if freed > 0:
                reclaimed += freed
                self.observer.on_gc_reclaimed(freed)
        if steps:
            self.entry_log_count = await loop.run_in_executor(pool, lambda: len(list_entry_logs(self.ledgers_dir)))
        return reclaimed

    async def removals_done(self) -> None:
        """Returns once every file removal asked for so far has finished (the removal thread takes them in
        order): for whoever must see the space back, tests among them."""
        await asyncio.wrap_future(self._removal_pool.submit(lambda: None))

    async def roll_entry_log(self) -> None:
        """Seals the current entry log (the next flush opens a new one); tests use it to make logs GC-able."""
        async with self._flush_lock:
            await asyncio.get_running_loop().run_in_executor(self._storage_pool, self._writer.roll)


def _lock_data_dir(data_dir) -> int:
    """An exclusive lock on ``<data_dir>/LOCK`` for the life of the process (the kernel drops it at exit,
    SIGKILL included): two bookies on one data dir would corrupt each other."""
    fd = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise BookieError(f"data_dir {data_dir} is in use by another bookie (its LOCK is held)") from None
    return fd
