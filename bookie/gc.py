"""Entry-log garbage collection: unlink logs whose ledgers are all deleted, compact mostly-dead ones.

Every method runs on the storage thread, the same single thread that flushes, so a collection never
races a flush over the index or the current log; :class:`bookie.storage.Storage` runs a collection as a
series of short steps (one log removal, one compaction chunk) so flushes interleave with it.

What is live is decided from committed tombstones only (``deleted``: ledgers whose deletion the index has
committed): a ledger never seen before (appearing in a log after the plan was made) is therefore never
mistaken for a dead one. Compaction copies a record only when the index still points at it, rewrites it
into the current entry log, syncs, then repoints the index key *if it still points at the old copy* (a
delete in between simply leaves a dead copy behind), and removes the old log once it has been read
through.
"""

from __future__ import annotations

import enum
import logging
import pathlib
from collections import defaultdict
from typing import Callable, NamedTuple, Optional

from . import codec
from .directio import remove_in_steps_now
from .entrylog import EntryLogWriter, iter_log, log_path
from .index import Index, encode_location, entry_key

log = logging.getLogger("bookie.gc")

COMPACTION_CHUNK_BYTES = 16 * 1024 * 1024


class Action(enum.Enum):
    REMOVE = "remove"
    COMPACT = "compact"


class Step(NamedTuple):
    log_id: int
    action: Action
    live_bytes: int
    total_bytes: int


class GarbageCollector:
    """Entry-log GC over one ledgers directory (storage thread only)."""

    def __init__(
        self,
        *,
        directory: pathlib.Path,
        index: Index,
        writer: EntryLogWriter,
        deleted: set[int],
        compaction_live_ratio: float,
        remove: Callable[[pathlib.Path], int] = remove_in_steps_now,
    ) -> None:
        self.directory = directory
        self.index = index
        self.writer = writer
        self.deleted = deleted  # shared with Storage, mutated on the storage thread only
        self.compaction_live_ratio = compaction_live_ratio
        self._remove = remove  # deletes a file, returns the bytes it held (the storage's paced removal)
        self._skip: set[int] = set()  # logs found corrupt: kept for an operator, never compacted again

    def plan(self) -> list[Step]:
        """Which logs to remove or compact now (never the one being appended to)."""
        steps = []
        current = self.writer.current_log_id
        for log_id, usage in sorted(self.index.load_log_usage().items()):
            if log_id == current or log_id in self._skip:
                continue
            total = sum(usage.values())
            live = sum(n for ledger_id, n in usage.items() if ledger_id not in self.deleted)
            if live == 0:
                steps.append(Step(log_id, Action.REMOVE, live, total))
            elif self.compaction_live_ratio > 0 and live < self.compaction_live_ratio * total:
                steps.append(Step(log_id, Action.COMPACT, live, total))
        return steps

    def remove(self, log_id: int) -> int:
        """Unlinks a log holding only deleted ledgers (re-checked now); returns the bytes freed."""
        usage = self.index.load_log_usage().get(log_id)
        if log_id == self.writer.current_log_id:
            return 0
        if usage is not None and any(ledger_id not in self.deleted for ledger_id in usage):
            return 0
        self.index.remove_log(log_id)
        return self._unlink(log_path(self.directory, log_id))

    def compact_chunk(self, log_id: int, offset: int) -> tuple[Optional[int], int]:
        """Rewrites the live records of up to one chunk of ``log_id`` starting at ``offset``.

        Returns ``(next_offset, reclaimed_bytes)``; ``next_offset`` None means the log was finished and
        removed (or abandoned because it is corrupt).
        """
        path = log_path(self.directory, log_id)
        batch: list[tuple[bytes, bytes, codec.EntryRecord]] = []
        read = 0
        next_offset: Optional[int] = None
        records = iter_log(path, offset)
        try:
            for rec_offset, size, record in records:
                read += size
                if record.ledger_id not in self.deleted:
                    key = entry_key(record.ledger_id, record.entry_id)
                    batch.append((key, encode_location(log_id, rec_offset, size), record))
                if read >= COMPACTION_CHUNK_BYTES:
                    next_offset = rec_offset + size
                    break
        except FileNotFoundError:
            self.index.remove_log(log_id)
            return None, 0
        except codec.CorruptRecord as err:
            if not err.truncated:
                log.error("entry log %d is corrupt (%s): not compacting it", log_id, err)
                self._skip.add(log_id)
                return None, 0
            # A torn tail left by a crash during a flush that never committed: nothing references it.
            log.info("entry log %d ends with an unreferenced torn record; compacting up to it", log_id)
        finally:
            records.close()

        current = self.index.locations_in_log([key for key, _old, _rec in batch])
        moves = []
        usage: dict[int, dict[int, int]] = defaultdict(dict)
        rewritten = 0
        for (key, old, record), now in zip(batch, current):
            if now != old:
                continue  # deleted, or a newer copy exists elsewhere
            loc = self.writer.append(record.ledger_id, record.entry_id, record.last_add_confirmed, record.payload)
            moves.append((key, old, encode_location(*loc)))
            per_ledger = usage[loc.log_id]
            per_ledger[record.ledger_id] = per_ledger.get(record.ledger_id, 0) + loc.size
            rewritten += loc.size
        if moves:
            self.writer.sync()
            self.index.commit_moves(moves, dict(usage))
        if next_offset is not None:
            return next_offset, -rewritten
        self.index.remove_log(log_id)
        freed = self._unlink(path)
        log.info("entry log %d compacted: %d live records rewritten", log_id, len(moves))
        return None, freed - rewritten

    def _unlink(self, path: pathlib.Path) -> int:
        size = self._remove(path)
        if size:
            log.info("entry log %s removed (%d bytes)", path.name, size)
        return size
