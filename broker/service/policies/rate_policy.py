"""Which rate limits a topic runs with: its own policy, else its namespace's, else the broker's default.

As in Pulsar (``AbstractTopic``'s ``PolicyHierarchyValue`` for ``publishRate``, ``dispatchRate`` and
``subscriptionDispatchRate``), each of the three rates is resolved on its own, the most specific level that
sets it winning:

1. the topic's own policy (``TopicPolicies.publishRate`` / ``dispatchRate`` / ``subscriptionDispatchRate``;
   a partitioned topic's cover its partitions);
2. the namespace's entry for this broker's cluster (``publishMaxMessageRate`` / ``topicDispatchRate`` /
   ``subscriptionDispatchRate``: Pulsar keeps these per cluster);
3. the broker's settings (``max_publish_rate_per_topic_in_{messages,bytes}``,
   ``dispatch_throttling_rate_per_topic_in_{msg,byte}``, ``dispatch_throttling_rate_per_subscription_in_msg``,
   ``dispatch_throttling_rate_per_subscribe_in_byte``), per second.

A rate with no positive limit (both ``<= 0``) counts as *not set* at its level, so the next level applies:
Pulsar's ``PublishRate.normalize`` / ``DispatchRateImpl.normalize``. Posting ``-1, -1`` on a topic therefore
does not lift its namespace's limit; a topic runs unlimited only when no level sets a positive limit.

Pure: no asyncio. :func:`rates_of` reads a topic duck-typed (``policies``, ``own_topic_policies``,
``service.config``, ``service.cluster_name``), so non-persistent topics and test doubles work too.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from config_store.models import DispatchRate, PublishRate


class Rates(NamedTuple):
    """The limits a topic applies (None: that limit is off)."""

    publish: Optional[PublishRate]
    topic_dispatch: Optional[DispatchRate]
    subscription_dispatch: Optional[DispatchRate]


def normalize_publish(rate: Optional[PublishRate]) -> Optional[PublishRate]:
    """``rate`` when it limits something, else None (not set at its level)."""
    if rate is None or (rate.msgs_per_s <= 0 and rate.bytes_per_s <= 0):
        return None
    return rate


def normalize_dispatch(rate: Optional[DispatchRate]) -> Optional[DispatchRate]:
    """``rate`` when it limits something, else None (not set at its level)."""
    if rate is None or (rate.msgs_per_period <= 0 and rate.bytes_per_period <= 0):
        return None
    return rate


def broker_publish_rate(config: Any) -> PublishRate:
    """The broker's default publish rate (both limits 0 when off, as Pulsar shows it)."""
    return PublishRate(msgs_per_s=getattr(config, "max_publish_rate_per_topic_in_messages", 0),
                       bytes_per_s=getattr(config, "max_publish_rate_per_topic_in_bytes", 0))


def broker_topic_dispatch_rate(config: Any) -> DispatchRate:
    return DispatchRate(msgs_per_period=getattr(config, "dispatch_throttling_rate_per_topic_in_msg", 0),
                        bytes_per_period=getattr(config, "dispatch_throttling_rate_per_topic_in_byte", 0))


def broker_subscription_dispatch_rate(config: Any) -> DispatchRate:
    return DispatchRate(msgs_per_period=getattr(config, "dispatch_throttling_rate_per_subscription_in_msg", 0),
                        bytes_per_period=getattr(config, "dispatch_throttling_rate_per_subscribe_in_byte", 0))


# (TopicPolicies attribute, Policies attribute (per cluster), broker default, normalize) of each rate
_LEVELS = {
    "publish": ("publish_rate", "publish_max_message_rate", broker_publish_rate, normalize_publish),
    "topic_dispatch": ("dispatch_rate", "topic_dispatch_rate", broker_topic_dispatch_rate, normalize_dispatch),
    "subscription_dispatch": ("subscription_dispatch_rate", "subscription_dispatch_rate",
                              broker_subscription_dispatch_rate, normalize_dispatch),
}


def applied(kind: str, config: Any, namespace_policies: Any, topic_policies: Any, cluster: str):
    """The rate of ``kind`` (``publish``, ``topic_dispatch``, ``subscription_dispatch``) that applies, shown
    as Pulsar's ``applied=true`` does: the first level that sets it, else the broker's (maybe all zero)."""
    own_attr, ns_attr, broker_default, normalize = _LEVELS[kind]
    for rate in (getattr(topic_policies, own_attr, None),
                 (getattr(namespace_policies, ns_attr, None) or {}).get(cluster)):
        rate = normalize(rate)
        if rate is not None:
            return rate
    return broker_default(config)


def resolve(config: Any, namespace_policies: Any, topic_policies: Any, cluster: str) -> Rates:
    """The limits that apply (see the module docstring); a limit off at every level is None."""
    found = {}
    for kind, (_, _, _, normalize) in _LEVELS.items():
        found[kind] = normalize(applied(kind, config, namespace_policies, topic_policies, cluster))
    return Rates(**found)


def rates_of(topic: Any) -> Rates:
    """The limits ``topic`` runs with now (policy changes reach loaded topics through the watches)."""
    service = topic.service
    return resolve(getattr(service, "config", None), getattr(topic, "policies", None),
                   getattr(topic, "own_topic_policies", None), service.cluster_name)
