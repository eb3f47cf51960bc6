"""What an add is answered: request validation and outcome summaries (pure; no I/O, no asyncio).

A request is checked as a whole before anything of it is stored: entry ids strictly ascending within each
ledger, ids in range, no entry over the size limit. Per-entry outcomes (stored, fenced, conflicting...)
are then summarized into one status: OK, the common refusal, or PARTIAL with one status per entry.
"""

from __future__ import annotations

from typing import Awaitable, NamedTuple, Optional

from magnetar.proto import bookie_pb2

from .errors import BookieError

S = bookie_pb2.Status
OK, INVALID, FENCED, READ_ONLY = S.OK, S.INVALID_ARGUMENT, S.FENCED, S.READ_ONLY
NO_SUCH_ENTRY, NO_SUCH_LEDGER, CONFLICT, TOO_LARGE = S.NO_SUCH_ENTRY, S.NO_SUCH_LEDGER, S.ENTRY_CONFLICT, S.TOO_LARGE
INTERNAL, UNAVAILABLE, PARTIAL = S.INTERNAL, S.UNAVAILABLE, S.PARTIAL

MAX_ID = (1 << 63) - 1  # entry ids are signed 64-bit in ledger state (-1: none)

# (status, message, per-entry statuses or None)
AddAnswer = tuple[int, str, Optional[list[int]]]
OK_ANSWER: AddAnswer = (OK, "", None)
SHUTTING_DOWN: AddAnswer = (UNAVAILABLE, "the bookie is shutting down", None)


class AddTicket:
    """The outcome of accepting an AddRequest: an immediate ``answer``, or a ``waiter`` to await.

    Awaiting ``waiter`` gives None, meaning the answer is ``then`` (OK unless set), now durable; or an
    :data:`AddAnswer` of its own. It raises OSError on a journal failure.
    """

    __slots__ = ("answer", "waiter", "then", "entries", "nbytes")

    def __init__(self, answer: Optional[AddAnswer] = None, waiter: Optional[Awaitable] = None, entries: int = 0,
                 nbytes: int = 0, then: Optional[AddAnswer] = None) -> None:
        self.answer = answer
        self.waiter = waiter
        self.then = then
        self.entries = entries
        self.nbytes = nbytes

    def settled(self) -> bool:
        """True when the outcome is known: awaiting ``waiter`` would not wait."""
        return self.answer is not None or self.waiter is None or self.waiter.done()


class Refused(BookieError):
    """The whole request is refused with ``answer`` (its status is ``status``); nothing of it may be stored."""

    def __init__(self, answer: AddAnswer) -> None:
        super().__init__(answer[1])
        self.answer = answer
        self.status = answer[0]


class ValidatedAdd(NamedTuple):
    """A request's entries as parallel lists (one pass over the protobuf, no per-entry objects but the
    ``(lac, payload)`` tuple the write cache keeps)."""

    ledger_ids: list[int]
    entry_ids: list[int]
    values: list[tuple[int, bytes]]  # (last_add_confirmed, payload)
    nbytes: int
    max_lac: int
    single_ledger: bool


def validate(request: bookie_pb2.AddRequest, *, entry_max_size_bytes: int) -> ValidatedAdd:
    """Checks a request as a whole; raises :class:`Refused` (INVALID_ARGUMENT or TOO_LARGE)."""
    lids: list[int] = []
    eids: list[int] = []
    vals: list[tuple[int, bytes]] = []
    nbytes = 0
    max_lac = -1
    prev_lid = -1
    prev_eid = -1
    lasts: dict[int, int] = {}  # the last id seen of every ledger but the current one
    for e in request.entries:
        lid = e.ledger_id
        eid = e.entry_id
        payload = e.payload
        size = len(payload)
        if size > entry_max_size_bytes:
            raise Refused((TOO_LARGE, f"entry {lid}:{eid} has {size} bytes, more than the bookie's "
                                      f"entry_max_size_bytes={entry_max_size_bytes}", None))
        if lid == prev_lid:
            if eid <= prev_eid:
                raise Refused(not_ascending(lid, prev_eid, eid))
        else:
            if prev_lid >= 0:
                lasts[prev_lid] = prev_eid
            last = lasts.get(lid)
            if last is not None and eid <= last:
                raise Refused(not_ascending(lid, last, eid))
            prev_lid = lid
        if eid > MAX_ID:
            raise Refused((INVALID, f"entry id {eid} of ledger {lid} is out of range", None))
        prev_eid = eid
        lac = e.last_add_confirmed
        if lac > max_lac:
            max_lac = lac
        nbytes += size
        lids.append(lid)
        eids.append(eid)
        vals.append((lac, payload))
    return ValidatedAdd(lids, eids, vals, nbytes, max_lac, not lasts)


def not_ascending(ledger_id: int, before: int, after: int) -> AddAnswer:
    return (
        INVALID,
        f"entry ids of ledger {ledger_id} must be strictly ascending within a request: {after} follows {before}; "
        f"nothing of the request was stored",
        None,
    )


_EXPLAIN = {
    FENCED: "ledger {lid} is fenced (a recovery took it over)",
    NO_SUCH_LEDGER: "ledger {lid} was deleted on this bookie",
    CONFLICT: "entry {lid}:{eid} is already stored with other bytes",
    NO_SUCH_ENTRY: "entry {lid}:{eid} vanished while being compared",
    INTERNAL: "entry {lid}:{eid} could not be read back for comparison",
}


def summarize(statuses: list[int], lids: list[int], eids: list[int]) -> AddAnswer:
    """One answer for per-entry outcomes: OK, the shared refusal, or PARTIAL naming the first refusal."""
    first_bad = next((i for i, s in enumerate(statuses) if s != OK), None)
    if first_bad is None:
        return OK_ANSWER
    status = statuses[first_bad]
    message = _EXPLAIN.get(status, "entry {lid}:{eid} refused").format(lid=lids[first_bad], eid=eids[first_bad])
    if all(s == status for s in statuses):
        return (status, message, None)
    return (PARTIAL, f"entries had different outcomes; first refusal: {message}", list(statuses))
