"""A cursor's acknowledgement state below the entry level: a set of positions kept as disjoint open-closed
ranges ``(lo, hi]`` (Guava's ``RangeSet`` as Pulsar's cursor uses it for individually deleted entries), and
the batch-index ack sets of partly acknowledged batch entries (see :func:`batch_ack_sets_to_persist`).

Pure: no asyncio, no I/O. Points are any totally ordered values; the cursor uses ``Position`` tuples.
Acknowledging entry ``p`` adds ``(previous(p), p]`` where ``previous`` is the managed ledger's previous
existing position, so acknowledgements of consecutive entries - also across a ledger boundary - touch and
merge into one range.

Invariants (checked by the property tests): ranges are non-empty (``lo < hi``), sorted, and pairwise
*disconnected*: for consecutive ranges ``hi_k < lo_{k+1}``. Ranges that touch (``hi_k == lo_{k+1}``) or
overlap are merged when added, so the representation of a given set of points is canonical.
"""

from __future__ import annotations

import bisect
from typing import Generic, Iterable, Iterator, Mapping, Optional, TypeVar

P = TypeVar("P")


class RangeSet(Generic[P]):
    """Disjoint open-closed ranges; see the module docstring."""

    __slots__ = ("_lows", "_highs")

    def __init__(self, ranges: Optional[list[tuple[P, P]]] = None) -> None:
        self._lows: list[P] = []
        self._highs: list[P] = []
        for lo, hi in ranges or []:
            self.add(lo, hi)

    # -- queries ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """The number of ranges (not of points)."""
        return len(self._lows)

    def __bool__(self) -> bool:
        return bool(self._lows)

    def __iter__(self) -> Iterator[tuple[P, P]]:
        return iter(list(zip(self._lows, self._highs)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and list(self) == list(other)

    def __repr__(self) -> str:
        return "RangeSet(" + ", ".join(f"({lo}..{hi}]" for lo, hi in self) + ")"

    def ranges(self) -> list[tuple[P, P]]:
        return list(zip(self._lows, self._highs))

    def contains(self, point: P) -> bool:
        """True if some range has ``lo < point <= hi``."""
        return self.range_containing(point) is not None

    def range_containing(self, point: P) -> Optional[tuple[P, P]]:
        """The range holding ``point``, or None."""
        k = bisect.bisect_left(self._highs, point)  # first range with hi >= point
        if k < len(self._lows) and self._lows[k] < point:
            return self._lows[k], self._highs[k]
        return None

    def first(self) -> Optional[tuple[P, P]]:
        return (self._lows[0], self._highs[0]) if self._lows else None

    def last(self) -> Optional[tuple[P, P]]:
        return (self._lows[-1], self._highs[-1]) if self._lows else None

    # -- changes ----------------------------------------------------------------------------------------

    def add(self, lo: P, hi: P) -> None:
        """Adds ``(lo, hi]``, merging every range it overlaps or touches. An empty range is a no-op."""
        if not lo < hi:
            return
        i = bisect.bisect_left(self._highs, lo)  # first range with hi >= lo: connected from the left
        j = bisect.bisect_right(self._lows, hi)  # ranges before j have lo <= hi: connected from the right
        if i < j:
            lo = min(lo, self._lows[i])
            hi = max(hi, self._highs[j - 1])
        self._lows[i:j] = [lo]
        self._highs[i:j] = [hi]

    def remove_at_or_below(self, point: P) -> None:
        """Removes every point ``<= point``: whole ranges below it go, a range across it becomes
        ``(point, hi]``."""
        k = bisect.bisect_right(self._highs, point)  # ranges before k have hi <= point
        del self._lows[:k]
        del self._highs[:k]
        if self._lows and self._lows[0] < point:
            self._lows[0] = point

    def pop_first(self) -> Optional[tuple[P, P]]:
        if not self._lows:
            return None
        return self._lows.pop(0), self._highs.pop(0)

    def clear(self) -> None:
        self._lows.clear()
        self._highs.clear()

    def copy(self) -> "RangeSet[P]":
        other: RangeSet[P] = RangeSet()
        other._lows = list(self._lows)
        other._highs = list(self._highs)
        return other


# ---------------------------------------------------------------------------------------------- batch ack sets
#
# A batch entry some of whose members are acknowledged (batch-index acks) has an *ack set*: the bit set of the
# members still unacknowledged (Pulsar's convention: bit i set = member i not acknowledged yet). In memory it is
# a Python int; stored and sent on the wire it is a list of signed int64 words, ``java.util.BitSet.toLongArray``
# order (bit i is bit i % 64 of word i // 64, no trailing zero words).

BATCH_ACK_SETS_PERSISTED_MAX = 1000
"""At most this many partly acknowledged entries are persisted with a cursor (Pulsar's
``managedLedgerMaxBatchDeletedIndexToPersist``, 10,000 there; lower here because the whole cursor state is one
ZooKeeper node, bounded by ZooKeeper's 1 MB ``jute.maxbuffer``, where Pulsar writes it to a cursor ledger)."""

BATCH_ACK_WORDS_PERSISTED_MAX = 16_384
"""At most this many 64-bit words of ack sets are persisted with a cursor (at most ~21 JSON bytes each: about
350 KB). With pulsar-client's default batch of up to 1000 messages (16 words) the entry cap binds first."""

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def ack_set_to_words(bits: int) -> tuple[int, ...]:
    """A non-negative ack set as signed int64 words (``BitSet.toLongArray``)."""
    if bits < 0:
        raise ValueError(f"an ack set is a non-negative bit set, got {bits}")
    words = []
    while bits:
        word = bits & (_U64 - 1)
        words.append(word - _U64 if word > _I64_MAX else word)
        bits >>= 64
    return tuple(words)


def ack_set_from_words(words: Iterable[int]) -> int:
    """Reverses :func:`ack_set_to_words` (any int64 or uint64 word values)."""
    bits = 0
    for i, word in enumerate(words):
        bits |= (word % _U64) << (64 * i)
    return bits


def batch_ack_sets_to_persist(ack_sets: Mapping[P, int], *, entries_max: int = BATCH_ACK_SETS_PERSISTED_MAX,
                              words_max: int = BATCH_ACK_WORDS_PERSISTED_MAX) -> list[tuple[P, tuple[int, ...]]]:
    """The ack sets a cursor persists: ``(position, words)`` in ascending position order, lowest positions
    first, stopping before the first one that would exceed ``entries_max`` entries or ``words_max`` words in
    all. Empty sets (fully acknowledged entries, which the cursor records as deleted instead) are skipped.

    What is left out is not lost while the broker runs; after a reload those entries are redelivered whole
    (at least once, as Pulsar does past its cap). The lowest positions are kept because they are redelivered
    first and hold the mark-delete position back."""
    out: list[tuple[P, tuple[int, ...]]] = []
    words_total = 0
    for position in sorted(ack_sets):
        if len(out) >= entries_max:
            break
        words = ack_set_to_words(ack_sets[position])
        if not words:
            continue
        if words_total + len(words) > words_max:
            break
        words_total += len(words)
        out.append((position, words))
    return out
