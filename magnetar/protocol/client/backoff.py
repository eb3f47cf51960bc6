"""Reconnection backoff: exponential, jittered, capped, with a swappable random source (pure)."""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["Backoff"]


class Backoff:
    """Delays for successive retries: ``initial_s * 2**n`` capped at ``max_s``, each scaled by a random factor
    in ``[1 - jitter, 1]`` so that many clients cut off at once do not come back in lockstep.

    Args:
        initial_s: first delay (pulsar-client: 100 ms).
        max_s: longest delay (pulsar-client: 60 s; 30 s here, brokers hand topics over in seconds).
        jitter: fraction of each delay that is randomized (0 = deterministic).
        rand: returns a float in [0, 1); tests pass a seeded ``random.Random().random``.
    """

    def __init__(
        self,
        *,
        initial_s: float = 0.1,
        max_s: float = 30.0,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if initial_s <= 0 or max_s < initial_s or not 0 <= jitter <= 1:
            raise ValueError(f"bad backoff settings: initial_s={initial_s} max_s={max_s} jitter={jitter}")
        self.initial_s = initial_s
        self.max_s = max_s
        self.jitter = jitter
        self._rand = rand
        self.attempts = 0

    def next_delay_s(self) -> float:
        """The delay before the next attempt (and counts the attempt)."""
        base = min(self.max_s, self.initial_s * (2 ** min(self.attempts, 62)))
        self.attempts += 1
        return base * (1.0 - self.jitter * self._rand())

    def reset(self) -> None:
        """Call after a success: the next failure starts again from ``initial_s``."""
        self.attempts = 0
