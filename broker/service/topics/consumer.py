"""A consumer: one client-side consumer attached to a subscription, as topic code keeps it.

It owns the flow-control state (permits granted by FLOW, counted in messages, so a batched entry of n
messages takes n permits and may drive them negative as in Pulsar), the pending acknowledgements (entries
sent and not yet acknowledged, with their message counts, so a disconnect or a REDELIVER can hand them
back) and the counters behind its stats. What reaches the client goes through its :class:`~.api.ConsumerSink`
(the session's connection): MESSAGE frames, active-consumer changes, the end of a terminated topic, the
broker closing the consumer. Nothing here knows the protocol's commands.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from broker.managed_ledger.api import Entry, Position

from ..stats import RateMeter, iso_now
from .model import KeySharedSpec, SubType
from .stats import ConsumerStats

if TYPE_CHECKING:
    from .api import ConsumerSink
    from .subscription import Subscription


class Consumer:
    """See the module docstring. Created by the SUBSCRIBE handler, attached by ``Subscription.add_consumer``."""

    def __init__(self, subscription: "Subscription", connection: "ConsumerSink", consumer_id: int, name: str, *,
                 sub_type: SubType, priority_level: int = 0, metadata: Optional[Mapping[str, str]] = None,
                 key_shared_meta: Optional[KeySharedSpec] = None, consumer_epoch: Optional[int] = None,
                 max_unacked_messages: int = 0) -> None:
        self.subscription = subscription
        self.connection = connection
        self.consumer_id = consumer_id
        topic_name = subscription.topic.topic_name
        self.partition_index = topic_name.partition_index if topic_name.is_partition else -1
        self.name = name
        self.sub_type = sub_type
        self.priority_level = priority_level
        self.metadata = dict(metadata or {})
        self.key_shared_meta = key_shared_meta
        self.consumer_epoch = consumer_epoch
        self.max_unacked_messages = max_unacked_messages
        self.permits = 0
        self.flow_seen = False  # a FLOW arrived: the client has our SUBSCRIBE answer and is attached
        self.pending_acks: dict[Position, int] = {}  # position -> messages of that entry still unacked
        self.unacked_messages = 0
        self.blocked = False  # too many unacked messages (Shared / Key_Shared)
        self.closed = False
        self.is_active = False
        self.reached_end_of_topic = False  # found at the end of the terminated topic
        self.end_of_topic_notified = False  # ... and sent REACHED_END_OF_TOPIC (its client handles it)
        self.join_position: Optional[Position] = None  # Key_Shared: restricted until acks pass it
        self.connected_since = iso_now()
        self.msg_out = RateMeter()
        self.bytes_out = RateMeter()
        self.msg_redeliver = RateMeter()
        self.msg_ack = RateMeter()
        self.last_consumed_ms = 0
        self.last_acked_ms = 0
        self.last_flow_ms = 0
        self.read_compacted = False  # reads the compacted view up to the horizon (compaction/view.py)
        self.avg_messages_per_entry = 1.0

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, id={self.consumer_id}, {self.connection.remote_address})"

    @property
    def individual_ack_mode(self) -> bool:
        return self.sub_type in (SubType.Shared, SubType.Key_Shared)

    # --------------------------------------------------------------------------------- flow control

    def available(self) -> bool:
        """May receive now: permits left, not blocked on unacked messages, connection not closed."""
        return self.permits > 0 and not self.blocked and not self.closed

    def flow(self, permits: int) -> None:
        self.permits += permits
        self.flow_seen = True
        self.last_flow_ms = int(time.time() * 1000)

    # --------------------------------------------------------------------------------- sending

    def send_entries(self, items: Iterable[tuple[Entry, int, int, Sequence[int]]]) -> int:
        """Sends one MESSAGE per ``(entry, message_count, redelivery_count, ack_set_words)`` through the sink;
        returns the number of messages sent. Entries are recorded as pending acknowledgement."""
        out: list[tuple[Entry, int, Sequence[int]]] = []
        messages = 0
        size = 0
        pending = self.pending_acks
        for entry, count, redeliveries, ack_set in items:
            pos = entry.position
            out.append((entry, redeliveries, ack_set))
            if pos not in pending:
                self.unacked_messages += count
            pending[pos] = count
            messages += count
            size += len(entry.data)
        if not out:
            return 0
        self.permits -= messages
        self.connection.send_messages(self, out)
        self.msg_out.record(messages)
        self.bytes_out.record(size)
        self.last_consumed_ms = int(time.time() * 1000)
        self.avg_messages_per_entry = 0.9 * self.avg_messages_per_entry + 0.1 * (messages / len(out))
        if self.individual_ack_mode and self.max_unacked_messages and \
                self.unacked_messages >= self.max_unacked_messages:
            self.blocked = True
        return messages

    # --------------------------------------------------------------------------------- acknowledgements

    def acked(self, position: Position, messages: Optional[int] = None) -> bool:
        """The entry at ``position`` (or ``messages`` of it) was acknowledged. Returns True when this
        unblocked the consumer."""
        count = self.pending_acks.get(position)
        if count is None:
            return False
        if messages is None or messages >= count:
            del self.pending_acks[position]
            self.unacked_messages -= count
        else:
            self.pending_acks[position] = count - messages
            self.unacked_messages -= messages
        self.last_acked_ms = int(time.time() * 1000)
        return self._maybe_unblock()

    def acked_up_to(self, position: Position) -> bool:
        """Cumulative acknowledgement: every pending entry at or before ``position``."""
        done = [p for p in self.pending_acks if p <= position]
        for p in done:
            self.unacked_messages -= self.pending_acks.pop(p)
        if done:
            self.last_acked_ms = int(time.time() * 1000)
        return self._maybe_unblock()

    def take_pending(self, positions: Optional[Iterable[Position]] = None) -> list[Position]:
        """Removes (all, or the given) pending entries and returns their positions (for redelivery)."""
        if positions is None:
            taken = list(self.pending_acks)
            self.pending_acks.clear()
            self.unacked_messages = 0
        else:
            taken = []
            for p in positions:
                count = self.pending_acks.pop(p, None)
                if count is not None:
                    self.unacked_messages -= count
                    taken.append(p)
        self._maybe_unblock()
        return taken

    def _maybe_unblock(self) -> bool:
        if self.blocked and (not self.max_unacked_messages
                             or self.unacked_messages <= self.max_unacked_messages // 2):
            self.blocked = False
            return True
        return False

    # --------------------------------------------------------------------------------- notifications

    def notify_active(self, active: bool) -> None:
        self.is_active = active
        self.connection.notify_active(self, active)

    def reached_end(self) -> bool:
        """The topic is terminated and this consumer's subscription has nothing left to deliver: marks it, and
        tells the client if it handles it (the sink decides, see ``session.consumer_endpoints``). Once per
        consumer: returns whether this call was the first.

        Not before the consumer's first FLOW (returns False; its FLOW wakes the dispatcher to ask again): a
        client may drop a notification that arrives while it is still waiting for the SUBSCRIBE answer, or in
        the same read as that answer (Magnetar's client does). Pulsar too finds the end only on a read, which
        needs permits."""
        if self.reached_end_of_topic or self.closed or not self.flow_seen:
            return False
        self.reached_end_of_topic = True
        self.end_of_topic_notified = self.connection.notify_end_of_topic(self)
        return True

    def notify_closed(self) -> None:
        """Tells the client its consumer is closed by the broker (it reconnects and looks the topic up)."""
        self.closed = True
        self.connection.notify_consumer_closed(self)

    # --------------------------------------------------------------------------------- stats

    def stats(self) -> ConsumerStats:
        return ConsumerStats(
            consumer_name=self.name,
            msg_rate_out=self.msg_out.rate(),
            msg_throughput_out=self.bytes_out.rate(),
            bytes_out_counter=self.bytes_out.total,
            msg_out_counter=self.msg_out.total,
            msg_rate_redeliver=self.msg_redeliver.rate(),
            message_ack_rate=self.msg_ack.rate(),
            available_permits=self.permits,
            unacked_messages=self.unacked_messages,
            avg_messages_per_entry=round(self.avg_messages_per_entry),
            blocked_consumer_on_unacked_msgs=self.blocked,
            read_position_when_joining=str(self.join_position) if self.join_position else None,
            address=self.connection.remote_address,
            connected_since=self.connected_since,
            client_version=self.connection.client_version,
            last_acked_timestamp_ms=self.last_acked_ms,
            last_consumed_timestamp_ms=self.last_consumed_ms,
            last_consumed_flow_timestamp_ms=self.last_flow_ms,
            metadata=dict(self.metadata),
        )
