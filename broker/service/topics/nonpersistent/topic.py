"""A non-persistent topic (``non-persistent://tenant/ns/topic``): messages relayed, never stored.

Theory of operation
-------------------

A SEND is handled inline, as for persistent topics, but nothing is appended anywhere: the entry (byte for
byte as received) is offered at once to every subscription, whose dispatch gives it to one consumer with
permits or drops it (``subscription.py``, ``dispatch.py``), and the receipt goes
back immediately with message id ``(0, 0)``, as Pulsar's ``NonPersistentTopic.publishMessage`` answers.
So a message published while a subscription has no consumer ready is lost for that subscription, and a
consumer subscribing later never sees it. There is no backlog, no deduplication (receipts answer every
SEND), no retention, no TTL, no backlog quota, no termination, no replication.

The topic is created on first use within an existing namespace, owned through the same bundles as
persistent topics (``BrokerService.get_topic``); unloading it tells every client to reconnect (they look it
up again and carry on with a fresh topic). A topic with no producer and no subscription for
``INACTIVE_UNLOAD_S`` unloads itself, as Pulsar's inactive-topic GC deletes it (there is nothing to delete).

Producer access modes work as for persistent topics, the topic epoch kept in memory only (as Pulsar does
for non-persistent topics).

Stats follow Pulsar's ``NonPersistentTopicStats``: the usual rates and counters, ``msgDropRate`` per
subscription (messages no consumer could take) and per publisher and topic (always 0 here: Pulsar drops at
publish only past ``maxConcurrentNonPersistentMessagePerConnection`` messages in flight on a connection,
and a Magnetar SEND is never in flight: it is dispatched before the next frame is read).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Optional

from broker.managed_ledger.api import Position
from magnetar.protocol.message_id import MessageId
from magnetar.topic_name import TopicName

from ...policies.backlog_quota import QuotaType
from ..consumer import Consumer
from ...errors import NotAllowedError, TopicBusyError, topic_not_ready
from ...latency import StorageStats
from .dispatch import Offer
from .subscription import NonPersistentSubscription
from ..model import SubscribeRequest
from ...stats import RateMeter
from ...policies.throttle import TopicRateLimits
from ..common import TopicCommon, TopicState
from ..stats import BacklogQuotaStats, NonPersistentPublisherStats, NonPersistentTopicStats

if TYPE_CHECKING:
    from config_store.models import Policies

    from ..api import ConsumerSink, TopicProducer as Producer
    from ...service import BrokerService

log = logging.getLogger("broker.service.nonpersistent")

INACTIVE_UNLOAD_S = 60.0  # Pulsar: brokerDeleteInactiveTopicsMaxInactiveDurationSeconds default
_NOTHING_STORED = Position(0, 0)  # the id Pulsar answers for a non-persistent message


class NoBacklogQuota:
    """A non-persistent topic has no backlog, so no quota applies (Pulsar: ``checkBacklogQuotaExceeded``
    is a no-op there); the backlog quota monitor and ``/metrics`` still find the fields they read."""

    def __init__(self) -> None:
        self.evictions = {quota_type: 0 for quota_type in QuotaType}

    async def check_producer(self, producer_name: str) -> None:
        return None

    async def check(self) -> None:
        return None

    @staticmethod
    def stats() -> BacklogQuotaStats:
        return BacklogQuotaStats()  # no limits, no backlog


class NonPersistentTopic(TopicCommon):
    """See the module docstring. Made by ``BrokerService.get_topic`` for the non-persistent domain."""

    persistent = False

    def __init__(self, service: "BrokerService", topic_name: TopicName,
                 policies: Optional["Policies"] = None, own_topic_policies=None) -> None:
        self.service = service
        self.config = service.config
        self.topic_name = topic_name
        self.name = str(topic_name)
        self.state = TopicState.ACTIVE
        self.policies = policies
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.topic_epoch: Optional[int] = None
        self.topic_backlog_quotas: Optional[dict] = None  # kept for the service's policy listener; unused
        self.backlog_quota = NoBacklogQuota()
        self.msg_in = RateMeter()
        self.bytes_in = RateMeter()
        self.publish_latency = service.publish_latency  # broker-wide: SEND arrival to receipt
        self.storage_stats = StorageStats(time.perf_counter)  # stays empty: nothing is stored
        self.entries_added = 0
        self.batch_published = False
        self._waiting_exclusive: collections.deque[tuple[Producer, asyncio.Future]] = collections.deque()
        self._removed_msg_out = 0
        self._removed_bytes_out = 0
        self._tasks: set[asyncio.Task] = set()
        self._idle_since = time.monotonic()
        self._unload_requested = False
        self.own_topic_policies = own_topic_policies  # the topic's own TopicPolicies, when any are set
        self.rate_limits = TopicRateLimits(self)  # the publish rate limit (throttle.py)
        self.rate_limits.refresh()

    def __repr__(self) -> str:
        return f"NonPersistentTopic({self.name!r}, {self.state.value})"

    # --------------------------------------------------------------------------------- policies (nothing stored)

    async def apply_policies(self, policies: Optional["Policies"]) -> None:
        self.policies = policies
        self.rate_limits.refresh()  # publish rate only: nothing is read

    async def set_topic_replication_clusters(self, clusters: Optional[list[str]]) -> None:
        """Replication of non-persistent topics is not served: the setting is ignored."""

    async def check_message_ttl(self) -> None:
        """Nothing is kept, so nothing expires."""

    # --------------------------------------------------------------------------------- producers

    async def add_producer(self, producer: Producer) -> Optional[asyncio.Future]:
        """Admits ``producer`` under its access mode, as ``Topic.add_producer`` (epoch in memory only).

        Raises:
            ProducerBusyError, ProducerFencedError, ServiceNotReadyError, NotAllowedError.
        """
        self.check_active()
        return self._admit(producer)

    def _waiting_granted(self, producer: Producer, fut: asyncio.Future) -> None:
        fut.set_result(None)  # nothing to store: the epoch lives in memory only

    def last_sequence_id(self, producer_name: str) -> int:
        return -1  # no deduplication state: nothing is stored

    async def ensure_subscription(self, name: str) -> None:
        """A producer's ``initial_subscription_name``: subscriptions exist only with consumers here."""

    def publish(self, producer: "Producer", entry: bytes, *, sequence_id: int, highest_sequence_id: Optional[int],
                num_messages: int, marker: bool = False, received_s: Optional[float] = None,
                entry_messages: Optional[int] = None) -> None:
        """Offers the entry to every subscription now and answers the receipt ``(0, 0)`` at once.
        ``entry_messages`` (the persistent topic's hint for broker entry indexes) means nothing here: nothing
        is stored, so nothing is indexed."""
        seq = sequence_id
        highest = highest_sequence_id
        if self.state is not TopicState.ACTIVE:
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(topic_not_ready(self.name, self.state.value))
            producer.track(seq, highest, fut, started=received_s)
            return
        started = time.perf_counter() if received_s is None else received_s
        messages = max(num_messages, 1)
        size = len(entry)
        self._count_published(producer, messages, size)
        self.entries_added += 1
        if num_messages > 1:
            self.batch_published = True
        if self.subscriptions:
            offer = Offer(entry, messages)
            for sub in list(self.subscriptions.values()):
                sub.dispatch(offer)
        stored = asyncio.get_running_loop().create_future()
        stored.set_result(_NOTHING_STORED)
        producer.track(seq, highest, stored, started=started)  # the receipt counts the dispatch as the write

    def on_publish_failure(self, error) -> None:
        """Nothing is written, so no failure needs the topic reopened."""

    # --------------------------------------------------------------------------------- subscriptions

    async def subscribe(self, request: SubscribeRequest, sink: "ConsumerSink") -> Consumer:
        """Attaches a consumer, creating its subscription if this is its first consumer.

        Raises:
            NotAllowedError (empty name, read_compacted), ConsumerBusyError, ConsumerAssignError,
            ServiceNotReadyError.
        """
        self.check_active()
        name = request.subscription
        if not name:
            raise NotAllowedError("the subscription name is empty")
        if request.read_compacted:
            raise NotAllowedError("readCompacted only valid on persistent topics")
        sub = self.subscriptions.get(name)
        if sub is None:
            sub = self.subscriptions[name] = NonPersistentSubscription(self, name)
        consumer = Consumer(sub, sink, request.consumer_id, request.consumer_name, sub_type=request.sub_type,
                            priority_level=request.priority_level, metadata=request.metadata,
                            key_shared_meta=request.key_shared, consumer_epoch=request.consumer_epoch,
                            max_unacked_messages=0)
        try:
            sub.add_consumer(consumer)
        except BaseException:
            if not sub.consumers and self.subscriptions.get(name) is sub:
                sub.closed = True
                self.forget_subscription(sub)
            raise
        return consumer

    def forget_subscription(self, sub: NonPersistentSubscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            stats = sub.stats()
            self._removed_msg_out += stats.msg_out_counter
            self._removed_bytes_out += stats.bytes_out_counter

    async def unsubscribe(self, consumer: Consumer) -> None:
        await consumer.subscription.delete(requester=consumer)

    async def create_subscription(self, name: str, position=None) -> None:
        """Admin create: a subscription without consumers does not exist here (Pulsar returns one that is
        never registered), so this succeeds and changes nothing."""
        self.check_active()

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        sub = self.subscriptions.get(name)
        if sub is not None:
            await sub.delete(force=force)

    # Seek, reset, skip and expire change nothing: there is no cursor (Pulsar answers them the same way).

    def seek_position(self, ledger_id: int, entry_id: int) -> None:
        return None

    async def find_position(self, timestamp_ms: int) -> None:
        return None

    async def reset_cursor(self, sub_name: str, *, position=None, timestamp_ms: Optional[int] = None) -> None:
        return None

    async def skip(self, sub_name: str, n: int) -> int:
        return 0

    async def expire(self, sub_name: str, seconds: float) -> int:
        raise NotAllowedError("Expire message by timestamp is not supported for non-persistent topic.")

    async def last_message_id(self) -> MessageId:
        """GET_LAST_MESSAGE_ID: nothing is stored, so ``(-1, -1)``: pulsar-client's ``has_message_available()``
        answers False. (Pulsar's broker fails the command instead: getLastPosition is unsupported.)"""
        return MessageId(-1, -1, self.topic_name.partition_index if self.topic_name.is_partition else -1)

    async def terminate(self):
        raise NotAllowedError(f"topic {self.name} is non-persistent: termination is not allowed")

    # --------------------------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        """Unload: every client is told to reconnect; nothing to flush."""
        if self.state in (TopicState.CLOSED, TopicState.DELETED):
            return
        self.state = TopicState.CLOSING
        await self._disconnect_all()
        self.state = TopicState.CLOSED

    async def delete(self, *, force: bool = False) -> None:
        """Refused (TopicBusyError) while producers or consumers are connected, unless ``force``."""
        if not force and self.has_clients():
            raise TopicBusyError(f"topic {self.name} has connected producers or consumers")
        self.state = TopicState.CLOSING
        await self._disconnect_all()
        self.state = TopicState.DELETED

    async def _disconnect_all(self) -> None:
        self._disconnect_producers()
        for sub in list(self.subscriptions.values()):
            sub.disconnect_consumers()
        self.subscriptions.clear()
        if self._tasks:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _check_inactive(self) -> None:
        if self.has_clients() or self._waiting_exclusive:
            self._idle_since = time.monotonic()
            return
        if time.monotonic() - self._idle_since >= INACTIVE_UNLOAD_S and not self._unload_requested \
                and self.state is TopicState.ACTIVE:
            self._unload_requested = True
            log.info("[%s] inactive for %.0fs: unloading", self.name, INACTIVE_UNLOAD_S)
            self.service.spawn(self.service.unload_topic(self.name), f"unload inactive {self.name}")

    # --------------------------------------------------------------------------------- stats

    def tick(self) -> None:
        self._tick_traffic()
        self._check_inactive()

    @staticmethod
    def _publisher_stats(producer: Producer) -> NonPersistentPublisherStats:
        return NonPersistentPublisherStats.of(producer.stats())  # never dropped at publish (module docstring)

    def stats(self) -> NonPersistentTopicStats:
        """Pulsar's NonPersistentTopicStats, with zero storage and backlog fields for dashboards."""
        subs = {name: s.stats() for name, s in self.subscriptions.items()}
        publishers = tuple(self._publisher_stats(p) for p in self.producers.values())
        msgs = self.msg_in.total
        return NonPersistentTopicStats(
            msg_rate_in=self.msg_in.rate(),
            msg_throughput_in=self.bytes_in.rate(),
            msg_rate_out=sum(s.msg_rate_out for s in subs.values()),
            msg_throughput_out=sum(s.msg_throughput_out for s in subs.values()),
            bytes_in_counter=self.bytes_in.total,
            msg_in_counter=msgs,
            bytes_out_counter=self._removed_bytes_out + sum(s.bytes_out_counter for s in subs.values()),
            msg_out_counter=self._removed_msg_out + sum(s.msg_out_counter for s in subs.values()),
            average_msg_size=(self.bytes_in.total / msgs) if msgs else 0.0,
            msg_drop_rate=sum(p.msg_drop_rate for p in publishers),
            waiting_publishers=len(self._waiting_exclusive),
            publish_rate_limited_times=self.rate_limits.publish_rate_limited_times,
            deduplication_status="Disabled",
            topic_epoch=self.topic_epoch,
            publishers=publishers,
            subscriptions=subs,
            backlog_quota=self.backlog_quota.stats(),
        )

    def internal_stats(self) -> dict:
        """Pulsar's answer for a non-persistent topic: the entries added and one empty record per cursor."""
        return {"entriesAddedCounter": self.entries_added, "numberOfEntries": 0, "totalSize": 0,
                "ledgers": [], "cursors": {name: {} for name in self.subscriptions}}
