"""The write-ahead journal: one writer thread, group commit, torn-tail recovery.

Theory of operation. Every change a bookie acknowledges (an add, a fence, a delete) is first a record in
the journal. The event loop never touches the file: :meth:`Journal.append` queues the record and returns a
future. The writer thread takes *everything* queued, frames it, writes it with one ``write`` and makes it
durable with one ``fdatasync`` for the whole group, then completes the group's futures with a single
``loop.call_soon_threadsafe``. Files are written with ``O_DIRECT`` where the file system allows
(:mod:`bookie.directio`): each group is padded with a PAD record to a 4 KiB boundary, so a write never
rewrites a block that holds acknowledged records. So under load the cost of a sync is shared by every request that arrived
while the previous one ran (group commit), and an add is acknowledged only after its record is on disk.

Files are ``<data_dir>/journal/<id:016x>.journal``; a file rolls at ``max_file_size_bytes`` (a record never
spans two files) and a restart always opens a fresh file. A position is ``(file_id, offset)``.
Ledger storage periodically records a *checkpoint*: the position up to which everything journaled is also
flushed and fsynced in the entry logs and index. Replay starts at the checkpoint; files wholly before it
are deleted (:meth:`Journal.reclaim`).

At replay a record that fails its length or CRC check ends the file: the file is truncated there (a torn
tail left by a crash mid-write, or garbage) and never replayed as data. A torn tail can only exist in the
newest file of the previous run, because a file is rolled only after its last write was synced; a bad
record in an older file means a disk fault and is logged as an error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import threading
import time
from typing import Iterator, NamedTuple, Optional

from . import codec
from .directio import BlockAppender, open_for_append
from .ledger_storage import StorageClosedError

log = logging.getLogger("bookie.journal")

_SUFFIX = ".journal"


class Position(NamedTuple):
    """A place in the journal: records before it are covered."""

    file_id: int
    offset: int


class ReplayedRecord(NamedTuple):
    record_type: int
    body: bytes
    end: Position  # the position just after this record


class _Item:
    __slots__ = ("record_type", "body", "entries", "future")

    def __init__(self, record_type: int, body: Optional[bytes], entries: int, future: asyncio.Future) -> None:
        self.record_type = record_type
        self.body = body
        self.entries = entries
        self.future = future


class JournalClosedError(StorageClosedError):
    """The journal no longer accepts records (closing or closed)."""


def journal_path(directory: pathlib.Path, file_id: int) -> pathlib.Path:
    return directory / f"{file_id:016x}{_SUFFIX}"


def list_journal_files(directory: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    """``(file_id, path)`` of every journal file, oldest first."""
    out = []
    for path in directory.glob(f"*{_SUFFIX}"):
        try:
            out.append((int(path.stem, 16), path))
        except ValueError:
            log.warning("ignoring stray file %s in the journal directory", path)
    return sorted(out)


def fsync_dir(directory: pathlib.Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JournalObserver:
    """Hooks for metrics; the defaults do nothing. Called from the writer thread."""

    def on_sync(self, seconds: float, entries: int, records: int, nbytes: int) -> None:
        pass


class Journal:
    """The group-committing journal of one bookie.

    Lifecycle: construct, :meth:`replay` (before anything is appended), :meth:`start`, :meth:`append` /
    :meth:`barrier` from the event loop, :meth:`reclaim` after checkpoints, :meth:`close` (drains).

    Args:
        directory: the journal directory (created if missing).
        max_file_size_bytes: roll to a new file once the current one reaches this size.
        sync: ``fdatasync`` each group before completing it (False only for benchmarks).
        direct_io: write with ``O_DIRECT`` where the file system allows it.
        observer: metrics hooks.
    """

    def __init__(
        self,
        directory: pathlib.Path,
        *,
        max_file_size_bytes: int,
        sync: bool = True,
        direct_io: bool = True,
        observer: Optional[JournalObserver] = None,
    ) -> None:
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_file_size_bytes = max_file_size_bytes
        self.sync = sync
        self.direct_io = direct_io
        self.observer = observer or JournalObserver()
        self._cond = threading.Condition()
        self._queue: list[_Item] = []
        self._closing = False
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._fd = -1
        self._out: Optional[BlockAppender] = None
        self._file_id = 0
        self._replayed = False
        # End of the last record written (not necessarily synced yet). Read by the event loop when it takes
        # a checkpoint: every record before it was queued, hence applied to the write cache, earlier.
        self.written_position = Position(0, 0)
        self.failed: Optional[BaseException] = None

    # -- replay ----------------------------------------------------------------------------------------

    def replay(self, start: Optional[Position]) -> Iterator[ReplayedRecord]:
        """Yields every good record from ``start`` on, cutting a bad tail, deleting files before ``start``.

        Must run (to exhaustion) before :meth:`start`. ``start`` None means "from the very beginning".
        """
        files = list_journal_files(self.directory)
        for index, (file_id, path) in enumerate(files):
            if start is not None and file_id < start.file_id:
                log.info("deleting journal file %s: wholly before the checkpoint %s", path.name, start)
                path.unlink()
                continue
            first_offset = start.offset if start is not None and file_id == start.file_id else None
            yield from self._replay_file(file_id, path, first_offset, newest=index == len(files) - 1)
        self._replayed = True
        self._file_id = files[-1][0] if files else (start.file_id if start else 0)

    def _replay_file(
        self, file_id: int, path: pathlib.Path, first_offset: Optional[int], *, newest: bool
    ) -> Iterator[ReplayedRecord]:
        with open(path, "r+b") as f:
            header = f.read(codec.FILE_HEADER_SIZE)
            try:
                if codec.decode_file_header(header, codec.JOURNAL_MAGIC) != file_id:
                    raise codec.CorruptRecord("header names another file id")
            except codec.CorruptRecord as err:
                # A header is written and synced before any record, so a bad one means nothing was acked.
                log.warning("journal file %s has no valid header (%s): removing it", path.name, err)
                f.close()
                path.unlink()
                return
            offset = codec.FILE_HEADER_SIZE
            if first_offset is not None and first_offset > offset:
                offset = first_offset
                f.seek(offset)
            count = 0
            while True:
                try:
                    record = codec.read_journal_record(f)
                except codec.CorruptRecord as err:
                    size = os.fstat(f.fileno()).st_size
                    level = logging.WARNING if newest else logging.ERROR
                    log.log(
                        level,
                        "journal file %s: bad record at offset %d (%s); cutting %d bytes of tail%s",
                        path.name, offset, err, size - offset,
                        "" if newest else " (not the newest file: a disk fault?)",
                    )
                    f.truncate(offset)
                    f.flush()
                    os.fsync(f.fileno())
                    break
                if record is None:
                    break
                record_type, body, size = record
                offset += size
                if record_type == codec.RecordType.PAD:
                    continue
                count += 1
                yield ReplayedRecord(record_type, body, Position(file_id, offset))
            log.info("replayed %d journal records from %s", count, path.name)

    # -- writing ---------------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Opens a fresh journal file and starts the writer thread."""
        if self._thread is not None:
            return
        if not self._replayed:
            # Nothing to replay is fine (a new bookie), but records must never be appended to a file that
            # may hold a torn tail: finding the newest id is what replay does.
            for _ in self.replay(None):
                raise RuntimeError("Journal.start before replay of a journal that holds records")
        self._loop = loop
        self._open_file(self._file_id + 1)
        self._thread = threading.Thread(target=self._run, name="bookie-journal", daemon=True)
        self._thread.start()

    def append(self, record_type: int, body: bytes, entries: int = 0) -> asyncio.Future:
        """Queues a record; the future completes (None) once it is durable, or fails with the I/O error.

        Must be called from the event loop thread.
        """
        future = self._loop.create_future()
        item = _Item(record_type, body, entries, future)
        with self._cond:
            if self._closing:
                raise JournalClosedError("the journal is closing")
            self._queue.append(item)
            if len(self._queue) == 1:
                self._cond.notify()
        return future

    def barrier(self) -> asyncio.Future:
        """A future completing once every record queued before it is durable."""
        future = self._loop.create_future()
        with self._cond:
            if self._closing:
                raise JournalClosedError("the journal is closing")
            self._queue.append(_Item(0, None, 0, future))
            if len(self._queue) == 1:
                self._cond.notify()
        return future

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def _open_file(self, file_id: int) -> None:
        path = journal_path(self.directory, file_id)
        fd, direct = open_for_append(path, direct=self.direct_io)
        out = BlockAppender(fd, 0, direct=direct)
        try:
            out.append((codec.encode_file_header(codec.JOURNAL_MAGIC, file_id),))
            self._pad(out)
            out.write_out()
            os.fsync(fd)
            fsync_dir(self.directory)
        except BaseException:
            out.close()
            os.close(fd)
            raise
        old, old_out = self._fd, self._out
        self._fd, self._out, self._file_id = fd, out, file_id
        self.written_position = Position(file_id, out.offset)
        if old_out is not None:
            old_out.close()
        if old >= 0:
            os.close(old)
        log.info("journal file %s opened%s", path.name, "" if direct else " (buffered: no O_DIRECT here)")

    @staticmethod
    def _pad(out: BlockAppender) -> None:
        size = out.padding_needed(codec.JOURNAL_HEAD_SIZE)
        if size:
            out.append((codec.encode_journal_padding(size),))
            out.append_zeros(size - codec.JOURNAL_HEAD_SIZE)

    def _run(self) -> None:
        loop = self._loop
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                batch, self._queue = self._queue, []
                if not batch and self._closing:
                    return
            error = self._write_batch(batch)
            try:
                loop.call_soon_threadsafe(_complete, batch, error)
            except RuntimeError:  # the loop is gone (process exit): nobody waits any more
                return

    def _write_batch(self, batch: list[_Item]) -> Optional[BaseException]:
        if self.failed is not None:
            return self.failed
        parts: list[bytes] = []
        entries = 0
        for item in batch:
            if item.body is not None:
                parts.append(codec.encode_journal_header(item.record_type, item.body))
                parts.append(item.body)
                entries += item.entries
        if not parts:
            return None  # only barriers: everything before them completed with an earlier group
        started = time.perf_counter()
        out = self._out
        begin = out.offset
        try:
            out.append(parts)
            self._pad(out)
            out.write_out()
            if self.sync:
                os.fdatasync(self._fd)
        except OSError as err:
            # The file's tail is now unknown: stop writing for good (the bookie must be restarted, and the
            # restart cuts whatever partial record is there). Acking anything after this would be a lie.
            log.error("journal write failed, refusing further writes: %s", err)
            self.failed = err
            return err
        nbytes = out.offset - begin
        self.written_position = Position(self._file_id, out.offset)
        self.observer.on_sync(time.perf_counter() - started, entries, len(parts) // 2, nbytes)
        if out.offset >= self.max_file_size_bytes:
            try:
                self._open_file(self._file_id + 1)
            except OSError as err:
                log.error("journal roll failed: %s", err)
                self.failed = err
        return None

    # -- reclaim and close -----------------------------------------------------------------------------

    def reclaim(self, checkpoint: Position) -> int:
        """Deletes journal files wholly before ``checkpoint`` (never the current one); returns how many.

        Thread-safe (files are only ever created by the writer thread with higher ids).
        """
        removed = 0
        current = self._file_id
        for file_id, path in list_journal_files(self.directory):
            if file_id >= checkpoint.file_id or file_id >= current:
                break
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    async def close(self) -> None:
        """Writes and syncs everything queued, then stops the thread and closes the file. Idempotent."""
        thread = self._thread
        with self._cond:
            self._closing = True
            self._cond.notify()
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join)
            self._thread = None
            # The last group's completions were scheduled with call_soon_threadsafe; let them run.
            await asyncio.sleep(0)
        if self._out is not None:
            self._out.close()
            self._out = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _complete(batch: list[_Item], error: Optional[BaseException]) -> None:
    for item in batch:
        future = item.future
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(OSError(f"journal write failed: {error}"))


__all__ = ["Journal", "JournalClosedError", "JournalObserver", "Position", "ReplayedRecord", "fsync_dir"]
