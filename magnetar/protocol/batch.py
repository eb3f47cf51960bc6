"""Batched payloads: many messages in one entry.

When ``MessageMetadata.num_messages_in_batch`` is set, the (decompressed) payload is a sequence of::

    [single_metadata_size u32][SingleMessageMetadata][payload of SingleMessageMetadata.payload_size bytes]

Brokers rarely need to split a batch (they store and dispatch whole entries); the replicator, tools and
tests do. Both directions are pure functions; splitting never raises anything but
:class:`~magnetar.protocol.errors.BatchFormatError` on malformed input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.checksum import Buffer
from magnetar.protocol.errors import BatchFormatError

__all__ = ["BatchedMessage", "encode_single_message", "join_batch", "split_batch"]

_U32 = struct.Struct(">I")


class BatchedMessage(NamedTuple):
    """One message of a batch: its own small metadata and its payload."""

    metadata: pb.SingleMessageMetadata
    payload: bytes


def encode_single_message(metadata: pb.SingleMessageMetadata, payload: Buffer) -> bytes:
    """Encodes one batch item; ``payload_size`` is taken from ``payload`` (``metadata`` is not modified)."""
    if not metadata.HasField("payload_size") or metadata.payload_size != len(payload):
        fixed = pb.SingleMessageMetadata()
        fixed.CopyFrom(metadata)
        fixed.payload_size = len(payload)
        metadata = fixed
    md = metadata.SerializeToString()
    return b"".join((_U32.pack(len(md)), md, payload))


def join_batch(messages: Iterable[tuple[pb.SingleMessageMetadata, Buffer]]) -> bytes:
    """Encodes a batched payload from ``(metadata, payload)`` pairs (set ``num_messages_in_batch`` yourself)."""
    return b"".join(encode_single_message(md, payload) for md, payload in messages)


def split_batch(payload: bytes, count: int | None = None) -> list[BatchedMessage]:
    """Splits a batched payload into its messages.

    Args:
        payload: the uncompressed batch.
        count: ``num_messages_in_batch`` from the entry's metadata; when given, the payload must hold
            exactly that many messages and nothing after them. None: read items until the end.

    Raises:
        BatchFormatError: the payload does not split cleanly.
    """
    if count is not None and count < 0:
        raise BatchFormatError(f"negative batch size {count}")
    # The loop runs once per message of every batch a reader, a replicator or the Spark source splits: names
    # are bound locally and each message costs one header unpack, one protobuf parse and two slices.
    view = memoryview(payload)
    size = len(payload)
    unpack = _U32.unpack_from
    parse = pb.SingleMessageMetadata.FromString
    new = tuple.__new__
    pos = 0
    messages: list[BatchedMessage] = []
    append = messages.append
    index = 0
    while pos < size if count is None else index < count:
        if size - pos < 4:
            raise BatchFormatError(f"batch truncated before message {index} (offset {pos} of {size})")
        md_start = pos + 4
        md_end = md_start + unpack(payload, pos)[0]
        if md_end > size:
            raise BatchFormatError(f"metadata of message {index} ({md_end - md_start} bytes) overruns the batch")
        try:
            metadata = parse(view[md_start:md_end])
        except DecodeError as exc:
            raise BatchFormatError(f"undecodable metadata of message {index}: {exc}") from None
        length = metadata.payload_size
        if length <= 0 and (length < 0 or not metadata.HasField("payload_size")):
            raise BatchFormatError(f"message {index} has no valid payload_size")
        pos = md_end + length
        if pos > size:
            raise BatchFormatError(f"payload of message {index} ({length} bytes) overruns the batch")
        append(new(BatchedMessage, (metadata, payload[md_end:pos])))
        index += 1
    if pos != size:
        raise BatchFormatError(f"{size - pos} bytes after the {len(messages)} messages of the batch")
    return messages
