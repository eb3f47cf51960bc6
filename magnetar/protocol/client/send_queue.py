"""A producer's pending sends and how receipts match them (pure bookkeeping, no asyncio).

Theory of operation
-------------------

A producer writes SENDs in sequence-id order and the broker answers SEND_RECEIPTs in the same order (one
topic, one producer, one connection: the broker persists and acknowledges in order). So the pending
sends form a FIFO, and a receipt must name the head:

* ``sequence_id == head``: the head is done (:attr:`ReceiptOutcome.MATCHED`);
* ``sequence_id < head``: an answer to a send that was already completed or failed (a receipt that raced a
  send timeout, or the duplicate answer to a resend): ignore it (:attr:`ReceiptOutcome.STALE`);
* ``sequence_id > head``: the broker skipped a send, which must not happen on a healthy connection: the
  producer reconnects and re-sends everything still pending (:attr:`ReceiptOutcome.OUT_OF_ORDER`), which
  is what pulsar-client does too;
* nothing pending: :attr:`ReceiptOutcome.NO_PENDING` (ignored).

Every pending send keeps its encoded frame, so after a reconnection the producer writes the same bytes
again, with the same sequence ids: a broker with deduplication on recognizes what it already persisted.
The queue is bounded (``max_sends``); the producer waits for room before adding.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["PendingSend", "PendingSends", "ReceiptOutcome"]


class ReceiptOutcome(enum.Enum):
    MATCHED = "matched"
    STALE = "stale"
    OUT_OF_ORDER = "out-of-order"
    NO_PENDING = "no-pending"


@dataclass(slots=True)
class PendingSend:
    """One SEND awaiting its receipt.

    Attributes:
        sequence_id: the SEND's sequence id (the first message's, for a batch).
        highest_sequence_id: the last message's sequence id (== ``sequence_id`` unless given otherwise).
        num_messages: messages in the entry.
        frame: the encoded SEND frame, as buffers for ``writelines`` (kept for re-sending).
        waiter: what completes the send (an ``asyncio.Future`` in the producer; opaque here).
        created_s: monotonic time the send was queued (for send timeouts and latency).
    """

    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    frame: list[bytes]
    waiter: Any
    created_s: float

    @property
    def size_bytes(self) -> int:
        return sum(len(b) for b in self.frame)


class PendingSends:
    """The FIFO of a producer's unacknowledged sends (see the module docstring).

    Args:
        max_sends: most sends (entries) pending at once; :meth:`has_room` turns False at that count.
    """

    def __init__(self, *, max_sends: int) -> None:
        if max_sends < 1:
            raise ValueError(f"max_sends must be at least 1, not {max_sends}")
        self.max_sends = max_sends
        self._queue: deque[PendingSend] = deque()
        self.messages = 0  # messages (not entries) pending

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[PendingSend]:
        return iter(self._queue)

    def has_room(self) -> bool:
        return len(self._queue) < self.max_sends

    @property
    def head(self) -> PendingSend | None:
        return self._queue[0] if self._queue else None

    @property
    def last_sequence_id(self) -> int | None:
        """The highest sequence id queued (None when empty)."""
        return self._queue[-1].highest_sequence_id if self._queue else None

    def append(self, send: PendingSend) -> None:
        """Queues ``send``; its sequence id must be above every queued one (sends stay in order)."""
        last = self.last_sequence_id
        if last is not None and send.sequence_id <= last:
            raise ValueError(
                f"sequence id {send.sequence_id} is not above the last pending one ({last}): sends must be in order"
            )
        self._queue.append(send)
        self.messages += send.num_messages

    def on_receipt(self, sequence_id: int) -> tuple[ReceiptOutcome, PendingSend | None]:
        """Matches a SEND_RECEIPT; on MATCHED the head is removed and returned."""
        if not self._queue:
            return ReceiptOutcome.NO_PENDING, None
        head = self._queue[0]
        if sequence_id == head.sequence_id:
            self._queue.popleft()
            self.messages -= head.num_messages
            return ReceiptOutcome.MATCHED, head
        if sequence_id < head.sequence_id:
            return ReceiptOutcome.STALE, None
        return ReceiptOutcome.OUT_OF_ORDER, None

    def remove(self, sequence_id: int) -> PendingSend | None:
        """Removes and returns the send with ``sequence_id`` (a SEND_ERROR that fails one send), if pending."""
        for send in self._queue:
            if send.sequence_id == sequence_id:
                self._queue.remove(send)
                self.messages -= send.num_messages
                return send
        return None

    def expired(self, now_s: float, timeout_s: float) -> bool:
        """True when the oldest pending send was queued more than ``timeout_s`` before ``now_s``."""
        return bool(self._queue) and now_s - self._queue[0].created_s >= timeout_s

    def drain(self) -> list[PendingSend]:
        """Removes and returns every pending send (to fail them)."""
        sends = list(self._queue)
        self._queue.clear()
        self.messages = 0
        return sends
