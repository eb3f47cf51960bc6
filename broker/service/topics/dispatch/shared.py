"""Shared subscriptions: entries spread over every consumer with permits, round robin; redelivery.

Consumers are served by priority level (a lower level first; a higher level only gets what the lower ones
have no permits for) and round robin within a level, at most ``dispatcher_max_round_robin_batch``
messages per consumer per turn.

Redelivery: positions handed back (a consumer's REDELIVER_UNACKNOWLEDGED_MESSAGES, negative acks, ack
timeouts, a consumer leaving with unacknowledged entries) go into the *replay set*, which a round serves
before new entries, oldest first. A REDELIVER bumps the redelivery count of each position (pulsar-client's
dead-letter policy counts on it); a consumer leaving does not. When no replayed entry could be sent in a
round (Key_Shared: their consumers have no permits; it reads only positions it could send,
``key_shared_decisions.py``), the replay set is *stuck* and rounds read new entries until the next event (an
event during the round itself, or delayed entries coming due, make the set worth another look at once); the
replay set is bounded (``max_redelivery_replay_entries``), past that only events make progress. A replay
read the bookies fail (``retriable``) puts the positions back and the round fails (the loop backs off).

Delayed delivery (``delayed.py``, on unless the topic's policy is off: ``delayed_policy.py``): an entry read with its
``deliver_at_time`` in the future is held by the tracker instead of dispatched, and the read goes on. Each
round first moves the held entries whose time has come into the replay set (so they go out before new
entries, like redeliveries); one timer per dispatcher (``loop.call_at``) is set for the earliest deliver
time still held, re-armed when that changes, and cancelled on close; it only wakes the read loop. Held
entries acknowledged meanwhile (by id, or passed by the mark-delete position: skip, expire) are forgotten;
a seek forgets them all (the rewound cursor reads them again). A full tracker stops reads of new entries.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from broker.managed_ledger.api import Entry, Position

from ...policies import delayed_delivery as delayed_policy
from ..delayed_tracker import DelayedTracker, wall_clock_ms
from .base import Dispatcher, Next
from ..entries import EntryInfo

if TYPE_CHECKING:
    from ..consumer import Consumer


class ReplaySet:
    """Positions to redeliver, ordered, each with an optional key hash (Key_Shared ordering: it also answers
    the earliest position of each hash in the set)."""

    def __init__(self) -> None:
        self._sorted: list[Position] = []
        self._hash: dict[Position, Optional[int]] = {}
        self._by_hash: dict[int, list[Position]] = {}

    def __len__(self) -> int:
        return len(self._sorted)

    def __contains__(self, position: Position) -> bool:
        return position in self._hash

    def add(self, position: Position, key_hash: Optional[int] = None) -> None:
        if position in self._hash:
            return
        bisect.insort(self._sorted, position)
        self._hash[position] = key_hash
        if key_hash is not None:
            bisect.insort(self._by_hash.setdefault(key_hash, []), position)

    def discard(self, position: Position) -> None:
        if position not in self._hash:
            return
        key_hash = self._hash.pop(position)
        i = bisect.bisect_left(self._sorted, position)
        del self._sorted[i]
        if key_hash is not None:
            same = self._by_hash[key_hash]
            del same[bisect.bisect_left(same, position)]
            if not same:
                del self._by_hash[key_hash]

    def first(self, n: int) -> list[Position]:
        return self._sorted[:n]

    def earliest(self, key_hash: int) -> Optional[Position]:
        """The earliest position of ``key_hash`` in the set (None: none)."""
        same = self._by_hash.get(key_hash)
        return same[0] if same else None

    def clear(self) -> None:
        self._sorted.clear()
        self._hash.clear()
        self._by_hash.clear()

    def positions(self) -> list[Position]:
        return list(self._sorted)

    def items(self) -> Iterator[tuple[Position, Optional[int]]]:
        """``(position, key hash)`` in position order."""
        return ((p, self._hash[p]) for p in self._sorted)


class SharedDispatcher(Dispatcher):
    def __init__(self, subscription) -> None:
        super().__init__(subscription)
        self.replay = ReplaySet()
        self.replay_stuck = False
        self._rr = 0
        self.delayed = DelayedTracker(max_entries=self.config.delayed_delivery_max_held_entries)
        self.clock_ms: Callable[[], int] = wall_clock_ms  # swappable (a simulated clock)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_due_ms: Optional[int] = None
        self._timer_fired_ms: Optional[int] = None  # when the timer last fired (the tick counts from it)

    def wake(self) -> None:
        self.replay_stuck = False
        super().wake()

    async def close(self) -> None:
        self._closed = True
        self._cancel_timer()
        await super().close()
        self._cancel_timer()
        self.delayed.clear()

    def delayed_messages(self) -> int:
        return len(self.delayed)

    @property
    def delayed_timer_due_ms(self) -> Optional[int]:
        """The deliver time the armed timer is for (None: no timer armed)."""
        return self._timer_due_ms if self._timer is not None else None

    # --------------------------------------------------------------------------------- consumers

    def remove_consumer(self, consumer: "Consumer") -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for pos in consumer.take_pending():
            self.add_to_replay(pos)
        self.wake()

    def redeliver(self, consumer: "Consumer", positions: Optional[list[Position]]) -> None:
        taken = consumer.take_pending(positions)
        counts = self.subscription.redelivery_counts
        for pos in taken:
            counts[pos] = counts.get(pos, 0) + 1
            self.add_to_replay(pos)
        consumer.msg_redeliver.record(len(taken))
        self.wake()

    def add_to_replay(self, position: Position, key_hash: Optional[int] = None) -> None:
        if not self.subscription.is_acked(position):
            self.replay.add(position, key_hash)

    def on_acked(self, positions: list[Position]) -> None:
        if len(self.delayed):
            for pos in positions:
                self.delayed.discard(pos)

    def after_reset(self) -> None:
        self.replay.clear()
        self.delayed.clear()
        self._cancel_timer()
        for c in self.consumers:
            c.take_pending()
        super().after_reset()

    # --------------------------------------------------------------------------------- delayed delivery

    def filter_entries(self, entries: list[Entry]) -> list[tuple[Entry, EntryInfo]]:
        """The base filter, then entries whose deliver time is still ahead go to the tracker."""
        out = super().filter_entries(entries)
        if not self._delayed_settings().active:
            return out
        now_ms = 0
        kept = []
        held = False
        for item in out:
            at = item[1].deliver_at_ms
            if at > 0:
                now_ms = now_ms or self.clock_ms()
                if self.delayed.hold(item[0].position, at, now_ms):
                    held = True
                    continue
            kept.append(item)
        if held:
            self._arm_timer(now_ms)
        return kept

    def _release_due(self) -> None:
        """Held entries whose time has come (or that were acknowledged meanwhile) leave the tracker; the
        due ones join the replay set."""
        if not len(self.delayed):
            return
        self.delayed.discard_up_to(self.cursor.mark_delete_position)
        now_ms = self.clock_ms()
        # Switched off by a policy: everything held is due now (delayed_policy.py).
        release_at_ms = now_ms if self._delayed_settings().active else 1 << 62
        released = self.delayed.pop_due(release_at_ms)
        for pos in released:
            self.add_to_replay(pos)
        if released:
            self.replay_stuck = False  # new replay entries: the set is worth another look
        self._arm_timer(now_ms)

    def _arm_timer(self, now_ms: int) -> None:
        """One timer, for the earliest deliver time held (one already past: at once), re-armed only when that
        time changes; the timer only wakes the read loop, whose next round releases what is due."""
        due_ms = self.delayed.next_due_ms()
        if due_ms is None or self._closed:
            self._cancel_timer()
            return
        if self._timer is not None and self._timer_due_ms == due_ms:
            return
        self._cancel_timer()
        loop = asyncio.get_running_loop()
        fire_ms = delayed_policy.timer_target_ms(due_ms, self._timer_fired_ms, self._delayed_settings().tick_time_ms)
        # +1 ms: the loop may run a timer up to its clock resolution early, and due means now >= deliver time.
        delay_s = max(0, fire_ms - now_ms) / 1000 + 0.001
        self._timer = loop.call_at(loop.time() + delay_s, self._on_timer)
        self._timer_due_ms = due_ms

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_due_ms = None
        self._timer_fired_ms = self.clock_ms()
        self.wake()

    def _delayed_settings(self) -> delayed_policy.DelayedDeliverySettings:
        topic = self.subscription.topic
        return delayed_policy.resolve(self.config, getattr(topic, "policies", None),
                                      getattr(topic, "own_topic_policies", None))

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_due_ms = None

    # --------------------------------------------------------------------------------- the round

    def _total_permits(self) -> tuple[int, float]:
        total = 0
        avg = 1.0
        for c in self.consumers:
            if c.available():
                total += c.permits
                avg = max(avg, c.avg_messages_per_entry)
        return total, avg

    async def _round(self) -> Next:
        self._release_due()
        total, avg = self._total_permits()
        if total <= 0:
            return Next.WAIT_EVENT
        for c in self.consumers:
            if c.available() and c.connection.write_blocked():
                await c.connection.drain()
                return Next.PROGRESS
        n = self.estimate_entries(total, avg)
        if len(self.replay) and not self.replay_stuck:
            return await self._replay_round(n)
        if len(self.replay) >= self.config.max_redelivery_replay_entries:
            return Next.WAIT_EVENT
        room = self.delayed.room
        if room <= 0:
            return Next.WAIT_EVENT  # the timer wakes us when a held entry comes due
        entries = await self._read_new(min(n, room))
        if entries is None:
            return Next.PROGRESS
        if not entries:
            return Next.WAIT_ENTRIES
        self.dispatch(self.filter_entries(entries), replayed=False)
        return Next.PROGRESS

    def replay_positions(self, n: int) -> list[Position]:
        """The replay positions a round reads (Key_Shared: only those it could send now)."""
        return self.replay.first(n)

    async def _replay_round(self, n: int) -> Next:
        positions = self.replay_positions(n)
        ml = self.subscription.topic.ml
        generation = self.generation
        entries: list[Entry] = []
        for pos in positions:
            self.replay.discard(pos)
            if self.subscription.is_acked(pos):
                continue
            try:
                entries.append(await ml.read_entry(pos))
            except Exception as exc:
                if getattr(exc, "retriable", False):  # the bookies may serve it later: keep what was taken
                    for p in [e.position for e in entries] + [pos]:
                        self.add_to_replay(p)
                    raise
                self.subscription.log_debug(f"replay of {pos} skipped: {exc}")  # trimmed or deleted meanwhile
        if generation != self.generation:
            return Next.PROGRESS
        batch = self.filter_entries(entries)
        sent = self.dispatch(batch, replayed=True)
        if not sent and len(batch) == len(positions) and not self._wakeup.is_set():
            # Nothing in the set could go. Unless positions left the set otherwise (acknowledged, even while
            # being read; skipped; held for delayed delivery), which may have unblocked others of their key,
            # or an event during the reads (FLOW, redelivery, a consumer leaving) may have made something
            # sendable: then look again.
            self.replay_stuck = True
        return Next.PROGRESS

    def dispatch(self, batch: list[tuple[Entry, EntryInfo]], *, replayed: bool) -> int:
        """Round robin by priority; what finds no consumer goes back to the replay set. Returns entries sent."""
        if not batch:
            return 0
        step = self.config.dispatcher_max_round_robin_batch
        assigned: dict[int, list[tuple[Entry, EntryInfo]]] = {}
        budget: dict[int, int] = {}
        by_id = {}
        i = 0
        while i < len(batch):
            consumer = self._next_consumer(budget)
            if consumer is None:
                break
            key = id(consumer)
            by_id[key] = consumer
            room = budget.setdefault(key, self.room_of(consumer))
            share = min(step, room)
            taken = 0
            while i < len(batch) and taken < share:
                entry, info = batch[i]
                assigned.setdefault(key, []).append((entry, info))
                taken += info.num_messages
                i += 1
            budget[key] = room - taken
        for entry, _info in batch[i:]:
            self.add_to_replay(entry.position)
        sent = 0
        for key, items in assigned.items():
            consumer = by_id[key]
            consumer.send_entries(self.message_items(consumer, items))
            sent += len(items)
        return sent

    @staticmethod
    def room_of(consumer: "Consumer") -> int:
        """Messages ``consumer`` may take now: its permits, capped by its unacked-messages allowance."""
        room = consumer.permits
        if consumer.max_unacked_messages:
            room = min(room, consumer.max_unacked_messages - consumer.unacked_messages)
        return room

    def _next_consumer(self, budget: dict[int, int]) -> Optional["Consumer"]:
        """The next consumer in round-robin order among the best priority level that still has room."""
        candidates = [c for c in self.consumers if c.available() and budget.get(id(c), self.room_of(c)) > 0]
        if not candidates:
            return None
        best = min(c.priority_level for c in candidates)
        level = [c for c in candidates if c.priority_level == best]
        self._rr = (self._rr + 1) % (1 << 30)
        return level[self._rr % len(level)]
