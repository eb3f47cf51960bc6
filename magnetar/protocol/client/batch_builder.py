"""Building batched entries the way pulsar-client does (pure).

A batch is one entry: one ``MessageMetadata`` (producer name, the first message's sequence id, publish
time, ``num_messages_in_batch``) and a payload of ``[size][SingleMessageMetadata][payload]`` items, each
item carrying its own sequence id, key, properties and event time. The SEND that carries it names the first
sequence id and ``num_messages``; the broker's deduplication and the consumer's message ids follow from that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from magnetar.protocol import compress, encode_single_message, pb

from .commands import key_values, now_ms

__all__ = ["BATCH_SIZE_BYTES_MAX_DEFAULT", "BatchBuilder", "BuiltBatch"]

BATCH_SIZE_BYTES_MAX_DEFAULT = 128 * 1024  # pulsar-client's batchingMaxAllowedSizeInBytes


class BuiltBatch(NamedTuple):
    """What :meth:`BatchBuilder.build` returns: ready for ``Producer.send_entry``."""

    metadata: pb.MessageMetadata
    payload: bytes
    num_messages: int
    sequence_id: int
    highest_sequence_id: int


class BatchBuilder:
    """Accumulates messages into one batched entry.

    Args:
        max_messages: the batch is full at this many messages.
        max_bytes: ... or once the encoded items reach this many bytes (a single larger message still
            makes a batch of one).
        compression: a ``pb.CompressionType`` applied to the whole batch payload.
    """

    def __init__(
        self,
        *,
        max_messages: int = 1000,
        max_bytes: int = BATCH_SIZE_BYTES_MAX_DEFAULT,
        compression: int = pb.NONE,
    ) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("a batch must allow at least one message and one byte")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.compression = compression
        self._items: list[bytes] = []
        self._size_bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def full(self) -> bool:
        return len(self._items) >= self.max_messages or self._size_bytes >= self.max_bytes

    def fits(self, payload_size_bytes: int) -> bool:
        """False when adding a payload of this size would overflow a non-empty batch."""
        return not self._items or (
            len(self._items) < self.max_messages and self._size_bytes + payload_size_bytes <= self.max_bytes
        )

    def add(
        self,
        payload: bytes,
        *,
        sequence_id: int | None = None,
        key: str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time_ms: int | None = None,
        ordering_key: bytes | None = None,
    ) -> bool:
        """Adds one message; returns :attr:`full` afterwards."""
        md = pb.SingleMessageMetadata(payload_size=len(payload))
        if sequence_id is not None:
            md.sequence_id = sequence_id
        if properties:
            md.properties.extend(key_values(properties))
        if key is not None:
            md.partition_key = key
        if event_time_ms:
            md.event_time = event_time_ms
        if ordering_key is not None:
            md.ordering_key = ordering_key
        item = encode_single_message(md, payload)
        self._items.append(item)
        self._size_bytes += len(item)
        return self.full

    def add_encoded(self, item: bytes) -> bool:
        """Adds an item already encoded with ``encode_single_message`` (load generators reuse one)."""
        self._items.append(item)
        self._size_bytes += len(item)
        return self.full

    def build(self, *, producer_name: str, sequence_id: int, publish_time_ms: int | None = None) -> BuiltBatch:
        """The entry for the messages added so far (which are then cleared).

        ``sequence_id`` is the first message's; the batch covers ``sequence_id .. sequence_id + n - 1``.

        Raises:
            ValueError: the batch is empty.
        """
        if not self._items:
            raise ValueError("cannot build an empty batch")
        count = len(self._items)
        payload = b"".join(self._items)
        self._items = []
        self._size_bytes = 0
        md = pb.MessageMetadata(
            producer_name=producer_name,
            sequence_id=sequence_id,
            publish_time=now_ms() if publish_time_ms is None else publish_time_ms,
            num_messages_in_batch=count,
        )
        if self.compression != pb.NONE:
            md.compression = self.compression
            md.uncompressed_size = len(payload)
            payload = compress(self.compression, payload)
        return BuiltBatch(md, payload, count, sequence_id, sequence_id + count - 1)
