"""Appending to the bookie's files in whole blocks with ``O_DIRECT``, bypassing the page cache.

Why. The journal is written and never read back except at a restart, and entry logs are mostly read from the
write cache or the broker's cache, so copying every byte into the page cache buys little and costs a lot:
the copy itself, fresh page-cache pages to allocate (on a virtual machine, first-touch faults on the host as
well: writing 512 MB to a new file took 0.6 CPU-s through the page cache and 0.05 CPU-s with ``O_DIRECT`` on
the 2-core machine this was built on), and later a writeback burst that ``fsync`` must wait for. With
``O_DIRECT`` the ``write`` hands the buffer to the device and ``fdatasync`` is left with the device cache
flush and the file-size update.

How. ``O_DIRECT`` needs the buffer address, the file offset and the length to be multiples of the device's
logical block size; :data:`BLOCK` (4 KiB) satisfies every device Linux supports. A :class:`BlockAppender`
copies what it is given into a page-aligned staging buffer (an anonymous ``mmap``; a user-space copy, far
cheaper than the kernel's page-cache one) and writes the buffer with ``pwrite`` whenever it fills. Before
the data must be on disk the owner pads the stream to a block boundary with a record of its own format
(:func:`padding_size` says how long) and calls :meth:`BlockAppender.write_out`. So every write starts on a
block boundary, a block already holding acknowledged records is never rewritten, and a crash tears at most
the blocks of the write in progress.

Where the file system refuses ``O_DIRECT`` (tmpfs, some overlay file systems) :func:`open_for_append`
falls back to ordinary buffered writes; then nothing is staged and no padding is needed.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from typing import Callable, Optional, Sequence

log = logging.getLogger("bookie.directio")

BLOCK = 4096
_DEFAULT_CAPACITY = 4 * 1024 * 1024
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024


def write_all(fd: int, buffers: Sequence[bytes]) -> int:
    """Writes ``buffers`` in order with ``writev`` (a short write resumes where it stopped); returns the byte
    count. Joining them first would copy every payload once more before the kernel copies it again."""
    views = [memoryview(b) for b in buffers if len(b)]
    start = total = 0
    while start < len(views):
        written = os.writev(fd, views[start:start + _IOV_MAX])
        total += written
        while written:
            size = len(views[start])
            if written >= size:
                written -= size
                start += 1
            else:
                views[start] = views[start][written:]
                written = 0
    return total


def padding_size(offset: int, min_record: int) -> int:
    """Bytes of padding record that take a stream at ``offset`` to a block boundary (0: already there).

    A padding record cannot be shorter than ``min_record`` (its own header), so a gap smaller than that
    is widened by one block."""
    gap = -offset % BLOCK
    if gap and gap < min_record:
        gap += BLOCK
    return gap


def open_for_append(path: os.PathLike | str, *, direct: bool) -> tuple[int, bool]:
    """Creates ``path`` (it must not exist) for writing; returns ``(fd, direct)``, ``direct`` False when
    it was not asked for or the file system refuses ``O_DIRECT``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    if direct and _O_DIRECT:
        try:
            return os.open(path, flags | _O_DIRECT, 0o644), True
        except OSError as err:
            if err.errno != errno.EINVAL:
                raise
            log.warning("%s: the file system refuses O_DIRECT; writing through the page cache", path)
            try:
                os.unlink(path)  # Linux creates the file before the file system refuses the flag
            except FileNotFoundError:
                pass
    return os.open(path, flags | os.O_APPEND, 0o644), False


class BlockAppender:
    """Sequential writes to one file from ``offset`` on (one owner thread).

    Direct mode: :meth:`append` stages bytes and writes each full staging buffer; :meth:`write_out` writes
    what is staged, which must then end on a block boundary (the owner pads first). Buffered mode:
    :meth:`append` writes at once and :meth:`write_out` has nothing to do.

    Args:
        fd: the file, opened by :func:`open_for_append`.
        offset: where the next byte goes (a block boundary in direct mode).
        direct: whether ``fd`` was opened with ``O_DIRECT``.
        capacity: staging buffer size, a multiple of :data:`BLOCK`: the size of each write (but the last).
        before_write: called (direct mode) before each write of the staging buffer; the entry-log writer
            waits there for the journal to go idle (see :meth:`bookie.journal.Journal.wait_idle`).
    """

    def __init__(self, fd: int, offset: int, *, direct: bool, capacity: int = _DEFAULT_CAPACITY,
                 before_write: Optional[Callable[[], None]] = None) -> None:
        if direct and (offset % BLOCK or capacity % BLOCK):
            raise ValueError(f"direct writes need block-aligned offset and capacity, got {offset}, {capacity}")
        self.fd = fd
        self.direct = direct
        self._written = offset  # file offset where the staged bytes go
        self._staged = 0
        self._capacity = capacity
        self._before_write = before_write
        self._buffer = mmap.mmap(-1, capacity) if direct else None
        self._view = memoryview(self._buffer) if direct else None

    @property
    def offset(self) -> int:
        """The logical end of the file: everything appended, written or staged."""
        return self._written + self._staged

    def padding_needed(self, min_record: int) -> int:
        """Padding bytes the owner must append before :meth:`write_out` (always 0 in buffered mode)."""
        return padding_size(self.offset, min_record) if self.direct else 0

    def append(self, parts: Sequence[bytes | memoryview]) -> int:
        """Appends ``parts`` in order; returns the byte count. May write full staging buffers."""
        if not self.direct:
            written = write_all(self.fd, parts)
            self._written += written
            return written
        total = 0
        view, capacity = self._view, self._capacity
        for part in parts:
            data = part if isinstance(part, memoryview) else memoryview(part)
            size = len(data)
            done = 0
            while done < size:
                take = min(size - done, capacity - self._staged)
                view[self._staged:self._staged + take] = data[done:done + take]
                self._staged += take
                done += take
                if self._staged == capacity:
                    self._write_staged()
            total += size
        return total

    def append_zeros(self, count: int) -> None:
        """Appends ``count`` zero bytes (the body of a padding record)."""
        while count:
            take = min(count, len(_ZEROS))
            self.append((_ZEROS[:take],))
            count -= take

    def write_out(self) -> None:
        """Writes everything staged. In direct mode the logical end must be on a block boundary."""
        if not self.direct or not self._staged:
            return
        if self._staged % BLOCK:
            raise ValueError(f"direct write of {self._staged} bytes does not end on a block boundary")
        self._write_staged()

    def _write_staged(self) -> None:
        if self._before_write is not None:
            self._before_write()
        length = self._staged
        with self._view[:length] as view:  # released even when the write fails (the mmap can then close)
            done = 0
            while done < length:
                done += os.pwrite(self.fd, view[done:], self._written + done)
        self._written += length
        self._staged = 0

    def close(self) -> None:
        """Releases the staging buffer (the caller closes the file)."""
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._buffer is not None:
            try:
                self._buffer.close()
            except BufferError:  # a failed write's traceback still holds a view: the collector frees it
                pass
            self._buffer = None


_ZEROS = bytes(64 * 1024)

__all__ = ["BLOCK", "BlockAppender", "open_for_append", "padding_size", "remove_in_steps", "remove_in_steps_now",
           "write_all"]


def remove_in_steps(path: "os.PathLike[str] | str", step_bytes: int,
                    pace: Optional[Callable[[], None]] = None) -> int:
    """Deletes a file by shrinking it ``step_bytes`` at a time from its end, then unlinking it; returns the
    size it had (0 if it was already gone). ``pace`` runs before each step (the bookie's waits for an idle
    journal); ``step_bytes`` 0 or less unlinks at once.

    Why. Freeing a large file's blocks is file-system journal work that a later ``fdatasync`` of the bookie's
    journal waits for, and on a file system mounted with ``discard`` it includes telling the device about
    every freed block. Unlinking a 256 MiB journal file at once stalled the journal's syncs for 100-250 ms on
    the machine this was built on (ext4, ``discard``); freed a few MiB at a time (the bookie's
    ``file_removal_step_bytes``), each sync waits for one step's share at most. A crash midway leaves a shorter file of the same name, which is what the caller was
    deleting anyway: callers only remove files nothing points into any more (removed again at the next start).
    """
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return 0
    try:
        size = remaining = os.fstat(fd).st_size
        if step_bytes > 0:
            while remaining > step_bytes:
                if pace is not None:
                    pace()
                remaining -= step_bytes
                os.ftruncate(fd, remaining)
    finally:
        os.close(fd)
    if pace is not None:
        pace()
    try:
        os.unlink(path)
    except FileNotFoundError:
        return 0
    return size


def remove_in_steps_now(path: "os.PathLike[str] | str") -> int:
    """Unlinks ``path`` at once; returns the size it had (0 if it was already gone)."""
    return remove_in_steps(path, 0)
