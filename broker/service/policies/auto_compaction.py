"""Automatic compaction: a topic is compacted by its owner once enough was written since the last compaction.

Theory of operation
-------------------

As Pulsar's ``PersistentTopic.checkCompaction``: every ``interval_s`` the owner looks at each persistent topic
it has loaded. The threshold is the topic's own ``compactionThreshold`` (``TopicPolicies``) when set, else its
namespace's ``compaction_threshold`` (``Policies``), else 0; a threshold of 0 (or less) means never. The
amount not yet compacted is the backlog of the ``__compaction`` cursor in bytes (estimated like a
subscription's backlog: entries after its mark-delete times the average entry size), or, when no compaction
ever ran on the topic (no such cursor), the whole topic's size. Compaction is triggered when that amount is
*above* the threshold (Pulsar's ``>``) and no compaction of the topic is running; a failed compaction is
simply tried again at a later pass while the backlog stays above the threshold (as in Pulsar).

Departure from Pulsar: no broker-wide default threshold (``brokerServiceCompactionThresholdInBytes``, 0 there,
i.e. off); set it per namespace or per topic. Only loaded topics are checked (as in Pulsar).

The decision (:func:`effective_threshold`, :func:`uncompacted_bytes`, :func:`should_compact`) is pure.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from .periodic import PeriodicCheck

if TYPE_CHECKING:
    from .subjects import PolicyTopic as Topic

log = logging.getLogger(__name__)


def effective_threshold(namespace_policies: Any = None, own_topic_policies: Any = None) -> int:
    """The topic's own ``compaction_threshold`` when set, else its namespace's, else 0 (bytes; <= 0: never)."""
    for policies in (own_topic_policies, namespace_policies):
        value = getattr(policies, "compaction_threshold", None)
        if value is not None:
            return value
    return 0


def uncompacted_bytes(*, total_size_bytes: int, number_of_entries: int,
                      compaction_backlog_entries: Optional[int]) -> int:
    """Bytes written since the last compaction: the ``__compaction`` cursor's backlog (None: no compaction ever
    ran, so the whole topic), estimated at the topic's average entry size."""
    if compaction_backlog_entries is None:
        return total_size_bytes
    if number_of_entries <= 0:
        return 0
    return int(total_size_bytes * min(compaction_backlog_entries, number_of_entries) / number_of_entries)


def should_compact(*, threshold_bytes: int, uncompacted_size_bytes: int, running: bool) -> bool:
    """Pulsar's rule: a positive threshold, strictly exceeded, and no compaction of the topic running."""
    return threshold_bytes > 0 and not running and uncompacted_size_bytes > threshold_bytes


def topic_uncompacted_bytes(topic: "Topic") -> int:
    """:func:`uncompacted_bytes` of a loaded topic."""
    ml = topic.ml
    return uncompacted_bytes(total_size_bytes=ml.total_size, number_of_entries=ml.number_of_entries,
                             compaction_backlog_entries=topic.compaction.backlog_entries())


class CompactionMonitor(PeriodicCheck):
    """Triggers the compaction of topics over their threshold every ``interval_s``; see the module docstring.

    A failure on one topic is logged and the others are still checked. Triggering only starts the topic's
    compaction task (owned and stopped by the topic's :class:`~broker.service.topics.compaction.compactor.TopicCompaction`),
    so a pass is short and closing the monitor never waits for a compaction.

    Args:
        topics: the loaded topics.
        interval_s: how often to look.
    """

    def __init__(self, topics: Callable[[], Iterable["Topic"]], *, interval_s: float) -> None:
        super().__init__(interval_s=interval_s, name="compaction threshold check")
        self._topics = topics
        self.triggered = 0

    async def check_all(self) -> list[str]:
        """One pass over the loaded persistent topics; returns the names whose compaction it started."""
        started = []
        for topic in list(self._topics()):
            if self.stopping:
                break
            if not getattr(topic.topic_name, "persistent", False) or not topic.serving:
                continue
            try:
                threshold = effective_threshold(topic.policies, getattr(topic, "own_topic_policies", None))
                if threshold <= 0:
                    continue
                size = topic_uncompacted_bytes(topic)
                if should_compact(threshold_bytes=threshold, uncompacted_size_bytes=size,
                                  running=topic.compaction.running):
                    log.info("[%s] %d bytes not compacted, over the compaction threshold of %d: compacting",
                             topic.name, size, threshold)
                    topic.compaction.trigger()
                    started.append(topic.name)
                    self.triggered += 1
            except Exception as exc:
                log.warning("[%s] compaction threshold check failed: %s", topic.name, exc)
        self.checks += 1
        return started
