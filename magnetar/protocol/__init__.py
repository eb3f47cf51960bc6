"""Pulsar's binary protocol, sans-I/O: messages, frames, checksums, batches, compression, message ids.

Nothing here imports asyncio or touches a socket; a connection feeds bytes to a :class:`FrameDecoder` and
writes what the ``encode_*`` functions return. ``pb`` is the generated protobuf module
(``pulsar_api.proto``: Pulsar's field numbers, Magnetar's text).
"""

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.batch import BatchedMessage, encode_single_message, join_batch, split_batch
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.errors import (
    BatchFormatError,
    ChecksumError,
    CodecUnavailableError,
    CompressionError,
    FrameTooLargeError,
    InvalidMessageIdError,
    ProtocolError,
)
from magnetar.protocol.frames import (
    FRAME_SIZE_BYTES_MAX_DEFAULT,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    Entry,
    Frame,
    FrameDecoder,
    add_broker_entry_metadata,
    command_body,
    encode_command,
    encode_entry,
    encode_message_frame_from_entry,
    encode_message_frame_header,
    encode_payload_command,
    parse_entry,
    split_broker_entry_metadata,
    wrap,
)
from magnetar.protocol.message_id import MessageId

__all__ = [
    "FRAME_SIZE_BYTES_MAX_DEFAULT",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "BatchFormatError",
    "BatchedMessage",
    "ChecksumError",
    "CodecUnavailableError",
    "CompressionError",
    "Entry",
    "Frame",
    "FrameDecoder",
    "FrameTooLargeError",
    "InvalidMessageIdError",
    "MessageId",
    "ProtocolError",
    "add_broker_entry_metadata",
    "command_body",
    "compress",
    "decompress",
    "encode_command",
    "encode_entry",
    "encode_message_frame_from_entry",
    "encode_message_frame_header",
    "encode_payload_command",
    "join_batch",
    "parse_entry",
    "pb",
    "split_batch",
    "split_broker_entry_metadata",
    "wrap",
]
