"""The disk-space monitor: turns the bookie read-only below a free-space threshold, writable again above a
higher one (hysteresis, so a bookie hovering at the limit does not flap)."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import shutil
from typing import Awaitable, Callable, Optional

log = logging.getLogger("bookie.disk")


def next_read_only(read_only: bool, free_bytes: int, *, min_bytes: int, resume_bytes: int) -> bool:
    """The pure transition rule: read-only under ``min_bytes`` free, writable again over ``resume_bytes``."""
    if not read_only and free_bytes < min_bytes:
        return True
    if read_only and free_bytes > resume_bytes:
        return False
    return read_only


def describe(free_bytes: int, min_bytes: int, resume_bytes: int) -> str:
    return (
        f"free disk {free_bytes} bytes is under disk_free_min_bytes={min_bytes}; adds are refused until more "
        f"than disk_free_resume_bytes={resume_bytes} bytes are free"
    )


class DiskMonitor:
    """Samples ``shutil.disk_usage(path)`` every ``interval_ms`` and reports read-only transitions.

    Args:
        on_change: ``await on_change(read_only, reason)`` at each transition (and once at start when the
            disk is already too full). Exceptions are logged; the monitor keeps going and retries the
            notification at the next sample.
        on_sample: ``on_sample(free, total)`` after every sample (metrics).
    """

    def __init__(
        self,
        path: pathlib.Path,
        *,
        min_bytes: int,
        resume_bytes: int,
        interval_ms: int,
        on_change: Callable[[bool, str], Awaitable[None]],
        on_sample: Optional[Callable[[int, int], None]] = None,
    ) -> None:
        self.path = path
        self.min_bytes = min_bytes
        self.resume_bytes = resume_bytes
        self.interval_s = interval_ms / 1000
        self.on_change = on_change
        self.on_sample = on_sample
        self.read_only = False
        self._notified: Optional[bool] = False  # the state on_change last completed for
        self._task: Optional[asyncio.Task] = None

    async def check(self) -> bool:
        """One sample (and transition); returns whether the bookie is now read-only."""
        usage = shutil.disk_usage(self.path)
        if self.on_sample is not None:
            self.on_sample(usage.free, usage.total)
        new = next_read_only(self.read_only, usage.free, min_bytes=self.min_bytes, resume_bytes=self.resume_bytes)
        if new != self.read_only:
            self.read_only = new
            if new:
                log.warning("turning read-only: %s", describe(usage.free, self.min_bytes, self.resume_bytes))
            else:
                log.warning("writable again: %d bytes free (> disk_free_resume_bytes=%d)", usage.free, self.resume_bytes)
        if self._notified != self.read_only:
            reason = describe(usage.free, self.min_bytes, self.resume_bytes) if self.read_only else ""
            try:
                await self.on_change(self.read_only, reason)
                self._notified = self.read_only
            except Exception:
                log.exception("could not apply the read-only=%s transition; retrying at the next sample", self.read_only)
        return self.read_only

    async def start(self) -> None:
        if self._task is None:
            await self.check()
            self._task = asyncio.create_task(self._run(), name="bookie-disk-monitor")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("disk check failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
