"""Inactive topic deletion: a persistent topic nobody uses is deleted by its owner after a while.

Theory of operation
-------------------

As Pulsar's ``PersistentTopic.checkGC``: every ``delete_inactive_topics_frequency_s`` the owner looks at each
persistent topic it has loaded. A topic is *active* while it has a producer or a consumer, and, depending
on the delete mode, while it has any subscription (``delete_when_no_subscriptions``) or a subscription with
a backlog (``delete_when_subscriptions_caught_up``). A topic not active for longer than the max inactive
duration (counted from the first check after its load, or its last active check), and not kept by its
namespace's retention (``retention_time_in_minutes`` -1: forever; > 0: for that long after it was last
active), is deleted: its
subscriptions, its managed ledger and its ledgers (``Topic.delete``, which refuses if a client connected
meanwhile). Partitions are deleted one by one like any topic, as Pulsar does; a partitioned topic's
metadata stays (Pulsar keeps it too unless ``brokerDeleteInactivePartitionedTopicMetadataEnabled``), so a
producer recreates the partition. Non-persistent topics are not concerned: they vanish when unloaded.

Which settings apply: the topic's own ``inactiveTopicPolicies`` (``TopicPolicies``; a partitioned topic's
cover its partitions) when set, else the namespace's ``inactive_topic_policies`` (``deleteWhileInactive``,
``inactiveTopicDeleteMode``, ``maxInactiveDurationSeconds``), else the broker's ``delete_inactive_topics_*``.
As in Pulsar the three fields go together: the most specific level that sets the policy decides all three.
Changes reach loaded topics through the policies watches and count from the next check.

Departure from Pulsar: the broker default is *off* (``brokerDeleteInactiveTopicsEnabled`` is true in Pulsar):
deleting a user's topic a minute after its last client left surprises more than it helps. Turn it on in
broker.toml, per namespace or per topic.

Only loaded topics are checked (as in Pulsar): a topic nobody looked up since the broker started is not.
The check runs whatever the broker setting, so that a namespace policy can switch deletion on (Pulsar runs
it only when the broker-wide switch is on).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple

from .periodic import PeriodicCheck

if TYPE_CHECKING:
    from .subjects import PolicyTopic as Topic

log = logging.getLogger(__name__)

NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"


class InactiveSettings(NamedTuple):
    enabled: bool
    mode: str
    max_inactive_s: float


def resolve(config: Any, namespace_policies: Any = None, topic_policies: Any = None) -> InactiveSettings:
    """The topic's own ``inactive_topic_policies`` when set, else the namespace's, else the broker's settings."""
    chosen = getattr(topic_policies, "inactive_topic_policies", None)
    if chosen is None:
        chosen = getattr(namespace_policies, "inactive_topic_policies", None)
    if chosen is not None:
        return InactiveSettings(chosen.delete_while_inactive, chosen.delete_mode,
                                float(chosen.max_inactive_duration_s))
    return InactiveSettings(config.delete_inactive_topics_enabled, config.delete_inactive_topics_mode,
                            float(config.delete_inactive_topics_max_inactive_duration_s))


def is_active(mode: str, *, clients: bool, subscriptions: int, backlogged_subscriptions: int) -> bool:
    """Whether a topic counts as in use (Pulsar ``PersistentTopic.isActive(deleteMode)``)."""
    if clients:
        return True
    if mode == SUBSCRIPTIONS_CAUGHT_UP:
        return backlogged_subscriptions > 0
    return subscriptions > 0


def retained(retention_minutes: int, idle_s: float) -> bool:
    """Whether the namespace's retention keeps an idle topic (Pulsar ``shouldTopicBeRetained``)."""
    if retention_minutes < 0:
        return True
    return idle_s < retention_minutes * 60


class InactiveTopicMonitor(PeriodicCheck):
    """Looks for inactive topics every ``interval_s`` and deletes them; see the module docstring.

    One task, started by :meth:`start`, stopped by :meth:`close` (waited for, not cancelled mid-deletion);
    a failure on one topic is logged and the others are still checked.

    Args:
        topics: the loaded topics.
        delete: ``async (name) -> None`` deleting a topic without force (the service's ``delete_topic``).
        config: the service settings (broker defaults).
        interval_s: how often to look.
        clock_s: monotonic seconds (swappable in tests).
    """

    def __init__(self, topics: Callable[[], Iterable["Topic"]], delete: Callable[[str], Any], *, config: Any,
                 interval_s: float, clock_s: Callable[[], float] = time.monotonic) -> None:
        super().__init__(interval_s=interval_s, name="inactive topic check")
        self._topics = topics
        self._delete = delete
        self.config = config
        self.clock_s = clock_s
        self.deleted = 0
        self._last_active: dict[str, tuple[Any, float]] = {}  # name -> (the Topic object, monotonic s)

    async def check_all(self) -> list[str]:
        """One pass over the loaded persistent topics; returns the names deleted."""
        now = self.clock_s()
        loaded = [t for t in self._topics() if getattr(t.topic_name, "persistent", False)
                  and t.serving]
        names = {t.name for t in loaded}
        for name in [n for n in self._last_active if n not in names]:
            del self._last_active[name]  # unloaded or deleted: counted afresh when loaded again
        deleted = []
        for topic in loaded:
            if self.stopping:
                break
            try:
                if self._inactive_long_enough(topic, now):
                    await self._delete(topic.name)
                    self._last_active.pop(topic.name, None)
                    deleted.append(topic.name)
                    self.deleted += 1
                    log.info("[%s] deleted after being inactive (no clients%s)", topic.name,
                             "" if self._settings(topic).mode == SUBSCRIPTIONS_CAUGHT_UP else ", no subscriptions")
            except Exception as exc:
                log.warning("[%s] inactive topic check failed: %s", topic.name, exc)
        self.checks += 1
        return deleted

    def _settings(self, topic: "Topic") -> InactiveSettings:
        return resolve(self.config, topic.policies, getattr(topic, "own_topic_policies", None))

    def _inactive_long_enough(self, topic: "Topic", now: float) -> bool:
        seen = self._last_active.get(topic.name)
        if seen is None or seen[0] is not topic:  # first look at this load of the topic: its clock starts now
            self._last_active[topic.name] = (topic, now)
            seen = self._last_active[topic.name]
        settings = self._settings(topic)
        subs = list(topic.subscriptions.values())
        backlogged = 0
        if settings.mode == SUBSCRIPTIONS_CAUGHT_UP:
            backlogged = sum(1 for s in subs if s.cursor.backlog_entries() > 0)
        if is_active(settings.mode, clients=topic.has_clients(), subscriptions=len(subs),
                     backlogged_subscriptions=backlogged):
            self._last_active[topic.name] = (topic, now)
            return False
        if not settings.enabled:
            return False
        idle_s = now - seen[1]
        if idle_s < settings.max_inactive_s:
            return False
        retention = getattr(topic.policies, "retention_time_in_minutes", 0) if topic.policies is not None else 0
        return not retained(retention, idle_s)
