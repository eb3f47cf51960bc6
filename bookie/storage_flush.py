"""Flush, checkpoint and journal replay: how entries move from the write cache into entry logs + index.

The half of :class:`bookie.storage.Storage` that runs on its storage thread (see the theory of operation
in :mod:`bookie.storage`). A flush swaps the active write cache for an empty one on the event loop, then
the storage thread appends the entries, sorted by (ledger, entry), to the current entry log, fsyncs, and
commits one index transaction holding their locations, the dirty ledger states, the deletions and the
new checkpoint; journal files before the checkpoint are then deleted. A flush that fails puts everything
back so that the next one retries it.

A flush shares the disk with the journal, and a journal sync issued behind a burst of entry-log writes
waits for them: that is add latency. So the storage thread yields. It writes the entry log in pieces of
``entry_log_write_bytes`` and, before each piece, each entry-log fsync and the index commit, waits until the
journal is idle (:meth:`bookie.journal.Journal.wait_idle`: nothing queued, written or syncing), at most
``flush_yield_max_ms`` each time. A busy journal therefore slows a flush down (at worst by that bound per
piece) but never stops it, and nothing about what a flush guarantees changes: entries stay readable in the
flushing cache until the commit, the checkpoint is part of the commit, and a crash anywhere leaves what the
journal replay restores. Each wait is counted (``magnetar_bookie_flush_yields_total``). At start, the journal is replayed from the checkpoint into the write
cache, flushing as it goes when the cache fills.

:class:`StorageFlush` is a part of ``Storage`` (which inherits it), not a class of its own: it works on
the storage's write cache, ledger states, index, journal and entry-log writer.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from collections import defaultdict
from typing import Optional

from magnetar.proto import bookie_pb2

from . import codec
from .directio import remove_in_steps
from .entrylog import list_entry_logs
from .index import FlushBatch, LedgerRecord, encode_location, entry_key
from .journal import Position, ReplayedRecord
from .storage_state import StorageState

__all__ = ["StorageFlush"]

log = logging.getLogger("bookie.storage")


class StorageFlush:
    """Flushing and replay of :class:`bookie.storage.Storage` (see the module docstring)."""

    async def _flush_loop(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000
        while True:
            try:
                await asyncio.wait_for(self._flush_wanted.wait(), interval_s)
            except asyncio.TimeoutError:
                pass
            self._flush_wanted.clear()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("flush failed; the cache is kept and the flush will be retried")
                await asyncio.sleep(interval_s)

    async def flush(self) -> None:
        """Flushes the write cache to entry logs + index and advances the checkpoint (no-op when clean)."""
        async with self._flush_lock:
            checkpoint = self.journal.written_position
            if not self._cache.active and not self._dirty and not self._pending_deletes:
                if checkpoint == self._checkpoint or self.state is StorageState.NEW:
                    return
                # Nothing to write, but the journal moved on (a restart opened a new file, or only barriers
                # and already-applied records were written): advancing the checkpoint lets old files go.
            snapshot, nbytes = self._cache.swap()
            states = {lid: self._ledgers[lid].record() for lid in self._dirty}
            deletes = self._pending_deletes
            self._dirty, self._pending_deletes = set(), []
            loop = asyncio.get_running_loop()
            started = time.perf_counter()
            job = loop.run_in_executor(self._storage_pool, self._flush_sync, snapshot, states, deletes, checkpoint)
            try:
                entries = await asyncio.shield(job)
            except asyncio.CancelledError:
                await asyncio.wait([job])  # never leave the storage thread writing a snapshot we dropped
                self._finish_flush(job, snapshot, states, deletes)
                raise
            except BaseException:
                self._finish_flush(job, snapshot, states, deletes)
                raise
            self._finish_flush(job, snapshot, states, deletes)
            self.observer.on_flush(entries, nbytes, time.perf_counter() - started)

    def _finish_flush(self, job, snapshot, states, deletes) -> None:
        if job.cancelled() or job.exception() is not None:
            # Put everything back so that nothing is lost and the next flush retries it.
            self._cache.restore(snapshot, keep=lambda lid: not self._ledgers[lid].deleted)
            self._dirty.update(states)
            self._pending_deletes[:0] = deletes
        else:
            self._cache.flushed()
        self._room.set()

    def _flush_sync(
        self,
        snapshot: dict[int, dict[int, tuple[int, bytes]]],
        states: dict[int, LedgerRecord],
        deletes: list[int],
        checkpoint: Optional[Position],
    ) -> int:
        deleted_now = set(deletes)
        locations: list[tuple[bytes, bytes]] = []
        usage: dict[int, dict[int, int]] = defaultdict(dict)
        append = self._writer.append
        count = 0
        for lid in sorted(snapshot):
            if lid in deleted_now:
                continue
            entries = snapshot[lid]
            per_log_bytes: dict[int, int] = defaultdict(int)
            for eid in sorted(entries):
                lac, payload = entries[eid]
                loc = append(lid, eid, lac, payload)
                locations.append((entry_key(lid, eid), encode_location(*loc)))
                per_log_bytes[loc.log_id] += loc.size
            count += len(entries)
            for log_id, nbytes in per_log_bytes.items():
                usage[log_id][lid] = nbytes
        self._writer.sync()
        self._yield_to_journal()
        self.index.commit_flush(FlushBatch(locations, states, deletes, dict(usage), checkpoint))
        self.entry_count = self.index.count_entries()  # an LMDB statistic: no walk of the entries
        self._committed_deleted.update(deletes)
        if checkpoint is not None:
            self._checkpoint = checkpoint
            removed = self.journal.reclaim(checkpoint, remove=self._remove_file)
            if removed:
                log.info("checkpoint %s: %d journal files removed", checkpoint, removed)
        self.entry_log_count = len(list_entry_logs(self.ledgers_dir))
        return count

    def _remove_file(self, path: pathlib.Path) -> int:
        """Storage thread: has a file nothing points into any more deleted by the removal thread, in steps that
        yield to the journal (a 256 MiB journal file takes a second or two, which the flushes do not wait
        for); returns the bytes it held, 0 when it is gone or already being removed."""
        if path in self._removing:
            return 0
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return 0
        self._removing.add(path)
        self._removal_pool.submit(self._remove_in_steps, path)
        return size

    def _remove_in_steps(self, path: pathlib.Path) -> None:
        try:
            remove_in_steps(path, self.config.file_removal_step_bytes, self._yield_to_journal)
        except OSError as err:
            log.error("could not remove %s: %s", path, err)
        finally:
            self._removing.discard(path)

    def _yield_to_journal(self) -> None:
        """Storage thread, before each entry-log write, fsync and index commit, and removal thread, before
        each step of a file's removal: waits (bounded) for the journal to be idle. A no-op during replay and
        after close (the journal is not open)."""
        wait_s = self.config.flush_yield_max_ms / 1000
        if wait_s <= 0 or not self.journal.busy:
            return
        started = time.perf_counter()
        idle = self.journal.wait_idle(wait_s)
        try:
            self.observer.on_flush_yield(time.perf_counter() - started, idle)
        except Exception:
            log.exception("storage observer failed")

    # -- replay --------------------------------------------------------------------------------------------

    def _apply_replayed(self, record: ReplayedRecord) -> None:
        kind = record.record_type
        if kind == codec.RecordType.ADD:
            try:
                request = bookie_pb2.AddRequest.FromString(record.body)
            except Exception as err:  # CRC passed, so this is a bug, not a disk fault: say so loudly
                log.error("journal ADD record at %s does not parse (%s); skipped", record.end, err)
                return
            for e in request.entries:
                lid, eid = e.ledger_id, e.entry_id
                state = self._ledgers.get(lid)
                if state is None:
                    state = self._new_ledger(lid)
                if state.deleted:
                    continue
                if self._cached(lid, eid) is not None:
                    continue
                if eid <= state.last_entry_id and self.index.get(lid, eid) is not None:
                    continue
                payload = e.payload
                self._cache.ledger(lid)[eid] = (e.last_add_confirmed, payload)
                self._cache.added(len(payload))
                state.last_entry_id = max(state.last_entry_id, eid)
                state.lac = max(state.lac, e.last_add_confirmed)
                self._dirty.add(lid)
        elif kind == codec.RecordType.FENCE:
            lid = codec.decode_ledger_id(record.body)
            state = self._ledgers.get(lid) or self._new_ledger(lid)
            if not state.fenced:
                state.fenced = True
                self._dirty.add(lid)
        elif kind == codec.RecordType.DELETE:
            self._apply_delete(codec.decode_ledger_id(record.body))
        else:
            log.error("journal record of unknown type %d at %s; skipped", kind, record.end)

    def _flush_replayed(self, checkpoint: Position) -> None:
        """A flush during replay (storage thread, nothing else running): bounds memory on a long journal."""
        snapshot, _nbytes = self._cache.swap()
        states = {lid: self._ledgers[lid].record() for lid in self._dirty}
        deletes, self._dirty, self._pending_deletes = self._pending_deletes, set(), []
        self._flush_sync(snapshot, states, deletes, checkpoint)
        self._cache.flushed()
