"""Giving the heap that closed client connections freed back to the system.

Theory of operation
-------------------

Each open TLS client connection holds about 24 KiB, most of it OpenSSL's per-connection state, allocated with
glibc's ``malloc``. When thousands of connections close at once (a load balancer drains, a fleet of clients
restarts), glibc keeps what they freed for reuse: the process's servers raise its trim threshold to 256 MiB
(``observability.runtime.keep_large_blocks``), and the long-lived tables that grew meanwhile (the event loop's
file-descriptor maps, the set of connections) sit above the freed space, so the heap's top is not free anyway.
Measured on the proxy: three rounds of 5,000 idle TLS connections opened and closed left the process at 210 MiB
resident after each round (a plateau, not a leak; 57 MiB before the first), 185-205 MiB of the heap free;
``malloc_trim(0)`` brought it to 78 MiB. With ``bench/proxy.py``'s 10,000: 213 MiB right after closing, 108 MiB
once the trimmer had run (490-510 MiB, kept, before this and the release of closed transports).

:class:`HeapTrimmer` checks every ``check_interval_s`` how many client connections closed since it last trimmed;
from ``after_closed`` on, and when glibc reports at least ``free_bytes_min`` free in its main heap, it calls
``malloc_trim(0)`` on a worker thread (the event loop goes on; a large allocation on it waits for glibc's heap
lock while the trim walks the heap, tens of milliseconds for a few hundred MiB) and logs what was returned.
Where the C library is not glibc it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import enum
import logging
import os
import time
from typing import Callable, Optional, Protocol

__all__ = ["Allocator", "FREE_BYTES_MIN", "HeapTrimmer", "TrimmerState", "glibc_allocator"]

log = logging.getLogger("proxy.memory")

FREE_BYTES_MIN = 16 * 1024 * 1024  # less free heap than this is not worth a walk of the heap


class Allocator(Protocol):
    """The C library's allocator, as far as trimming goes."""

    def free_bytes(self) -> Optional[int]:
        """Free bytes held in the main heap (None: unknown)."""
        ...

    def trim(self) -> None:
        """Returns free heap pages to the system."""
        ...


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


class _Glibc:
    def __init__(self, libc: ctypes.CDLL) -> None:
        self._trim = libc.malloc_trim
        self._trim.argtypes = [ctypes.c_size_t]
        self._mallinfo2 = getattr(libc, "mallinfo2", None)  # glibc 2.33+
        if self._mallinfo2 is not None:
            self._mallinfo2.restype = _MallInfo2

    def free_bytes(self) -> Optional[int]:
        return int(self._mallinfo2().fordblks) if self._mallinfo2 is not None else None

    def trim(self) -> None:
        self._trim(0)


def glibc_allocator() -> Optional[Allocator]:
    """glibc's allocator, or None where the C library is another (musl has no ``malloc_trim``)."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - present in glibc only
    except (OSError, AttributeError):
        return None
    return _Glibc(libc)


class TrimmerState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class HeapTrimmer:
    """Trims the heap after many client connections closed (see the module docstring).

    Args:
        closed_connections: how many client connections have closed so far (a count that only grows).
        after_closed: closed connections since the last trim that make the next check trim; 0: never trims.
        check_interval_s: how often to check.
        free_bytes_min: the least free heap worth trimming.
        allocator: what is trimmed; default glibc's (None where there is none).
    """

    def __init__(self, *, closed_connections: Callable[[], int], after_closed: int, check_interval_s: float,
                 free_bytes_min: int = FREE_BYTES_MIN, allocator: Optional[Allocator] = None) -> None:
        self._closed_connections = closed_connections
        self.after_closed = after_closed
        self.check_interval_s = check_interval_s
        self.free_bytes_min = free_bytes_min
        self.allocator = allocator if allocator is not None else glibc_allocator()
        self.state = TrimmerState.NEW
        self.trims = 0
        self._closed_at_trim = closed_connections()
        self._task: Optional[asyncio.Task] = None

    def due(self) -> bool:
        """Whether a trim is worth it now: enough connections closed since the last one, enough heap free."""
        if self.allocator is None or self.after_closed <= 0:
            return False
        if self._closed_connections() - self._closed_at_trim < self.after_closed:
            return False
        free = self.allocator.free_bytes()
        return free is None or free >= self.free_bytes_min

    async def trim_once(self) -> None:
        """Trims now, on a worker thread, and logs how much the process's resident memory went down."""
        assert self.allocator is not None
        closed = self._closed_connections()
        since = closed - self._closed_at_trim
        self._closed_at_trim = closed
        before, started = _resident_bytes(), time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(None, self.allocator.trim)
        self.trims += 1
        log.info("returned %.0f MiB of freed heap to the system in %.0f ms (%d client connections closed since "
                 "the last time)", (before - _resident_bytes()) / 2**20, (time.perf_counter() - started) * 1000,
                 since)

    def start(self) -> None:
        """Starts checking in the running loop (idempotent; does nothing when it can never trim)."""
        if self.state is not TrimmerState.NEW:
            return
        self.state = TrimmerState.RUNNING
        if self.allocator is not None and self.after_closed > 0:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="proxy heap trimmer")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                if self.due():
                    await self.trim_once()
            except Exception:  # noqa: BLE001 - a failed trim costs memory, never the proxy
                log.exception("trimming the heap failed")

    async def close(self) -> None:
        """Stops checking (idempotent); a trim under way finishes on its thread."""
        self.state = TrimmerState.CLOSED
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _resident_bytes() -> int:
    """This process's resident set size, from ``/proc/self/statm`` (0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
