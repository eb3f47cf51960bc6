"""A consumer: one client-side consumer attached to a subscription over one connection.

It owns the flow-control state (permits granted by FLOW, counted in messages, so a batched entry of n
messages takes n permits and may drive them negative as in Pulsar), the pending acknowledgements (entries
sent and not yet acknowledged, with their message counts, so a disconnect or a REDELIVER can hand them
back) and the counters behind its stats. It writes MESSAGE frames itself, splicing the stored entry
behind a hand-encoded header (``wire.message_frame_header``) in one vectored write.

REACHED_END_OF_TOPIC goes only to clients that handle it (``peer_handles_end_of_topic``). Pulsar sends it to
every client speaking protocol v9 or later, but the C++ core that pulsar-client (Python, C++, Node.js) wraps
has never had a case for it: ``ClientConnection::handleIncomingCommand`` (pulsar-client-cpp v4.2.0,
lib/ClientConnection.cc:991-993) falls through to ``default``, logs "Received invalid message from server"
and closes the connection; pulsar-client-go's ``connection.receivedCommand`` does the same ("Received invalid
command type"). Their consumers then reconnect, the new consumer is again at the end, is told again, and so
on (pulsar-client: every 100 ms, its first reconnection delay). Those clients simply wait at the end; their
readers learn it from GET_LAST_MESSAGE_ID (``has_message_available()`` is False).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

from broker.managed_ledger.api import Entry, Position
from magnetar.protocol import encode_command, pb, wrap

from . import wire
from ..stats import RateMeter, iso_now
from ..topics.stats import ConsumerStats

if TYPE_CHECKING:
    from .connection import Connection
    from ..topics.subscription import Subscription

SubType = pb.CommandSubscribe.SubType

_END_OF_TOPIC_MIN_PROTOCOL = 9  # the protocol version that added REACHED_END_OF_TOPIC
# CONNECT client_version prefixes of official clients that close the connection on REACHED_END_OF_TOPIC
# (see the module docstring): the C++ core ("Pulsar-CPP-v4.2.0", also under Python and Node.js) and Go.
_CLIENTS_WITHOUT_END_OF_TOPIC = ("Pulsar-CPP-v", "Pulsar Go ")


def peer_handles_end_of_topic(client_version: str, protocol_version: int) -> bool:
    """Whether a client that announced ``client_version`` / ``protocol_version`` in CONNECT may be sent
    REACHED_END_OF_TOPIC: as Pulsar, protocol v9 or later, except the clients known to drop the connection
    on it (the Java client and Magnetar's own handle it)."""
    return protocol_version >= _END_OF_TOPIC_MIN_PROTOCOL and not client_version.startswith(
        _CLIENTS_WITHOUT_END_OF_TOPIC)


class Consumer:
    """See the module docstring. Created by the SUBSCRIBE handler, attached by ``Subscription.add_consumer``."""

    def __init__(self, subscription: "Subscription", connection: "Connection", consumer_id: int, name: str, *,
                 sub_type: int, priority_level: int = 0, metadata: Optional[dict[str, str]] = None,
                 key_shared_meta: Optional[pb.KeySharedMeta] = None, consumer_epoch: Optional[int] = None,
                 max_unacked_messages: int = 0) -> None:
        self.subscription = subscription
        self.connection = connection
        self.consumer_id = consumer_id
        topic_name = subscription.topic.topic_name
        self.partition_index = topic_name.partition_index if topic_name.is_partition else -1
        self.name = name
        self.sub_type = sub_type
        self.priority_level = priority_level
        self.metadata = metadata or {}
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
        self.read_compacted = False  # reads the compacted view up to the horizon (compacted_view.py)
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
        """Writes one MESSAGE per ``(entry, message_count, redelivery_count, ack_set_words)``; returns the
        number of messages sent. Entries are recorded as pending acknowledgement."""
        frames: list[bytes] = []
        messages = 0
        size = 0
        entries = 0
        cid = self.consumer_id
        epoch = self.consumer_epoch
        pending = self.pending_acks
        partition = self.partition_index
        for entry, count, redeliveries, ack_set in items:
            pos = entry.position
            data = entry.data
            frames.append(wire.message_frame_header(cid, pos.ledger_id, pos.entry_id, len(data),
                                                    redelivery_count=redeliveries, ack_set=ack_set,
                                                    consumer_epoch=epoch, partition=partition))
            frames.append(data)
            if pos not in pending:
                self.unacked_messages += count
            pending[pos] = count
            messages += count
            size += len(data)
            entries += 1
        if not frames:
            return 0
        self.permits -= messages
        self.connection.writelines(frames)
        self.msg_out.record(messages)
        self.bytes_out.record(size)
        self.last_consumed_ms = int(time.time() * 1000)
        self.avg_messages_per_entry = 0.9 * self.avg_messages_per_entry + 0.1 * (messages / entries)
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
        self.connection.write(encode_command(wrap(pb.CommandActiveConsumerChange(
            consumer_id=self.consumer_id, is_active=active))))

    def reached_end(self) -> bool:
        """The topic is terminated and this consumer's subscription has nothing left to deliver: marks it, and
        sends REACHED_END_OF_TOPIC if the client handles it (``peer_handles_end_of_topic``). Once per consumer:
        returns whether this call was the first.

        Not before the consumer's first FLOW (returns False; its FLOW wakes the dispatcher to ask again): a
        client may drop a notification that arrives while it is still waiting for the SUBSCRIBE answer, or in
        the same read as that answer (Magnetar's client does). Pulsar too finds the end only on a read, which
        needs permits."""
        if self.reached_end_of_topic or self.closed or not self.flow_seen:
            return False
        self.reached_end_of_topic = True
        conn = self.connection
        if peer_handles_end_of_topic(conn.client_version, conn.protocol_version):
            conn.write(encode_command(wrap(pb.CommandReachedEndOfTopic(consumer_id=self.consumer_id))))
            self.end_of_topic_notified = True
        return True

    def notify_closed(self) -> None:
        """Tells the client its consumer is closed by the broker (it reconnects and looks the topic up)."""
        self.closed = True
        if self.connection.consumers.get(self.consumer_id) is self:
            self.connection.forget_consumer(self.consumer_id, self)
            self.connection.write(encode_command(wrap(pb.CommandCloseConsumer(
                consumer_id=self.consumer_id, request_id=0))))

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
