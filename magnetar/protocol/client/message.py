"""Received messages, and how one MESSAGE frame becomes them (pure).

A MESSAGE carries one entry. An unbatched entry is one message; a batched one (its metadata has
``num_messages_in_batch``) holds several, each with its own ``SingleMessageMetadata``, and each gets the
id ``(ledger, entry, partition, index)`` with ``batch_size`` set. The entry is decompressed first when its
metadata names a codec. Markers (replicated-subscription snapshots and the like) and messages compacted
out are never handed to the application; :func:`unpack_entry` reports how many it skipped so that the
consumer can still count them as consumed for flow control.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.protocol import MessageId, decompress, pb, split_batch

__all__ = ["Message", "unpack_entry"]


@dataclass(frozen=True, slots=True)
class Message:
    """One message as the application receives it.

    Attributes:
        message_id: where it sits in the topic (batch index and size set for a batched message).
        metadata: the entry's ``MessageMetadata`` (shared by every message of a batch).
        payload: the message's bytes.
        redelivery_count: how many times the broker delivered it before.
        single_metadata: the batch item's own metadata (None for an unbatched message).
        topic: the topic (partition) it came from.
        num_messages: how many messages this stands for: 1, or a whole entry's count when the consumer
            takes entries whole (``Consumer(whole_entries=True)``: ``payload`` is then the batch as stored).
        broker_entry_metadata: what the broker stored with the entry (broker time, index), when it sends it
            (its ``exposing_broker_entry_metadata_to_client_enabled``); None otherwise.
    """

    message_id: MessageId
    metadata: pb.MessageMetadata
    payload: bytes
    redelivery_count: int = 0
    single_metadata: pb.SingleMessageMetadata | None = None
    topic: str = ""
    num_messages: int = 1
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None

    @property
    def broker_publish_time_ms(self) -> int | None:
        """When the broker stored the entry (Pulsar's ``getBrokerPublishTime``), None when not sent."""
        bem = self.broker_entry_metadata
        return bem.broker_timestamp if bem is not None and bem.HasField("broker_timestamp") else None

    @property
    def index(self) -> int | None:
        """The message's broker entry index (Pulsar's ``getIndex``: the entry stores its last message's, a
        batch member's is counted back from it), None when not sent."""
        bem = self.broker_entry_metadata
        if bem is None or not bem.HasField("index"):
            return None
        mid = self.message_id
        if self.num_messages == 1 and mid.batch_size > 0 and mid.batch_index >= 0:
            return bem.index - mid.batch_size + mid.batch_index + 1
        return bem.index

    @property
    def properties(self) -> dict[str, str]:
        source = self.single_metadata if self.single_metadata is not None else self.metadata
        return {kv.key: kv.value for kv in source.properties}

    @property
    def key(self) -> str | None:
        source = self.single_metadata if self.single_metadata is not None else self.metadata
        return source.partition_key if source.HasField("partition_key") else None

    @property
    def ordering_key(self) -> bytes | None:
        source = self.single_metadata if self.single_metadata is not None else self.metadata
        return source.ordering_key if source.HasField("ordering_key") else None

    @property
    def event_time_ms(self) -> int:
        """The event time the producer set (0 when none)."""
        source = self.single_metadata if self.single_metadata is not None else self.metadata
        return source.event_time

    @property
    def publish_time_ms(self) -> int:
        return self.metadata.publish_time

    @property
    def producer_name(self) -> str:
        return self.metadata.producer_name

    @property
    def sequence_id(self) -> int:
        """The message's own sequence id (a batch item's, or the entry's first plus the batch index)."""
        single = self.single_metadata
        if single is not None and single.HasField("sequence_id"):
            return single.sequence_id
        return self.metadata.sequence_id + max(self.message_id.batch_index, 0)

    @property
    def replicated_from(self) -> str | None:
        return self.metadata.replicated_from if self.metadata.HasField("replicated_from") else None


def _acked_in_ack_set(ack_set: Sequence[int], index: int) -> bool:
    """Pulsar's batch-index ack set is a Java ``BitSet`` of the indexes still *unacknowledged*."""
    word = index >> 6
    if word >= len(ack_set):
        return True
    return not (ack_set[word] >> (index & 63)) & 1


def unpack_entry(
    message_id: pb.MessageIdData,
    metadata: pb.MessageMetadata,
    payload: bytes,
    *,
    redelivery_count: int = 0,
    ack_set: Sequence[int] = (),
    partition: int = -1,
    topic: str = "",
    whole: bool = False,
) -> tuple[list[Message], int]:
    """Turns one received entry into messages.

    Args:
        message_id: the MESSAGE's id (ledger, entry; partition and batch index unset).
        partition: this consumer's partition index (ids carry it; the broker does not send it).
        ack_set: the MESSAGE's ack set (batch indexes already acknowledged are skipped).
        whole: no split: the entry as one message (its id the entry's, its payload as stored) standing for
            ``num_messages_in_batch`` messages; the ack set is not applied (acknowledging the entry
            acknowledges every message of it).

    Returns:
        (messages to deliver, number of messages skipped: markers, compacted-out or already acknowledged).

    Raises:
        ProtocolError: the payload does not decompress or split (a ``CompressionError`` /
            ``BatchFormatError``).
    """
    batched = metadata.HasField("num_messages_in_batch")
    count = metadata.num_messages_in_batch if batched else 1
    if metadata.HasField("marker_type"):
        return [], count
    ledger_id, entry_id = _ids(message_id)
    if whole:
        return [Message(MessageId(ledger_id, entry_id, partition), metadata, payload, redelivery_count, None, topic,
                        count)], 0
    if metadata.compression != pb.NONE:
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    if not batched:
        mid = MessageId(ledger_id, entry_id, partition)
        return [Message(mid, metadata, payload, redelivery_count, None, topic)], 0
    messages: list[Message] = []
    skipped = 0
    for index, item in enumerate(split_batch(payload, count)):
        if item.metadata.compacted_out or (ack_set and _acked_in_ack_set(ack_set, index)):
            skipped += 1
            continue
        mid = MessageId(ledger_id, entry_id, partition, index, count)
        messages.append(Message(mid, metadata, item.payload, redelivery_count, item.metadata, topic))
    return messages, skipped


def _ids(message_id: pb.MessageIdData) -> tuple[int, int]:
    mid = MessageId.from_proto(message_id)
    return mid.ledger_id, mid.entry_id
