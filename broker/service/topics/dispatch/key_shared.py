"""Key_Shared subscriptions: every key goes to one consumer, in order.

An entry's sticky key (ordering key, else partition key, else the first batch member's key) hashes to a
consumer through the selector (``key_shared.py``: AUTO_SPLIT consistent hashing, or the consumer's own
STICKY ranges). Order per key is kept by three rules:

1. an entry whose consumer cannot take it now (no permits, blocked, no consumer for the hash) goes to the
   replay set, and so does every later entry of the same hash while earlier ones wait there;
2. replayed entries are served oldest first, and once one of a hash is held back in a round, the later
   ones of that hash are held back too;
3. a consumer joining a subscription that has entries in flight is *recently joined*: it gets no entry at
   or after the read position it joined at until every entry before that position is acknowledged (the
   old owner of its keys may still hold some), as Pulsar's ``recentlyJoinedConsumers``.

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
                self.selector.add(consumer, f"{consumer.name}#{consumer.consumer_id}@{id(consumer.connection)}")
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

    def dispatch(self, batch: list[tuple[Entry, EntryInfo]], *, replayed: bool) -> int:
        if not batch:
            return 0
        self._lift_join_restrictions()
        budget: dict[int, int] = {}
        assigned: dict[int, list[tuple[Entry, EntryInfo]]] = {}
        owners: dict[int, "Consumer"] = {}
        held_hashes: set[int] = set()
        waiting = self.replay.hash_counts
        sent = 0
        for entry, info in batch:
            pos = entry.position
            h = self._hashes.get(pos)
            if h is None:
                h = self._hashes[pos] = key_hash(sticky_key(entry.data, info.metadata))
            consumer = self.selector.select(h)
            ok = (consumer is not None and consumer.available() and h not in held_hashes
                  and (replayed or h not in waiting)
                  and (consumer.join_position is None or pos < consumer.join_position))
            if ok:
                room = budget.setdefault(id(consumer), self.room_of(consumer))
                ok = room > 0
            if not ok:
                held_hashes.add(h)
                self.add_to_replay(pos, h)
                continue
            budget[id(consumer)] -= info.num_messages
            owners[id(consumer)] = consumer
            assigned.setdefault(id(consumer), []).append((entry, info))
        for key, items in assigned.items():
            consumer = owners[key]
            consumer.send_entries(self.message_items(consumer, items))
            sent += len(items)
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
