"""Mirroring committed offsets onto the partitions: the subscription named after the group on each
partition this broker serves follows the group's commits, so ``magnetar admin`` and the topic stats show the
group's position and backlog there (Kafka-on-Pulsar's view of a group as a subscription).

A commit of offset O (the next offset the group reads) moves the subscription's mark-delete to the entry
before the one holding O (``ManagedLedger.find_position_by_index``, broker entry metadata), or to the last
entry when O is at the partition's end; the cursor's properties carry ``kafka.offset`` = O. Best effort: the
stored offsets (:mod:`.offsets`) are the truth; a partition served by another broker is not mirrored here,
and a failure is logged, never answered to the client.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from .placement import subscription_name

log = logging.getLogger("broker.kafka.groups")

OFFSET_PROPERTY = "kafka.offset"


def partition_topic_names(kafka_config: Any, topic: str, partition: int) -> list[str]:
    """The Pulsar topics Kafka's (topic, partition) may be: a partition of a partitioned topic, or (partition
    0) a non-partitioned topic. A full Pulsar name is taken as it is, a short one in the Kafka namespace."""
    base = topic if "://" in topic else f"persistent://{kafka_config.tenant}/{kafka_config.namespace}/{topic}"
    return [f"{base}-partition-{partition}"] + ([base] if partition == 0 else [])


async def mirror_commits(service: Any, kafka_config: Any, group_id: str,
                         offsets: Mapping[tuple[str, int], tuple[int, str]]) -> int:
    """Mirrors ``offsets`` onto the loaded partitions here; returns how many subscriptions it moved."""
    loaded = service.topics()
    moved = 0
    for (topic, partition), (offset, _) in offsets.items():
        served = next((loaded[n] for n in partition_topic_names(kafka_config, topic, partition) if n in loaded), None)
        if served is None:
            continue
        try:
            moved += await _mirror_one(served, group_id, offset)
        except Exception as exc:  # the commit itself is stored: this view lags until the next commit
            log.warning("[%s] mirroring group %r's offset %d failed: %s", served.name, group_id, offset, exc)
    return moved


async def _mirror_one(topic: Any, group_id: str, offset: int) -> int:
    ml = topic.ml
    if offset < 0 or not getattr(ml, "index_enabled", False):
        return 0  # nothing committed yet, or no broker entry index: Kafka offsets cannot be placed
    try:
        # an offset at or past the end gives the tail: mark-delete then covers the last entry
        start = await ml.find_position_by_index(min(offset, ml.next_index))
    except Exception as exc:
        from broker.managed_ledger.errors import IndexTrimmedError

        if not isinstance(exc, IndexTrimmedError):
            raise
        start = ml.first_position()  # below what is retained: everything retained is still to read
    sub = await topic.ensure_subscription(subscription_name(group_id))
    cursor = sub.cursor
    if ml.next_position(cursor.mark_delete_position) != start:
        await sub.reset(start)
    if (getattr(cursor, "properties", {}) or {}).get(OFFSET_PROPERTY) != offset:
        await cursor.mark_delete(cursor.mark_delete_position, properties={OFFSET_PROPERTY: offset})
    return 1
