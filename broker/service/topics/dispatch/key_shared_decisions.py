"""Key_Shared dispatch decisions, pure: which entries go to which consumer now, which wait, which replay.

Theory of operation
-------------------

The Key_Shared dispatcher (``dispatcher_key_shared.py``) owns the I/O: it reads new entries from the cursor
or replays positions from its *replay set* (entries held back earlier, redelivered, or left by a consumer),
and sends. Two decisions are made here, without I/O, clock or asyncio:

* :func:`select_replay` picks the replay positions worth reading now;
* :func:`plan_entries` splits entries read into what each consumer takes now and what goes (back) to the
  replay set.

Both see consumers through a :class:`ConsumerView`: who owns a key hash (``owner``: the selector of
``key_shared.py``), how many messages a consumer may take now (``room``: 0 when it has no permits, is blocked
on unacknowledged messages or closing), and from which position entries are held back for it (``limit``).

Rules, which keep each key in order and hand every entry to the consumer owning its hash:

1. an entry is held when its hash has no owner, the owner has no room left in this pass, or the entry is at
   or past the owner's limit (*recently joined* consumers, as Pulsar's ``recentlyJoinedConsumers``: a
   consumer that joined while entries were in flight gets nothing read after it joined until every entry
   before that point is acknowledged; while several are restricted, each is held to the earliest of their
   join positions, as Pulsar does for replays, so a key moving twice cannot overtake its first owner);
2. once an entry of a hash is held, every later entry of that hash in the same pass is held too;
3. an entry is held while the replay set has an older entry of its hash (a new entry: any entry of its hash).

Liveness. The replay set is sorted by position, and :func:`select_replay` skips exactly the positions rules 1
and 2 would hold (counting one message per entry against a consumer's room), wherever they sit in the set.
So a replay round that selects nothing, or reads what it selected and can send none of it, proves that no
replayed entry can go now; the dispatcher then marks the set *stuck* (reads only new entries) until an event
that may change that: a FLOW or an acknowledgement giving a consumer room, the mark-delete position lifting a
restriction, a consumer joining or leaving (ownership), a redelivery, a delayed entry coming due. Each of
those wakes the dispatcher, which clears the mark. A round proves nothing, and does not mark the set, when
such an event came while it was reading, when positions it took left the set otherwise (acknowledged
meanwhile), or when it learned keys it did not know when selecting (delayed entries). (Before this module a
replay round read the *first* positions of the set, whatever they were: when those belonged to consumers
without permits, to recently joined ones or to hashes no STICKY range covers, entries behind them whose
consumers had permits waited for an unrelated event, or forever.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterable, Optional, Protocol, Sequence, TypeVar


class _Ordered(Protocol):
    def __lt__(self, other, /) -> bool: ...


P = TypeVar("P", bound=_Ordered)  # a position
C = TypeVar("C", bound=Hashable)  # a consumer


@dataclass(frozen=True)
class ConsumerView(Generic[C, P]):
    """What the decisions need to know of consumers.

    Attributes:
        owner: the consumer owning a key hash (None: no consumer covers it).
        room: messages a consumer may take now (0 or less: none).
        limit: entries at or past this position are held for the consumer (None: unrestricted).
    """

    owner: Callable[[int], Optional[C]]
    room: Callable[[C], int]
    limit: Callable[[C], Optional[P]]


@dataclass(frozen=True)
class Candidate(Generic[P]):
    """An entry read, to place: its position, sticky-key hash and the messages it counts for."""

    position: P
    key_hash: int
    messages: int


@dataclass
class Plan(Generic[C]):
    """Indexes into the candidates: per consumer the ones it takes now (in order), and the ones held."""

    sends: dict[C, list[int]] = field(default_factory=dict)
    held: list[int] = field(default_factory=list)


def restriction_limit(join_positions: Iterable[Optional[P]]) -> Optional[P]:
    """The limit every recently joined consumer is held to: the earliest join position among them (None when
    no consumer is restricted)."""
    joined = [p for p in join_positions if p is not None]
    return min(joined) if joined else None


def plan_entries(candidates: Sequence[Candidate[P]], view: ConsumerView[C, P], *, replayed: bool,
                 waiting: Callable[[int], Optional[P]]) -> Plan[C]:
    """Places ``candidates`` (in position order) by rules 1-3 of the module docstring.

    Args:
        replayed: the candidates come from the replay set (they were removed from it to be read).
        waiting: the earliest position of a hash still in the replay set (None: none of it is there).
    """
    plan: Plan[C] = Plan()
    budget: dict[C, int] = {}
    blocked: set[int] = set()
    for i, cand in enumerate(candidates):
        h = cand.key_hash
        consumer = None if h in blocked else view.owner(h)
        ok = consumer is not None
        if ok:
            earliest = waiting(h)
            ok = earliest is None or (replayed and not earliest < cand.position)
        if ok:
            limit = view.limit(consumer)
            ok = limit is None or cand.position < limit
        if ok:
            room = budget[consumer] if consumer in budget else view.room(consumer)
            ok = room > 0
        if not ok:
            blocked.add(h)
            plan.held.append(i)
            continue
        budget[consumer] = room - cand.messages
        plan.sends.setdefault(consumer, []).append(i)
    return plan


def select_replay(replay: Iterable[tuple[P, Optional[int]]], max_entries: int,
                  view: ConsumerView[C, P]) -> list[P]:
    """The replay positions to read now: up to ``max_entries``, in order, skipping those rules 1 and 2 would
    hold. ``replay`` yields ``(position, key hash)`` in position order; a position whose hash is not known
    yet (None: e.g. a delayed entry come due) is always selected, its entry is placed once read."""
    chosen: list[P] = []
    if max_entries <= 0:
        return chosen
    budget: dict[C, int] = {}
    blocked: set[int] = set()
    for position, h in replay:
        if h is not None:
            if h in blocked:
                continue
            consumer = view.owner(h)
            ok = consumer is not None
            if ok:
                limit = view.limit(consumer)
                ok = limit is None or position < limit
            if ok:
                room = budget[consumer] if consumer in budget else view.room(consumer)
                ok = room > 0
            if not ok:
                blocked.add(h)
                continue
            budget[consumer] = room - 1
        chosen.append(position)
        if len(chosen) >= max_entries:
            break
    return chosen
