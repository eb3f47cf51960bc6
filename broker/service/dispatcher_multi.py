"""Shared subscriptions: entries spread over every consumer with permits, round robin; redelivery.

Consumers are served by priority level (a lower level first; a higher level only gets what the lower ones
have no permits for) and round robin within a level, at most ``dispatcher_max_round_robin_batch``
messages per consumer per turn.

Redelivery: positions handed back (a consumer's REDELIVER_UNACKNOWLEDGED_MESSAGES, negative acks, ack
timeouts, a consumer leaving with unacknowledged entries) go into the *replay set*, which a round serves
before new entries, oldest first. A REDELIVER bumps the redelivery count of each position (pulsar-client's
dead-letter policy counts on it); a consumer leaving does not. When no replayed entry could be sent in a
round (Key_Shared: their consumers have no permits), the replay set is *stuck* and rounds read new entries
until the next event; the replay set is bounded (``max_redelivery_replay_entries``), past that only
events make progress.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Optional

from broker.managed_ledger.api import Entry, Position

from .dispatcher import Dispatcher, Next
from .entries import EntryInfo

if TYPE_CHECKING:
    from .consumer import Consumer


class ReplaySet:
    """Positions to redeliver, ordered, each with an optional key hash (Key_Shared ordering)."""

    def __init__(self) -> None:
        self._sorted: list[Position] = []
        self._hash: dict[Position, Optional[int]] = {}
        self.hash_counts: dict[int, int] = {}

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
            self.hash_counts[key_hash] = self.hash_counts.get(key_hash, 0) + 1

    def discard(self, position: Position) -> None:
        if position not in self._hash:
            return
        key_hash = self._hash.pop(position)
        i = bisect.bisect_left(self._sorted, position)
        del self._sorted[i]
        if key_hash is not None:
            left = self.hash_counts[key_hash] - 1
            if left:
                self.hash_counts[key_hash] = left
            else:
                del self.hash_counts[key_hash]

    def first(self, n: int) -> list[Position]:
        return self._sorted[:n]

    def clear(self) -> None:
        self._sorted.clear()
        self._hash.clear()
        self.hash_counts.clear()

    def positions(self) -> list[Position]:
        return list(self._sorted)


class SharedDispatcher(Dispatcher):
    def __init__(self, subscription) -> None:
        super().__init__(subscription)
        self.replay = ReplaySet()
        self.replay_stuck = False
        self._rr = 0

    def wake(self) -> None:
        self.replay_stuck = False
        super().wake()

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

    def after_reset(self) -> None:
        self.replay.clear()
        for c in self.consumers:
            c.take_pending()
        super().after_reset()

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
        entries = await self._read_new(n)
        if entries is None:
            return Next.PROGRESS
        if not entries:
            return Next.WAIT_ENTRIES
        self.dispatch(self.filter_entries(entries), replayed=False)
        return Next.PROGRESS

    async def _replay_round(self, n: int) -> Next:
        positions = self.replay.first(n)
        ml = self.subscription.topic.ml
        generation = self.generation
        entries: list[Entry] = []
        for pos in positions:
            self.replay.discard(pos)
            if self.subscription.is_acked(pos):
                continue
            try:
                entries.append(await ml.read_entry(pos))
            except Exception as exc:  # trimmed or deleted meanwhile: nothing to redeliver
                self.subscription.log_debug(f"replay of {pos} skipped: {exc}")
        if generation != self.generation:
            return Next.PROGRESS
        sent = self.dispatch(self.filter_entries(entries), replayed=True)
        if not sent:
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
