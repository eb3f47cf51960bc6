"""What the Python runtime itself costs a process: garbage-collector pauses and event-loop lag.

A broker or bookie answers in a millisecond or two, so a 30 ms stall anywhere in the process shows up
as the p99 of every client. Two causes are the runtime's own and invisible in the request metrics:

* the cyclic garbage collector stops the world while it walks a generation; a full (generation 2)
  collection walks every tracked object of the process, which for a long-running server is mostly the
  modules, classes and protobuf descriptors loaded at start-up and never freed;
* a callback that keeps the event loop busy delays every other connection's reads and writes.

:func:`install_runtime_metrics` exports both as histograms (``magnetar_gc_pause_seconds{generation}``,
``magnetar_event_loop_lag_seconds``) so an operator can tell a slow disk from a stalled process.
:func:`tune_runtime` moves what exists after start-up into the permanent generation (``gc.freeze``),
which the collector no longer walks, and raises the first generation's threshold so that allocation bursts
of a loaded server trigger fewer, equally short, young collections. ``MAGNETAR_SWITCH_INTERVAL_S`` sets the
interpreter's GIL switch interval (CPython's 5 ms by default): a bookie's flush thread and a broker's
kazoo and gRPC threads run Python code next to the event loop, and a loop thread waiting behind one of them
waits up to one interval. Measured on a 2-core machine (``magnetar perf``, see docs/architecture.md): 0.5 ms
moved more broker-side publishes under 2.5 ms at 10,000 msg/s but cost about a quarter of the peak
throughput, so the default stays CPython's.

It also tells glibc's allocator to keep large blocks (:func:`keep_large_blocks`): a published entry is
~100 KiB and passes through several buffers (socket read, framing, one AddRequest per bookie, a journal
record); above glibc's default 128 KiB mapping threshold each such buffer was a fresh ``mmap``, zero-filled
page by page on first touch and unmapped on release, about 20,000 page faults a second in a loaded broker.
``MAGNETAR_MALLOC_TUNING=0`` leaves the allocator alone.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import sys
import time
from typing import Optional

from prometheus_client import CollectorRegistry, Histogram

_PAUSE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_LAG_PROBE_INTERVAL_S = 0.05

# Young collections happen every ``threshold0`` net allocations of tracked objects; CPython's default
# (700) makes a loaded server collect thousands of times a second.
_GEN0_THRESHOLD = 50_000

# glibc mallopt parameters and the values set: blocks up to 32 MiB come from the heap, and up to 256 MiB of
# free heap is kept before it is returned to the system.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 32 << 20
_TRIM_THRESHOLD_BYTES = 256 << 20


def keep_large_blocks() -> bool:
    """Raises glibc's mmap and trim thresholds (see the module docstring); False where there is no glibc."""
    if os.environ.get("MAGNETAR_MALLOC_TUNING", "1") == "0":
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                    _TRIM_THRESHOLD_BYTES))


def tune_runtime() -> None:
    """Call once start-up is done: start-up objects leave the collector's walk; fewer young collections;
    the GIL switch interval from ``MAGNETAR_SWITCH_INTERVAL_S`` when set (see the module docstring)."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GEN0_THRESHOLD, gen1, gen2)
    keep_large_blocks()
    interval = os.environ.get("MAGNETAR_SWITCH_INTERVAL_S")
    if interval:
        try:
            sys.setswitchinterval(float(interval))
        except ValueError:
            raise SystemExit(f"MAGNETAR_SWITCH_INTERVAL_S must be a positive number of seconds, not {interval!r}")


class RuntimeMetrics:
    """Collector pauses (from ``gc.callbacks``) and, once :meth:`start` runs in a loop, event-loop lag."""

    def __init__(self, registry: CollectorRegistry, prefix: str = "magnetar") -> None:
        self.gc_pause = Histogram(f"{prefix}_gc_pause_seconds", "Garbage-collector pauses, by generation",
                                  ["generation"], registry=registry, buckets=_PAUSE_BUCKETS)
        self.loop_lag = Histogram(f"{prefix}_event_loop_lag_seconds",
                                  "How late the event loop ran a callback it had scheduled",
                                  registry=registry, buckets=_PAUSE_BUCKETS)
        self._by_generation = [self.gc_pause.labels(generation=str(g)) for g in range(3)]
        self._gc_started = 0.0
        self._task: Optional[asyncio.Task] = None
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self._by_generation[min(info.get("generation", 2), 2)].observe(time.perf_counter() - self._gc_started)
            self._gc_started = 0.0

    def start(self) -> None:
        """Starts the lag probe in the running loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._probe(), name="event-loop lag probe")

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + _LAG_PROBE_INTERVAL_S
            await asyncio.sleep(_LAG_PROBE_INTERVAL_S)
            self.loop_lag.observe(max(0.0, loop.time() - due))

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
