"""Committed offsets: stored in the cursor properties of the subscription named after the group on the
group's coordination topic (see docs/kafka.md, "Consumer groups", for why there), mirrored onto the
subscription named after the group on each partition this broker serves.

A cursor's properties map strings to integers (Pulsar's ``ManagedCursor`` properties are ``long`` values),
so one committed partition is a few entries (the topic name last, so it may hold any character):

* ``o|<partition>|<topic>`` = the offset,
* ``n|<partition>|<topic>`` = the metadata string's length in UTF-8 bytes (absent: empty metadata),
* ``m|<partition>|<chunk>|<topic>`` = 7 bytes of that UTF-8 string each, big-endian.

The codec is pure; :class:`OffsetStore` reads and writes a loaded topic's cursors. A commit is written to
ZooKeeper (compare-and-set on the cursor node) before it is acknowledged, so a broker that takes the
coordination topic over after a crash reads every acknowledged commit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Mapping

from .placement import group_of_subscription, subscription_name

if TYPE_CHECKING:
    from broker.service.topics.topic import Topic

log = logging.getLogger("broker.kafka.groups")

__all__ = ["Committed", "encode_offsets", "decode_offsets", "METADATA_MAX_BYTES", "OffsetStore"]

Committed = dict[tuple[str, int], tuple[int, str]]  # (topic, partition) -> (offset, metadata)
METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes
_CHUNK = 7  # bytes per property value: stays a positive 63-bit long


def encode_offsets(committed: Mapping[tuple[str, int], tuple[int, str]]) -> dict[str, int]:
    props: dict[str, int] = {}
    for (topic, partition), (offset, metadata) in committed.items():
        props[f"o|{partition}|{topic}"] = int(offset)
        data = metadata.encode("utf-8")
        if data:
            props[f"n|{partition}|{topic}"] = len(data)
            for i in range(0, len(data), _CHUNK):
                props[f"m|{partition}|{i // _CHUNK}|{topic}"] = int.from_bytes(data[i:i + _CHUNK], "big")
    return props


def decode_offsets(props: Mapping[str, int]) -> Committed:
    """The inverse of :func:`encode_offsets`; entries of another shape (a property someone else set) and
    broken metadata are skipped, never raised on: a stored cursor must not stop a group from loading."""
    committed: Committed = {}
    for key, value in props.items():
        kind, _, rest = key.partition("|")
        if kind != "o":
            continue
        partition, _, topic = rest.partition("|")
        try:
            p = int(partition)
        except ValueError:
            continue
        metadata = ""
        length = props.get(f"n|{p}|{topic}")
        if isinstance(length, int) and 0 < length <= METADATA_MAX_BYTES:
            data = b""
            for i in range((length + _CHUNK - 1) // _CHUNK):
                chunk = props.get(f"m|{p}|{i}|{topic}")
                size = min(_CHUNK, length - i * _CHUNK)
                if not isinstance(chunk, int) or chunk < 0 or chunk.bit_length() > 8 * size:
                    data = None
                    break
                data += chunk.to_bytes(size, "big")
            if data is not None:
                metadata = data.decode("utf-8", errors="replace")
        committed[(topic, p)] = (int(value), metadata)
    return committed


class OffsetStore:
    """Reads and writes the committed offsets of groups on one loaded coordination topic."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    @staticmethod
    def groups(topic: "Topic") -> list[str]:
        return [group_of_subscription(name) for name, sub in topic.subscriptions.items() if sub.durable]

    @staticmethod
    def has(topic: "Topic", group_id: str) -> bool:
        return subscription_name(group_id) in topic.subscriptions

    @staticmethod
    def read(topic: "Topic", group_id: str) -> Committed:
        sub = topic.subscriptions.get(subscription_name(group_id))
        if sub is None:
            return {}
        return decode_offsets(getattr(sub.cursor, "properties", {}) or {})

    async def commit(self, topic: "Topic", group_id: str, offsets: Mapping[tuple[str, int], tuple[int, str]]) -> None:
        """Merges ``offsets`` into the group's stored ones and writes them through before returning.

        Raises:
            ManagedLedgerError (fenced: another broker owns the topic now; ZooKeeper unavailable), BrokerServiceError.
        """
        name = subscription_name(group_id)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            sub = await topic.ensure_subscription(name)
            cursor = sub.cursor
            merged = {**decode_offsets(getattr(cursor, "properties", {}) or {}), **offsets}
            await cursor.mark_delete(cursor.mark_delete_position, properties=encode_offsets(merged))
            await cursor.flush()

    async def delete(self, topic: "Topic", group_id: str) -> bool:
        name = subscription_name(group_id)
        if name not in topic.subscriptions:
            return False
        await topic.delete_subscription(name, force=True)
        self._locks.pop(name, None)
        return True
