"""The stats the policies room keeps about a topic: its backlog quota and its dispatch throttling.

They are typed snapshots, built when stats are asked for (an admin REST call, a ``/metrics`` scrape), never
on the publish or dispatch path. ``to_json()`` renders the fields under Apache Pulsar's topic-stats and
subscription-stats names (``backlogQuotaLimitSize``, ``dispatchThrottledMsgEventsBySubscriptionLimit``, ...),
which the topic's stats (``broker/service/topics/stats.py``) merge into their own JSON. They live here, not in
the topics room, because imports flow topics -> policies. Pure: no asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True, kw_only=True, slots=True)
class BacklogQuotaStats:
    """The backlog quota fields of Pulsar's ``TopicStats``.

    Attributes:
        limit_size_bytes: the size limit of the quota in force (-1: none).
        limit_time_s: the age limit of the quota in force (-1: none).
        oldest_backlog_message_age_s: age of the oldest unacknowledged entry of the slowest durable
            subscription, as of its last read (0: no backlog; -1: not read yet).
        oldest_backlog_message_subscription_name: that subscription (None when there is none).
    """

    limit_size_bytes: int = -1
    limit_time_s: int = -1
    oldest_backlog_message_age_s: int = 0
    oldest_backlog_message_subscription_name: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {
            "backlogQuotaLimitSize": self.limit_size_bytes,
            "backlogQuotaLimitTime": self.limit_time_s,
            "oldestBacklogMessageAgeSeconds": self.oldest_backlog_message_age_s,
            "oldestBacklogMessageSubscriptionName": self.oldest_backlog_message_subscription_name,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class DispatchThrottleStats:
    """How often dispatch rate limits held a subscription back since it (or its topic) loaded, by the level of
    the limit and its dimension (messages or bytes): Pulsar's ``dispatchThrottled*Events*`` subscription
    stats. The broker-wide limit is not served here, so its counts stay 0."""

    msg_events_by_subscription_limit: int = 0
    bytes_events_by_subscription_limit: int = 0
    msg_events_by_topic_limit: int = 0
    bytes_events_by_topic_limit: int = 0
    msg_events_by_broker_limit: int = 0
    bytes_events_by_broker_limit: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "dispatchThrottledMsgEventsBySubscriptionLimit": self.msg_events_by_subscription_limit,
            "dispatchThrottledBytesEventsBySubscriptionLimit": self.bytes_events_by_subscription_limit,
            "dispatchThrottledMsgEventsByTopicLimit": self.msg_events_by_topic_limit,
            "dispatchThrottledBytesEventsByTopicLimit": self.bytes_events_by_topic_limit,
            "dispatchThrottledMsgEventsByBrokerLimit": self.msg_events_by_broker_limit,
            "dispatchThrottledBytesEventsByBrokerLimit": self.bytes_events_by_broker_limit,
        }
