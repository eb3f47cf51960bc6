"""A consumer: one subscription on one topic (or partition), with flow control, acks and reconnection.

Theory of operation
-------------------

After SUBSCRIBE succeeds the consumer grants ``receiver_queue_size`` permits (FLOW). The broker sends at
most that many messages (a batched entry counts as its number of messages); each MESSAGE is split into
:class:`Message` objects and queued, so the queue never holds much more than ``receiver_queue_size``
messages. Every message handed to the application (or skipped: markers, compacted-out or already
acknowledged batch items) is a permit to give back; they are returned in one FLOW once half the queue
size has accumulated, as pulsar-client does.

Acknowledgements go through an :class:`AckTracker` (batches, grouping); they are sent every
``ack_group_time_s`` (0: at once), when many are waiting, and on close.

On reconnection (connection lost, CLOSE_CONSUMER from the broker) the messages still queued are dropped
(the broker redelivers what was not acknowledged) and the consumer subscribes again. A non-durable
consumer (a reader) resumes after the last message it handed out: it re-subscribes from that id and
drops anything at or before it, so it neither loses nor repeats messages.

A MESSAGE whose checksum fails, or whose payload does not decompress or split, is acknowledged with the
matching ``validation_error`` (so the broker can discard it) and never reaches the application.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping

from magnetar.protocol import Frame, MessageId, ProtocolError, pb, wrap
from magnetar.protocol.errors import BatchFormatError

from .acks import AckTracker
from .backoff import Backoff
from .commands import ack_command, flow_frame, key_values
from .connection import Connection
from .errors import AlreadyClosedError, ClientError, ConnectionClosedError, TopicTerminatedError
from .handler import HandlerState, TopicHandler
from .lookup import LookupService
from .message import Message, unpack_entry

__all__ = ["Consumer", "ConsumerState", "InitialPosition", "SubscriptionType"]

log = logging.getLogger(__name__)

ConsumerState = HandlerState
_Validation = pb.CommandAck


class SubscriptionType(enum.IntEnum):
    EXCLUSIVE = pb.CommandSubscribe.Exclusive
    SHARED = pb.CommandSubscribe.Shared
    FAILOVER = pb.CommandSubscribe.Failover
    KEY_SHARED = pb.CommandSubscribe.Key_Shared


class InitialPosition(enum.IntEnum):
    LATEST = pb.CommandSubscribe.Latest
    EARLIEST = pb.CommandSubscribe.Earliest


class Consumer(TopicHandler):
    """A consumer; create it with ``Client.subscribe`` or ``Client.create_reader`` (see the module docstring).

    Args:
        lookup: finds the topic's broker and lends connections.
        topic: the topic or partition.
        subscription: the subscription name.
        consumer_id: unique among the client's consumers.
        subscription_type: Exclusive, Shared, Failover or Key_Shared.
        initial_position: where a new subscription starts (Latest or Earliest).
        consumer_name: shown in the broker's stats (default: chosen by the broker).
        receiver_queue_size: permits granted, hence the most messages queued here.
        durable: False for a reader (a non-durable subscription that vanishes with the consumer).
        start_message_id: where a non-durable subscription starts (exclusive: the first message delivered
            is the one after it; ``MessageId.EARLIEST`` / ``MessageId.LATEST`` work too).
        replicate_subscription_state: ask the broker to replicate this subscription's position.
        read_compacted: read the compacted view of the topic.
        properties: consumer metadata sent in SUBSCRIBE.
        ack_group_time_s: acknowledgements wait at most this long to be sent together (0: at once).
        whole_entries: hand each entry over as one :class:`Message` whose payload is the entry's batch as
            stored (``num_messages`` says how many messages it holds; acknowledging it acknowledges them
            all), instead of splitting it. For tools that count or forward entries, as ``magnetar perf``.
        operation_timeout_s: how long :meth:`start` keeps retrying retriable errors.
        backoff: reconnection delays.
    """

    kind = "consumer"

    def __init__(
        self,
        lookup: LookupService,
        topic: str,
        subscription: str,
        consumer_id: int,
        *,
        subscription_type: SubscriptionType = SubscriptionType.EXCLUSIVE,
        initial_position: InitialPosition = InitialPosition.LATEST,
        consumer_name: str | None = None,
        receiver_queue_size: int = 1000,
        durable: bool = True,
        start_message_id: MessageId | None = None,
        replicate_subscription_state: bool = False,
        read_compacted: bool = False,
        priority_level: int | None = None,
        properties: Mapping[str, str] | None = None,
        ack_group_time_s: float = 0.1,
        whole_entries: bool = False,
        operation_timeout_s: float = 30.0,
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(lookup, topic, operation_timeout_s=operation_timeout_s, backoff=backoff)
        if receiver_queue_size < 1:
            raise ValueError(f"receiver_queue_size must be at least 1, not {receiver_queue_size}")
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.subscription_type = SubscriptionType(subscription_type)
        self.initial_position = InitialPosition(initial_position)
        self.consumer_name = consumer_name
        self.receiver_queue_size = receiver_queue_size
        self.durable = durable
        self.start_message_id = start_message_id
        self.replicate_subscription_state = replicate_subscription_state
        self.read_compacted = read_compacted
        self.priority_level = priority_level
        self.properties = dict(properties or {})
        self.ack_group_time_s = ack_group_time_s
        self.whole_entries = whole_entries
        self.is_active: bool | None = None
        self.reached_end_of_topic = False
        self.discarded_messages = 0
        self._queue: deque[Message] = deque()
        self._available = asyncio.Event()
        self._permits_to_return = 0
        self._last_delivered: MessageId | None = None
        self._acks = AckTracker()
        self._ack_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<Consumer {self.topic} {self.subscription} {self.state.value} queued={len(self._queue)}>"

    @property
    def _prefix(self) -> str:
        return f"[{self.topic}][{self.subscription}][{self.consumer_id}]"

    @property
    def queued(self) -> int:
        """Messages received and not yet handed to the application."""
        return len(self._queue)

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            try:
                yield await self.receive()
            except AlreadyClosedError:
                return

    # -- attaching -----------------------------------------------------------------------------------------

    def _unregister(self, conn: Connection) -> None:
        conn.unregister_consumer(self.consumer_id, self)

    def _abandon(self, conn: Connection) -> None:
        close = pb.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=conn.new_request_id())
        conn.send_command(wrap(close))

    def _subscribe_command(self) -> pb.CommandSubscribe:
        cmd = pb.CommandSubscribe(
            topic=self.topic,
            subscription=self.subscription,
            subType=int(self.subscription_type),
            consumer_id=self.consumer_id,
            durable=self.durable,
            initialPosition=int(self.initial_position),
            replicate_subscription_state=self.replicate_subscription_state,
            read_compacted=self.read_compacted,
        )
        if self.consumer_name:
            cmd.consumer_name = self.consumer_name
        if self.priority_level is not None:
            cmd.priority_level = self.priority_level
        if self.properties:
            cmd.metadata.extend(key_values(self.properties))
        if not self.durable:
            start = self._last_delivered or self.start_message_id
            if start is not None:
                start.to_proto(cmd.start_message_id)
        return cmd

    async def _attach(self, conn: Connection) -> None:
        conn.register_consumer(self.consumer_id, self)
        await conn.request(self._subscribe_command())

    def _attached(self, conn: Connection) -> None:
        log.debug("%s subscribed on %s", self._prefix, conn)
        self._permits_to_return = 0
        conn.write(flow_frame(self.consumer_id, self.receiver_queue_size))
        if self._acks.pending:
            self._flush_acks()

    def _detached(self, conn: Connection) -> None:
        # Not yet handed out: the broker redelivers them (durable) or we resume after the last one (reader).
        self._queue.clear()

    def _failed(self, exc: BaseException) -> None:
        self._available.set()

    # -- receiving -----------------------------------------------------------------------------------------

    def _handle_message(self, conn: Connection, frame: Frame) -> None:
        if conn is not self._conn:
            return
        cmd = frame.command.message
        if not frame.checksum_ok or frame.metadata is None or frame.payload is None:
            self._discard(conn, cmd, _Validation.ChecksumMismatch, 1, "checksum mismatch")
            return
        try:
            messages, skipped = unpack_entry(
                cmd.message_id,
                frame.metadata,
                frame.payload,
                redelivery_count=cmd.redelivery_count,
                ack_set=cmd.ack_set,
                partition=self.partition,
                topic=self.topic,
                whole=self.whole_entries,
            )
        except ProtocolError as exc:
            count = frame.metadata.num_messages_in_batch if frame.metadata.HasField("num_messages_in_batch") else 1
            error = _Validation.BatchDeSerializeError if isinstance(exc, BatchFormatError) else _Validation.DecompressionError
            self._discard(conn, cmd, error, count, str(exc))
            return
        if frame.broker_entry_metadata is not None and messages:
            bem = frame.broker_entry_metadata
            messages = [dataclasses.replace(m, broker_entry_metadata=bem) for m in messages]
        if frame.metadata.HasField("marker_type") and self.durable:
            self._acks.ack(MessageId.from_proto(cmd.message_id))
            self._schedule_ack_flush()
        last = self._last_delivered
        if last is not None and not self.durable and messages and messages[0].message_id <= last:
            kept = [m for m in messages if m.message_id > last]
            skipped += len(messages) - len(kept)
            messages = kept
        if skipped:
            self._return_permits(skipped)
        if messages:
            self._queue.extend(messages)
            self._available.set()

    def _discard(self, conn: Connection, cmd: pb.CommandMessage, error: int, count: int, why: str) -> None:
        mid = MessageId.from_proto(cmd.message_id)
        log.warning("%s discarding message %s: %s", self._prefix, mid, why)
        self.discarded_messages += count
        conn.send_command(ack_command(self.consumer_id, [mid.entry()], validation_error=error))
        self._return_permits(count)

    def _return_permits(self, count: int) -> None:
        self._permits_to_return += count
        if self._permits_to_return >= max(1, self.receiver_queue_size // 2) and self._conn is not None:
            permits, self._permits_to_return = self._permits_to_return, 0
            try:
                self._conn.write(flow_frame(self.consumer_id, permits))
            except ConnectionClosedError:
                pass  # a new subscription grants its own permits

    def _take(self) -> Message:
        msg = self._queue.popleft()
        self._last_delivered = msg.message_id
        self._return_permits(msg.num_messages)
        return msg

    async def _wait_available(self, deadline: float | None) -> bool:
        while not self._queue:
            if self.state not in (HandlerState.READY, HandlerState.RECONNECTING):
                self._check_open()
            if self.reached_end_of_topic:
                raise TopicTerminatedError(f"{self._prefix} reached the end of the terminated topic")
            self._available.clear()
            if deadline is None:
                await self._available.wait()
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._available.wait(), remaining)
            except (asyncio.TimeoutError, TimeoutError):
                return False
        return True

    async def receive(self, *, timeout_s: float | None = None) -> Message:
        """The next message.

        Raises:
            TimeoutError: nothing arrived within ``timeout_s``.
            AlreadyClosedError: the consumer is closed (or failed: the cause is chained).
            TopicTerminatedError: the topic was terminated and every message was received.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not await self._wait_available(deadline):
            raise TimeoutError(f"{self._prefix} no message within {timeout_s} s")
        return self._take()

    async def receive_batch(self, *, max_messages: int = 1000, timeout_s: float | None = None) -> list[Message]:
        """Every queued message up to ``max_messages``, waiting (up to ``timeout_s``) for at least one;
        an empty list on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not await self._wait_available(deadline):
            return []
        out = []
        while self._queue and len(out) < max_messages:
            out.append(self._take())
        return out

    # -- acknowledging -------------------------------------------------------------------------------------

    def ack(self, message: Message | MessageId) -> None:
        """Acknowledges one message (sent with the next group of acks)."""
        mid = message.message_id if isinstance(message, Message) else message
        if self._acks.ack(mid):
            self._schedule_ack_flush()

    def ack_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledges every message up to and including this one (not for Shared/Key_Shared)."""
        if self.subscription_type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
            raise ClientError(f"{self._prefix} cumulative acknowledgement is not allowed on a {self.subscription_type.name} subscription")
        mid = message.message_id if isinstance(message, Message) else message
        if self._acks.ack_cumulative(mid):
            self._schedule_ack_flush()

    def _schedule_ack_flush(self) -> None:
        if self.ack_group_time_s <= 0 or self._acks.should_flush:
            self._flush_acks()
        elif self._ack_timer is None:
            self._ack_timer = asyncio.get_running_loop().call_later(self.ack_group_time_s, self._flush_acks)

    def _flush_acks(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        conn = self._conn
        if conn is None or not self._acks.pending:
            return  # kept until the consumer is attached again
        individual, cumulative = self._acks.take()
        try:
            if cumulative is not None:
                conn.send_command(ack_command(self.consumer_id, [cumulative], cumulative=True))
            if individual:
                conn.send_command(ack_command(self.consumer_id, individual))
        except ConnectionClosedError:
            self._acks.restore(individual, cumulative)

    async def flush_acks(self) -> None:
        """Sends every acknowledgement waiting to be grouped now."""
        self._flush_acks()

    def negative_ack(self, message: Message | MessageId) -> None:
        """Asks the broker to redeliver this message's entry (Shared and Key_Shared subscriptions)."""
        mid = message.message_id if isinstance(message, Message) else message
        if self._conn is not None:
            redeliver = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)
            mid.entry().to_proto(redeliver.message_ids.add())
            self._conn.send_command(wrap(redeliver))

    def redeliver_unacknowledged(self) -> None:
        """Asks the broker to redeliver every message it sent this consumer that is not acknowledged; the
        messages still queued here are dropped (they come again)."""
        conn = self._conn
        if conn is None:
            return  # a reconnection redelivers anyway
        dropped = sum(m.num_messages for m in self._queue)
        self._queue.clear()
        conn.send_command(wrap(pb.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)))
        if dropped:
            self._return_permits(dropped)

    # -- requests ------------------------------------------------------------------------------------------

    def _require_conn(self) -> Connection:
        self._check_open()
        if self._conn is None:
            raise ConnectionClosedError(f"{self._prefix} is reconnecting; try again")
        return self._conn

    async def seek(self, target: MessageId | int) -> None:
        """Moves the subscription to a message id, or to the first message published at or after a time
        (``int``: milliseconds since the epoch). Queued messages are dropped.

        Raises:
            ServerError: the broker refused.
            ConnectionClosedError: not attached right now (the consumer is reconnecting).
        """
        conn = self._require_conn()
        request = pb.CommandSeek(consumer_id=self.consumer_id)
        if isinstance(target, MessageId):
            target.to_proto(request.message_id)
        else:
            request.message_publish_time = int(target)
        await conn.request(request)
        self._queue.clear()
        self._acks.reset_position()
        self._last_delivered = None
        if isinstance(target, MessageId):
            self.start_message_id = target

    async def get_last_message_id(self) -> MessageId:
        """The id of the last message stored in the topic."""
        conn = self._require_conn()
        answer = await conn.request(pb.CommandGetLastMessageId(consumer_id=self.consumer_id))
        mid = MessageId.from_proto(answer.getLastMessageIdResponse.last_message_id)
        if self.partition >= 0 and mid.partition != self.partition:
            mid = MessageId(mid.ledger_id, mid.entry_id, self.partition, mid.batch_index, mid.batch_size)
        return mid

    async def unsubscribe(self) -> None:
        """Deletes the subscription on the broker, then closes the consumer.

        Raises:
            ServerError: the broker refused (e.g. other consumers are connected to a shared subscription).
        """
        conn = self._require_conn()
        await conn.request(pb.CommandUnsubscribe(consumer_id=self.consumer_id))
        self._unregister(conn)
        self._conn = None
        await self.close()

    # -- broker events -------------------------------------------------------------------------------------

    def _handle_end_of_topic(self, conn: Connection) -> None:
        if conn is self._conn:
            log.info("%s reached the end of the topic", self._prefix)
            self.reached_end_of_topic = True
            self._available.set()

    def _handle_active_consumer_change(self, conn: Connection, is_active: bool) -> None:
        if conn is self._conn:
            self.is_active = is_active

    # -- closing -------------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Sends pending acks, closes the consumer on the broker, wakes receivers (idempotent)."""
        if self.state is HandlerState.CLOSED:
            return
        if self.state is HandlerState.CLOSING:
            await self._closed.wait()
            return
        self.state = HandlerState.CLOSING
        try:
            self._flush_acks()
            await self._stop_reconnecting()
            conn, self._conn = self._conn, None
            if conn is not None:
                self._unregister(conn)
                if conn.is_ready:
                    try:
                        await conn.request(pb.CommandCloseConsumer(consumer_id=self.consumer_id), timeout_s=5.0)
                    except ClientError as exc:
                        log.debug("%s CLOSE_CONSUMER: %s", self._prefix, exc)
        finally:
            if self._ack_timer is not None:
                self._ack_timer.cancel()
                self._ack_timer = None
            self._queue.clear()
            self.state = HandlerState.CLOSED
            self._available.set()
            self._closed_now()
