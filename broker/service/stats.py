"""Counters and rates behind Pulsar's TopicStats JSON.

A :class:`RateMeter` keeps a running total and turns it into a per-second rate over the last completed
window (``tick()`` closes a window; the service ticks every ``stats_update_interval_s``). Between ticks a
rate is computed over the current window once it is at least a second old, so a fresh topic shows
non-zero rates without waiting a whole interval. Pure: no asyncio.
"""

from __future__ import annotations

import datetime
import time

_MIN_WINDOW_S = 1.0


def iso_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RateMeter:
    __slots__ = ("total", "_window_start_s", "_window_start_total", "_last_rate")

    def __init__(self) -> None:
        self.total = 0
        self._window_start_s = time.monotonic()
        self._window_start_total = 0
        self._last_rate = 0.0

    def record(self, amount: int = 1) -> None:
        self.total += amount

    def tick(self, now_s: float | None = None) -> None:
        """Closes the current window: its rate becomes the reported one."""
        now_s = time.monotonic() if now_s is None else now_s
        elapsed = now_s - self._window_start_s
        if elapsed > 0:
            self._last_rate = (self.total - self._window_start_total) / elapsed
        self._window_start_s = now_s
        self._window_start_total = self.total

    def rate(self, now_s: float | None = None) -> float:
        now_s = time.monotonic() if now_s is None else now_s
        elapsed = now_s - self._window_start_s
        if elapsed >= _MIN_WINDOW_S and self.total != self._window_start_total:
            return (self.total - self._window_start_total) / elapsed
        return self._last_rate
