"""Rate limits as token buckets: pure (no asyncio), the clock passed in by the caller.

Theory of operation
-------------------

Pulsar's namespace rate limits (``publishMaxMessageRate``, ``topicDispatchRate``,
``subscriptionDispatchRate``) allow N messages and/or B bytes per period. Each limited dimension here is a
:class:`TokenBucket` holding at most one period's worth of tokens (the burst) and refilled continuously
at ``permits / period``; a new bucket starts full. Work is charged *after* it is done and a bucket may go
into debt, as Pulsar's ``AsyncTokenBucket`` does: one batch of 1,000 messages under a limit of 200 msg/s
is let through and the next four seconds pay for it. The caller stops the flow while a bucket is
exhausted (no tokens left) and resumes after :meth:`RateLimiter.wait_s`, which waits for a slice of the
period (``refill_fraction``, default a tenth) so a throttled flow moves in slices, not one message per
timer.

A limit ``<= 0`` leaves its dimension unlimited, Pulsar's convention (its default is -1).
"""

from __future__ import annotations

import math
from typing import Optional

DEFAULT_REFILL_FRACTION = 0.1


class TokenBucket:
    """One limited dimension (messages or bytes): ``permits_per_period`` per ``period_s`` seconds."""

    def __init__(self, *, permits_per_period: int, period_s: float, now_s: float) -> None:
        if permits_per_period <= 0 or period_s <= 0:
            raise ValueError(f"a token bucket needs positive permits and period, got {permits_per_period} / "
                             f"{period_s}s")
        self.capacity = float(permits_per_period)
        self.rate_per_s = permits_per_period / period_s
        self.tokens = self.capacity
        self._updated_s = now_s

    def _refill(self, now_s: float) -> None:
        elapsed = now_s - self._updated_s
        if elapsed > 0:
            self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
            self._updated_s = now_s

    def set_rate(self, *, permits_per_period: int, period_s: float, now_s: float) -> None:
        """A new limit; the tokens (or debt) held carry over, capped at the new capacity."""
        self._refill(now_s)
        self.capacity = float(permits_per_period)
        self.rate_per_s = permits_per_period / period_s
        self.tokens = min(self.tokens, self.capacity)

    def consume(self, permits: int, now_s: float) -> None:
        self._refill(now_s)
        self.tokens -= permits

    def available(self, now_s: float) -> int:
        """Whole tokens available now (0 when in debt)."""
        self._refill(now_s)
        return max(0, math.floor(self.tokens))

    def exhausted(self, now_s: float) -> bool:
        self._refill(now_s)
        return self.tokens < 1

    def wait_s(self, now_s: float, *, refill_fraction: float = DEFAULT_REFILL_FRACTION) -> float:
        """Seconds until the bucket holds ``max(1, refill_fraction * capacity)`` tokens (0 if it does)."""
        self._refill(now_s)
        target = min(self.capacity, max(1.0, refill_fraction * self.capacity))
        if self.tokens >= target:
            return 0.0
        return (target - self.tokens) / self.rate_per_s


class RateLimiter:
    """A message limit and a byte limit together (either may be off); see the module docstring."""

    def __init__(self, *, msgs_per_period: int = -1, bytes_per_period: int = -1, period_s: float = 1.0,
                 now_s: float) -> None:
        self.msgs: Optional[TokenBucket] = None
        self.bytes: Optional[TokenBucket] = None
        self.period_s = period_s
        self.set_rate(msgs_per_period=msgs_per_period, bytes_per_period=bytes_per_period, period_s=period_s,
                      now_s=now_s)

    @property
    def enabled(self) -> bool:
        return self.msgs is not None or self.bytes is not None

    def set_rate(self, *, msgs_per_period: int, bytes_per_period: int, period_s: float, now_s: float) -> None:
        """Changes the limits in place (a dimension turned off forgets its debt; one turned on starts full)."""
        self.period_s = period_s
        self.msgs = _retuned(self.msgs, msgs_per_period, period_s, now_s)
        self.bytes = _retuned(self.bytes, bytes_per_period, period_s, now_s)

    def _buckets(self) -> list[TokenBucket]:
        return [b for b in (self.msgs, self.bytes) if b is not None]

    def consume(self, msgs: int, size_bytes: int, now_s: float) -> None:
        if self.msgs is not None:
            self.msgs.consume(msgs, now_s)
        if self.bytes is not None:
            self.bytes.consume(size_bytes, now_s)

    def exhausted(self, now_s: float) -> bool:
        """True while some limited dimension has no whole token left: stop the flow."""
        return any(b.exhausted(now_s) for b in self._buckets())

    def available_msgs(self, now_s: float) -> Optional[int]:
        """Messages that may go now (None: no message limit). The byte limit is enforced by debt only."""
        return None if self.msgs is None else self.msgs.available(now_s)

    def wait_s(self, now_s: float, *, refill_fraction: float = DEFAULT_REFILL_FRACTION) -> float:
        """Seconds until every exhausted dimension has refilled a slice of its period (0: flow may go on)."""
        return max((b.wait_s(now_s, refill_fraction=refill_fraction) for b in self._buckets()
                    if b.exhausted(now_s)), default=0.0)


def _retuned(bucket: Optional[TokenBucket], permits: int, period_s: float, now_s: float) -> Optional[TokenBucket]:
    if permits <= 0:
        return None
    if bucket is None:
        return TokenBucket(permits_per_period=permits, period_s=period_s, now_s=now_s)
    bucket.set_rate(permits_per_period=permits, period_s=period_s, now_s=now_s)
    return bucket
