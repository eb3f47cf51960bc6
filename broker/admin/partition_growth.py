"""Growing a partitioned topic: the existing partitions' durable subscriptions are made on the new ones.

Pulsar's ``internalUpdatePartitionedTopicAsync`` updates the partition count first, then reads the
partitions' stats and creates every durable subscription (``isDurable``; a reader's non-durable one is not
copied) on partitions ``old..new-1`` at the latest position, which on a new, empty partition is its start.
Without the copy, a base-name call on the subscription answers 404 naming the new partitions, and a consumer
that discovers them later starts at whatever is latest then.

As in Pulsar the copy follows the count update, so when it fails the topic has already grown: the error says
so, and creating the subscription on the topic's base name finishes the job (that call creates it wherever it
is missing). Like Pulsar's, the copy races with clients: a producer that reaches a new partition before its
subscriptions exist publishes messages those subscriptions start after.

The subscription's ``replicated`` flag is not copied: the create-subscription call has no such parameter yet.
"""

from __future__ import annotations

from typing import Iterable

from magnetar.topic_name import TopicName, encode_local_name

from .context import AdminContext
from .errors import RestError
from .fanout import PartitionAnswer, fan_out, judge, partition_calls

_ALREADY_EXISTS = 409  # the subscription is on the new partition already (a consumer got there first)


def durable_subscriptions(answers: Iterable[PartitionAnswer]) -> list[str]:
    """The names of the durable subscriptions in partitions' ``/stats`` answers, sorted (pure)."""
    names: set[str] = set()
    for answer in answers:
        if not answer.ok or not isinstance(answer.body, dict):
            continue
        for name, stats in (answer.body.get("subscriptions") or {}).items():
            if isinstance(stats, dict) and stats.get("isDurable") is True:
                names.add(name)
    return sorted(names)


async def copy_subscriptions(ctx: AdminContext, topic: TopicName, old: int, new: int) -> None:
    """Creates the durable subscriptions of partitions ``0..old-1`` on partitions ``old..new-1``, each at its
    owner. A partition not created yet has none (404 is no error); "already exists" is success.

    Raises:
        RestError: a partition's owner refused or failed (a 5xx becomes 502); the reason says that the topic
            has grown all the same.
    """
    answers = await fan_out(ctx, "GET", partition_calls(topic, old, "/stats"))
    failed = judge(answers, missing_ok=True)
    if failed is not None:
        raise _copy_failed(topic, new, failed)
    names = durable_subscriptions(answers)
    new_partitions = [topic.partition(i) for i in range(old, new)]
    calls = [(p, f"/admin/v2/{p.rest_path}/subscription/{encode_local_name(name)}")
             for name in names for p in new_partitions]
    created = await fan_out(ctx, "PUT", calls)  # no body: at the latest position, as Pulsar creates them
    failed = judge([a for a in created if a.status != _ALREADY_EXISTS])
    if failed is not None:
        raise _copy_failed(topic, new, failed)


def _copy_failed(topic: TopicName, new: int, failed: PartitionAnswer) -> RestError:
    error = failed.error()
    return RestError(error.status, f"Partitioned topic {topic} now has {new} partitions, but copying its "
                                   f"subscriptions to the new partitions failed ({error.reason}); create the "
                                   f"missing ones on the topic's name (PUT .../subscription/<name>)")
