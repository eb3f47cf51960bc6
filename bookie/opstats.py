"""BookKeeper's operation statistics: the latency of one kind of operation, successes apart from failures.

BookKeeper's ``OpStatsLogger`` is what its Prometheus provider turns into a *summary* per operation
(``bookie_journal_JOURNAL_SYNC``, ``bookkeeper_server_ADD_ENTRY_REQUEST``, ...): for ``success="true"`` and
``success="false"`` alike, the quantiles 0.5, 0.75, 0.95, 0.99, 0.999, 0.9999 and 1.0 of the latency in
milliseconds, plus ``_count`` and ``_sum`` since start. Dashboards built for BookKeeper read exactly those
series (``{success="true", quantile="0.99"}``), so a bookie that wants to be read by them keeps the same shape.

Theory of operation. Counts and sums are cumulative (a counter each). Quantiles are over a recent window, as
BookKeeper's are over its last rollover period (60 s by default): :class:`OpStats` keeps the sketch of the
current window and of the previous one and answers from both merged, so a quantile always covers between one
and two windows of recent history, and an operation seen a moment ago already shows (BookKeeper's first
minute shows NaN). A window with no operation gives NaN, as BookKeeper does.

The sketch (:class:`QuantileSketch`) keeps counts in logarithmic buckets whose bounds grow by a fixed ratio,
so any quantile it answers is within ``relative_error`` of a value actually observed at that rank, with
memory bounded by the range of values rather than by their number (1 µs to 1 h is under 1,100 buckets at
1 %). The maximum is kept exactly, so quantile 1.0 is the slowest operation of the window.

Pure logic: no I/O, no asyncio. :class:`OpStats` takes a lock because operations are recorded on the event
loop and on the journal's force thread while a scrape reads from the metrics server's thread.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, NamedTuple

__all__ = ["QUANTILES", "OpStats", "OpStatsSnapshot", "OutcomeSnapshot", "QuantileSketch"]

QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
"""The quantiles BookKeeper's Prometheus provider writes for every operation."""

_SMALLEST = 1e-6  # values at or below this (ms) share one bucket: a nanosecond is below any clock's resolution


class QuantileSketch:
    """Counts of values in logarithmic buckets (relative-error quantiles). Not thread-safe.

    Args:
        relative_error: the largest relative distance between a quantile answered and a value observed at
            that rank.
    """

    __slots__ = ("_gamma_log", "_gamma", "buckets", "small", "count", "max")

    def __init__(self, relative_error: float = 0.01) -> None:
        if not 0.0 < relative_error < 1.0:
            raise ValueError(f"relative_error must be in (0, 1), not {relative_error}")
        self._gamma = (1.0 + relative_error) / (1.0 - relative_error)
        self._gamma_log = math.log(self._gamma)
        self.buckets: dict[int, int] = {}
        self.small = 0  # values <= _SMALLEST (and negative ones: a clock stepping back)
        self.count = 0
        self.max = -math.inf

    def add(self, value: float) -> None:
        if value != value:  # NaN: not a latency
            return
        self.count += 1
        if value > self.max:
            self.max = value
        if value <= _SMALLEST:
            self.small += 1
            return
        index = math.ceil(math.log(value) / self._gamma_log)
        self.buckets[index] = self.buckets.get(index, 0) + 1

    def merge(self, other: "QuantileSketch") -> None:
        """Adds ``other``'s counts into this sketch (both must have the same relative error)."""
        if other._gamma != self._gamma:
            raise ValueError("cannot merge sketches of different relative errors")
        for index, n in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + n
        self.small += other.small
        self.count += other.count
        if other.max > self.max:
            self.max = other.max

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (NaN when empty); 1.0 is the exact maximum."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], not {q}")
        if self.count == 0:
            return math.nan
        if q >= 1.0:
            return self.max
        rank = q * (self.count - 1)  # 0-based rank of the answer among the values, in order
        seen = self.small
        if rank < seen:
            return min(0.0, self.max)
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if rank < seen:
                # The bucket holds values in (gamma^(i-1), gamma^i]; this point is within relative_error of both.
                return min(2.0 * self._gamma ** index / (self._gamma + 1.0), self.max)
        return self.max


class OutcomeSnapshot(NamedTuple):
    """One outcome (success or failure) of an operation at one moment."""

    count: int
    sum_ms: float
    quantiles_ms: tuple[float, ...]  # one per :data:`QUANTILES`


class OpStatsSnapshot(NamedTuple):
    success: OutcomeSnapshot
    failure: OutcomeSnapshot

    def outcome(self, success: bool) -> OutcomeSnapshot:
        return self.success if success else self.failure


class _Outcome:
    __slots__ = ("count", "sum_ms", "current", "previous")

    def __init__(self, relative_error: float) -> None:
        self.count = 0
        self.sum_ms = 0.0
        self.current = QuantileSketch(relative_error)
        self.previous = QuantileSketch(relative_error)


class OpStats:
    """Latencies of one operation in milliseconds, successes and failures apart (see the module docstring).

    Args:
        window_s: length of a quantile window (BookKeeper's ``prometheusStatsLatencyRolloverSeconds``).
        relative_error: precision of the quantiles.
        clock: monotonic seconds; tests pass a fake one.
    """

    def __init__(self, *, window_s: float = 60.0, relative_error: float = 0.01,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, not {window_s}")
        self.window_s = window_s
        self._relative_error = relative_error
        self._clock = clock
        self._lock = threading.Lock()
        self._outcomes = (_Outcome(relative_error), _Outcome(relative_error))  # [failure, success]
        self._window_start = clock()

    def record(self, value_ms: float, success: bool) -> None:
        """One operation that took ``value_ms`` milliseconds and succeeded or failed."""
        with self._lock:
            self._rotate(self._clock())
            outcome = self._outcomes[1 if success else 0]
            outcome.count += 1
            outcome.sum_ms += value_ms
            outcome.current.add(value_ms)

    def record_seconds(self, seconds: float, success: bool) -> None:
        self.record(seconds * 1000.0, success)

    def snapshot(self) -> OpStatsSnapshot:
        with self._lock:
            self._rotate(self._clock())
            failure, success = (self._snapshot(o) for o in self._outcomes)
        return OpStatsSnapshot(success=success, failure=failure)

    def _snapshot(self, outcome: _Outcome) -> OutcomeSnapshot:
        merged = QuantileSketch(self._relative_error)
        merged.merge(outcome.previous)
        merged.merge(outcome.current)
        return OutcomeSnapshot(outcome.count, outcome.sum_ms, tuple(merged.quantile(q) for q in QUANTILES))

    def _rotate(self, now: float) -> None:
        elapsed = now - self._window_start
        if elapsed < self.window_s:
            return
        # Two windows or more without a rotation: what is current is too old to count as "previous" too.
        stale = elapsed >= 2 * self.window_s
        for outcome in self._outcomes:
            outcome.previous = QuantileSketch(self._relative_error) if stale else outcome.current
            outcome.current = QuantileSketch(self._relative_error)
        self._window_start = now
