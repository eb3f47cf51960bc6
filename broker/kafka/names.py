"""Kafka topic names ⇄ Pulsar topic names, Kafka partitions ⇄ Pulsar partitions (pure).

* ``orders`` is ``persistent://<kafka_tenant>/<kafka_namespace>/orders``; a full Pulsar name
  (``persistent://t/ns/x``) or ``t/ns/x`` is taken as it is. Answers name a topic as the client did.
* A partitioned Pulsar topic of N partitions is a Kafka topic of N partitions: Kafka partition ``i`` is
  ``<topic>-partition-<i>``. A non-partitioned topic is a Kafka topic of one partition, 0, itself.
"""

from __future__ import annotations

from typing import Optional

from magnetar.topic_name import InvalidTopicNameError, TopicName

__all__ = ["InvalidTopicNameError", "kafka_name", "partition_topic", "pulsar_name"]


def pulsar_name(kafka_topic: str, *, tenant: str, namespace: str) -> TopicName:
    """The Pulsar topic a Kafka client means by ``kafka_topic``.

    Raises:
        InvalidTopicNameError: empty, or not a valid Pulsar name once completed; a name of a partition
            (``x-partition-3``) is refused too: Kafka addresses partitions by number.
    """
    if not isinstance(kafka_topic, str) or not kafka_topic:
        raise InvalidTopicNameError("a Kafka topic name must not be empty")
    if "://" in kafka_topic or kafka_topic.count("/") == 2:
        name = TopicName.parse(kafka_topic)
    elif "/" in kafka_topic:
        raise InvalidTopicNameError(f"invalid topic name {kafka_topic!r}: expected a short name or tenant/namespace/topic")
    else:
        name = TopicName.parse(f"persistent://{tenant}/{namespace}/{kafka_topic}")
    if name.is_partition:
        raise InvalidTopicNameError(f"{kafka_topic!r} names a partition: use the topic's name and a partition number")
    return name


def kafka_name(topic: TopicName, *, tenant: str, namespace: str) -> str:
    """How a topic is named to Kafka clients listing topics: its local name in the Kafka namespace (a
    persistent topic of ``tenant/namespace``), its complete Pulsar name otherwise."""
    if topic.persistent and topic.tenant == tenant and topic.namespace_portion == namespace and "/" not in topic.local_name:
        return topic.local_name
    return str(topic)


def partition_topic(topic: TopicName, partitions: int, index: int) -> Optional[str]:
    """The Pulsar topic behind Kafka partition ``index`` of ``topic`` (``partitions`` = 0: non-partitioned);
    None when there is no such partition."""
    if partitions == 0:
        return str(topic) if index == 0 else None
    if 0 <= index < partitions:
        return topic.partition_name(index)
    return None


def kafka_partition_count(partitions: int) -> int:
    """Partitions a Kafka client sees for a Pulsar partition count (0: non-partitioned, one partition)."""
    return partitions if partitions > 0 else 1
