"""A subscription: a cursor, its consumers, their dispatcher, and acknowledgements.

Acknowledgements (``acknowledgements.py``): applied at once where visible, then by one worker per
subscription to the cursor, in arrival order.

Seek (``reset``) and unsubscribe (``delete``) run under ``_op_lock``, like ``add_consumer``: a consumer
reconnecting after a seek waits for the reset to finish instead of reading from the old position.

A reader's (non-durable) subscription goes away with its last consumer, except when a seek disconnects
them: pulsar-client resubscribes after a seek by publish time *without* a start message id, so only the
broker knows where the reader is to go on. As Pulsar keeps the reset cursor for the reconnecting reader
(its start id is then ignored), the subscription stays at its new position for
``reader_seek_reconnect_grace_s``, then is removed if unclaimed. A failed seek removes it at once (the
client then resubscribes from what it last received, as before the seek).

Replicated subscriptions (``replicate_subscription_state``) keep the snapshots their dispatcher reads in a
cache made by the topic's replicated-subscriptions controller; whenever the mark-delete position moves
(ack worker, skip/expire, seek) the newest snapshot it passed goes to the controller, which writes the
UPDATE marker that moves the subscription in the other clusters. Without a controller nothing happens.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from broker.managed_ledger.api import ManagedCursor, Position
from magnetar.protocol.metadata import MessageMetadata
from magnetar.protocol.errors import ProtocolError

from .acknowledgements import SubscriptionAcks
from .consumer import Consumer
from .model import KeySharedMode, SubType
from .dispatch.base import Dispatcher
from .dispatch.key_shared import KeySharedDispatcher
from .dispatch.shared import SharedDispatcher
from .dispatch.single import SingleActiveConsumerDispatcher
from .stats import SubscriptionStats, with_key_hash_ranges
from ..errors import ConsumerBusyError, ServiceNotReadyError, SubscriptionNotFoundError
from ..stats import RateMeter
from ..tasks import shielded

if TYPE_CHECKING:
    from .topic import Topic

log = logging.getLogger("broker.service.topics.subscription")

REPLICATED_PROPERTY = "pulsar.replicated.subscription"



class SnapshotCacheHook(Protocol):
    """A replicated subscription's cache of snapshots (``replicator.SnapshotCache``)."""

    def add_marker(self, metadata: MessageMetadata, payload: bytes) -> None: ...

    def advance(self, mark_delete: Position) -> Optional[dict[str, Position]]: ...


class ReplicatedSubscriptionsHook(Protocol):
    """What a subscription needs of its topic's ``replicator.ReplicatedSubscriptionsController`` (the broker
    does not import the replicator room; the topic hands the controller over as
    ``Topic.replicated_subscriptions``)."""

    def new_snapshot_cache(self) -> SnapshotCacheHook: ...

    def subscription_advanced(self, subscription_name: str, clusters: dict[str, Position]) -> None: ...


class Subscription(SubscriptionAcks):
    """See the module docstring."""

    def __init__(self, topic: "Topic", name: str, cursor: ManagedCursor, *, durable: bool,
                 replicated: bool = False) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.replicated = replicated
        self.config = topic.config
        self.sub_type: Optional[int] = None
        self.dispatcher: Optional[Dispatcher] = None
        self.redelivery_counts: dict[Position, int] = {}
        self.batch_acks: dict[Position, int] = cursor.batch_ack_sets()
        self.closed = False
        self._queued_acks: set[Position] = set()
        self._queued_md: Optional[Position] = None
        self._ack_ops: collections.deque = collections.deque()
        self._ack_event = asyncio.Event()
        self._ack_idle = asyncio.Event()
        self._ack_idle.set()
        self._ack_task: Optional[asyncio.Task] = None
        self._op_lock = asyncio.Lock()
        self._removed_msg_out = 0
        self._removed_bytes_out = 0
        self.msg_expired = RateMeter()
        self.last_expire_ms = 0
        self.last_md_advanced_ms = 0
        self._snapshots: Optional[SnapshotCacheHook] = None
        self._resetting = False  # a seek is disconnecting the consumers: a reader subscription stays
        self._reconnect_timer: Optional[asyncio.TimerHandle] = None  # a reset reader awaits its consumers
        self.log_prefix = f"[{topic.name}][{name}]"

    def log_debug(self, text: str) -> None:
        log.debug("%s %s", self.log_prefix, text)

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher else []

    def type_name(self) -> str:
        return SubType(self.sub_type).name if self.sub_type is not None else "None"

    # --------------------------------------------------------------------------------- consumers

    async def add_consumer(self, consumer: Consumer) -> None:
        async with self._op_lock:
            if self.closed:
                raise ServiceNotReadyError(f"subscription {self.name!r} on {self.topic.name} is closing")
            current = self.consumers
            if current and consumer.sub_type != self.sub_type:
                raise ConsumerBusyError(f"subscription {self.name!r} is of type {self.type_name()}, "
                                        f"not {SubType(consumer.sub_type).name}")
            if consumer.sub_type == SubType.Exclusive and current:
                raise ConsumerBusyError(f"exclusive consumer is already connected to subscription {self.name!r}")
            if not current and (self.dispatcher is None or self.sub_type != consumer.sub_type):
                await self._replace_dispatcher(consumer)
            self.dispatcher.add_consumer(consumer)
            self._cancel_reconnect_timer()
            self._ensure_ack_worker()

    async def _replace_dispatcher(self, consumer: Consumer) -> None:
        old = self.dispatcher
        if old is not None:
            await old.close()
            self.rewind_cursor()
        self.sub_type = consumer.sub_type
        if consumer.sub_type in (SubType.Exclusive, SubType.Failover):
            partition = self.topic.topic_name.partition_index
            self.dispatcher = SingleActiveConsumerDispatcher(self, consumer.sub_type, partition_index=partition)
        elif consumer.sub_type == SubType.Shared:
            self.dispatcher = SharedDispatcher(self)
        else:
            self.dispatcher = KeySharedDispatcher(self, consumer.key_shared_meta)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detaches ``consumer`` (closed by its client, its connection, or the broker)."""
        consumer.closed = True
        if self.dispatcher is not None and consumer in self.dispatcher.consumers:
            self._removed_msg_out += consumer.msg_out.total
            self._removed_bytes_out += consumer.bytes_out.total
            self.dispatcher.remove_consumer(consumer)
        if not self._resetting:
            self._drop_if_unused_reader()

    def _drop_if_unused_reader(self) -> None:
        """A non-durable subscription without consumers is removed (its cursor goes with it)."""
        self._cancel_reconnect_timer()
        if not self.durable and not self.consumers and not self.closed:
            self.topic.forget_subscription(self)
            self.closed = True
            self.topic.spawn(self._close_quietly(), f"close reader subscription {self.log_prefix}")

    def _cancel_reconnect_timer(self) -> None:
        if self._reconnect_timer is not None:
            self._reconnect_timer.cancel()
            self._reconnect_timer = None

    async def _close_quietly(self) -> None:
        try:
            await self._shutdown()
        except Exception:
            log.exception("%s closing a non-durable subscription failed", self.log_prefix)

    def disconnect_consumers(self) -> None:
        for c in self.consumers:
            self.remove_consumer(c)
            c.notify_closed()

    def cursor_properties(self) -> Optional[dict[str, int]]:
        return {REPLICATED_PROPERTY: 1} if self.replicated else None

    async def set_replicated(self, replicated: bool) -> None:
        """Records ``replicate_subscription_state`` in the cursor's properties."""
        if replicated == self.replicated or not self.durable:
            return
        self.replicated = replicated
        if not replicated:
            self._snapshots = None
        await self.drain_acks()
        await shielded(self.cursor.mark_delete(self.cursor.mark_delete_position,
                                               properties={REPLICATED_PROPERTY: 1 if replicated else 0}))

    def _wake_dispatcher(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.wake()

    # --------------------------------------------------------------------------------- replicated snapshots

    def _controller(self) -> Optional[ReplicatedSubscriptionsHook]:
        return getattr(self.topic, "replicated_subscriptions", None) if self.replicated else None

    def on_snapshot_marker(self, position: Position, metadata: MessageMetadata, payload: bytes) -> None:
        """A dispatcher met a SNAPSHOT marker at ``position``: keep its snapshot until mark-delete passes it."""
        controller = self._controller()
        if controller is None:
            return
        if self._snapshots is None:
            self._snapshots = controller.new_snapshot_cache()
        try:
            self._snapshots.add_marker(metadata, payload)
        except ProtocolError as exc:
            log.warning("%s ignoring the snapshot marker at %s: %s", self.log_prefix, position, exc)

    def _snapshots_passed(self) -> None:
        """Mark-delete moved: hands the newest snapshot it passed (if any) to the controller."""
        cache = self._snapshots
        controller = self._controller()
        if cache is None or controller is None:
            return
        clusters = cache.advance(self.cursor.mark_delete_position)
        if clusters is not None:
            controller.subscription_advanced(self.name, clusters)

    # --------------------------------------------------------------------------------- redelivery

    def redeliver(self, consumer: Consumer, positions: Optional[Sequence[Position]]) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: the given entries of the consumer's (None: all it holds)."""
        if self.dispatcher is None:
            return
        self.dispatcher.redeliver(consumer, positions)

    def rewind_cursor(self) -> None:
        self.cursor.rewind()

    # --------------------------------------------------------------------------------- admin operations

    async def reset(self, position: Position) -> None:
        """Seek: disconnects every consumer (they reconnect), then resets the cursor to ``position``. A reader
        subscription is kept for its consumers to come back to (module docstring)."""
        async with self._op_lock:
            self._resetting = True
            try:
                self.disconnect_consumers()
                await self.drain_acks()
                await shielded(self.cursor.reset(position))
            except BaseException:
                self._resetting = False
                self._drop_if_unused_reader()
                raise
            self._resetting = False
            self._cancel_reconnect_timer()
            if not self.durable and not self.consumers and not self.closed:
                self._reconnect_timer = asyncio.get_running_loop().call_later(
                    self.config.reader_seek_reconnect_grace_s, self._drop_if_unused_reader)
            self._queued_acks.clear()
            self._queued_md = None
            self.redelivery_counts.clear()
            self.batch_acks.clear()
            if self.dispatcher is not None:
                self.dispatcher.after_reset()
            self._snapshots_passed()

    async def mark_delete_up_to(self, position: Position) -> None:
        """Acknowledges everything up to ``position`` (skip, expire, clear-backlog, backlog eviction, a
        replicated subscription's update).

        The dispatcher is woken, never rewound: what it sent past ``position`` and is still unacknowledged
        stays with its consumers, as in Pulsar (only a seek or a redelivery request sends an entry again).
        Rewinding would read those entries once more and deliver them twice. The cursor moves its read
        position past ``position`` by itself, and whatever a read in flight or the replay set still holds up
        to ``position`` is dropped by the acknowledgement filter."""
        await self.drain_acks()
        if position <= self.cursor.mark_delete_position:
            return
        await shielded(self.cursor.mark_delete(position, properties=self.cursor_properties()))
        for p in [p for p in self.redelivery_counts if p <= position]:
            del self.redelivery_counts[p]
        for p in [p for p in self.batch_acks if p <= position]:
            del self.batch_acks[p]
        for c in self.consumers:
            c.acked_up_to(position)
        if self.dispatcher is not None:
            self.dispatcher.wake()
        self._snapshots_passed()

    async def delete(self, *, requester: Optional[Consumer] = None, force: bool = False) -> None:
        """Unsubscribe: removes the subscription and its cursor.

        Raises:
            ConsumerBusyError: other consumers are connected and ``force`` is False.
        """
        async with self._op_lock:
            others = [c for c in self.consumers if c is not requester]
            if others and not force:
                raise ConsumerBusyError(f"subscription {self.name!r} has {len(others)} other connected "
                                        f"consumer(s); close them first")
            self.closed = True
            if requester is not None:
                self.remove_consumer(requester)
                requester.connection.forget_consumer(requester.consumer_id, requester)
            self.disconnect_consumers()
            await self._shutdown(flush=False)
            self.topic.forget_subscription(self)
            if self.durable:
                await shielded(self.topic.ml.delete_cursor(self.name))

    async def close(self) -> None:
        """Unload: disconnects consumers, applies queued acknowledgements, flushes the cursor."""
        self.closed = True
        self.disconnect_consumers()
        await self._shutdown(flush=self.durable)

    async def _shutdown(self, *, flush: bool = False) -> None:
        self._cancel_reconnect_timer()
        if self.dispatcher is not None:
            await self.dispatcher.close()
        try:
            await asyncio.wait_for(self.drain_acks(), 10.0)
        except TimeoutError:
            log.warning("%s queued acknowledgements not applied within 10s", self.log_prefix)
        if self._ack_task is not None:
            self._ack_task.cancel()
            await asyncio.gather(self._ack_task, return_exceptions=True)
            self._ack_task = None
        if flush:
            await shielded(self.cursor.flush())

    # --------------------------------------------------------------------------------- stats

    def tick(self) -> None:
        self.msg_expired.tick()
        for c in self.consumers:
            for meter in (c.msg_out, c.bytes_out, c.msg_redeliver, c.msg_ack):
                meter.tick()

    def backlog_size_bytes(self, backlog_entries: int) -> int:
        ml = self.topic.ml
        n = ml.number_of_entries
        return int(ml.total_size * backlog_entries / n) if n else 0

    def stats(self) -> SubscriptionStats:
        consumers = self.consumers
        cstats = [c.stats() for c in consumers]
        backlog = self.cursor.backlog_entries()
        dispatcher = self.dispatcher
        delayed = dispatcher.delayed_messages() if dispatcher else 0
        key_shared = dispatcher if isinstance(dispatcher, KeySharedDispatcher) else None
        cstats = with_key_hash_ranges(consumers, cstats, key_shared)
        return SubscriptionStats.of_consumers(
            self.type_name(), cstats, removed_bytes_out=self._removed_bytes_out,
            removed_msg_out=self._removed_msg_out,
            msg_rate_redeliver=sum(c.msg_rate_redeliver for c in cstats),
            msg_backlog=backlog,
            backlog_size_bytes=self.backlog_size_bytes(backlog),
            msg_backlog_no_delayed=max(0, backlog - delayed),
            msg_delayed=delayed,
            unacked_messages=sum(c.unacked_messages for c in cstats),
            active_consumer_name=dispatcher.active_consumer_name() if dispatcher else None,
            msg_rate_expired=self.msg_expired.rate(),
            total_msg_expired=self.msg_expired.total,
            last_expire_timestamp_ms=self.last_expire_ms,
            last_mark_delete_advanced_timestamp_ms=self.last_md_advanced_ms,
            is_durable=self.durable,
            is_replicated=self.replicated,
            non_contiguous_deleted_messages_ranges=len(self.cursor.individually_deleted_ranges()),
            dispatch_throttling=self.topic.rate_limits.throttle_stats(self.name),
            key_shared_mode=KeySharedMode(key_shared.mode).name if key_shared is not None else None,
            allow_out_of_order_delivery=key_shared.allow_out_of_order if key_shared is not None else None,
        )

    def internal_stats(self) -> dict:
        return {
            "markDeletePosition": str(self.cursor.mark_delete_position),
            "readPosition": str(self.cursor.read_position),
            "messagesConsumedCounter": self._removed_msg_out + sum(c.msg_out.total for c in self.consumers),
            "individuallyDeletedMessages": "[" + ", ".join(f"({a}..{b}]" for a, b in
                                                           self.cursor.individually_deleted_ranges()) + "]",
            "numberOfEntriesSinceFirstNotAckedMessage": self.cursor.backlog_entries(),
            "totalNonContiguousDeletedMessagesRange": len(self.cursor.individually_deleted_ranges()),
            "state": "Closed" if self.closed else "Open",
            "active": bool(self.consumers),
            "properties": dict(getattr(self.cursor, "properties", None) or {}),
        }


def ensure_found(sub: Optional[Subscription], name: str, topic: str) -> Subscription:
    if sub is None:
        raise SubscriptionNotFoundError(f"subscription {name!r} does not exist on {topic}")
    return sub
