"""The write-ahead journal: a write stage and a force (fsync) stage, group commit, torn-tail recovery.

Theory of operation. Every change a bookie acknowledges (an add, a fence, a delete) is first a record in
the journal. The event loop never touches the file: :meth:`Journal.append` queues the record and returns a
future. Two threads then carry records to disk, as BookKeeper's ``Journal`` and ``ForceWriteThread`` do:

* the *writer* takes everything queued, frames it and writes it with one ``write`` (a *group*), then hands
  the group to the force stage through a bounded queue and goes straight back for the next group;
* the *forcer* takes every group written so far, makes them durable with one ``fdatasync`` and completes
  their futures, in order, with a single ``loop.call_soon_threadsafe``.

So under load the cost of a sync is shared by every record written while the previous one ran (group
commit), and writing the next group overlaps the current sync instead of waiting for it. An add is
acknowledged only after the sync covering its record returned; groups are forced and completed in the order
they were written, so records are acknowledged in order. When the forcer lags ``max_groups_unforced``
groups behind, the writer waits (the queue is bounded).

Files are written with ``O_DIRECT`` where the file system allows (:mod:`bookie.directio`): each group is
padded with a PAD record to a 4 KiB boundary, so a write never rewrites a block that holds acknowledged
records (nor one being forced).

Files are ``<data_dir>/journal/<id:016x>.journal``; a file rolls at ``max_file_size_bytes`` (a record never
spans two files) and a restart always opens a fresh file. A position is ``(file_id, offset)``. Before it
rolls, the writer waits until every group of the old file is forced, so a record in a newer file is never
durable while an older file's tail is not.
Ledger storage periodically records a *checkpoint*: the position up to which everything journaled is also
flushed and fsynced in the entry logs and index. Replay starts at the checkpoint; files wholly before it
are deleted (:meth:`Journal.reclaim`).

At replay a record that fails its length or CRC check ends the file: the file is truncated there (a torn
tail left by a crash mid-write, or garbage) and never replayed as data. A torn tail can only exist in the
newest file of the previous run, because a file is rolled only after its last write was synced; a bad
record in an older file means a disk fault and is logged as an error.

Yielding to the journal. Entry-log flushes and index commits share the disk with the journal, and a sync
issued behind a large write waits for it. The storage thread therefore asks :meth:`Journal.wait_idle`
before each piece it writes: it returns once no record is queued, being written or waiting for its sync
(every record accepted so far is acknowledged or failed), or after a short timeout, so that a journal that
is never idle slows a flush down but never stops it.

Failure. A failed write or sync leaves the file's tail unknown: the journal refuses every later record
(``failed`` is set, the bookie must restart; the restart cuts whatever partial record is there), and every
record not yet acknowledged fails with the error.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import pathlib
import queue
import threading
import time
from typing import Callable, Iterator, NamedTuple, Optional

from . import codec
from .directio import BlockAppender, open_for_append, remove_in_steps_now
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
    __slots__ = ("record_type", "body", "entries", "future", "queued")

    def __init__(self, record_type: int, body: Optional[bytes], entries: int, future: asyncio.Future) -> None:
        self.record_type = record_type
        self.body = body
        self.entries = entries
        self.future = future
        self.queued = time.perf_counter()


class _Group:
    """Records written with one ``write``, on their way through the force stage (barriers only: no bytes)."""

    __slots__ = ("items", "fd", "error", "started", "entries", "records", "nbytes", "written")

    def __init__(self, items: list[_Item], fd: int = -1, error: Optional[BaseException] = None,
                 started: float = 0.0, entries: int = 0, records: int = 0, nbytes: int = 0,
                 written: float = 0.0) -> None:
        self.items = items
        self.fd = fd
        self.error = error
        self.started = started  # perf_counter() when its write began
        self.entries = entries
        self.records = records
        self.nbytes = nbytes
        self.written = written  # perf_counter() when its write returned


class JournalState(enum.Enum):
    NEW = "new"  # replay may run; nothing is accepted yet
    OPEN = "open"  # writer and forcer running; records accepted
    CLOSING = "closing"  # records refused; what was accepted is written and forced
    CLOSED = "closed"


class JournalClosedError(StorageClosedError):
    """The journal does not accept records (not started, closing or closed)."""


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
    """Hooks for metrics; the defaults do nothing. Called from the force thread."""

    def on_sync(self, seconds: float, entries: int, records: int, nbytes: int) -> None:
        pass

    def on_sync_failed(self, seconds: float) -> None:
        """A sync that raised, ``seconds`` after its first group started being written."""

    def on_stages(self, queue_s: float, write_s: float, force_wait_s: float, fsync_s: float) -> None:
        """Where the time of one synced group went, for the oldest group of a sync and its oldest record:
        ``queue_s`` from :meth:`Journal.append` until the writer took it, ``write_s`` the group's ``write``,
        ``force_wait_s`` from the end of that write until the forcer began the sync (a slow previous sync
        shows here), ``fsync_s`` the sync itself (0 with ``sync`` off)."""


class Journal:
    """The group-committing journal of one bookie.

    Lifecycle (:attr:`state`): construct, :meth:`replay` (before anything is appended), :meth:`start`,
    :meth:`append` / :meth:`barrier` from the event loop, :meth:`reclaim` after checkpoints, :meth:`close`
    (drains).

    Args:
        directory: the journal directory (created if missing).
        max_file_size_bytes: roll to a new file once the current one reaches this size.
        sync: make each group durable before completing it (False only for benchmarks).
        direct_io: write with ``O_DIRECT`` where the file system allows it.
        observer: metrics hooks.
        sync_file: what makes a written file durable (``os.fdatasync``); tests swap in one that records
            or stalls.
        max_groups_unforced: bound of the queue between the write and force stages; the writer waits
            while this many written groups wait for their sync.
    """

    def __init__(
        self,
        directory: pathlib.Path,
        *,
        max_file_size_bytes: int,
        sync: bool = True,
        direct_io: bool = True,
        observer: Optional[JournalObserver] = None,
        sync_file: Callable[[int], None] = os.fdatasync,
        max_groups_unforced: int = 64,
    ) -> None:
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_file_size_bytes = max_file_size_bytes
        self.sync = sync
        self.direct_io = direct_io
        self.observer = observer or JournalObserver()
        self._sync_file = sync_file
        self.state = JournalState.NEW
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # the writer waits on it for records
        self._idle = threading.Condition(lock)  # wait_idle waits on it for _unfinished to reach 0
        self._unfinished = 0  # records (and barriers) accepted and not yet completed; under _cond
        self._queue: list[_Item] = []
        self._forces: queue.Queue[Optional[_Group]] = queue.Queue(max_groups_unforced)
        self._writer: Optional[threading.Thread] = None
        self._forcer: Optional[threading.Thread] = None
        self._closed: Optional[asyncio.Future] = None
        self._sync_error: Optional[BaseException] = None  # force thread only
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._fd = -1
        self._out: Optional[BlockAppender] = None
        self._file_id = 0
        self._replayed = False
        # End of the last group written (not necessarily forced yet). Read by the event loop when it takes a
        # checkpoint: every record before it was queued, hence applied to the write cache, earlier.
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
        """Opens a fresh journal file and starts the writer and force threads."""
        if self.state is not JournalState.NEW:
            return
        if not self._replayed:
            # Nothing to replay is fine (a new bookie), but records must never be appended to a file that
            # may hold a torn tail: finding the newest id is what replay does.
            for _ in self.replay(None):
                raise RuntimeError("Journal.start before replay of a journal that holds records")
        self._loop = loop
        self._open_file(self._file_id + 1)  # nothing to close before: no file was open
        self._writer = threading.Thread(target=self._write_loop, name="bookie-journal", daemon=True)
        self._forcer = threading.Thread(target=self._force_loop, name="bookie-journal-force", daemon=True)
        with self._cond:
            self.state = JournalState.OPEN
        self._forcer.start()
        self._writer.start()

    def append(self, record_type: int, body: bytes, entries: int = 0) -> asyncio.Future:
        """Queues a record; the future completes (None) once it is durable, or fails with the I/O error.

        Must be called from the event loop thread. Raises JournalClosedError unless the journal is open.
        """
        return self._enqueue(record_type, body, entries)

    def barrier(self) -> asyncio.Future:
        """A future completing once every record queued before it is durable."""
        return self._enqueue(0, None, 0)

    def _enqueue(self, record_type: int, body: Optional[bytes], entries: int) -> asyncio.Future:
        with self._cond:
            if self.state is not JournalState.OPEN:
                raise JournalClosedError(f"the journal is not open ({self.state.value})")
            future = self._loop.create_future()
            self._queue.append(_Item(record_type, body, entries, future))
            self._unfinished += 1
            if len(self._queue) == 1:
                self._cond.notify()
        return future

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def busy(self) -> bool:
        """Whether a record accepted by :meth:`append` (or a barrier) is not yet durable or failed: queued,
        being written, or waiting for or inside its sync. A racy read, for a quick check."""
        return self._unfinished > 0

    def wait_idle(self, timeout_s: float) -> bool:
        """Blocks until the journal is not :attr:`busy` (True) or ``timeout_s`` passed (False).

        For other threads that share the disk (the storage thread, between pieces of a flush): what they
        write while the journal is idle never delays a journal sync that is already on its way. Returns True
        at once when the journal is not open. Never call it from the event loop.
        """
        with self._cond:
            if self.state is not JournalState.OPEN:
                return True
            return self._idle.wait_for(lambda: self._unfinished <= 0 or self.state is not JournalState.OPEN,
                                       timeout_s)

    def _open_file(self, file_id: int) -> int:
        """Creates the next file (its header durable) and makes it current; returns the previous file's
        descriptor (-1 if none), for the caller to close once nothing syncs it any more."""
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
            old_out.close()  # everything staged was written out: only the descriptor may still be synced
        log.info("journal file %s opened%s", path.name, "" if direct else " (buffered: no O_DIRECT here)")
        return old

    @staticmethod
    def _pad(out: BlockAppender) -> None:
        size = out.padding_needed(codec.JOURNAL_HEAD_SIZE)
        if size:
            out.append((codec.encode_journal_padding(size),))
            out.append_zeros(size - codec.JOURNAL_HEAD_SIZE)

    # -- the write stage (writer thread) ---------------------------------------------------------------

    def _write_loop(self) -> None:
        batch: list[_Item] = []
        try:
            while True:
                with self._cond:
                    while not self._queue and self.state is JournalState.OPEN:
                        self._cond.wait()
                    batch, self._queue = self._queue, []
                if not batch:
                    return  # closing, and everything accepted was handed to the force stage
                group = self._write_batch(batch)
                batch = []
                old_fd = -1
                if group.nbytes and self._out.offset >= self.max_file_size_bytes and self.failed is None:
                    old_fd = self._roll()
                self._forces.put(group)
                if old_fd >= 0:
                    # The new file takes no record until every group of the old one is forced: a record in
                    # a newer file is never durable while an older file's tail is not (see replay).
                    self._forces.join()
                    os.close(old_fd)
        except BaseException as err:  # a bug: fail what is left rather than leave its waiters hanging
            log.exception("journal writer failed")
            self.failed = self.failed or err
            with self._cond:
                batch, self._queue = batch + self._queue, []
            self._forces.put(_Group(batch, error=self.failed))
        finally:
            self._forces.put(None)  # after the last group: the forcer stops

    def _write_batch(self, batch: list[_Item]) -> _Group:
        if self.failed is not None:
            return _Group(batch, error=self.failed)
        parts: list[bytes] = []
        entries = 0
        for item in batch:
            if item.body is not None:
                parts.append(codec.encode_journal_header(item.record_type, item.body))
                parts.append(item.body)
                entries += item.entries
        if not parts:
            return _Group(batch)  # only barriers: they complete after the groups before them
        started = time.perf_counter()
        out = self._out
        begin = out.offset
        try:
            out.append(parts)
            self._pad(out)
            out.write_out()
        except OSError as err:
            # The file's tail is now unknown: stop writing for good (the bookie must be restarted, and the
            # restart cuts whatever partial record is there). Acking anything after this would be a lie.
            log.error("journal write failed, refusing further writes: %s", err)
            self.failed = err
            return _Group(batch, error=err)
        self.written_position = Position(self._file_id, out.offset)
        return _Group(batch, self._fd, None, started, entries, len(parts) // 2, out.offset - begin,
                      time.perf_counter())

    def _roll(self) -> int:
        """Opens the next file right after the current one's last group was written (so the position a
        checkpoint takes once that group is acknowledged is already in the new file); returns the old
        file's descriptor, still to be synced, or -1 when the roll failed."""
        try:
            return self._open_file(self._file_id + 1)
        except OSError as err:
            log.error("journal roll failed: %s", err)
            self.failed = err
            return -1

    # -- the force stage (force thread) ----------------------------------------------------------------

    def _force_loop(self) -> None:
        forces = self._forces
        while True:
            groups = [forces.get()]
            while groups[-1] is not None:  # everything written so far shares one sync
                try:
                    groups.append(forces.get_nowait())
                except queue.Empty:
                    break
            stop = groups[-1] is None
            if stop:
                groups.pop()
            try:
                if groups:
                    self._force(groups)
            except BaseException as err:  # a bug: fail the groups rather than leave their waiters hanging
                log.exception("journal force stage failed")
                self.failed = self.failed or err
                self._complete([(g.items, self.failed) for g in groups])
            finally:
                for _ in range(len(groups) + stop):
                    forces.task_done()
            if stop:
                return

    def _force(self, groups: list[_Group]) -> None:
        """Makes ``groups`` durable with one sync and completes them, in order. A group that failed to be
        written fails, and so does every later one (the writer fails them too); after a failed sync,
        everything fails."""
        if self._sync_error is not None:
            self._complete([(g.items, self._sync_error) for g in groups])
            return
        written = 0
        while written < len(groups) and groups[written].error is None:
            written += 1
        synced, rest = groups[:written], groups[written:]
        error: Optional[BaseException] = None
        with_bytes = [g for g in synced if g.nbytes]
        if with_bytes:
            sync_began = time.perf_counter()
            if self.sync:
                try:
                    # All in one file: a new file takes no group until the old file's are forced.
                    self._sync_file(with_bytes[-1].fd)
                except OSError as err:
                    log.error("journal sync failed, refusing further writes: %s", err)
                    self._sync_error = error = err
                    self.failed = self.failed or err
                    try:
                        self.observer.on_sync_failed(time.perf_counter() - with_bytes[0].started)
                    except Exception:
                        log.exception("journal observer failed")
            if error is None:
                sync_ended = time.perf_counter()
                first = with_bytes[0]
                try:
                    self.observer.on_stages(first.started - first.items[0].queued, first.written - first.started,
                                            sync_began - first.written, sync_ended - sync_began)
                    self.observer.on_sync(
                        time.perf_counter() - with_bytes[0].started, sum(g.entries for g in with_bytes),
                        sum(g.records for g in with_bytes), sum(g.nbytes for g in with_bytes),
                    )
                except Exception:
                    log.exception("journal observer failed")
        self._complete([(g.items, error) for g in synced] + [(g.items, g.error) for g in rest])

    def _complete(self, outcomes: list[tuple[list[_Item], Optional[BaseException]]]) -> None:
        count = sum(len(items) for items, _ in outcomes)
        with self._cond:
            self._unfinished -= count
            if self._unfinished <= 0:
                self._idle.notify_all()
        try:
            self._loop.call_soon_threadsafe(_complete, outcomes)
        except RuntimeError:  # the loop is gone (process exit): nobody waits any more
            pass

    # -- reclaim and close -----------------------------------------------------------------------------

    def reclaim(self, checkpoint: Position, remove: Callable[[pathlib.Path], int] = remove_in_steps_now) -> int:
        """Deletes journal files wholly before ``checkpoint`` (never the current one) with ``remove`` (the
        storage's paced removal; it returns the bytes a file held, 0 for one gone or already being removed);
        returns how many.

        Thread-safe (files are only ever created by the writer thread with higher ids).
        """
        removed = 0
        current = self._file_id
        for file_id, path in list_journal_files(self.directory):
            if file_id >= checkpoint.file_id or file_id >= current:
                break
            if remove(path):
                removed += 1
        return removed

    async def close(self) -> None:
        """Refuses new records, waits until everything accepted is written and forced (or failed), then
        closes the file. Idempotent; concurrent calls all wait for the same close."""
        if self._closed is not None:
            await asyncio.shield(self._closed)
            return
        self._closed = asyncio.get_running_loop().create_future()
        try:
            with self._cond:
                started = self.state is JournalState.OPEN
                self.state = JournalState.CLOSING
                self._cond.notify()
                self._idle.notify_all()
            if started:
                await asyncio.get_running_loop().run_in_executor(None, self._join_threads)
                # The last groups' completions were scheduled with call_soon_threadsafe; let them run.
                await asyncio.sleep(0)
            if self._out is not None:
                self._out.close()
                self._out = None
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        finally:
            self.state = JournalState.CLOSED
            self._closed.set_result(None)

    def _join_threads(self) -> None:
        for thread in (self._writer, self._forcer):
            if thread is not None:
                thread.join()


def _complete(outcomes: list[tuple[list[_Item], Optional[BaseException]]]) -> None:
    for items, error in outcomes:
        for item in items:
            future = item.future
            if future.done():
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(OSError(f"journal write failed: {error}"))


__all__ = ["Journal", "JournalClosedError", "JournalObserver", "JournalState", "Position", "ReplayedRecord",
           "fsync_dir"]
