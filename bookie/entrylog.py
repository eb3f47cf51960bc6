"""Entry logs: append-only files interleaving the flushed entries of many ledgers.

The writer belongs to the storage thread (flush and compaction); readers run in the read pool and open
files per batch (a log removed by garbage collection meanwhile raises FileNotFoundError and the caller
re-reads the index). Each flush appends entries sorted by (ledger, entry), so a catch-up read of a range
usually finds its records adjacent and reads them with one ``pread`` (:func:`read_records`).

Files are ``<data_dir>/ledgers/<log_id:016x>.log``: a 16-byte header then :mod:`bookie.codec` entry records.
A log rolls at ``max_size_bytes``; a restart always starts a fresh one. Logs are written with ``O_DIRECT``
where the file system allows (:mod:`bookie.directio`): each sync pads the log to a 4 KiB boundary with a
padding record (ledger id ``PADDING_LEDGER_ID``), which no index entry points at and :func:`iter_log` skips.

Bounded writes. The writer writes in pieces of ``write_bytes`` (256 KiB by default) and calls ``pace``
before each piece and before each fsync. The storage passes a ``pace`` that waits (briefly, bounded) for the
journal to be idle, so a flush or a compaction slips its I/O between journal syncs instead of putting
megabytes in front of one (a sync waits for the writes queued on the device before it). With buffered
writes (no ``O_DIRECT``) the pieces go to the page cache and only the fsyncs are paced.
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Callable, Iterator, Optional, Sequence

from magnetar.proto import bookie_pb2

from . import codec
from .index import Index, Location
from .directio import BLOCK, BlockAppender, open_for_append
from .journal import fsync_dir
from .ledger_storage import ReadResult

log = logging.getLogger("bookie.entrylog")

_SUFFIX = ".log"
# Adjacent records are read together up to this many bytes.
_COALESCE_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_WRITE_BYTES = 256 * 1024


def _no_pace() -> None:
    pass


def log_path(directory: pathlib.Path, log_id: int) -> pathlib.Path:
    return directory / f"{log_id:016x}{_SUFFIX}"


def list_entry_logs(directory: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    out = []
    for path in directory.glob(f"*{_SUFFIX}"):
        try:
            out.append((int(path.stem, 16), path))
        except ValueError:
            continue
    return sorted(out)


class EntryLogWriter:
    """Appends records to the current entry log, rolling by size. Not thread-safe: one owner thread.

    Appends are buffered; :meth:`sync` writes the buffer and fsyncs every file touched since the previous
    sync, after which the returned locations are durable.

    Args:
        directory: where the logs are.
        first_log_id: the id of the first log this writer creates.
        max_size_bytes: a log rolls once the next record would take it past this size.
        direct_io: write with ``O_DIRECT`` where the file system allows it.
        write_bytes: the size of each write (a multiple of :data:`bookie.directio.BLOCK`).
        pace: called on the writer's thread before each write and each fsync (see the module docstring).
    """

    def __init__(
        self, directory: pathlib.Path, *, first_log_id: int, max_size_bytes: int, direct_io: bool = True,
        write_bytes: int = DEFAULT_WRITE_BYTES, pace: Optional[Callable[[], None]] = None,
    ) -> None:
        if write_bytes <= 0 or write_bytes % BLOCK:
            raise ValueError(f"write_bytes must be a positive multiple of {BLOCK}, not {write_bytes}")
        self.directory = pathlib.Path(directory)
        self.max_size_bytes = max_size_bytes
        self.direct_io = direct_io
        self.write_bytes = write_bytes
        self._pace = pace or _no_pace
        self._next_log_id = first_log_id
        self._fd = -1
        self._out: Optional[BlockAppender] = None
        self._log_id: Optional[int] = None
        self._unsynced: list[int] = []  # fds rolled away from but not yet synced (closed after sync)

    @property
    def current_log_id(self) -> Optional[int]:
        """The log being appended to (garbage collection must leave it alone), None before the first."""
        return self._log_id

    def append(self, ledger_id: int, entry_id: int, lac: int, payload: bytes) -> Location:
        head = codec.encode_entry_record_head(ledger_id, entry_id, lac, payload)
        size = len(head) + len(payload)
        if self._out is None or (
            self._out.offset + size > self.max_size_bytes and self._out.offset > codec.FILE_HEADER_SIZE
        ):
            self._roll()
        offset = self._out.offset
        self._out.append((head, payload))
        return Location(self._log_id, offset, size)

    def sync(self) -> None:
        """Makes every appended record durable."""
        if self._out is None:
            return
        self._write_out()
        for fd in self._unsynced:
            self._pace()
            os.fsync(fd)
            os.close(fd)
        self._unsynced.clear()
        self._pace()
        os.fdatasync(self._fd)

    def roll(self) -> None:
        """Starts a new log at the next append (tests and shutdown use it to seal the current one)."""
        if self._out is not None:
            self._retire()

    def close(self) -> None:
        if self._out is not None:
            self.sync()
            self._out.close()
            self._out = None
            os.close(self._fd)
            self._fd = -1
            self._log_id = None
        for fd in self._unsynced:
            os.close(fd)
        self._unsynced.clear()

    def _retire(self) -> None:
        """Writes out the current log's tail and leaves its fd to the next sync."""
        self._write_out()
        self._out.close()
        self._unsynced.append(self._fd)
        self._fd, self._out, self._log_id = -1, None, None

    def _roll(self) -> None:
        if self._out is not None:
            self._retire()
        log_id = self._next_log_id
        self._next_log_id += 1
        path = log_path(self.directory, log_id)
        fd, direct = open_for_append(path, direct=self.direct_io)
        out = BlockAppender(fd, 0, direct=direct, capacity=self.write_bytes, before_write=self._pace)
        out.append((codec.encode_file_header(codec.ENTRY_LOG_MAGIC, log_id),))
        fsync_dir(self.directory)
        self._fd, self._out, self._log_id = fd, out, log_id
        log.info("entry log %s opened%s", path.name, "" if direct else " (buffered: no O_DIRECT here)")

    def _write_out(self) -> None:
        out = self._out
        size = out.padding_needed(codec.ENTRY_HEAD_SIZE)
        if size:
            out.append((codec.encode_entry_padding(size),))
            out.append_zeros(size - codec.ENTRY_HEAD_SIZE)
        out.write_out()


def read_indexed(
    index: Index, directory: pathlib.Path, ledger_id: int, entry_ids: list[int], budget_bytes: int
) -> list[ReadResult]:
    """Index lookups and entry-log reads of the longest prefix of ``entry_ids`` (at least one) whose records
    fit ``budget_bytes``. Runs in the read pool; retries when garbage collection moved records meanwhile."""
    status = bookie_pb2.Status
    for _attempt in range(5):
        locations = index.get_many(ledger_id, entry_ids)
        take = 0
        total = 0
        for loc in locations:
            if take and loc is not None and total + loc.size > budget_bytes:
                break
            take += 1
            if loc is not None:
                total += loc.size
        wanted = [(eid, loc) for eid, loc in zip(entry_ids[:take], locations[:take]) if loc is not None]
        try:
            records = iter(read_records(directory, ledger_id, wanted))
        except FileNotFoundError:
            continue  # compacted or removed after our index lookup: look again
        out = []
        for eid, loc in zip(entry_ids[:take], locations[:take]):
            if loc is None:
                out.append(ReadResult(eid, status.NO_SUCH_ENTRY, -1, b""))
                continue
            record = next(records)
            if isinstance(record, codec.CorruptRecord):
                log.error("read of ledger %d: %s", ledger_id, record)
                out.append(ReadResult(eid, status.INTERNAL, -1, b""))
            else:
                out.append(ReadResult(eid, status.OK, record.last_add_confirmed, record.payload))
        return out
    raise OSError(f"entry logs of ledger {ledger_id} kept vanishing under the read")


def read_records(
    directory: pathlib.Path, ledger_id: int, wanted: Sequence[tuple[int, Location]]
) -> list[codec.EntryRecord | codec.CorruptRecord]:
    """Reads the records at ``wanted`` (``(entry_id, location)`` pairs), coalescing adjacent ones.

    Each result is the record, or a CorruptRecord when its CRC/length fails or it holds another entry than
    the index promised; never unchecked bytes. Raises FileNotFoundError when a log is gone (removed by
    garbage collection after the caller read the index: re-read the index and retry).
    """
    results: list[codec.EntryRecord | codec.CorruptRecord] = []
    fds: dict[int, int] = {}
    try:
        i = 0
        n = len(wanted)
        while i < n:
            start_loc = wanted[i][1]
            j = i + 1
            end = start_loc.offset + start_loc.size
            while j < n:
                loc = wanted[j][1]
                if loc.log_id != start_loc.log_id or loc.offset != end or end - start_loc.offset > _COALESCE_MAX_BYTES:
                    break
                end += loc.size
                j += 1
            fd = fds.get(start_loc.log_id)
            if fd is None:
                fd = fds[start_loc.log_id] = os.open(log_path(directory, start_loc.log_id), os.O_RDONLY)
            data = os.pread(fd, end - start_loc.offset, start_loc.offset)
            for entry_id, loc in wanted[i:j]:
                results.append(_decode_at(data, loc.offset - start_loc.offset, loc, ledger_id, entry_id))
            i = j
    finally:
        for fd in fds.values():
            os.close(fd)
    return results


def _decode_at(
    data: bytes, offset: int, loc: Location, ledger_id: int, entry_id: int
) -> codec.EntryRecord | codec.CorruptRecord:
    try:
        record, end = codec.decode_entry_record(data, offset)
    except codec.CorruptRecord as err:
        return codec.CorruptRecord(f"entry {ledger_id}:{entry_id} in log {loc.log_id} at {loc.offset}: {err}")
    if end - offset != loc.size or record.ledger_id != ledger_id or record.entry_id != entry_id:
        return codec.CorruptRecord(
            f"entry {ledger_id}:{entry_id}: log {loc.log_id} at {loc.offset} holds "
            f"{record.ledger_id}:{record.entry_id} ({end - offset} bytes, index says {loc.size})"
        )
    return record


def iter_log(path: pathlib.Path, start_offset: int = 0) -> Iterator[tuple[int, int, codec.EntryRecord]]:
    """Yields ``(offset, size, record)`` of a log from ``start_offset`` (0: just after the header).

    Raises CorruptRecord at a bad record (a torn tail left by a crash mid-flush is reported as truncated).
    """
    with open(path, "rb", buffering=1024 * 1024) as f:
        header = f.read(codec.FILE_HEADER_SIZE)
        codec.decode_file_header(header, codec.ENTRY_LOG_MAGIC)
        offset = max(start_offset, codec.FILE_HEADER_SIZE)
        f.seek(offset)
        while True:
            item = codec.read_entry_record(f)
            if item is None:
                return
            record, size = item
            if record.ledger_id != codec.PADDING_LEDGER_ID:
                yield offset, size, record
            offset += size
