"""One replicator: a topic's entries carried to one remote cluster.

Theory of operation
-------------------

The replicator of topic T towards cluster R reads T's managed ledger through its own durable cursor
``pulsar.repl.<R>`` (so what R has not yet acknowledged stays in the backlog, however long R is away) and
publishes each entry to T in R through Magnetar's asyncio client side of the binary protocol, as the
producer ``pulsar.repl.<local cluster>``:

* The entry travels as it was stored: the origin's metadata (producer name, sequence id, publish and event
  time, key, properties, compression, the batch as it was) with ``replicated_from`` set to the local
  cluster and the entry's origin position added as the property ``__magnetar.repl.source_position``; the
  SEND names the origin position too (``CommandSend.message_id``) and uses it as its sequence id
  (``ledger_id << 32 | entry_id``), so R's broker deduplicates by origin position: a replicator that
  restarts, a failover on either side or a retried send adds no copy.
* Skipped, and acknowledged at once: entries that came here by replication (``replicated_from`` set; so
  there are no loops), and entries whose ``replicate_to`` does not name R (pulsar-client's per-message
  ``replication_clusters``; ``disable_replication`` sends ``replicate_to = ["__local__"]``).
* The cursor is acknowledged cumulatively, in order, as R's receipts come back. At most
  ``pending_max`` entries are in flight; while R is unreachable the client producer keeps them and
  reconnects with backoff, the read loop waits for room, and the backlog grows in the cursor, never in
  memory. Local producers are not slowed: they never wait on a replicator.
* A producer that fails for good (R refused it) is closed and re-created after a backoff, with the
  cursor rewound to its mark-delete position: R's deduplication drops what it already has.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Any, Optional

from broker.managed_ledger.api import InitialPosition, ManagedCursor, Position
from broker.service.topics.dedup import SOURCE_POSITION_PROPERTY, origin_sequence_id
from broker.service.topics.replication import REPLICATOR_CURSOR_PREFIX
from broker.service.stats import RateMeter
from broker.service.topics.stats import ReplicatorStats
from magnetar.protocol import pb
from magnetar.protocol.client import Backoff, HandlerState
from magnetar.protocol.frames import parse_entry

if TYPE_CHECKING:
    from magnetar.protocol.client import Producer

    from .clients import RemoteClients

log = logging.getLogger("replicator")

_LOCAL_ONLY = "__local__"


def cursor_name(remote_cluster: str) -> str:
    return REPLICATOR_CURSOR_PREFIX + remote_cluster


def producer_name(local_cluster: str) -> str:
    return REPLICATOR_CURSOR_PREFIX + local_cluster


def should_replicate(metadata: pb.MessageMetadata, remote_cluster: str) -> bool:
    """False for entries that came by replication and for those whose ``replicate_to`` leaves out the remote."""
    if metadata.HasField("replicated_from"):
        return False
    if metadata.replicate_to:
        return remote_cluster in metadata.replicate_to
    return True


def replicated_metadata(metadata: pb.MessageMetadata, local_cluster: str, position: Position) -> pb.MessageMetadata:
    """The metadata the remote cluster stores: the origin's, plus ``replicated_from`` and the origin position."""
    out = pb.MessageMetadata()
    out.CopyFrom(metadata)
    out.replicated_from = local_cluster
    prop = out.properties.add()
    prop.key = SOURCE_POSITION_PROPERTY
    prop.value = f"{position.ledger_id}:{position.entry_id}"
    return out


class Replicator:
    """Replicates one topic (``topic``: a broker ``Topic``) to ``remote_cluster``; see the module docstring."""

    def __init__(self, topic: Any, *, local_cluster: str, remote_cluster: str, clients: "RemoteClients",
                 read_batch_max: int = 100, pending_max: int = 500, backoff_max_s: float = 5.0) -> None:
        self.topic = topic
        self.topic_name = topic.name
        self.local_cluster = local_cluster
        self.remote_cluster = remote_cluster
        self.clients = clients
        self.read_batch_max = read_batch_max
        self.pending_max = pending_max
        self.backoff_max_s = backoff_max_s
        self.cursor: Optional[ManagedCursor] = None
        self.producer: Optional["Producer"] = None
        self.msg_out = RateMeter()
        self.bytes_out = RateMeter()
        self.connected_since: Optional[str] = None
        self.last_error = ""
        # (position, receipt future or None for a skipped entry, publish time ms, messages, bytes)
        self._inflight: collections.deque[tuple[Position, Optional[asyncio.Future], int, int, int]] = \
            collections.deque()
        self._ack_target: Optional[Position] = None
        self._ack_wakeup = asyncio.Event()
        self._ack_task: Optional[asyncio.Task] = None
        self._task: Optional[asyncio.Task] = None
        self._closing = False
        self._head_publish_ms = 0
        self.log_prefix = f"[{self.topic_name} -> {remote_cluster}]"

    def __repr__(self) -> str:
        return f"Replicator({self.topic_name!r} -> {self.remote_cluster})"

    # --------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Opens (or creates, at the latest position) the cursor and starts replicating."""
        self.cursor = await self.topic.ml.open_cursor(cursor_name(self.remote_cluster),
                                                      initial_position=InitialPosition.LATEST)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name=f"replicator {self.log_prefix}")
        self._ack_task = loop.create_task(self._ack_loop(), name=f"replicator acks {self.log_prefix}")
        log.info("%s started at %s (backlog %d entries)", self.log_prefix, self.cursor.mark_delete_position,
                 self.cursor.backlog_entries())

    async def close(self) -> None:
        """Stops replicating; the cursor keeps the position acknowledged so far (persisted)."""
        if self._closing:
            return
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close_producer()
        self._advance_acks()
        self._ack_wakeup.set()
        if self._ack_task is not None:
            try:
                await asyncio.wait_for(self._ack_task, 10.0)
            except (TimeoutError, asyncio.CancelledError):
                self._ack_task.cancel()
            except Exception as exc:
                log.warning("%s last acknowledgement failed: %s", self.log_prefix, exc)
        self.connected_since = None

    async def delete(self) -> None:
        """Stops and deletes the cursor (the remote cluster was removed from the topic's clusters)."""
        await self.close()
        name = cursor_name(self.remote_cluster)
        if name in self.topic.ml.cursors:
            await self.topic.ml.delete_cursor(name)
        log.info("%s removed", self.log_prefix)

    # --------------------------------------------------------------------------------- the loop

    async def _run(self) -> None:
        backoff = Backoff(initial_s=0.1, max_s=self.backoff_max_s)
        while not self._closing:
            try:
                producer = await self._connect()
                backoff = Backoff(initial_s=0.1, max_s=self.backoff_max_s)
                await self._pump(producer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("%s %s; retrying", self.log_prefix, self.last_error)
            await self._close_producer()
            self._rewind()
            await asyncio.sleep(backoff.next_delay_s())

    async def _connect(self) -> "Producer":
        client = await self.clients.get(self.remote_cluster)
        producer = await client.create_producer(self.topic_name, producer_name=producer_name(self.local_cluster),
                                                max_pending_sends=self.pending_max, send_timeout_s=0)
        self.producer = producer
        self.connected_since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.last_error = ""
        log.info("%s connected (remote last sequence %d)", self.log_prefix, producer.broker_last_sequence_id)
        return producer

    async def _pump(self, producer: "Producer") -> None:
        cursor = self.cursor
        assert cursor is not None
        while not self._closing:
            if producer.state is HandlerState.FAILED or producer.state is HandlerState.CLOSED:
                raise ConnectionError(f"producer {producer.state.value}")
            entries = await cursor.read_entries(self.read_batch_max)
            if not entries:
                await cursor.wait_for_entries(timeout_s=1.0)
                continue
            for entry in entries:
                await self._replicate(producer, entry.position, entry.data)

    async def _replicate(self, producer: "Producer", position: Position, data: bytes) -> None:
        # Only the producer's metadata and payload go on: the local broker entry metadata (this region's broker
        # time and index) stays here, and the remote broker stamps its own on the copy it stores.
        parsed = parse_entry(data, require_checksum=False)
        md = parsed.metadata
        if not should_replicate(md, self.remote_cluster):
            self._inflight.append((position, None, 0, 0, 0))
            self._advance_acks()
            return
        if not self._inflight:
            self._head_publish_ms = md.publish_time
        messages = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
        fut = await producer.send_entry(
            replicated_metadata(md, self.local_cluster, position), parsed.payload, num_messages=messages,
            sequence_id=origin_sequence_id(position.ledger_id, position.entry_id),
            marker=md.HasField("marker_type"), source_position=(position.ledger_id, position.entry_id))
        self._inflight.append((position, fut, md.publish_time, messages, len(data)))
        fut.add_done_callback(self._on_receipt)

    def _on_receipt(self, fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self._advance_acks()

    def _advance_acks(self) -> None:
        """Moves the acknowledgement target over the completed head of the in-flight queue."""
        target = None
        inflight = self._inflight
        while inflight:
            position, fut, _publish_ms, messages, size = inflight[0]
            if fut is not None:
                if not fut.done() or fut.cancelled() or fut.exception() is not None:
                    break
                self.msg_out.record(messages)
                self.bytes_out.record(size)
            inflight.popleft()
            target = position
        if inflight:
            head = next((item for item in inflight if item[1] is not None), None)
            self._head_publish_ms = head[2] if head is not None else 0
        else:
            self._head_publish_ms = 0
        if target is not None:
            self._ack_target = target
            self._ack_wakeup.set()

    async def _ack_loop(self) -> None:
        """Acknowledges the newest completed position (one cursor write at a time; the cursor throttles)."""
        while True:
            await self._ack_wakeup.wait()
            self._ack_wakeup.clear()
            target = self._ack_target
            cursor = self.cursor
            if target is not None and cursor is not None and target > cursor.mark_delete_position:
                try:
                    await asyncio.shield(cursor.mark_delete(target))
                except Exception as exc:
                    log.warning("%s acknowledging %s failed: %s", self.log_prefix, target, exc)
            if self._closing and self._ack_target == target:
                if cursor is not None:
                    await asyncio.shield(cursor.flush())
                return

    def _rewind(self) -> None:
        """After a producer failure: forget what was in flight and read again from the mark-delete position."""
        self._inflight.clear()
        self._head_publish_ms = 0
        if self.cursor is not None and not self._closing:
            self.cursor.rewind()

    async def _close_producer(self) -> None:
        producer, self.producer = self.producer, None
        self.connected_since = None
        if producer is not None:
            try:  # receipts still on their way move the cursor; the rest is re-sent (and deduplicated) later
                await producer.close(flush_timeout_s=2.0)
            except Exception as exc:
                log.debug("%s closing the producer: %s", self.log_prefix, exc)

    # --------------------------------------------------------------------------------- stats

    @property
    def connected(self) -> bool:
        producer = self.producer
        return producer is not None and producer.state is HandlerState.READY

    def _outbound_connection(self) -> str:
        producer = self.producer
        conn = producer.connection if producer is not None and producer.state is HandlerState.READY else None
        return conn.target if conn is not None else ""

    def backlog(self) -> int:
        return self.cursor.backlog_entries() if self.cursor is not None else 0

    def delay_s(self) -> float:
        """Age of the oldest entry not yet acknowledged by the remote cluster (0 when caught up)."""
        if self.backlog() == 0:
            return 0.0
        if self._head_publish_ms:
            return max(0.0, time.time() - self._head_publish_ms / 1000)
        return 0.0

    def tick(self) -> None:
        self.msg_out.tick()
        self.bytes_out.tick()

    def stats(self) -> ReplicatorStats:
        """The outbound side of Pulsar's ``ReplicatorStats`` (the topic adds the inbound side)."""
        return ReplicatorStats(
            msg_rate_out=self.msg_out.rate(),
            msg_throughput_out=self.bytes_out.rate(),
            msg_out_counter=self.msg_out.total,
            bytes_out_counter=self.bytes_out.total,
            replication_backlog=self.backlog(),
            connected=self.connected,
            replication_delay_s=round(self.delay_s(), 3),
            outbound_connected_since=self.connected_since or "",
            outbound_connection=self._outbound_connection(),
            last_error=self.last_error,
        )
