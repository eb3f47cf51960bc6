"""A subscription of a non-persistent topic: its consumers and the dispatch that picks one per message.

It exists only while it has consumers (the first SUBSCRIBE creates it, the last consumer leaving removes it),
whatever the client asked for (durable or not, as Pulsar). Nothing is stored, so what other subscriptions
do with a cursor is accepted and ignored here, as Pulsar's ``NonPersistentSubscription`` does:
acknowledgements, redelivery requests and seeks succeed and change nothing, and the backlog is always 0.

Messages are written to the chosen consumer at once, spliced behind a MESSAGE header whose id is
``(ledger 0, entry 0, partition)``, the id Pulsar's non-persistent topics use for every message (the C++ and
Java clients keep no acknowledgement state for non-persistent topics, so equal ids are never taken for
duplicates). No pending-acknowledgement state is kept: those clients never acknowledge here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional, Sequence

from broker.managed_ledger.api import Entry, Position

from ..consumer import Consumer
from ..model import AckedId, KeySharedMode, SubType
from ...errors import ConsumerBusyError, ServiceNotReadyError
from .dispatch import Dispatch, KeySharedDispatch, Offer, new_dispatch
from ...stats import RateMeter
from ..stats import NonPersistentSubscriptionStats, with_key_hash_ranges

if TYPE_CHECKING:
    from .topic import NonPersistentTopic



_NOTHING_STORED = Position(0, 0)  # the id Pulsar sends for a non-persistent message


class _NoCursor:
    """Nothing is stored: what handlers read from a cursor (GET_LAST_MESSAGE_ID, CONSUMER_STATS)."""

    mark_delete_position = Position(-1, -1)

    @staticmethod
    def backlog_entries() -> int:
        return 0


NO_CURSOR = _NoCursor()


def consumer_ready(consumer: Consumer) -> bool:
    """May take a message now: permits left, not closed, and its connection drains (not write-blocked)."""
    return consumer.permits > 0 and not consumer.closed and not consumer.connection.write_blocked()


def deliver(consumer: Consumer, offer: Offer) -> None:
    """Writes ``offer`` to ``consumer`` as one MESSAGE and counts it (permits, rates)."""
    data = offer.entry
    consumer.connection.send_messages(consumer, [(Entry(_NOTHING_STORED, data), 0, ())])
    messages = offer.messages
    consumer.permits -= messages
    consumer.msg_out.record(messages)
    consumer.bytes_out.record(len(data))
    consumer.last_consumed_ms = int(time.time() * 1000)
    consumer.avg_messages_per_entry = 0.9 * consumer.avg_messages_per_entry + 0.1 * messages


class NonPersistentSubscription:
    """See the module docstring."""

    durable = False
    replicated = False

    def __init__(self, topic: "NonPersistentTopic", name: str) -> None:
        self.topic = topic
        self.name = name
        self.cursor = NO_CURSOR
        self.dispatcher: Optional[Dispatch[Consumer]] = None
        self.closed = False
        self.msg_drop = RateMeter()
        self.msg_expired = RateMeter()  # never recorded: nothing expires (CONSUMER_STATS reads it)
        self._removed_msg_out = 0
        self._removed_bytes_out = 0
        self.log_prefix = f"[{topic.name}][{name}]"

    def __repr__(self) -> str:
        return f"NonPersistentSubscription({self.log_prefix})"

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher is not None else []

    @property
    def sub_type(self) -> Optional[int]:
        return self.dispatcher.sub_type if self.dispatcher is not None else None

    def type_name(self) -> str:
        return SubType(self.sub_type).name if self.sub_type is not None else "None"

    # --------------------------------------------------------------------------------- consumers

    def add_consumer(self, consumer: Consumer) -> None:
        """Raises ConsumerBusyError (Exclusive taken, or another type), ConsumerAssignError (Key_Shared)."""
        if self.closed:
            raise ServiceNotReadyError(f"subscription {self.name!r} on {self.topic.name} is closing")
        current = self.consumers
        if current and consumer.sub_type != self.sub_type:
            raise ConsumerBusyError(f"subscription {self.name!r} is of type {self.type_name()}, "
                                    f"not {SubType(consumer.sub_type).name}")
        if current and consumer.sub_type == SubType.Exclusive:
            raise ConsumerBusyError(f"exclusive consumer is already connected to subscription {self.name!r}")
        if not current:
            partition = self.topic.topic_name.partition_index if self.topic.topic_name.is_partition else 0
            self.dispatcher = new_dispatch(consumer.sub_type, consumer_ready, partition_index=partition,
                                           key_shared_meta=consumer.key_shared_meta)
        self._notify(self.dispatcher.add(consumer))

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detaches ``consumer``; the subscription goes away with its last consumer."""
        consumer.closed = True
        dispatcher = self.dispatcher
        if dispatcher is not None and consumer in dispatcher.consumers:
            self._removed_msg_out += consumer.msg_out.total
            self._removed_bytes_out += consumer.bytes_out.total
            self._notify(dispatcher.remove(consumer))
        if not self.consumers and not self.closed:
            self.closed = True
            self.topic.forget_subscription(self)

    @staticmethod
    def _notify(notifications) -> None:
        for consumer, active in notifications:
            consumer.notify_active(active)

    def disconnect_consumers(self) -> None:
        """Tells every consumer to reconnect (unload, delete), then forgets them."""
        for c in self.consumers:
            self.remove_consumer(c)
            c.notify_closed()

    # --------------------------------------------------------------------------------- dispatch

    def dispatch(self, offer: Offer) -> bool:
        """Hands ``offer`` to the consumer dispatch picks, or drops it. Returns whether it was delivered."""
        dispatcher = self.dispatcher
        consumer = dispatcher.select(offer) if dispatcher is not None else None
        if consumer is None:
            self.msg_drop.record(offer.messages)
            return False
        deliver(consumer, offer)
        return True

    # --------------------------------------------------------------------------------- accepted and ignored

    def acknowledge(self, consumer: Consumer, ids: Sequence[AckedId], *, cumulative: bool = False) -> None:
        """Nothing to acknowledge (pulsar-client does not even send acks for non-persistent topics)."""
        consumer.msg_ack.record(len(ids))
        return None

    def redeliver(self, consumer: Consumer, ids) -> None:
        """Nothing is kept, so nothing can be redelivered."""

    async def reset(self, position) -> None:
        """Seek: succeeds and changes nothing, as Pulsar's ``resetCursor`` on a non-persistent subscription."""

    async def mark_delete_up_to(self, position) -> None:
        """Skip / clear-backlog: there is no backlog."""

    async def delete(self, *, requester: Optional[Consumer] = None, force: bool = False) -> None:
        """Unsubscribe: refused (ConsumerBusyError) while other consumers are connected, unless ``force``."""
        others = [c for c in self.consumers if c is not requester]
        if others and not force:
            raise ConsumerBusyError(f"subscription {self.name!r} has {len(others)} other connected "
                                    f"consumer(s); close them first")
        if requester is not None:
            requester.connection.forget_consumer(requester.consumer_id, requester)
            self.remove_consumer(requester)
        self.disconnect_consumers()
        if not self.closed:
            self.closed = True
            self.topic.forget_subscription(self)

    # --------------------------------------------------------------------------------- stats

    def tick(self) -> None:
        self.msg_drop.tick()
        for c in self.consumers:
            for meter in (c.msg_out, c.bytes_out, c.msg_redeliver, c.msg_ack):
                meter.tick()

    def stats(self) -> NonPersistentSubscriptionStats:
        """Pulsar's NonPersistentSubscriptionStats (plus the zero backlog fields dashboards read)."""
        consumers = self.consumers
        cstats = [c.stats() for c in consumers]
        dispatcher = self.dispatcher
        key_shared = dispatcher if isinstance(dispatcher, KeySharedDispatch) else None
        cstats = with_key_hash_ranges(consumers, cstats, key_shared)
        return NonPersistentSubscriptionStats.of_consumers(
            self.type_name(), cstats, removed_bytes_out=self._removed_bytes_out,
            removed_msg_out=self._removed_msg_out,
            msg_drop_rate=self.msg_drop.rate(),
            active_consumer_name=dispatcher.active_consumer_name() if dispatcher is not None else None,
            key_shared_mode=KeySharedMode(key_shared.mode).name if key_shared is not None else None,
        )
