"""A consumer's acknowledgements before they go on the wire (pure).

Two things happen between ``consumer.ack(id)`` and an ACK frame:

* **Batches.** The broker tracks entries, not messages. Acknowledging message ``i`` of a batch of ``n``
  only records ``i``; the entry is acknowledged once all ``n`` are (what pulsar-client does with
  batch-index acknowledgement off). A cumulative ack of message ``i < n - 1`` acknowledges up to the
  *previous* entry, ``(ledger, entry - 1)``, so the rest of the batch is not lost if the consumer stops
  there (``entry - 1`` may be ``-1``: "nothing of this ledger", a valid mark-delete position).
* **Grouping.** Acks are held and sent together (one ACK with many ids, and only the highest cumulative
  position), at most every ``ack_group_time_s`` or when ``max_pending`` individual ids are waiting,
  which is what makes acknowledging every message affordable.
"""

from __future__ import annotations

from magnetar.protocol import MessageId

__all__ = ["AckTracker"]


class AckTracker:
    """Acknowledgements waiting to be sent (see the module docstring).

    Args:
        max_pending: :attr:`should_flush` turns True at this many individual acks.
    """

    def __init__(self, *, max_pending: int = 1000) -> None:
        self.max_pending = max_pending
        self._individual: dict[MessageId, None] = {}  # ordered set
        self._cumulative: MessageId | None = None
        self._sent_cumulative: MessageId | None = None
        self._batches: dict[MessageId, set[int]] = {}

    @property
    def pending(self) -> int:
        return len(self._individual) + (self._cumulative is not None)

    @property
    def should_flush(self) -> bool:
        return len(self._individual) >= self.max_pending

    @property
    def open_batches(self) -> int:
        """Batched entries with some but not all of their messages acknowledged."""
        return len(self._batches)

    def ack(self, message_id: MessageId) -> bool:
        """Records an individual ack; returns True when it makes an entry ready to be acknowledged."""
        if message_id.is_batched and message_id.batch_size > 1:
            entry = message_id.entry()
            outstanding = self._batches.get(entry)
            if outstanding is None:
                outstanding = self._batches[entry] = set(range(message_id.batch_size))
            outstanding.discard(message_id.batch_index)
            if outstanding:
                return False
            del self._batches[entry]
            message_id = entry
        else:
            message_id = message_id.entry()
        self._individual[message_id] = None
        return True

    def ack_cumulative(self, message_id: MessageId) -> bool:
        """Records a cumulative ack; returns True when it moves the position to send forward."""
        if message_id.is_batched and message_id.batch_index < message_id.batch_size - 1:
            target = MessageId(message_id.ledger_id, message_id.entry_id - 1, message_id.partition)
        else:
            target = message_id.entry()
        best = max((p for p in (self._cumulative, self._sent_cumulative) if p is not None), default=None)
        if best is not None and target <= best:
            return False
        self._cumulative = target
        for entry in [e for e in self._batches if e <= target]:
            del self._batches[entry]
        return True

    def take(self) -> tuple[list[MessageId], MessageId | None]:
        """Returns and forgets what is waiting: (individual entry ids, cumulative position or None)."""
        individual = list(self._individual)
        self._individual.clear()
        cumulative, self._cumulative = self._cumulative, None
        if cumulative is not None:
            self._sent_cumulative = cumulative
            individual = [m for m in individual if m > cumulative]
        return individual, cumulative

    def restore(self, individual: list[MessageId], cumulative: MessageId | None) -> None:
        """Puts back what :meth:`take` returned when it could not be sent (no connection)."""
        for mid in individual:
            self._individual[mid] = None
        if cumulative is not None and (self._cumulative is None or cumulative > self._cumulative):
            self._cumulative = cumulative

    def reset_position(self) -> None:
        """Forget the cumulative position sent so far (after a seek moved the subscription back)."""
        self._sent_cumulative = None
        self._cumulative = None
        self._batches.clear()
