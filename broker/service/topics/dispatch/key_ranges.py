"""Key_Shared consumer selection, pure: which consumer owns a key hash.

Keys hash with Murmur3 (32-bit, seed 0, as Pulsar's ``Murmur3_32Hash``) into ``[0, 65536)``.

* AUTO_SPLIT: a consistent-hash ring with ``replica_points`` points per consumer; a hash belongs to the
  first point at or after it (wrapping). Consumers joining or leaving move only the keys of their
  neighbours' arcs.
* STICKY: consumers declare inclusive hash ranges; overlaps are refused (ConsumerAssignError), hashes no
  range covers have no consumer (their entries wait).
"""

from __future__ import annotations

import bisect
import struct
from typing import Generic, Optional, Sequence, TypeVar

from magnetar.errors import MagnetarError

RANGE_SIZE = 65536

C = TypeVar("C")
_U32 = 0xFFFFFFFF
_BLOCKS = struct.Struct("<I")


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & _U32
    n = len(data)
    rounded = n & ~3
    for i in range(0, rounded, 4):
        k = _BLOCKS.unpack_from(data, i)[0]
        k = (k * c1) & _U32
        k = ((k << 15) | (k >> 17)) & _U32
        k = (k * c2) & _U32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _U32
        h = (h * 5 + 0xE6546B64) & _U32
    k = 0
    tail = n & 3
    if tail == 3:
        k ^= data[rounded + 2] << 16
    if tail >= 2:
        k ^= data[rounded + 1] << 8
    if tail >= 1:
        k ^= data[rounded]
        k = (k * c1) & _U32
        k = ((k << 15) | (k >> 17)) & _U32
        k = (k * c2) & _U32
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _U32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _U32
    h ^= h >> 16
    return h


def key_hash(key: bytes) -> int:
    """The sticky-key hash in ``[0, RANGE_SIZE)`` (Pulsar: ``(murmur3 & Integer.MAX_VALUE) % 65536``)."""
    return (murmur3_32(key) & 0x7FFFFFFF) % RANGE_SIZE


class SelectorError(MagnetarError, ValueError):
    """A consumer cannot be placed (STICKY ranges overlapping or out of bounds); the dispatchers map it to
    ConsumerAssignError. Still a ValueError for callers that catch bad input as such."""


class AutoSplitSelector(Generic[C]):
    def __init__(self, *, replica_points: int = 100) -> None:
        self.replica_points = replica_points
        self._points: list[int] = []
        self._owners: list[C] = []

    def add(self, consumer: C, identity: str) -> None:
        for i in range(self.replica_points):
            point = murmur3_32(f"{identity}{i}".encode()) & 0x7FFFFFFF
            k = bisect.bisect_left(self._points, point)
            while k < len(self._points) and self._points[k] == point:  # equal points: first added wins
                k += 1
            self._points.insert(k, point)
            self._owners.insert(k, consumer)

    def remove(self, consumer: C) -> None:
        keep = [(p, o) for p, o in zip(self._points, self._owners) if o is not consumer]
        self._points = [p for p, _ in keep]
        self._owners = [o for _, o in keep]

    def select(self, hash_: int) -> Optional[C]:
        if not self._points:
            return None
        # Spread the 16-bit hash over the ring's 31-bit space so each consumer's arcs are comparable.
        point = hash_ * (0x7FFFFFFF // RANGE_SIZE)
        k = bisect.bisect_left(self._points, point)
        return self._owners[k % len(self._owners)]

    def ranges(self, consumer: C) -> list[tuple[int, int]]:
        """Approximate hash ranges owned by ``consumer`` (for stats)."""
        out = []
        scale = 0x7FFFFFFF // RANGE_SIZE
        prev = -1
        for point, owner in zip(self._points, self._owners):
            if owner is consumer:
                out.append((prev // scale + 1, point // scale))
            prev = point
        return out


class StickySelector(Generic[C]):
    def __init__(self) -> None:
        self._ranges: list[tuple[int, int, C]] = []

    def add(self, consumer: C, ranges: Sequence[tuple[int, int]]) -> None:
        if not ranges:
            raise SelectorError("a STICKY Key_Shared consumer must declare at least one hash range")
        for start, end in ranges:
            if not 0 <= start <= end < RANGE_SIZE:
                raise SelectorError(f"hash range [{start}, {end}] is outside [0, {RANGE_SIZE - 1}]")
            for s, e, other in self._ranges:
                if start <= e and s <= end:
                    raise SelectorError(f"hash range [{start}, {end}] overlaps [{s}, {e}] of another consumer")
        for start, end in ranges:
            self._ranges.append((start, end, consumer))
        self._ranges.sort(key=lambda r: r[0])

    def remove(self, consumer: C) -> None:
        self._ranges = [r for r in self._ranges if r[2] is not consumer]

    def select(self, hash_: int) -> Optional[C]:
        for start, end, consumer in self._ranges:
            if start <= hash_ <= end:
                return consumer
        return None

    def ranges(self, consumer: C) -> list[tuple[int, int]]:
        return [(s, e) for s, e, c in self._ranges if c is consumer]
