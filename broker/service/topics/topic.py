"""A persistent topic: its managed ledger, producers (with access modes and deduplication), and
subscriptions (durable ones recovered from the ledger's cursors, non-durable ones for readers).

States: ACTIVE → CLOSING → CLOSED (unload) or DELETED. Anything but ACTIVE refuses producers, consumers
and SENDs with ServiceNotReady, which pulsar-client answers with a fresh lookup and a retry.

Producer access modes (``ProducerAccessMode``, rules in ``producer_access.py``): Shared producers coexist
unless an exclusive one holds or awaits the topic (ProducerBusy). Exclusive takes the topic only when no other
producer is connected or waiting (ProducerFenced otherwise, as Pulsar); ExclusiveWithFencing fails the waiting
ones, closes every other producer and takes it; WaitForExclusive is answered ``producer_ready=false`` and
queued until the topic is free. Each new exclusive holder increments the *topic epoch*; a producer
reconnecting with an older epoch than the topic's is fenced (ProducerFenced).
The epoch is stored in the managed ledger's properties (``pulsar.topic.epoch``, as Pulsar does) before the
exclusive producer is admitted, and read when the topic is loaded, so a fenced producer stays fenced after
an unload or a failover.

Termination (:meth:`Topic.terminate`, admin ``terminate``): the managed ledger is terminated (stored, so it
survives a reload), producers are refused (TopicTerminatedError, on PRODUCER and on every later SEND) and
each consumer gets REACHED_END_OF_TOPIC once its subscription has nothing left (see the dispatcher).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from typing import TYPE_CHECKING, Optional

from broker.managed_ledger.api import InitialPosition, ManagedLedger, Position
from magnetar.protocol.frames import parse_entry
from magnetar.protocol.message_id import MessageId
from magnetar.topic_name import TopicName

from . import dedup as dedup_mod
from ..policies import delayed_delivery as delayed_policy
from ..policies.backlog_quota import TopicBacklogQuota
from .consumer import Consumer
from ..errors import (BrokerServiceError, NotAllowedError, PersistenceError, ProducerFencedError,
                     ServiceNotReadyError, TopicBusyError, TopicTerminatedError,
                     topic_not_ready)
from .entries import entry_info, publish_time_of
from ..latency import StorageStats
from .common import TopicCommon, TopicState
from .replication import TopicReplication
from .stats import ReplicationInboundStats, ReplicationStats, TopicStats
from ..stats import RateMeter
from .compaction.compactor import TopicCompaction
from .model import LATEST_ID, SubscribeRequest, SubType
from .subscription import REPLICATED_PROPERTY, Subscription
from .subscription_admin import TopicSubscriptions, is_reserved_subscription
from ..tasks import shielded
from ..policies.throttle import TopicRateLimits

if TYPE_CHECKING:
    from config_store.models import Policies

    from .api import ConsumerSink, TopicProducer as Producer
    from ..service import BrokerService

log = logging.getLogger("broker.service.topics.topic")

TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"


class Topic(TopicSubscriptions, TopicCommon):
    def __init__(self, service: "BrokerService", topic_name: TopicName, ml: ManagedLedger) -> None:
        self.service = service
        self.config = service.config
        self._broker_retention: Optional[tuple[float, int]] = None  # before any namespace policy (first apply)
        self.topic_name = topic_name
        self.name = str(topic_name)
        self.ml = ml
        self.state = TopicState.ACTIVE
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.dedup = dedup_mod.Deduplication(ml, snapshot_interval_entries=self.config.dedup_snapshot_interval_entries,
                                             recent_positions_max=self.config.dedup_recent_positions_max)
        self.topic_epoch: Optional[int] = None
        self.policies: Optional["Policies"] = None
        self.msg_in = RateMeter()
        self.bytes_in = RateMeter()
        self.publish_latency = service.publish_latency  # broker-wide: SEND arrival to receipt
        self.storage_stats = StorageStats(time.perf_counter, service.storage_write_latency)  # add latency, sizes
        self._removed_msg_out = 0
        self._waiting_exclusive: collections.deque[tuple[Producer, asyncio.Future]] = collections.deque()
        self._sub_locks: dict[str, asyncio.Lock] = {}
        self._policy_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._unload_requested = False
        self.replication: Optional[TopicReplication] = None
        self.replication_clusters: list[str] = []
        self.topic_replication_clusters: Optional[list[str]] = None  # topic-level override, when set
        self.replication_in: dict[str, tuple[RateMeter, RateMeter]] = {}  # origin cluster -> (msgs, bytes)
        self.topic_backlog_quotas: Optional[dict] = None  # topic-level backlog quotas by type, when set
        self.own_topic_policies = None  # the topic's own TopicPolicies, when any are set (policies/delayed_delivery.py)
        self.backlog_quota = TopicBacklogQuota(self, service.backlog_quota_defaults,
                                               publish_time_of=publish_time_of)
        self.rate_limits = TopicRateLimits(self)  # publish and dispatch rate limits (throttle.py)
        self.compaction = TopicCompaction(self)  # topic compaction and the compacted view (compaction.py)

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, {self.state.value})"

    # --------------------------------------------------------------------------------- loading, policies

    @property
    def replicated_subscriptions(self):
        """The replicated-subscriptions controller of this topic (None without replication)."""
        return self.replication.replicated_subscriptions if self.replication is not None else None

    async def initialize(self, policies: Optional["Policies"],
                         topic_replication_clusters: Optional[list[str]] = None) -> None:
        self._load_epoch()
        for name, cursor in self.ml.cursors.items():
            if is_reserved_subscription(name) or not getattr(cursor, "durable", True):
                continue
            props = getattr(cursor, "properties", None) or {}
            self.subscriptions[name] = Subscription(self, name, cursor, durable=True,
                                                    replicated=bool(props.get(REPLICATED_PROPERTY)))
        provider = self.service.replication
        if provider is not None:
            self.replication = provider.attach(self)
        self.topic_replication_clusters = topic_replication_clusters
        await self.apply_policies(policies)

    async def apply_policies(self, policies: Optional["Policies"]) -> None:
        async with self._policy_lock:
            self.policies = policies
            self._apply_retention(policies)
            delayed_policy.policies_changed(self)
            self.rate_limits.refresh()
            dedup = policies.deduplication_enabled if policies is not None else None
            if dedup is None:
                dedup = self.config.deduplication_enabled
            if dedup:
                await self.dedup.enable()
            else:
                await self.dedup.disable()
            await self._apply_replication()

    def _apply_retention(self, policies: Optional["Policies"]) -> None:
        """The namespace's retention policy reaches the managed ledger (minutes and MB; -1: unlimited). A
        namespace without one (both 0, the stored default) keeps the broker's ``managed_ledger_retention_*``."""
        ml_config = getattr(self.ml, "config", None)  # the broker's managed_ledger_retention_* (test doubles: none)
        if self._broker_retention is None:
            self._broker_retention = ((ml_config.retention_time_s, ml_config.retention_size_bytes)
                                      if ml_config is not None else (0, 0))
        defaults = self._broker_retention
        minutes = getattr(policies, "retention_time_in_minutes", 0)
        mb = getattr(policies, "retention_size_in_mb", 0)
        if (minutes, mb) == (0, 0):
            time_s, size_bytes = defaults
        else:
            time_s = -1 if minutes < 0 else minutes * 60
            size_bytes = -1 if mb < 0 else mb * 1024 * 1024
        self.ml.set_retention(time_s, size_bytes)

    async def set_topic_replication_clusters(self, clusters: Optional[list[str]]) -> None:
        """The topic-level override of the namespace's replication clusters changed (None: removed)."""
        async with self._policy_lock:
            self.topic_replication_clusters = clusters
            await self._apply_replication()

    async def _apply_replication(self) -> None:
        if self.topic_replication_clusters is not None:
            clusters = list(self.topic_replication_clusters)
        else:
            clusters = list(getattr(self.policies, "replication_clusters", None) or [])
        self.replication_clusters = clusters
        if self.replication is not None and self.state is TopicState.ACTIVE:
            await self.replication.set_clusters(clusters)

    # --------------------------------------------------------------------------------- producers

    async def add_producer(self, producer: Producer) -> Optional[asyncio.Future]:
        """Admits ``producer``; returns a future when it must wait for exclusive access (WaitForExclusive).

        Raises:
            ProducerBusyError, ProducerFencedError, ServiceNotReadyError: as Pulsar answers them.
        """
        self.check_active()
        if self.ml.terminated:
            raise TopicTerminatedError(f"topic {self.name} is terminated")
        if producer.is_replicator:  # its sends are deduplicated by origin position, whatever the policy
            await self.dedup.track_replicated()
            self.check_active()
        wait = self._admit(producer)
        if wait is not None:
            return wait
        if producer.exclusive:
            await self._store_epoch(producer)
        return None

    def _load_epoch(self) -> None:
        stored = self.ml.properties.get(TOPIC_EPOCH_PROPERTY)
        if stored is None:
            return
        try:
            self.topic_epoch = int(stored)
        except ValueError:
            log.warning("[%s] ignoring the unreadable stored topic epoch %r", self.name, stored)

    async def _store_epoch(self, producer: Producer) -> None:
        """Stores the topic epoch before ``producer`` (admitted with it) hears of it; it is refused (and
        removed) if that fails, or if another exclusive producer fenced it meanwhile. Writes are serialised
        by the managed ledger in call order and carry the epoch current at the call, so the stored epoch
        never goes back."""
        try:
            await shielded(self.ml.set_properties({TOPIC_EPOCH_PROPERTY: str(self.topic_epoch)}))
        except BaseException:
            self.remove_producer(producer)
            raise
        if self.producers.get(producer.name) is not producer:
            raise ProducerFencedError(f"producer {producer.name!r} was fenced by a newer exclusive producer "
                                      f"while topic epoch {producer.topic_epoch} was being stored")

    async def _admit_waiting(self, producer: Producer, fut: asyncio.Future) -> None:
        try:
            await self._store_epoch(producer)
        except BaseException as exc:
            if not fut.done():
                fut.cancel() if isinstance(exc, asyncio.CancelledError) else fut.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            if not fut.done():
                fut.set_result(None)

    def _waiting_granted(self, producer: Producer, fut: asyncio.Future) -> None:
        self.spawn(self._admit_waiting(producer, fut), f"store topic epoch {self.name}")

    def last_sequence_id(self, producer_name: str) -> int:
        return self.dedup.last_sequence_id(producer_name)

    def publish(self, producer: "Producer", entry: bytes, *, sequence_id: int, highest_sequence_id: Optional[int],
                num_messages: int, marker: bool = False, received_s: Optional[float] = None,
                entry_messages: Optional[int] = None) -> None:
        """Stores one SEND's entry (or answers a duplicate); the producer sends the receipt in order.
        ``num_messages`` is the SEND's count (0 when the client left it out: one message); ``received_s``
        (``time.perf_counter()``) is when the SEND arrived, where the publish latency starts (default: now);
        ``entry_messages``: the entry metadata's message count when the caller parsed it (the broker entry
        index counts it; without it the managed ledger reads it from the entry)."""
        seq = sequence_id
        highest = highest_sequence_id
        if self.state is not TopicState.ACTIVE or self.ml.terminated:
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(TopicTerminatedError(f"topic {self.name} is terminated") if self.ml.terminated
                              else topic_not_ready(self.name, self.state.value))
            producer.track(seq, highest, fut, started=received_s)
            return
        dedup = self.dedup
        # pulsar-client (C++) sends a batch with its first sequence id and no highest one; its members are
        # numbered consecutively, so the batch covers seq .. seq + n - 1 (what the Java client would send).
        # A replicator's sequence id is its entry's origin position, one per entry, whatever the batch size.
        if producer.is_replicator:
            top = seq
        else:
            top = highest if highest is not None else seq + max(num_messages, 1) - 1
        deduplicate = dedup.applies_to(producer.name)
        if deduplicate:
            status, fut = dedup.check(producer.name, seq, top)
            if status is dedup_mod.Status.DUPLICATE:
                producer.track(seq, highest, fut, started=received_s)
                return
        size = len(entry)
        stored = producer.expect(seq, highest, started=received_s)  # the receipt, in the turn it is stored
        try:
            handed = time.perf_counter()
            fut = self.ml.add_entry_nowait(entry, num_messages=entry_messages, on_done=stored)
        except Exception as exc:
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
            stored(fut)
        else:
            fut.add_done_callback(functools.partial(self.storage_stats.on_add_done, handed, size))
        if deduplicate:
            dedup.pushed(producer.name, seq, top, fut)
        if marker and producer.is_replicator:
            fut.add_done_callback(lambda f: self._replicated_marker_stored(f, entry))
        messages = num_messages
        self._count_published(producer, messages, size)
        if producer.is_replicator:
            meters = self.replication_in.get(producer.origin_cluster)
            if meters is None:
                meters = self.replication_in[producer.origin_cluster] = (RateMeter(), RateMeter())
            meters[0].record(messages)
            meters[1].record(size)

    def _replicated_marker_stored(self, fut: asyncio.Future, entry: bytes) -> None:
        """A marker replicated from another cluster is stored: the replicated-subscriptions controller reads it."""
        if fut.cancelled() or fut.exception() is not None or self.replication is None:
            return
        try:
            parsed = parse_entry(entry, require_checksum=False)
        except Exception as exc:
            log.warning("[%s] undecodable replicated marker at %s: %s", self.name, fut.result(), exc)
            return
        self.replication.on_marker(fut.result(), parsed.metadata, parsed.payload)

    def on_publish_failure(self, error: BrokerServiceError) -> None:
        """A write failed: the managed ledger is fenced or unusable, so the topic is unloaded and reopened by
        whoever looks it up next (clients get CLOSE_PRODUCER/CLOSE_CONSUMER and reconnect)."""
        if isinstance(error, (PersistenceError, ServiceNotReadyError)) and not self._unload_requested \
                and self.state is TopicState.ACTIVE:
            self._unload_requested = True
            log.warning("[%s] unloading after a failed write: %s", self.name, error)
            self.service.spawn(self.service.unload_topic(self.name), f"unload {self.name}")

    # --------------------------------------------------------------------------------- subscriptions

    def _lock_for(self, name: str) -> asyncio.Lock:
        lock = self._sub_locks.get(name)
        if lock is None:
            lock = self._sub_locks[name] = asyncio.Lock()
        return lock

    async def subscribe(self, request: SubscribeRequest, sink: "ConsumerSink") -> Consumer:
        """Attaches a consumer (its client reached through ``sink``), creating its subscription if needed."""
        self.check_active()
        name = request.subscription
        if not name or is_reserved_subscription(name):
            raise NotAllowedError(f"subscription name {name!r} is reserved or empty")
        if request.read_compacted:  # as Pulsar: only where one consumer reads everything in order
            if request.sub_type not in (SubType.Exclusive, SubType.Failover):
                raise NotAllowedError("readCompacted only allowed on failover or exclusive subscriptions")
            await self.compaction.ensure_loaded()
        async with self._lock_for(name):
            self.check_active()
            sub = self.subscriptions.get(name)
            if sub is not None and sub.closed:
                async with sub._op_lock:  # an unsubscribe in progress: let it delete the cursor first
                    pass
                sub = self.subscriptions.get(name)
                if sub is not None and sub.closed:
                    raise ServiceNotReadyError(f"subscription {name!r} on {self.name} is closing")
            if request.durable:
                if sub is None:
                    cursor = await shielded(self.ml.open_cursor(name, initial_position=request.initial_position))
                    props = getattr(cursor, "properties", None) or {}
                    sub = Subscription(self, name, cursor, durable=True,
                                       replicated=bool(props.get(REPLICATED_PROPERTY)))
                    self.subscriptions[name] = sub
                elif not sub.durable:
                    raise NotAllowedError(f"a non-durable subscription named {name!r} exists on {self.name}")
                if request.replicate_subscription_state:
                    await sub.set_replicated(True)
            else:
                if sub is not None and sub.durable:
                    raise NotAllowedError(f"cannot create a non-durable subscription named like the durable "
                                          f"subscription {name!r}")
                if sub is None:
                    start = self._reader_start(request)
                    cursor = self.ml.new_non_durable_cursor(start, name=name)
                    sub = Subscription(self, name, cursor, durable=False)
                    self.subscriptions[name] = sub
                    if request.start_message_rollback_duration_s > 0:
                        ts = int(time.time() * 1000) - request.start_message_rollback_duration_s * 1000
                        await sub.reset(await self.find_position(ts))
            consumer = Consumer(sub, sink, request.consumer_id, request.consumer_name, sub_type=request.sub_type,
                                priority_level=request.priority_level, metadata=request.metadata,
                                key_shared_meta=request.key_shared, consumer_epoch=request.consumer_epoch,
                                max_unacked_messages=self.config.max_unacked_messages_per_consumer)
            consumer.read_compacted = request.read_compacted
            await sub.add_consumer(consumer)
            if self.state is not TopicState.ACTIVE:  # unloaded meanwhile: its consumers were already told
                sub.remove_consumer(consumer)
                raise topic_not_ready(self.name, self.state.value)
            return consumer

    def before_first(self) -> Position:
        first = self.ml.first_position()
        return Position(first.ledger_id, first.entry_id - 1)

    def _reader_start(self, request: SubscribeRequest) -> Position:
        """Where a reader's non-durable cursor starts (it reads from the entry after this position).

        A start id ``(l, e)`` starts *at* entry e, as Pulsar does (it treats every start id as a batch id
        and steps back one entry): the client drops what precedes its start id, or the start id itself
        when not inclusive."""
        start = request.start_message_id
        if start is not None:
            ledger, entry = start.ledger_id, start.entry_id
            if ledger == LATEST_ID:
                return self.ml.last_confirmed_position
            if ledger < 0:
                return self.before_first()
            if entry >= 0:
                return Position(ledger, entry - 1)
            return Position(ledger, entry)
        if request.initial_position is InitialPosition.EARLIEST:
            return self.before_first()
        return self.ml.last_confirmed_position

    def forget_subscription(self, sub: Subscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            lock = self._sub_locks.get(sub.name)
            if lock is not None and not lock.locked():
                del self._sub_locks[sub.name]
            self._removed_msg_out += sub._removed_msg_out + sum(c.msg_out.total for c in sub.consumers)
            self.rate_limits.forget(sub.name)

    async def last_message_id(self) -> MessageId:
        """GET_LAST_MESSAGE_ID: the last entry a consumer can be given, with the batch index of its last message.

        Marker entries (replicated-subscription snapshots and the like) are never dispatched, so trailing ones
        are stepped over backwards, as Pulsar's broker does: a reader looping on ``has_message_available()``
        would otherwise wait forever for a message that never comes. Entry id -1 when there is no message.
        """
        position = self.ml.last_confirmed_position
        batch_index = -1
        while position.entry_id >= 0:
            try:
                entry = await self.ml.read_entry(position)
            except Exception as exc:  # the position is still the best answer there is
                log.debug("[%s] reading entry %s for the last message id failed: %s", self.name, position, exc)
                break
            info = entry_info(entry.data)
            if not info.marker:
                if info.metadata.HasField("num_messages_in_batch"):
                    batch_index = info.num_messages - 1
                break
            position = self.ml.previous_position(position)
        partition = self.topic_name.partition_index if self.topic_name.is_partition else -1
        return MessageId(position.ledger_id, position.entry_id, partition, batch_index)

    # --------------------------------------------------------------------------------- termination

    async def terminate(self) -> Position:
        """Admin ``terminate``: no more messages, ever. Returns the last message's position (the same on a
        second call). Consumers that have acknowledged everything are told REACHED_END_OF_TOPIC."""
        self.check_active()
        position = await shielded(self.ml.terminate())
        log.info("[%s] terminated; last message %s", self.name, position)
        for sub in list(self.subscriptions.values()):
            dispatcher = getattr(sub, "dispatcher", None)
            if dispatcher is not None:
                dispatcher.wake()
        return position

    # --------------------------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        """Unload: tells every client to reconnect, stops dispatchers, flushes cursors, closes the ledger."""
        if self.state in (TopicState.CLOSED, TopicState.DELETED):
            return
        self.state = TopicState.CLOSING
        await self._disconnect_all(flush=True)
        if self.replication is not None:
            await self.replication.close()
        await self.dedup.close()
        await self.compaction.close()
        await self.ml.close()
        self.state = TopicState.CLOSED

    async def _disconnect_all(self, *, flush: bool) -> None:
        self._disconnect_producers()
        results = await asyncio.gather(*(s.close() if flush else s._shutdown()
                                         for s in list(self.subscriptions.values())), return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):
                log.warning("[%s] closing a subscription failed: %s", self.name, r)
        if self._tasks:  # let them finish (a cancelled cursor write can fence the cursor), within bounds
            _done, pending = await asyncio.wait(list(self._tasks), timeout=10.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def delete(self, *, force: bool = False) -> None:
        """Deletes the topic's data. Without ``force`` refuses while producers or consumers are connected."""
        if not force and self.has_clients():
            raise TopicBusyError(f"topic {self.name} has connected producers or consumers")
        self.state = TopicState.CLOSING
        for sub in self.subscriptions.values():
            sub.closed = True
            sub.disconnect_consumers()
        await self._disconnect_all(flush=False)
        if self.replication is not None:
            await self.replication.close()
        await self.compaction.close(delete=True)
        await self.ml.delete()
        self.state = TopicState.DELETED

    # --------------------------------------------------------------------------------- stats

    def tick(self) -> None:
        self._tick_traffic()
        for meters in self.replication_in.values():
            meters[0].tick()
            meters[1].tick()
        if self.replication is not None:
            self.replication.tick()

    def replication_stats(self) -> dict[str, ReplicationStats]:
        """Per remote cluster: outbound (our replicator) and inbound (its replicator's publishing here)."""
        outbound = self.replication.stats() if self.replication is not None else {}
        inbound = {cluster: ReplicationInboundStats(msg_rate_in=msgs.rate(), msg_throughput_in=size.rate(),
                                                    msg_in_counter=msgs.total)
                   for cluster, (msgs, size) in self.replication_in.items()}
        return {cluster: ReplicationStats(outbound=outbound.get(cluster), inbound=inbound.get(cluster))
                for cluster in {**outbound, **inbound}}

    def stats(self) -> TopicStats:
        subs = {name: s.stats() for name, s in self.subscriptions.items()}
        msgs = self.msg_in.total
        return TopicStats(
            msg_rate_in=self.msg_in.rate(),
            msg_throughput_in=self.bytes_in.rate(),
            msg_rate_out=sum(s.msg_rate_out for s in subs.values()),
            msg_throughput_out=sum(s.msg_throughput_out for s in subs.values()),
            bytes_in_counter=self.bytes_in.total,
            msg_in_counter=msgs,
            bytes_out_counter=sum(s.bytes_out_counter for s in subs.values()),
            msg_out_counter=self._removed_msg_out + sum(s.msg_out_counter for s in subs.values()),
            average_msg_size=(self.bytes_in.total / msgs) if msgs else 0.0,
            storage_size_bytes=self.ml.total_size,
            backlog_size_bytes=max([s.backlog_size_bytes for s in subs.values()], default=0),
            waiting_publishers=len(self._waiting_exclusive),
            publish_rate_limited_times=self.rate_limits.publish_rate_limited_times,
            deduplication_status=self.dedup.stats_status(),
            topic_epoch=self.topic_epoch,
            publishers=tuple(p.stats() for p in self.producers.values()),
            subscriptions=subs,
            replication=self.replication_stats(),
            non_contiguous_deleted_messages_ranges=sum(s.non_contiguous_deleted_messages_ranges
                                                       for s in subs.values()),
            backlog_quota=self.backlog_quota.stats(),
            compaction=self.compaction.stats(),
        )

    def internal_stats(self) -> dict:
        out = dict(self.ml.internal_stats())
        cursors = dict(out.get("cursors") or {})
        for name, sub in self.subscriptions.items():
            cursors[name] = {**cursors.get(name, {}), **sub.internal_stats()}
        out["cursors"] = cursors
        out["compactedLedger"] = self.compaction.internal_stats()
        return out
