"""A producer: pipelined SENDs on one topic (or partition), receipts in order, re-sent after reconnection.

Theory of operation
-------------------

``await producer.send_entry(...)`` / ``await producer.send(...)`` waits for room in the bounded queue of
pending sends (:class:`PendingSends`), encodes the SEND frame once, queues it, writes it at once when the
producer is connected, and returns an ``asyncio.Future`` that the matching SEND_RECEIPT completes with the
:class:`MessageId` (aiokafka's ``send`` / ``send_and_wait`` split). Receipts arrive in order; a receipt
for a later send than the head makes the producer reconnect (see ``send_queue``).

The producer reconnects, with lookup and jittered exponential backoff, when its connection drops, when
the broker sends CLOSE_PRODUCER (topic unloaded or moved; an assigned broker URL, when given, is used
without a lookup), on a retriable SEND_ERROR (``PersistenceError``, ``ServiceNotReady``...: it first
closes itself on the broker so the re-created producer cannot overlap the old one) and on an out-of-order
receipt. Once PRODUCER succeeds again it writes every pending frame again, byte for byte: same producer
name, same sequence ids, so a topic with deduplication stores each exactly once. ``ProducerFenced``,
``TopicTerminated`` and other final errors fail everything pending and leave the producer ``FAILED``.

What ``send_entry`` sends is the caller's ``MessageMetadata`` as given (e.g. the replicator's copy of an
origin entry with ``replicated_from`` set and the origin's producer name and sequence id) and the payload
bytes as given (a batch stays the same batch); ``send_raw_entry`` does not even re-encode the metadata.

A send not acknowledged within ``send_timeout_s`` fails, with every send queued after it
(``SendTimeoutError``; it may still have been stored). ``send_timeout_s=0`` waits forever, which is what
the replicator wants.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Iterable, Mapping

from magnetar.protocol import MessageId, pb, wrap

from .backoff import Backoff
from .commands import encode_send, encode_send_raw, key_values, message_metadata
from .connection import Connection
from .errors import (
    AlreadyClosedError,
    ClientError,
    ConnectionClosedError,
    MessageTooLargeError,
    SendTimeoutError,
    error_from_server,
)
from .handler import HandlerState, TopicHandler
from .lookup import LookupService
from .send_queue import PendingSend, PendingSends, ReceiptOutcome

__all__ = ["AccessMode", "Producer", "ProducerState"]

log = logging.getLogger(__name__)

ProducerState = HandlerState


class AccessMode(enum.IntEnum):
    SHARED = pb.Shared
    EXCLUSIVE = pb.Exclusive
    WAIT_FOR_EXCLUSIVE = pb.WaitForExclusive
    EXCLUSIVE_WITH_FENCING = pb.ExclusiveWithFencing


_FINAL_SEND_ERRORS = frozenset((pb.ChecksumError, pb.TopicTerminatedError, pb.ProducerFenced, pb.NotAllowedError,
                                pb.AuthorizationError, pb.IncompatibleSchema, pb.ProducerBlockedQuotaExceededError,
                                pb.ProducerBlockedQuotaExceededException))


class Producer(TopicHandler):
    """A producer on one topic; create it with ``Client.create_producer`` (see the module docstring).

    Args:
        lookup: finds the topic's broker and lends connections.
        topic: the topic or partition (any form :class:`TopicName` accepts).
        producer_id: unique among the client's producers.
        producer_name: None lets the broker choose (and the same name is asked for on reconnection).
        access_mode: Shared, Exclusive, WaitForExclusive or ExclusiveWithFencing.
        max_pending_sends: most entries awaiting receipts; further sends wait for room.
        send_timeout_s: fail sends not acknowledged within this long (0: never).
        operation_timeout_s: how long :meth:`start` keeps retrying retriable errors.
        properties: producer metadata sent in PRODUCER.
        initial_sequence_id: first sequence id :meth:`send` uses (default: the broker's last one + 1).
        backoff: reconnection delays.
    """

    kind = "producer"

    def __init__(
        self,
        lookup: LookupService,
        topic: str,
        producer_id: int,
        *,
        producer_name: str | None = None,
        access_mode: AccessMode = AccessMode.SHARED,
        max_pending_sends: int = 1000,
        send_timeout_s: float = 30.0,
        operation_timeout_s: float = 30.0,
        properties: Mapping[str, str] | None = None,
        initial_sequence_id: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(lookup, topic, operation_timeout_s=operation_timeout_s, backoff=backoff)
        self.producer_id = producer_id
        self.user_provided_name = producer_name is not None
        self.producer_name = producer_name or ""
        self.access_mode = access_mode
        self.send_timeout_s = send_timeout_s
        self.properties = dict(properties or {})
        self.broker_last_sequence_id = -1
        self.last_sequence_id_published = -1
        self.epoch = 0
        self._pending = PendingSends(max_sends=max_pending_sends)
        self._room = asyncio.Event()
        self._room.set()
        self._next_sequence_id = initial_sequence_id
        self._stale_conn: Connection | None = None
        self._timeout_handle: asyncio.TimerHandle | None = None
        self._max_message_size_bytes: int | None = None

    def __repr__(self) -> str:
        return f"<Producer {self.topic} {self.producer_name or '?'} {self.state.value} pending={len(self._pending)}>"

    @property
    def _prefix(self) -> str:
        return f"[{self.topic}][{self.producer_name or self.producer_id}]"

    @property
    def pending_sends(self) -> int:
        """Entries sent (or waiting to be) without a receipt yet."""
        return len(self._pending)

    @property
    def pending_messages(self) -> int:
        return self._pending.messages

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- attaching -----------------------------------------------------------------------------------------

    def _unregister(self, conn: Connection) -> None:
        conn.unregister_producer(self.producer_id, self)

    async def _attach(self, conn: Connection) -> None:
        stale, self._stale_conn = self._stale_conn, None
        if stale is not None and stale.is_ready:
            # Close the old incarnation first, so the broker cannot hold two producers with one id.
            try:
                await stale.request(pb.CommandCloseProducer(producer_id=self.producer_id), timeout_s=5.0)
            except ClientError as exc:
                log.debug("%s closing the producer on %s before re-creating it: %s", self._prefix, stale, exc)
        request = pb.CommandProducer(
            topic=self.topic,
            producer_id=self.producer_id,
            encrypted=False,
            epoch=self.epoch,
            user_provided_producer_name=self.user_provided_name,
            producer_access_mode=int(self.access_mode),
        )
        if self.producer_name:
            request.producer_name = self.producer_name
        if self.properties:
            request.metadata.extend(key_values(self.properties))
        conn.register_producer(self.producer_id, self)
        answer = (await conn.request(request)).producer_success
        self.producer_name = answer.producer_name
        self.broker_last_sequence_id = answer.last_sequence_id
        if self._next_sequence_id is None:
            self._next_sequence_id = answer.last_sequence_id + 1
        self.epoch += 1

    def _abandon(self, conn: Connection) -> None:
        close = pb.CommandCloseProducer(producer_id=self.producer_id, request_id=conn.new_request_id())
        conn.send_command(wrap(close))  # the answer is not awaited

    def _handle_connection_closed(self, conn: Connection, exc: BaseException | None) -> None:
        if self.state is HandlerState.CLOSING and conn is self._conn:
            self._fail_pending(ConnectionClosedError(f"{self._prefix} connection closed while closing the producer"))
        super()._handle_connection_closed(conn, exc)

    def _attached(self, conn: Connection) -> None:
        self._max_message_size_bytes = conn.max_message_size_bytes
        if len(self._pending):
            log.info("%s connected to %s; re-sending %d pending entries", self._prefix, conn, len(self._pending))
            buffers: list[bytes] = []
            for send in self._pending:
                buffers.extend(send.frame)
            conn.write(*buffers)
        else:
            log.debug("%s connected to %s", self._prefix, conn)

    def _failed(self, exc: BaseException) -> None:
        log.error("%s failing %d pending sends: %s", self._prefix, len(self._pending), exc)
        self._fail_pending(exc)

    # -- connection events ---------------------------------------------------------------------------------

    def _handle_receipt(self, conn: Connection, receipt: pb.CommandSendReceipt) -> None:
        if conn is not self._conn:
            return
        outcome, send = self._pending.on_receipt(receipt.sequence_id)
        if send is not None:
            if receipt.HasField("message_id"):
                mid = MessageId.from_proto(receipt.message_id)
                if self.partition >= 0 and mid.partition != self.partition:
                    mid = MessageId(mid.ledger_id, mid.entry_id, self.partition, mid.batch_index, mid.batch_size)
            else:
                mid = MessageId(-1, -1, self.partition)
            self.last_sequence_id_published = send.highest_sequence_id
            if not send.waiter.done():
                send.waiter.set_result(mid)
            self._room_changed()
        elif outcome is ReceiptOutcome.OUT_OF_ORDER:
            head = self._pending.head
            log.warning("%s receipt for sequence id %d while %s is the oldest pending: reconnecting", self._prefix,
                        receipt.sequence_id, head.sequence_id if head else None)
            self._stale_conn = conn
            self._reconnect(conn, "out-of-order receipt")
        else:
            log.debug("%s ignoring receipt for sequence id %d (%s)", self._prefix, receipt.sequence_id, outcome.value)

    def _handle_send_error(self, conn: Connection, error: pb.CommandSendError) -> None:
        if conn is not self._conn:
            return
        exc = error_from_server(error.error, error.message, context=f"{self._prefix} send {error.sequence_id}")
        if error.error in (pb.TopicTerminatedError, pb.ProducerFenced):
            self._fail(exc)
        elif error.error in _FINAL_SEND_ERRORS:
            send = self._pending.remove(error.sequence_id)
            log.warning("%s %s", self._prefix, exc)
            if send is not None:
                if not send.waiter.done():
                    send.waiter.set_exception(exc)
                self._room_changed()
        else:
            self._stale_conn = conn
            self._reconnect(conn, str(exc))

    # -- sending -------------------------------------------------------------------------------------------

    async def _wait_room(self) -> None:
        self._check_open()
        while not self._pending.has_room():
            await self._room.wait()
            self._check_open()

    def _room_changed(self) -> None:
        if self._pending.has_room():
            self._room.set()
        if not len(self._pending) and self._timeout_handle is not None:
            self._timeout_handle.cancel()
            self._timeout_handle = None

    def _check_size(self, size_bytes: int) -> None:
        limit = self._max_message_size_bytes
        if limit is not None and size_bytes > limit:
            raise MessageTooLargeError(
                f"{self._prefix} entry of {size_bytes} bytes exceeds the broker's max_message_size of {limit} bytes"
            )

    def _append(self, sequence_id: int, highest_sequence_id: int, num_messages: int,
                frame: list[bytes]) -> asyncio.Future[MessageId]:
        """Queues an encoded SEND and writes it when connected (no await between room and append)."""
        fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        self._pending.append(PendingSend(sequence_id, highest_sequence_id, num_messages, frame, fut, time.monotonic()))
        if not self._pending.has_room():
            self._room.clear()
        if self._conn is not None and self.state is HandlerState.READY:
            try:
                self._conn.write(*frame)
            except ConnectionClosedError:
                pass  # the close handler reconnects, and the reconnection re-sends it
        if self.send_timeout_s > 0 and self._timeout_handle is None:
            self._arm_timeout(self.send_timeout_s)
        return fut

    async def send_entry(
        self,
        metadata: pb.MessageMetadata,
        payload: bytes,
        *,
        num_messages: int = 1,
        sequence_id: int | None = None,
        highest_sequence_id: int | None = None,
        marker: bool = False,
        source_position: tuple[int, int] | None = None,
    ) -> asyncio.Future[MessageId]:
        """Sends one pre-built entry, keeping ``metadata`` exactly as given; returns the receipt's future.

        Args:
            metadata: the entry's metadata (producer name, sequence id, publish time, ``replicated_from``,
                ``num_messages_in_batch`` for a batch... whatever the caller set).
            payload: the (possibly batched, possibly compressed) payload, as the metadata describes it.
            num_messages: messages in the entry (the batch size).
            sequence_id: the SEND's sequence id (default: ``metadata.sequence_id``); must be above every
                pending one.
            highest_sequence_id: the last message's sequence id, for a batch whose messages carry
                consecutive ids (deduplication then covers the whole range).
            marker: the entry is an internal marker (``CommandSend.marker``; brokers accept it only from a
                replicator).
            source_position: ``(ledger_id, entry_id)`` of the entry in its origin topic
                (``CommandSend.message_id``), which the replicator sends.

        Raises:
            MessageTooLargeError: the entry exceeds the broker's maximum message size.
            AlreadyClosedError: the producer is closed or failed.
            ValueError: ``sequence_id`` is not above the pending ones.
        """
        await self._wait_room()
        self._check_size(metadata.ByteSize() + len(payload))
        seq = metadata.sequence_id if sequence_id is None else sequence_id
        frame = [encode_send(self.producer_id, seq, metadata, payload, num_messages=num_messages,
                             highest_sequence_id=highest_sequence_id, marker=marker,
                             source_position=source_position)]
        return self._append(seq, seq if highest_sequence_id is None else highest_sequence_id, num_messages, frame)

    async def send_raw_entry(
        self,
        entry: bytes,
        *,
        sequence_id: int,
        num_messages: int = 1,
        highest_sequence_id: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Sends an encoded entry (``0x0e01``, CRC32C, metadata, payload) byte for byte; see ``send_entry``."""
        await self._wait_room()
        self._check_size(len(entry))
        frame = encode_send_raw(self.producer_id, sequence_id, entry, num_messages=num_messages,
                                highest_sequence_id=highest_sequence_id)
        return self._append(sequence_id, sequence_id if highest_sequence_id is None else highest_sequence_id,
                            num_messages, frame)

    async def send(
        self,
        payload: bytes,
        *,
        key: str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time_ms: int | None = None,
        ordering_key: bytes | None = None,
        replicate_to: Iterable[str] | None = None,
        deliver_at_time_ms: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Sends one message (one entry) with metadata built here: producer name, the next sequence id,
        publish time now. Returns the receipt's future (``await (await producer.send(b"x"))``)."""
        await self._wait_room()
        seq = self._take_sequence_id()
        md = message_metadata(
            producer_name=self.producer_name,
            sequence_id=seq,
            key=key,
            properties=properties,
            event_time_ms=event_time_ms,
            ordering_key=ordering_key,
            replicate_to=replicate_to,
            deliver_at_time_ms=deliver_at_time_ms,
        )
        self._check_size(md.ByteSize() + len(payload))
        frame = [encode_send(self.producer_id, seq, md, payload)]
        return self._append(seq, seq, 1, frame)

    async def send_and_wait(self, payload: bytes, **kwargs: object) -> MessageId:
        """:meth:`send`, then wait for the receipt."""
        return await (await self.send(payload, **kwargs))  # type: ignore[arg-type]

    def next_sequence_ids(self, count: int) -> int:
        """Reserves ``count`` consecutive sequence ids for a batch built outside; returns the first."""
        first = self._take_sequence_id()
        self._next_sequence_id = first + count
        return first

    def _take_sequence_id(self) -> int:
        seq = self._next_sequence_id if self._next_sequence_id is not None else 0
        last = self._pending.last_sequence_id
        if last is not None and seq <= last:
            seq = last + 1
        self._next_sequence_id = seq + 1
        return seq

    async def flush(self) -> None:
        """Waits until every send queued so far is acknowledged (or failed)."""
        waiters = [s.waiter for s in self._pending]
        if waiters:
            await asyncio.wait(waiters)

    # -- timeouts and failure ------------------------------------------------------------------------------

    def _arm_timeout(self, delay_s: float) -> None:
        self._timeout_handle = asyncio.get_running_loop().call_later(max(delay_s, 0.001), self._check_timeout)

    def _check_timeout(self) -> None:
        self._timeout_handle = None
        if self.state not in (HandlerState.READY, HandlerState.RECONNECTING):
            return
        now = time.monotonic()
        if self._pending.expired(now, self.send_timeout_s):
            sends = self._pending.drain()
            exc = SendTimeoutError(
                f"{self._prefix} {len(sends)} sends not acknowledged within {self.send_timeout_s} s "
                f"(state {self.state.value})"
            )
            log.warning("%s", exc)
            for send in sends:
                if not send.waiter.done():
                    send.waiter.set_exception(exc)
            self._room_changed()
        head = self._pending.head
        if head is not None:
            self._arm_timeout(head.created_s + self.send_timeout_s - now)

    def _fail_pending(self, exc: BaseException) -> None:
        for send in self._pending.drain():
            if not send.waiter.done():
                send.waiter.set_exception(exc)
        self._room.set()  # wake waiters, who then see the state
        if self._timeout_handle is not None:
            self._timeout_handle.cancel()
            self._timeout_handle = None

    # -- closing -------------------------------------------------------------------------------------------

    async def close(self, *, flush_timeout_s: float | None = None) -> None:
        """Waits (up to ``flush_timeout_s``, default ``operation_timeout_s``) for pending sends, closes the
        producer on the broker, and fails whatever is still pending with ``AlreadyClosedError``. Idempotent."""
        if self.state is HandlerState.CLOSED:
            return
        if self.state is HandlerState.CLOSING:
            await self._closed.wait()
            return
        previous, self.state = self.state, HandlerState.CLOSING
        try:
            if previous is HandlerState.READY and len(self._pending):
                timeout = self.operation_timeout_s if flush_timeout_s is None else flush_timeout_s
                waiters = [s.waiter for s in self._pending]
                await asyncio.wait(waiters, timeout=timeout)
            await self._stop_reconnecting()
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.unregister_producer(self.producer_id, self)
                if conn.is_ready:
                    try:
                        await conn.request(pb.CommandCloseProducer(producer_id=self.producer_id), timeout_s=5.0)
                    except ClientError as exc:
                        log.debug("%s CLOSE_PRODUCER: %s", self._prefix, exc)
        finally:
            self._fail_pending(AlreadyClosedError(f"{self._prefix} producer closed"))
            self.state = HandlerState.CLOSED
            self._closed_now()

