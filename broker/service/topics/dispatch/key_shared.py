"""Key_Shared subscriptions: every key goes to one consumer, in order.

An entry's sticky key (ordering key, else partition key, else the first batch member's key) hashes to a
consumer through the selector (``key_shared.py``: AUTO_SPLIT consistent hashing, or the consumer's own
STICKY ranges). Order per key is kept by three rules (the decisions themselves are pure:
``key_shared_decisions.py``, whose docstring also says why the dispatcher cannot stall):

1. an entry whose consumer cannot take it now (no permits, blocked, no consumer for the hash) goes to the
   replay set, and so does every later entry of the same hash while earlier ones wait there;
2. replayed entries are served oldest first, and once one of a hash is held back in a round, the later
   ones of that hash are held back too; a replay round reads only the positions it could send, wherever
   they sit in the set;
3. a consumer joining a subscription that has entries in flight is *recently joined*: it gets no entry at
   or after the read position it joined at until every entry before that position is acknowledged (the
   old owner of its keys may still hold some), as Pulsar's ``recentlyJoinedConsumers``. While several
   are, each waits for the earliest of their join positions; once a single consumer is left it has none
   of this (nobody else holds entries), as in Pulsar.

With ``allowOutOfOrderDelivery`` rule 3 is skipped.

Delayed delivery works as for Shared (``dispatcher_multi.py``) and, as in Pulsar, overrides key order: a
held entry does not hold back later entries of its key; once due it is served like a redelivery. Held
entries keep the mark-delete position back, so a consumer joining meanwhile stays *recently joined* (rule
3) until they are delivered and acknowledged, as in Pulsar before 4.0 (apache/pulsar#8703).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from broker.managed_ledger.api import Entry, Position

from .shared import SharedDispatcher
from ..entries import EntryInfo, sticky_key
from ...errors import ConsumerAssignError
from .key_ranges import AutoSplitSelector, SelectorError, StickySelector, key_hash
from ..model import KeySharedMode, KeySharedSpec
from .key_shared_decisions import Candidate, ConsumerView, plan_entries, restriction_limit, select_replay

if TYPE_CHECKING:
    from ..consumer import Consumer


class KeySharedDispatcher(SharedDispatcher):
    def __init__(self, subscription, meta: Optional[KeySharedSpec]) -> None:
        super().__init__(subscription)
        self.mode = meta.mode if meta is not None else KeySharedMode.AUTO_SPLIT
        self.allow_out_of_order = bool(meta and meta.allow_out_of_order)
        self.selector = StickySelector() if self.mode == KeySharedMode.STICKY else AutoSplitSelector()
        self._hashes: dict[Position, int] = {}  # hashes of dispatched, unacknowledged positions

    # --------------------------------------------------------------------------------- consumers

    def check_consumer(self, consumer: "Consumer") -> None:
        meta = consumer.key_shared_meta
        mode = meta.mode if meta is not None else KeySharedMode.AUTO_SPLIT
        if self.consumers and mode != self.mode:
            raise ConsumerAssignError(f"subscription uses Key_Shared mode {KeySharedMode(self.mode).name}, "
                                      f"not {KeySharedMode(mode).name}")

    def add_consumer(self, consumer: "Consumer") -> None:
        self.check_consumer(consumer)
        if not self.consumers:
            meta = consumer.key_shared_meta
            self.mode = meta.mode if meta is not None else KeySharedMode.AUTO_SPLIT
            self.allow_out_of_order = bool(meta and meta.allow_out_of_order)
            self.selector = StickySelector() if self.mode == KeySharedMode.STICKY else AutoSplitSelector()
        try:
            if isinstance(self.selector, StickySelector):
                ranges = list(consumer.key_shared_meta.hash_ranges)
                self.selector.add(consumer, ranges)
            else:
                # Name, id and peer address: unique per attached consumer, and the same ring whenever the same
                # consumers attach (it used to hash the connection's memory address).
                self.selector.add(consumer, f"{consumer.name}#{consumer.consumer_id}@"
                                            f"{consumer.connection.remote_address}")
        except SelectorError as exc:
            raise ConsumerAssignError(str(exc)) from None
        cursor = self.cursor
        if self.consumers and not self.allow_out_of_order:
            first_unacked = self.subscription.topic.ml.next_position(cursor.mark_delete_position)
            if cursor.read_position > first_unacked:
                consumer.join_position = cursor.read_position
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: "Consumer") -> None:
        self.selector.remove(consumer)
        super().remove_consumer(consumer)
        if len(self.consumers) <= 1:
            for c in self.consumers:
                c.join_position = None

    def hash_ranges(self, consumer: "Consumer") -> list[tuple[int, int]]:
        return self.selector.ranges(consumer)

    def add_to_replay(self, position: Position, key_hash_: Optional[int] = None) -> None:
        if key_hash_ is None:
            key_hash_ = self._hashes.get(position)
        if not self.subscription.is_acked(position) and key_hash_ is not None:
            self._hashes[position] = key_hash_
            self.replay.add(position, key_hash_)
        elif not self.subscription.is_acked(position):
            self.replay.add(position, None)

    # --------------------------------------------------------------------------------- dispatch

    def _lift_join_restrictions(self) -> None:
        restricted = [c for c in self.consumers if c.join_position is not None]
        if not restricted:
            return
        first_unacked = self.subscription.topic.ml.next_position(self.cursor.mark_delete_position)
        for c in restricted:
            if first_unacked >= c.join_position:
                c.join_position = None

    def _view(self) -> ConsumerView["Consumer", Position]:
        """Consumers as the pure decisions see them (after lifting the restrictions acks allow)."""
        self._lift_join_restrictions()
        earliest_join = restriction_limit(c.join_position for c in self.consumers)
        return ConsumerView(owner=self.selector.select,
                            room=lambda c: self.room_of(c) if c.available() else 0,
                            limit=lambda c: earliest_join if c.join_position is not None else None)

    def replay_positions(self, n: int) -> list[Position]:
        return select_replay(self.replay.items(), n, self._view())

    def dispatch(self, batch: list[tuple[Entry, EntryInfo]], *, replayed: bool) -> int:
        if not batch:
            return 0
        batch_acks = self.subscription.batch_acks
        candidates = []
        learned = False
        for entry, info in batch:
            pos = entry.position
            h = self._hashes.get(pos)
            if h is None:
                h = self._hashes[pos] = key_hash(sticky_key(entry.data, info.metadata))
                learned = learned or replayed
            remaining = batch_acks.get(pos)  # counted as message_items will send it
            messages = info.num_messages if remaining is None else bin(remaining).count("1")
            candidates.append(Candidate(pos, h, messages))
        plan = plan_entries(candidates, self._view(), replayed=replayed, waiting=self.replay.earliest)
        for i in plan.held:
            self.add_to_replay(candidates[i].position, candidates[i].key_hash)
        if learned and plan.held:
            # Replayed positions whose key was not known (delayed entries come due) were chosen blind and
            # took the round's places; with their keys known the set is worth another look before it may
            # count as stuck.
            self.wake()
        sent = 0
        for consumer, indexes in plan.sends.items():
            consumer.send_entries(self.message_items(consumer, [batch[i] for i in indexes]))
            sent += len(indexes)
        return sent

    def on_acked(self, positions: list[Position]) -> None:
        super().on_acked(positions)
        for pos in positions:
            self._hashes.pop(pos, None)
        if len(self._hashes) > 4 * self.config.max_unacked_messages_per_consumer + 1000:
            md = self.cursor.mark_delete_position
            self._hashes = {p: h for p, h in self._hashes.items() if p > md}

    def after_reset(self) -> None:
        self._hashes.clear()
        for c in self.consumers:
            c.join_position = None
        super().after_reset()
