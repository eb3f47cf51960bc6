"""Ensemble placement and quorum arithmetic: pure functions, no I/O.

Theory of operation. A ledger with ensemble size E, write quorum Qw and ack quorum Qa sends entry e to the
Qw bookies ``ensemble[(e + i) % E]``, i in [0, Qw) (its *write set*), and treats it as acknowledged once Qa of
them have made it durable. Two facts follow that recovery relies on:

* an entry that was acknowledged lives on at least Qa bookies of its write set, so if
  ``Qw - Qa + 1`` bookies of the write set say they do not have it, it was never acknowledged;
* after fencing, a recoverer that has heard from at least ``Qw - Qa + 1`` bookies of *every* write set knows
  that no writer can still gather Qa acknowledgements for any new entry (every write set has fewer than Qa
  unfenced bookies left).
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence


def write_set(ensemble: Sequence[str], write_quorum: int, entry_id: int) -> list[str]:
    """The Qw bookies that store ``entry_id`` under ``ensemble``."""
    size = len(ensemble)
    return [ensemble[(entry_id + i) % size] for i in range(write_quorum)]


def write_set_indexes(ensemble_size: int, write_quorum: int, entry_id: int) -> list[int]:
    return [(entry_id + i) % ensemble_size for i in range(write_quorum)]


def choose_ensemble(
    writable: Iterable[str], size: int, *, exclude: Iterable[str] = (), rng: random.Random | None = None
) -> list[str] | None:
    """``size`` distinct bookies picked at random from ``writable`` minus ``exclude``; None if too few."""
    excluded = set(exclude)
    candidates = sorted(b for b in set(writable) if b not in excluded)
    if len(candidates) < size:
        return None
    return (rng or random).sample(candidates, size)


def choose_replacement(
    writable: Iterable[str],
    ensemble: Sequence[str],
    *,
    exclude: Iterable[str] = (),
    rng: random.Random | None = None,
) -> str | None:
    """A writable bookie outside ``ensemble`` and ``exclude`` to replace a failed member; None if none."""
    picked = choose_ensemble(writable, 1, exclude=set(ensemble) | set(exclude), rng=rng)
    return picked[0] if picked else None


def replace_bookies(
    ensemble: Sequence[str],
    failed: Iterable[str],
    writable: Iterable[str],
    *,
    exclude: Iterable[str] = (),
    rng: random.Random | None = None,
) -> list[str] | None:
    """A copy of ``ensemble`` with every failed member swapped for a fresh writable bookie (same slot).

    Keeping the slot keeps every other member's write sets unchanged, so only the entries that touched a
    failed bookie need re-sending. Returns None when there are not enough replacements.
    """
    failed_set = set(failed)
    new = list(ensemble)
    taken = set(ensemble) | set(exclude) | failed_set
    for i, bookie in enumerate(ensemble):
        if bookie in failed_set:
            picked = choose_ensemble(writable, 1, exclude=taken, rng=rng)
            if not picked:
                return None
            new[i] = picked[0]
            taken.add(picked[0])
    return new


def fencing_covers_every_write_set(
    ensemble: Sequence[str], write_quorum: int, ack_quorum: int, responded: Iterable[str]
) -> bool:
    """True when every write set of ``ensemble`` has at least ``Qw - Qa + 1`` bookies in ``responded``.

    This is the condition under which a fenced ledger can no longer gain an acknowledged entry.
    """
    need = write_quorum - ack_quorum + 1
    answered = set(responded)
    size = len(ensemble)
    for first in range(size):
        members = [ensemble[(first + i) % size] for i in range(write_quorum)]
        if sum(1 for b in members if b in answered) < need:
            return False
    return True


def entry_absent_for_sure(write_quorum: int, ack_quorum: int, no_such_entry_count: int) -> bool:
    """True when enough of an entry's write set deny having it that it cannot have been acknowledged."""
    return no_such_entry_count >= write_quorum - ack_quorum + 1
