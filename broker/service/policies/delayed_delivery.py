"""Delayed-delivery policies: which settings a topic's delayed delivery runs with, and what they decide.

As in Pulsar (``AbstractTopic``'s ``PolicyHierarchyValue``), each setting is resolved on its own, the most
specific level that sets it winning: the topic's own policies (``TopicPolicies.delayedDeliveryEnabled``,
``delayedDeliveryTickTimeMillis``, ``delayedDeliveryMaxDelayInMillis``; a partitioned topic's cover its
partitions), else the namespace's ``delayed_delivery_policies`` (``active``, ``tickTime``,
``maxDeliveryDelayInMillis``, all three set together), else the broker's ``delayed_delivery_*`` settings.

What they decide:

* ``active`` off: a Shared / Key_Shared dispatcher delivers a message with a deliver time at once, and
  releases what it held when the policy changed (Pulsar lets held messages wait out their time; delivering
  them is what "off" promises a user who switched it off to get them now);
* ``tick_time_ms``: the dispatcher's timer fires at most once per tick (:func:`timer_target_ms`). Timing
  stays strict: a message is never delivered before its time (Pulsar may deliver up to a tick early), so a
  coarse tick makes deliveries up to a tick late instead, in exchange for fewer wake-ups;
* ``max_delay_ms`` > 0 while active: a SEND whose ``deliver_at_time - publish_time`` exceeds it is refused
  with NotAllowedError, nothing stored (Pulsar PIP-315, ``isExceedMaximumDeliveryDelay``). pulsar-client
  (C++) answers any SEND_ERROR but a checksum error by reconnecting and sending again, so such a send ends
  in a timeout on the client's side, as against Pulsar.

Pure: no asyncio. The functions read a topic duck-typed (``config``, ``policies``, ``own_topic_policies``)
so non-persistent topics and test doubles work too.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from magnetar.protocol.metadata import MessageMetadata

from ..errors import NotAllowedError


class DelayedDeliverySettings(NamedTuple):
    active: bool
    tick_time_ms: int
    max_delay_ms: int


def resolve(config: Any, namespace_policies: Any = None, topic_policies: Any = None) -> DelayedDeliverySettings:
    """The settings that apply, field by field: topic, else namespace, else broker (``config``)."""
    active = config.delayed_delivery_enabled
    tick_ms = getattr(config, "delayed_delivery_tick_time_ms", 0)
    max_ms = getattr(config, "delayed_delivery_max_delay_ms", 0)
    ns = getattr(namespace_policies, "delayed_delivery_policies", None)
    if ns is not None:
        active, tick_ms, max_ms = ns.active, ns.tick_time_ms, ns.max_delay_ms
    if topic_policies is not None:
        if topic_policies.delayed_delivery_enabled is not None:
            active = topic_policies.delayed_delivery_enabled
        if topic_policies.delayed_delivery_tick_time_ms is not None:
            tick_ms = topic_policies.delayed_delivery_tick_time_ms
        if topic_policies.delayed_delivery_max_delay_ms is not None:
            max_ms = topic_policies.delayed_delivery_max_delay_ms
    return DelayedDeliverySettings(bool(active), max(0, int(tick_ms)), max(0, int(max_ms)))


def settings_of(topic: Any) -> DelayedDeliverySettings:
    """The settings ``topic`` runs with now (policies changes reach loaded topics through the watches)."""
    return resolve(topic.config, getattr(topic, "policies", None), getattr(topic, "own_topic_policies", None))


def timer_target_ms(due_ms: int, last_fire_ms: Optional[int], tick_time_ms: int) -> int:
    """When the timer for the earliest held deliver time ``due_ms`` should fire: at that time, but no sooner
    than one tick after the timer last fired (``last_fire_ms``; None: never)."""
    if tick_time_ms <= 0 or last_fire_ms is None:
        return due_ms
    return max(due_ms, last_fire_ms + tick_time_ms)


def exceeds_max_delay(metadata: Optional[MessageMetadata], settings: DelayedDeliverySettings) -> bool:
    """Whether a SEND with ``metadata`` asks for a delay beyond the limit (only while delayed delivery is on)."""
    if not settings.active or settings.max_delay_ms <= 0 or metadata is None:
        return False
    if not metadata.HasField("deliver_at_time"):
        return False
    return metadata.deliver_at_time - metadata.publish_time > settings.max_delay_ms


def check_send(topic: Any, metadata: Optional[MessageMetadata]) -> None:
    """Raises NotAllowedError (Pulsar's words) for a SEND whose deliver time is beyond the limit."""
    settings = settings_of(topic)
    if exceeds_max_delay(metadata, settings):
        raise NotAllowedError(f"Exceeds max allowed delivery delay of {settings.max_delay_ms} milliseconds")


def policies_changed(topic: Any) -> None:
    """Wakes the dispatchers that hold entries, so a switched-off policy releases them now (a new tick time
    applies from the next timer on)."""
    for sub in list(getattr(topic, "subscriptions", {}).values()):
        dispatcher = getattr(sub, "dispatcher", None)
        if dispatcher is not None and dispatcher.delayed_messages():
            dispatcher.wake()
