"""Backlog quotas, as Pulsar's ``BacklogQuotaManager`` enforces them.

A quota bounds what a topic's slowest durable subscription leaves unacknowledged: by size
(``destination_storage``: the estimated bytes of its backlog, the ``backlogSize`` of topic stats) or by age
(``message_age``: the publish time of the entry after its mark-delete position). Each type's quota comes
from the topic's own policies, else its namespace's ``backlog_quota_map``, else the broker's defaults; a
``-1`` limit is no limit. A topic is over a size quota when its backlog is ``>=`` the limit (Pulsar's rule),
over an age quota when its oldest unacknowledged message is older than the limit.

What happens over quota depends on the quota's policy:

* ``producer_request_hold`` / ``producer_exception``: a PRODUCER is refused with ServerError
  ``ProducerBlockedQuotaExceededError`` / ``...Exception`` (checked when it arrives), and the periodic
  check closes the producers already connected (CLOSE_PRODUCER: the client reconnects and is refused
  until the backlog is back under quota). pulsar-client holds a held producer's messages until its send
  timeout and fails an exception producer's at once.
* ``consumer_backlog_eviction``: the periodic check moves the slowest subscriptions forward: for size,
  dropping their oldest entries until each backlog is at most 90% of the limit (Pulsar's reduction
  factor, so one check does not leave the topic at the edge); for age, acknowledging every entry
  published before ``now - limit``. Each eviction is counted (``pulsar_storage_backlog_quota_exceeded_
  evictions_total{quota_type="size"|"time"}``).

Readers (non-durable subscriptions) and the broker's own cursors (deduplication, replication) neither count
nor are evicted. The decisions (:func:`effective_quota`, :func:`size_exceeded`, :func:`age_exceeded`,
:func:`entries_to_evict`, :func:`retention_conflict`) are pure; :class:`TopicBacklogQuota` applies them to one topic and
:class:`BacklogQuotaMonitor` runs the periodic check over the broker's topics.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional

from broker.managed_ledger.api import Position
from config_store.models import BACKLOG_QUOTA_POLICIES, BacklogQuota

from ..errors import ProducerBlockedQuotaExceededError, ProducerBlockedQuotaExceededException
from .periodic import PeriodicCheck
from .stats import BacklogQuotaStats

if TYPE_CHECKING:
    from .subjects import PolicySubscription as Subscription, PolicyTopic as Topic

log = logging.getLogger("broker.service.policies.backlog_quota")

HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"
EVICTION = "consumer_backlog_eviction"
SIZE_REDUCTION_FACTOR = 0.9


class QuotaType(str, enum.Enum):
    """Pulsar's ``BacklogQuotaType``; ``label`` is the ``quota_type`` of the eviction metric."""

    SIZE = "destination_storage"
    AGE = "message_age"

    @property
    def label(self) -> str:
        return "size" if self is QuotaType.SIZE else "time"


@dataclass(frozen=True)
class QuotaDefaults:
    """The broker's quota for topics whose topic and namespace set none (Pulsar ``backlogQuotaDefault*``)."""

    limit_size_bytes: int = -1
    limit_time_s: int = -1
    policy: str = HOLD

    def __post_init__(self) -> None:
        if self.policy not in BACKLOG_QUOTA_POLICIES:
            raise ValueError(f"unknown backlog quota policy {self.policy!r} "
                             f"(one of {', '.join(BACKLOG_QUOTA_POLICIES)})")

    def quota(self) -> BacklogQuota:
        return BacklogQuota(self.limit_size_bytes, self.limit_time_s, self.policy)


# ---------------------------------------------------------------------------------------------- pure decisions


def effective_quota(quota_type: QuotaType, topic_map: Optional[Mapping[str, BacklogQuota]],
                    namespace_map: Optional[Mapping[str, BacklogQuota]], defaults: QuotaDefaults) -> BacklogQuota:
    """The quota of ``quota_type`` a topic lives under: its own, else its namespace's, else the broker's."""
    for quotas in (topic_map, namespace_map):
        if quotas and quota_type.value in quotas:
            return quotas[quota_type.value]
    return defaults.quota()


def size_exceeded(backlog_bytes: int, quota: BacklogQuota) -> bool:
    """Pulsar's rule: a size limit is reached at ``backlog >= limit`` (so a limit of 0 always is)."""
    return quota.limit_size_bytes >= 0 and backlog_bytes >= quota.limit_size_bytes


def age_exceeded(age_s: Optional[float], quota: BacklogQuota) -> bool:
    """An age limit is exceeded when the oldest unacknowledged message is older than it (None: no backlog)."""
    return quota.limit_time_s >= 0 and age_s is not None and age_s > quota.limit_time_s


def entries_to_evict(backlog_entries: int, backlog_bytes: int, target_bytes: int) -> int:
    """How many of a subscription's oldest unacknowledged entries to drop so its estimated backlog (entries
    times the average entry size, as ``backlog_bytes`` was estimated) is at most ``target_bytes``."""
    if backlog_entries <= 0 or backlog_bytes <= target_bytes:
        return 0
    if target_bytes <= 0:
        return backlog_entries
    per_entry = backlog_bytes / backlog_entries
    keep = math.floor(target_bytes / per_entry)
    return max(0, backlog_entries - keep)


def retention_conflict(quota: BacklogQuota, *, retention_time_minutes: int, retention_size_mb: int) -> Optional[str]:
    """Why ``quota`` contradicts the namespace's retention (None if it does not), as Pulsar's admin checks
    before storing either: a backlog beyond what retention keeps would be dropped by retention anyway, so a
    size limit must be below the retention size and an age limit below the retention time (when those are
    positive; 0 and -1 retention leave the quota free)."""
    if retention_size_mb > 0 and quota.limit_size_bytes >= retention_size_mb * 1024 * 1024:
        return (f"the backlog quota's limitSize ({quota.limit_size_bytes} bytes) must be below the retention size "
                f"({retention_size_mb} MB)")
    if retention_time_minutes > 0 and quota.limit_time_s >= retention_time_minutes * 60:
        return (f"the backlog quota's limitTime ({quota.limit_time_s} s) must be below the retention time "
                f"({retention_time_minutes} min)")
    return None


def age_of(publish_time_ms: int, now_ms: int) -> float:
    """Seconds since ``publish_time_ms`` (never negative: clocks of producers and brokers differ)."""
    return max(0.0, (now_ms - publish_time_ms) / 1000)


@dataclass(frozen=True)
class OldestBacklog:
    """The first unacknowledged entry of the slowest subscription, as last read."""

    position: Position
    publish_time_ms: int
    subscription: str


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------------------------- one topic


class TopicBacklogQuota:
    """Quota checks and enforcement for one topic (see the module docstring).

    Reads the topic's ``policies`` (namespace) and ``topic_backlog_quotas`` (topic level) each time, so a
    policy change applies at the next check without any notification.
    """

    def __init__(self, topic: "Topic", defaults: QuotaDefaults, *, publish_time_of: Callable[[bytes], int]) -> None:
        self.topic = topic
        self.defaults = defaults
        self._publish_time_of = publish_time_of  # an entry's publish time (ms), read from its metadata
        self.evictions = {QuotaType.SIZE: 0, QuotaType.AGE: 0}
        self._oldest: Optional[OldestBacklog] = None
        self._exceeded: set[QuotaType] = set()  # for logging transitions only

    # --------------------------------------------------------------------------------- what applies

    def quota(self, quota_type: QuotaType) -> BacklogQuota:
        namespace_map = getattr(self.topic.policies, "backlog_quota_map", None)
        return effective_quota(quota_type, self.topic.topic_backlog_quotas, namespace_map, self.defaults)

    def _durable(self) -> list["Subscription"]:
        return [s for s in self.topic.subscriptions.values() if s.durable and not s.closed]

    def backlog_bytes(self) -> int:
        """The largest estimated backlog of a durable subscription (topic stats' ``backlogSize``)."""
        return max((s.backlog_size_bytes(s.cursor.backlog_entries()) for s in self._durable()), default=0)

    def _slowest(self) -> Optional["Subscription"]:
        behind = [s for s in self._durable() if s.cursor.backlog_entries() > 0]
        return min(behind, key=lambda s: s.cursor.mark_delete_position, default=None)

    async def oldest(self) -> Optional[OldestBacklog]:
        """The slowest subscription's first unacknowledged entry (None without backlog); the entry is read
        only when that position moved since the last call."""
        sub = self._slowest()
        if sub is None:
            self._oldest = None
            return None
        ml = self.topic.ml
        position = ml.next_position(sub.cursor.mark_delete_position)
        cached = self._oldest
        if cached is not None and cached.position == position:
            if cached.subscription != sub.name:
                cached = self._oldest = OldestBacklog(position, cached.publish_time_ms, sub.name)
            return cached
        entry = await ml.read_entry(position)
        self._oldest = OldestBacklog(position, self._publish_time_of(entry.data), sub.name)
        return self._oldest

    async def oldest_age_s(self) -> Optional[float]:
        """Age of the oldest unacknowledged message; None without backlog, or when it cannot be read (a
        storage hiccup must not refuse producers nor evict anything)."""
        try:
            oldest = await self.oldest()
        except Exception as exc:
            log.warning("[%s] reading the oldest unacknowledged entry failed: %s", self.topic.name, exc)
            return None
        return None if oldest is None else age_of(oldest.publish_time_ms, _now_ms())

    async def exceeded(self, quota_type: QuotaType, quota: Optional[BacklogQuota] = None) -> bool:
        quota = quota or self.quota(quota_type)
        if quota_type is QuotaType.SIZE:
            return size_exceeded(self.backlog_bytes(), quota)
        if quota.limit_time_s < 0:
            return False
        return age_exceeded(await self.oldest_age_s(), quota)

    # --------------------------------------------------------------------------------- producers

    async def check_producer(self, producer_name: str) -> None:
        """Refuses a new producer while a hold / exception quota is exceeded (Pulsar checks at creation too).

        Raises:
            ProducerBlockedQuotaExceededError: a ``producer_request_hold`` quota is exceeded.
            ProducerBlockedQuotaExceededException: a ``producer_exception`` quota is exceeded.
        """
        for quota_type in QuotaType:
            quota = self.quota(quota_type)
            if quota.policy == EVICTION or not await self.exceeded(quota_type, quota):
                continue
            what = (f"backlog of {self.backlog_bytes()} bytes, limit {quota.limit_size_bytes}"
                    if quota_type is QuotaType.SIZE else f"oldest unacknowledged message older than "
                                                         f"{quota.limit_time_s} s")
            text = (f"cannot create producer {producer_name!r} on {self.topic.name}: {quota_type.value} backlog "
                    f"quota exceeded ({what}, policy {quota.policy})")
            log.info("[%s] %s", self.topic.name, text)
            if quota.policy == HOLD:
                raise ProducerBlockedQuotaExceededError(text)
            raise ProducerBlockedQuotaExceededException(text)

    # --------------------------------------------------------------------------------- the periodic check

    async def check(self) -> None:
        """One periodic check: each exceeded quota's policy is applied."""
        for quota_type in QuotaType:
            quota = self.quota(quota_type)
            over = await self.exceeded(quota_type, quota)
            self._log_transition(quota_type, quota, over)
            if not over:
                continue
            if quota.policy == EVICTION:
                evicted = await (self._evict_by_size(quota) if quota_type is QuotaType.SIZE
                                 else self._evict_by_age(quota))
                if evicted:
                    self.evictions[quota_type] += 1
            else:
                self._disconnect_producers(quota_type)

    def _log_transition(self, quota_type: QuotaType, quota: BacklogQuota, over: bool) -> None:
        if over and quota_type not in self._exceeded:
            self._exceeded.add(quota_type)
            log.info("[%s] %s backlog quota exceeded (policy %s)", self.topic.name, quota_type.value, quota.policy)
        elif not over and quota_type in self._exceeded:
            self._exceeded.discard(quota_type)
            log.info("[%s] back within its %s backlog quota", self.topic.name, quota_type.value)

    def _disconnect_producers(self, quota_type: QuotaType) -> None:
        producers = [p for p in self.topic.producers.values() if not p.closed]
        for producer in producers:
            producer.notify_closed()
            self.topic.remove_producer(producer)
        if producers:
            log.info("[%s] closed %d producer(s): %s backlog quota exceeded", self.topic.name, len(producers),
                     quota_type.value)

    async def _evict_by_size(self, quota: BacklogQuota) -> bool:
        """Drops the oldest entries of every durable subscription over 90% of the limit."""
        target = int(quota.limit_size_bytes * SIZE_REDUCTION_FACTOR)
        evicted = False
        for sub in sorted(self._durable(), key=lambda s: s.cursor.mark_delete_position):
            backlog = sub.cursor.backlog_entries()
            n = entries_to_evict(backlog, sub.backlog_size_bytes(backlog), target)
            if n <= 0 or sub.closed:
                continue
            skipped = await self.topic.skip(sub.name, n)
            if skipped:
                evicted = True
                log.info("[%s][%s] evicted %d entries: backlog over its size quota of %d bytes", self.topic.name,
                         sub.name, skipped, quota.limit_size_bytes)
        return evicted

    async def _evict_by_age(self, quota: BacklogQuota) -> bool:
        """Acknowledges, on every durable subscription, what was published more than the limit ago."""
        topic = self.topic
        first_kept = await topic.find_position(_now_ms() - quota.limit_time_s * 1000)
        lac = topic.ml.last_confirmed_position
        target = lac if first_kept > lac else Position(first_kept.ledger_id, first_kept.entry_id - 1)
        evicted = False
        for sub in self._durable():
            if target > sub.cursor.mark_delete_position:
                await sub.mark_delete_up_to(target)
                evicted = True
                log.info("[%s][%s] evicted entries up to %s: older than its age quota of %d s", topic.name,
                         sub.name, target, quota.limit_time_s)
        return evicted

    # --------------------------------------------------------------------------------- stats

    def stats(self) -> BacklogQuotaStats:
        """The quotas in force and the oldest backlog, as of the last read of the oldest entry (-1: unknown)."""
        oldest = self._oldest
        sub = self._slowest()
        if sub is None:
            age, name = 0, None
        elif oldest is not None and oldest.position == self.topic.ml.next_position(sub.cursor.mark_delete_position):
            age, name = int(age_of(oldest.publish_time_ms, _now_ms())), oldest.subscription
        else:
            age, name = -1, sub.name
        return BacklogQuotaStats(limit_size_bytes=self.quota(QuotaType.SIZE).limit_size_bytes,
                                 limit_time_s=self.quota(QuotaType.AGE).limit_time_s,
                                 oldest_backlog_message_age_s=age, oldest_backlog_message_subscription_name=name)


# ---------------------------------------------------------------------------------------------- the broker's check


class BacklogQuotaMonitor(PeriodicCheck):
    """Checks every loaded topic's quotas every ``interval_s`` (Pulsar ``backlogQuotaCheckIntervalInSeconds``).

    One task, started by :meth:`start` and stopped (not cancelled mid-check: a cursor write cut short can
    fence the cursor) by :meth:`close`; a failure on one topic is logged and the others are still checked.
    """

    def __init__(self, topics: Callable[[], Iterable["Topic"]], *, interval_s: float) -> None:
        super().__init__(interval_s=interval_s, name="backlog quota check")
        self._topics = topics

    async def check_all(self) -> None:
        """One pass over the topics (also what an admin-triggered check runs)."""
        for topic in list(self._topics()):
            if self.stopping:
                return
            try:
                await topic.backlog_quota.check()
            except Exception as exc:
                log.warning("[%s] backlog quota check failed: %s", topic.name, exc)
        self.checks += 1
