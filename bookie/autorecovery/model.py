"""What auto-recovery reasons about, as pure values and functions (no I/O, no asyncio).

Theory of operation. A ledger's metadata lists ensembles by first entry id; an ensemble together with the
range of entries it covers is a *segment*, and a segment together with one of its bookies is a *fragment*:
the entries of the segment whose write set includes that bookie (``ensemble[(e + i) % E]``, i < Qw).
A fragment is *under-replicated* when its bookie is lost for good (gone past the grace period, marked for
decommission) or when it is known not to hold its entries intact (the scrubber found one missing or
corrupt). Repair copies every entry of the fragment from a surviving replica to a new bookie, then puts the
new bookie in the old one's slot of that segment only (one compare-and-set of the ledger's metadata).
Keeping the slot keeps every other member's write sets unchanged, so no other entry moves.

Records of under-replicated ledgers are stored one node per ledger (:class:`UnderReplicatedLedger`, JSON),
listing its fragments by ``(first_entry_id, bookie)``; marking the same fragment twice is a no-op, which is
what makes an auditor that restarts half-way harmless.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from config_store import InvalidMetadataError, LedgerMetadata, LedgerState

REASON_LOST = "lost"  # the bookie is gone past the grace period
REASON_DECOMMISSION = "decommission"  # an operator asked for the bookie to be emptied
REASON_CORRUPT = "corrupt"  # the scrubber read a record failing its checksum
REASON_MISSING = "missing"  # the scrubber found an entry the metadata says the bookie holds, but it does not
REASONS = (REASON_LOST, REASON_DECOMMISSION, REASON_CORRUPT, REASON_MISSING)


@dataclass(frozen=True, order=True)
class Fragment:
    """The entries of the segment starting at ``first_entry_id`` that ``bookie`` is meant to hold."""

    first_entry_id: int
    bookie: str
    reason: str = field(default=REASON_LOST, compare=False)

    @property
    def key(self) -> tuple[int, str]:
        return (self.first_entry_id, self.bookie)


@dataclass(frozen=True)
class UnderReplicatedLedger:
    """The stored record of one under-replicated ledger: its fragments and since when (ms since the epoch)."""

    ledger_id: int
    fragments: tuple[Fragment, ...]
    since_ms: int

    def with_fragments(self, fragments: list[Fragment]) -> "UnderReplicatedLedger":
        """A copy also listing ``fragments`` (already listed ones, by key, are kept as they are)."""
        known = {f.key for f in self.fragments}
        merged = list(self.fragments) + [f for f in fragments if f.key not in known]
        return dataclasses.replace(self, fragments=tuple(sorted(set(merged))))

    def without(self, key: tuple[int, str]) -> "UnderReplicatedLedger":
        return dataclasses.replace(self, fragments=tuple(f for f in self.fragments if f.key != key))

    def to_json(self) -> bytes:
        return json.dumps({
            "version": 1,
            "ledgerId": self.ledger_id,
            "sinceMs": self.since_ms,
            "fragments": [{"firstEntryId": f.first_entry_id, "bookie": f.bookie, "reason": f.reason}
                          for f in self.fragments],
        }, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "UnderReplicatedLedger":
        try:
            o = json.loads(data)
            fragments = tuple(sorted(
                Fragment(int(f["firstEntryId"]), str(f["bookie"]), str(f.get("reason", REASON_LOST)))
                for f in o["fragments"]))
            return cls(int(o["ledgerId"]), fragments, int(o.get("sinceMs", 0)))
        except (ValueError, KeyError, TypeError) as err:
            raise InvalidMetadataError(f"unreadable under-replication record: {err!r}") from None


# ------------------------------------------------------------------------------------------------ ledger math


def segments(md: LedgerMetadata) -> list[tuple[int, int, list[str]]]:
    """``(first, last, ensemble)`` of every ensemble of the ledger; ``last`` is inclusive and may be below
    ``first`` (an ensemble no entry reached). Of an open ledger the last segment's end is unknown: its
    ``last`` is -2 (treat it as not yet final)."""
    out = []
    for i, (first, bookies) in enumerate(md.ensembles):
        if i + 1 < len(md.ensembles):
            last = md.ensembles[i + 1][0] - 1
        elif md.state is LedgerState.CLOSED:
            last = md.last_entry_id
        else:
            last = -2
        out.append((first, last, list(bookies)))
    return out


def fragments_of(md: LedgerMetadata, bookies: set[str] | dict[str, str]) -> list[Fragment]:
    """Every fragment of the ledger held by one of ``bookies`` (a dict maps each to its reason)."""
    reasons = bookies if isinstance(bookies, dict) else {b: REASON_LOST for b in bookies}
    return [Fragment(first, b, reasons[b]) for first, _last, ensemble in segments(md) for b in ensemble
            if b in reasons]


def segment_at(md: LedgerMetadata, first_entry_id: int) -> Optional[tuple[int, int, list[str]]]:
    for seg in segments(md):
        if seg[0] == first_entry_id:
            return seg
    return None


def fragment_entries(md: LedgerMetadata, fragment: Fragment) -> list[int]:
    """The entry ids the fragment's bookie holds (ascending); [] when its segment is gone or unfinished."""
    seg = segment_at(md, fragment.first_entry_id)
    if seg is None or fragment.bookie not in seg[2]:
        return []
    first, last, ensemble = seg
    slot = ensemble.index(fragment.bookie)
    e, qw = md.ensemble_size, md.write_quorum_size
    # Entry x is on slot s when (s - x) mod E < Qw.
    return [x for x in range(first, last + 1) if (slot - x) % e < qw]


def still_pending(md: LedgerMetadata, fragment: Fragment) -> bool:
    """True while the fragment's bookie still holds its slot in the segment (repair not yet applied)."""
    seg = segment_at(md, fragment.first_entry_id)
    return seg is not None and fragment.bookie in seg[2]


def replace_in_segment(md: LedgerMetadata, first_entry_id: int, old: str, new: str) -> LedgerMetadata:
    """A copy of ``md`` where ``new`` takes ``old``'s slot in the segment starting at ``first_entry_id``."""
    ensembles = []
    found = False
    for first, bookies in md.ensembles:
        if first == first_entry_id and old in bookies:
            if new in bookies:
                raise InvalidMetadataError(f"ledger {md.ledger_id}: {new} is already in the ensemble at {first}")
            bookies = [new if b == old else b for b in bookies]
            found = True
        ensembles.append((first, bookies))
    if not found:
        raise InvalidMetadataError(f"ledger {md.ledger_id}: no ensemble at {first_entry_id} holds {old}")
    return dataclasses.replace(md, ensembles=ensembles)


def repairable_now(md: LedgerMetadata) -> bool:
    """Only a CLOSED ledger is repaired: an OPEN one has a live writer (whose own ensemble change handles a
    failed bookie, and whose next metadata write must not be beaten by ours), and an IN_RECOVERY one has a
    recoverer re-writing its tail. Their records wait until the ledger is closed."""
    return md.state is LedgerState.CLOSED


def bookies_of(md: LedgerMetadata) -> set[str]:
    return {b for _first, bookies in md.ensembles for b in bookies}


def batches(ids: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(ids), size):
        yield ids[i:i + size]


# ------------------------------------------------------------------------------------------------ throttle


class Throttle:
    """A token bucket for entries/s and bytes/s (0 = unlimited). Pure: ``delay_for`` says how long to wait
    before work of that size may go, and books it; the caller sleeps. The clock is swappable for tests.

    The bucket holds at most one second's budget; work beyond what it holds is booked as debt and waits in
    proportion to it, so a single entry larger than a second's budget is delayed, never refused.
    """

    def __init__(self, *, entries_per_s: float, bytes_per_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if entries_per_s < 0 or bytes_per_s < 0:
            raise ValueError("throttle rates must not be negative")
        self.rates = (float(entries_per_s), float(bytes_per_s))
        self._clock = clock
        now = clock()
        self._available = [self.rates[0], self.rates[1]]  # start with one second's worth
        self._at = now

    def delay_for(self, entries: int, nbytes: int) -> float:
        now = self._clock()
        elapsed = max(0.0, now - self._at)
        self._at = now
        wait = 0.0
        for i, amount in enumerate((entries, nbytes)):
            rate = self.rates[i]
            if rate <= 0:
                continue
            self._available[i] = min(rate, self._available[i] + elapsed * rate)
            self._available[i] -= amount
            if self._available[i] < 0:
                wait = max(wait, -self._available[i] / rate)
        return wait
