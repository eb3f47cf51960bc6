"""Where a group lives: its coordination topic, the subscription named after it, its coordinator's address.

Pure. A group's coordinator is the broker that owns the group's coordination topic,
``persistent://<tenant>/<namespace>/__kafka_consumer_offsets-partition-<k>`` with ``k`` = Kafka's own
choice, ``abs(java String.hashCode(group)) % N`` (so the partition of a group is the one Kafka would pick for
the same number of offsets-topic partitions). Ownership of that topic follows Magnetar's bundle ownership,
so coordinators spread over the brokers and move when a bundle moves (failover, unload, split).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = ["OFFSETS_TOPIC", "DEFAULT_OFFSETS_PARTITIONS", "KafkaNode", "java_string_hash", "coordination_partition",
           "coordination_topic", "subscription_name", "group_of_subscription", "node_id_for"]

OFFSETS_TOPIC = "__kafka_consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 8  # Kafka's offsets.topic.num.partitions is 50; a Python broker favours fewer topics


@dataclass(frozen=True)
class KafkaNode:
    """A broker as Kafka clients address it: FindCoordinator's answer."""

    node_id: int
    host: str
    port: int


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed), as Kafka hashes group ids."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordination_partition(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (its abs masks the sign bit)."""
    if partitions <= 0:
        raise ValueError(f"the offsets topic needs at least one partition, not {partitions}")
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


def coordination_topic(tenant: str, namespace: str, partition: int) -> str:
    return f"persistent://{tenant}/{namespace}/{OFFSETS_TOPIC}-partition-{partition}"


def subscription_name(group_id: str) -> str:
    """The subscription (and cursor) named after ``group_id``: the group id itself when it has only letters,
    digits and ``-_.~``, percent-encoded otherwise (a cursor name is a ZooKeeper node name: no ``/``)."""
    return quote(group_id, safe="")


def group_of_subscription(name: str) -> str:
    return unquote(name)


def node_id_for(broker_service_url: str) -> int:
    """A stable 31-bit node id for the broker serving ``pulsar://host:port`` (the same on every broker)."""
    return java_string_hash(broker_service_url) & 0x7FFFFFFF
