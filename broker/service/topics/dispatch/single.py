"""Exclusive and Failover subscriptions: one active consumer receives everything, in order.

Exclusive admits one consumer (a second one gets ConsumerBusy, checked by the subscription). Failover
admits many and picks the active one: consumers sorted by priority level (lower first) then consumer
name; on a partition ``partition_index % n`` among those of the highest priority, else the first. Every
change of the active consumer is announced with ACTIVE_CONSUMER_CHANGE (true to the new one, false to the
others) and rewinds the cursor to the first unacknowledged entry, so what the old active consumer had not
acknowledged goes to the new one, in order.

Redelivery here is always "everything unacknowledged" (a rewind), as in Pulsar: per-message redelivery
would break ordering. Redelivery counts are therefore not tracked for these types (Pulsar's
``RedeliveryTrackerDisabled``), so dead-letter policies act on Shared / Key_Shared subscriptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from broker.managed_ledger.api import Position

from .active_consumer import choose_active
from ..compaction.view import CompactedReadState, read_compacted
from .base import Dispatcher, Next
from ..model import SubType

if TYPE_CHECKING:
    from ..consumer import Consumer


class SingleActiveConsumerDispatcher(Dispatcher):
    def __init__(self, subscription, sub_type: int, *, partition_index: int = -1) -> None:
        super().__init__(subscription)
        self.sub_type = sub_type
        self.partition_index = partition_index
        self.active: Optional["Consumer"] = None
        self._compacted = CompactedReadState()  # a read_compacted consumer's progress (compacted_view.py)

    def active_consumer_name(self) -> Optional[str]:
        return self.active.name if self.active else None

    # --------------------------------------------------------------------------------- consumers

    def add_consumer(self, consumer: "Consumer") -> None:
        self.consumers.append(consumer)
        self._pick_active(notify_all=False, new=consumer)
        self.start()
        self.wake()

    def remove_consumer(self, consumer: "Consumer") -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        consumer.take_pending()
        if self.consumers:
            self._pick_active(notify_all=False)
        else:
            self.active = None
            self.generation += 1
        self.wake()

    def _pick_active(self, *, notify_all: bool, new: Optional["Consumer"] = None) -> None:
        chosen = choose_active(self.consumers, self.partition_index)
        changed = chosen is not self.active
        old = self.active
        self.active = chosen
        if changed:
            if old is not None:
                old.take_pending()
            self.generation += 1
            self.rewind_cursor()
        if self.sub_type == SubType.Failover:
            if changed or notify_all:
                for c in self.consumers:
                    c.notify_active(c is chosen)
            elif new is not None:
                new.notify_active(False)

    # --------------------------------------------------------------------------------- redelivery

    def redeliver(self, consumer: "Consumer", positions: Optional[list[Position]]) -> None:
        if consumer is not self.active:
            return
        taken = consumer.take_pending()
        consumer.msg_redeliver.record(len(taken))
        self.generation += 1
        self.rewind_cursor()
        self.wake()

    # --------------------------------------------------------------------------------- the round

    async def _read_compacted(self, consumer: "Consumer", n: int):
        """Entries of the compacted view up to its horizon; [] past it (then the cursor reads on)."""
        topic = self.subscription.topic
        compaction = getattr(topic, "compaction", None)
        if compaction is None:
            return []
        return await read_compacted(compaction.view, topic.ml, self.cursor, self._compacted, self.generation, n)

    async def _round(self) -> Next:
        consumer = self.active
        if consumer is None or not consumer.available():
            return Next.WAIT_EVENT
        if consumer.connection.write_blocked():
            await consumer.connection.drain()
            return Next.PROGRESS
        n = self.estimate_entries(consumer.permits, consumer.avg_messages_per_entry)
        entries = None
        if consumer.read_compacted:
            generation = self.generation
            entries = await self._read_compacted(consumer, n)
            if generation != self.generation:  # rewound meanwhile: start again from the cursor
                return Next.PROGRESS
        if not entries:
            entries = await self._read_new(n)
        if entries is None:
            return Next.PROGRESS
        if not entries:
            return Next.WAIT_ENTRIES
        if consumer is not self.active or consumer.closed:
            self.rewind_cursor()
            return Next.PROGRESS
        batch = self.filter_entries(entries)
        if batch:
            consumer.send_entries(self.message_items(consumer, batch))
        return Next.PROGRESS
