"""A subscription's acknowledgements: what an ACK changes at once, and the worker that applies it to the cursor.

Acknowledgements are applied in two steps. The ACK handler updates what is visible at once (consumers'
pending acks, redelivery counts, batch-index ack sets, and the sets of *queued* acknowledgements that
the dispatch filter consults through :meth:`is_acked`), then queues the cursor operation. One task per
subscription (the *ack worker*) applies queued operations to the cursor strictly in arrival order,
coalescing runs of the same kind: a slow cursor persist never stalls a connection's read loop, and an
acknowledged entry is never redelivered just because its cursor update has not landed yet.

Batch-index acknowledgements (``batch_index_ack_enabled``) carry a bit set of the batch members still
unacknowledged; the subscription ANDs them per entry (``batch_acks``), sends the result with any
redelivery of the entry, and deletes the entry once no bit is left. Each partial acknowledgement is also
queued for the cursor (``delete_batch_indexes``), which persists the sets with its state; a subscription
recovered from its cursor (topic reload, failover) starts from them, so a redelivery after a reload still
skips the members already acknowledged (up to the cursor's persisted cap, and what was persisted before a
crash).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Optional, Sequence

from broker.managed_ledger.api import Position

from ..errors import NotAllowedError
from ..tasks import shielded
from .entries import ack_set_to_int
from .model import AckedId, SubType

if TYPE_CHECKING:
    from .consumer import Consumer

log = logging.getLogger("broker.service.topics.subscription")


class SubscriptionAcks:
    """Mixed into ``Subscription``, whose state it reads and updates: ``cursor``, ``consumers``, ``dispatcher``,
    ``batch_acks``, ``redelivery_counts``, the queued-ack sets and the ack worker's queue. The ack worker is
    started on the first queued operation and cancelled with the subscription."""


    def is_acked(self, position: Position) -> bool:
        if position in self._queued_acks:
            return True
        md = self._queued_md
        if md is not None and position <= md:
            return True
        return self.cursor.is_deleted(position)

    def acknowledge(self, consumer: Consumer, ids: Sequence[AckedId], *, cumulative: bool = False
                    ) -> Optional[asyncio.Future]:
        """Applies an ACK's visible effects and queues its cursor operation; the returned future resolves
        once the cursor has it (None when nothing was queued).

        Raises:
            NotAllowedError: a cumulative ack on a Shared or Key_Shared subscription.
        """
        if cumulative:
            if consumer.individual_ack_mode:
                raise NotAllowedError(f"cumulative ack is not supported on {SubType(consumer.sub_type).name} "
                                      f"subscription {self.name!r}")
            if len(ids) != 1:
                raise NotAllowedError("a cumulative ack carries exactly one message id")
            return self._ack_cumulative(consumer, ids[0])
        return self._ack_individual(consumer, ids)

    def _ack_individual(self, consumer: Consumer, ids: Sequence[AckedId]) -> Optional[asyncio.Future]:
        full: list[Position] = []
        partial: dict[Position, int] = {}
        for pos, ack_set in ids:
            if pos.ledger_id < 0 or pos.entry_id < 0 or self.is_acked(pos):
                continue
            if ack_set:
                incoming = ack_set_to_int(ack_set)
                current = self.batch_acks.get(pos)
                remaining = incoming if current is None else current & incoming
                if remaining:
                    if remaining != current:
                        partial[pos] = remaining
                    self.batch_acks[pos] = remaining
                    owner = self._pending_owner(consumer, pos)
                    if owner is not None:
                        count = owner.pending_acks[pos]
                        left = bin(remaining).count("1")
                        if count > left and owner.acked(pos, count - left):
                            self._wake_dispatcher()
                    continue
            full.append(pos)
        partial_fut = self._queue_op("batch", partial) if partial else None
        if not full:
            return partial_fut
        for pos in full:
            self.batch_acks.pop(pos, None)
            self.redelivery_counts.pop(pos, None)
            owner = self._pending_owner(consumer, pos)
            if owner is not None:
                if owner.acked(pos):
                    self._wake_dispatcher()
        consumer.msg_ack.record(len(full))
        self._queued_acks.update(full)
        if self.dispatcher is not None:
            self.dispatcher.on_acked(full)
        return self._queue_op("delete", full)

    def _pending_owner(self, consumer: Consumer, pos: Position) -> Optional[Consumer]:
        if pos in consumer.pending_acks:
            return consumer
        for other in self.consumers:  # acked through another consumer (e.g. after a reconnection)
            if pos in other.pending_acks:
                return other
        return None

    def _ack_cumulative(self, consumer: Consumer, acked: AckedId) -> Optional[asyncio.Future]:
        pos, ack_set = acked
        if pos.ledger_id < 0:
            return None
        target = pos
        partial: Optional[dict[Position, int]] = None
        if ack_set:
            incoming = ack_set_to_int(ack_set)
            current = self.batch_acks.get(pos)
            remaining = incoming if current is None else current & incoming
            if remaining:
                self.batch_acks[pos] = remaining
                target = Position(pos.ledger_id, pos.entry_id - 1)
                if remaining != current and not self.is_acked(pos):
                    partial = {pos: remaining}
        current_md = self._queued_md or self.cursor.mark_delete_position
        if target <= current_md:
            return self._queue_op("batch", partial) if partial else None
        self._queued_md = target
        for p in [p for p in self.redelivery_counts if p <= target]:
            del self.redelivery_counts[p]
        for p in [p for p in self.batch_acks if p <= target]:
            del self.batch_acks[p]
        for c in self.consumers:
            if c.acked_up_to(target):
                self._wake_dispatcher()
        consumer.msg_ack.record(1)
        fut = self._queue_op("mark_delete", target)
        return self._queue_op("batch", partial) if partial else fut

    def ack_marker(self, position: Position) -> None:
        """Internal markers are acknowledged as soon as a dispatcher meets them."""
        self._queued_acks.add(position)
        self._queue_op("delete", [position])

    def _queue_op(self, kind: str, arg) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._ack_ops.append((kind, arg, fut))
        self._ack_idle.clear()
        self._ack_event.set()
        self._ensure_ack_worker()
        return fut

    def _ensure_ack_worker(self) -> None:
        if self._ack_task is None or self._ack_task.done():
            self._ack_task = asyncio.get_running_loop().create_task(self._ack_worker(),
                                                                    name=f"acks {self.log_prefix}")

    async def _ack_worker(self) -> None:
        ops = self._ack_ops
        while True:
            if not ops:
                self._ack_idle.set()
                await self._ack_event.wait()
                self._ack_event.clear()
                continue
            kind, arg, fut = ops.popleft()
            futures = [fut]
            if kind == "delete":
                positions = list(arg)
                while ops and ops[0][0] == "delete":
                    _, more, f = ops.popleft()
                    positions.extend(more)
                    futures.append(f)
            elif kind == "batch":
                ack_sets = dict(arg)
                while ops and ops[0][0] == "batch":
                    _, more, f = ops.popleft()
                    for p, bits in more.items():
                        ack_sets[p] = ack_sets[p] & bits if p in ack_sets else bits
                    futures.append(f)
                positions = list(ack_sets)
            else:
                positions = [arg]
                while ops and ops[0][0] == "mark_delete":
                    _, more, f = ops.popleft()
                    positions = [max(positions[0], more)]
                    futures.append(f)
            before = self.cursor.mark_delete_position
            error: Optional[BaseException] = None
            try:
                if kind == "delete":
                    await self._delete_positions(positions)
                elif kind == "batch":
                    await shielded(self.cursor.delete_batch_indexes(ack_sets))
                else:
                    await shielded(self.cursor.mark_delete(positions[0], properties=self.cursor_properties()))
            except asyncio.CancelledError:
                for f in futures:
                    f.cancel()
                raise
            except Exception as exc:
                error = exc
                log.warning("%s %s of %d position(s) failed: %s", self.log_prefix, kind, len(positions), exc)
            if kind == "delete":
                self._queued_acks.difference_update(positions)
            elif kind == "mark_delete" and self._queued_md is not None and self._queued_md <= positions[0]:
                self._queued_md = None
            for f in futures:
                if not f.done():
                    f.set_exception(error) if error else f.set_result(None)
            if self.cursor.mark_delete_position != before:
                self.last_md_advanced_ms = int(time.time() * 1000)
                self._wake_dispatcher()
                self._snapshots_passed()

    async def _delete_positions(self, positions: list[Position]) -> None:
        """Individual deletes; a position the ledger does not have (a client acknowledging garbage) must not
        cost the valid ones their acknowledgement, so a refused batch is retried one position at a time."""
        try:
            await shielded(self.cursor.delete(positions))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if len(positions) == 1 or "InvalidCursorPosition" not in type(exc).__name__:
                raise
            for pos in positions:
                try:
                    await shielded(self.cursor.delete([pos]))
                except asyncio.CancelledError:
                    raise
                except Exception as one:
                    if "InvalidCursorPosition" not in type(one).__name__:
                        raise
                    log.info("%s ignoring an acknowledgement of %s: %s", self.log_prefix, pos, one)

    async def drain_acks(self) -> None:
        """Waits until every queued acknowledgement reached the cursor."""
        if self._ack_task is not None and not self._ack_task.done():
            await self._ack_idle.wait()
