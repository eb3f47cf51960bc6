"""A producer: one client-side producer publishing to a topic over one connection.

Receipts go out strictly in the order the SENDs arrived. Each SEND gets a slot in ``_pending``; a slot is
completed by its storage future (or at once for a duplicate), and completed slots are flushed from the
head only, so a duplicate answered immediately never overtakes an earlier SEND still being stored.
pulsar-client closes the connection on a receipt it does not expect next.

A failed append answers SEND_ERROR PersistenceError (the client then reconnects and re-sends what is
pending; with deduplication on, nothing is stored twice).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from typing import TYPE_CHECKING, Callable, Optional

from broker.managed_ledger.api import Position
from magnetar.protocol import encode_command, pb, wrap

from . import wire
from ..topics.dedup import REPLICATOR_PREFIX, is_replicator
from ..errors import BrokerServiceError, map_error
from ..stats import RateMeter, iso_now
from ..topics.model import AccessMode
from ..topics.stats import PublisherStats

if TYPE_CHECKING:
    from .connection import Connection
    from ..topics.topic import Topic

log = logging.getLogger("broker.service.session.producer")



class _Slot:
    __slots__ = ("sequence_id", "highest_sequence_id", "position", "error", "done", "started")

    def __init__(self, sequence_id: int, highest_sequence_id: Optional[int], started: Optional[float]) -> None:
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.position: Optional[Position] = None
        self.error: Optional[BrokerServiceError] = None
        self.done = False
        self.started = time.perf_counter() if started is None else started


class Producer:
    def __init__(self, topic: "Topic", connection: "Connection", producer_id: int, name: str, *,
                 access_mode: int = AccessMode.Shared, epoch: int = 0, user_provided_name: bool = False,
                 metadata: Optional[dict[str, str]] = None, topic_epoch: Optional[int] = None) -> None:
        self.topic = topic
        self.connection = connection
        self.producer_id = producer_id
        self.name = name
        self.access_mode = AccessMode(access_mode)
        self.epoch = epoch
        self.user_provided_name = user_provided_name
        self.metadata = metadata or {}
        self.topic_epoch = topic_epoch
        self.schema_version = b""  # 8 bytes when it publishes with a schema (schema_commands.py)
        self.connected_since = iso_now()
        self.msg_in = RateMeter()
        self.bytes_in = RateMeter()
        self.closed = False
        # A geo-replicator of another cluster (``pulsar.repl.<origin>``): its SENDs carry origin positions.
        self.is_replicator = is_replicator(name)
        self.origin_cluster = name[len(REPLICATOR_PREFIX):] if self.is_replicator else ""
        self._pending: collections.deque[_Slot] = collections.deque()
        self._drained: Optional[asyncio.Event] = None

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, id={self.producer_id}, {self.connection.remote_address})"

    @property
    def exclusive(self) -> bool:
        return self.access_mode != AccessMode.Shared

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # --------------------------------------------------------------------------------- publishing

    def track(self, sequence_id: int, highest_sequence_id: Optional[int], future: "asyncio.Future[Position]", *,
              started: Optional[float] = None) -> None:
        """Registers a SEND whose receipt depends on ``future`` (storage, or an earlier identical SEND);
        ``started`` (``time.perf_counter()``) is when the SEND arrived, for the broker's publish latency
        (default: now)."""
        complete = self.expect(sequence_id, highest_sequence_id, started=started)
        if future.done():
            complete(future)
        else:
            future.add_done_callback(complete)

    def expect(self, sequence_id: int, highest_sequence_id: Optional[int], *,
               started: Optional[float] = None) -> Callable[[asyncio.Future], None]:
        """Registers a SEND as :meth:`track` does and returns what to call with its future once done (the
        managed ledger's ``on_done``: the receipt then leaves in the turn the bookies' answer was read)."""
        slot = _Slot(sequence_id, highest_sequence_id, started)
        self._pending.append(slot)
        self.connection.publish_started()
        return functools.partial(self._complete, slot)

    def _complete(self, slot: _Slot, future: asyncio.Future) -> None:
        slot.done = True
        if future.cancelled():
            slot.error = map_error(ConnectionError("the write was cancelled"))
        elif future.exception() is not None:
            slot.error = map_error(future.exception())
        else:
            slot.position = future.result()
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        conn = self.connection
        out: list[bytes] = []
        failed: Optional[BrokerServiceError] = None
        latency = self.topic.publish_latency
        now = time.perf_counter()
        while pending and pending[0].done:
            slot = pending.popleft()
            conn.publish_finished()
            if slot.error is not None:
                failed = failed or slot.error
                out.append(encode_command(wrap(pb.CommandSendError(
                    producer_id=self.producer_id, sequence_id=slot.sequence_id,
                    error=slot.error.server_error, message=str(slot.error)))))
                continue
            pos = slot.position
            latency.record(now - slot.started)
            out.append(wire.send_receipt_frame(self.producer_id, slot.sequence_id, pos.ledger_id, pos.entry_id,
                                               highest_sequence_id=slot.highest_sequence_id))
        if out and not self.closed:
            conn.write_now(out)
        if failed is not None:
            log.warning("[%s][%s] publish failed: %s", self.topic.name, self.name, failed)
            self.topic.on_publish_failure(failed)
        if not pending and self._drained is not None:
            self._drained.set()

    def fail_pending_now(self) -> None:
        """Connection gone: drop the slots (their futures may still complete; nothing is sent)."""
        for _ in range(len(self._pending)):
            self.connection.publish_finished()
        self._pending.clear()
        if self._drained is not None:
            self._drained.set()

    async def wait_drained(self, timeout_s: float) -> None:
        """Waits until every pending receipt was sent (CLOSE_PRODUCER answers after that)."""
        if not self._pending:
            return
        self._drained = asyncio.Event()
        try:
            await asyncio.wait_for(self._drained.wait(), timeout_s)
        except TimeoutError:
            log.warning("[%s][%s] %d receipts still pending at close", self.topic.name, self.name,
                        len(self._pending))

    # --------------------------------------------------------------------------------- notifications

    def notify_closed(self) -> None:
        """Tells the client the broker closed its producer (it reconnects after a fresh lookup)."""
        self.closed = True
        if self.connection.producers.get(self.producer_id) is self:
            self.connection.forget_producer(self.producer_id, self)
            self.connection.write(encode_command(wrap(pb.CommandCloseProducer(
                producer_id=self.producer_id, request_id=0))))

    # --------------------------------------------------------------------------------- stats

    def tick(self) -> None:
        self.msg_in.tick()
        self.bytes_in.tick()

    def stats(self) -> PublisherStats:
        msgs = self.msg_in.total
        return PublisherStats(
            producer_id=self.producer_id,
            producer_name=self.name,
            access_mode=AccessMode(self.access_mode).name,
            msg_rate_in=self.msg_in.rate(),
            msg_throughput_in=self.bytes_in.rate(),
            average_msg_size=(self.bytes_in.total / msgs) if msgs else 0.0,
            address=self.connection.remote_address,
            connected_since=self.connected_since,
            client_version=self.connection.client_version,
            metadata=dict(self.metadata),
        )
