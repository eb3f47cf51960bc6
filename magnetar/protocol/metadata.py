"""Entry metadata: the part of Pulsar's protocol that is also Magnetar's data model (DESIGN §4).

A stored entry is the metadata and payload a producer sent (``frames.parse_entry`` reads them), so code that
keeps and dispatches entries (the broker's topics, the replicator, tools) reads ``MessageMetadata`` without
depending on the protocol's commands. This module names exactly that surface: the metadata messages and the
enum values their fields take. Commands stay in ``pulsar_api_pb2`` for the connection-facing code.
"""

from magnetar.protocol import pulsar_api_pb2 as _pb

MessageMetadata = _pb.MessageMetadata
SingleMessageMetadata = _pb.SingleMessageMetadata
KeyValue = _pb.KeyValue

# CompressionType
COMPRESSION_NONE = _pb.NONE
COMPRESSION_LZ4 = _pb.LZ4
COMPRESSION_ZLIB = _pb.ZLIB
COMPRESSION_ZSTD = _pb.ZSTD
COMPRESSION_SNAPPY = _pb.SNAPPY

# MarkerType (PulsarMarkers.proto): internal entries never delivered to applications
MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST = _pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST
MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE = _pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT = _pb.REPLICATED_SUBSCRIPTION_SNAPSHOT
MARKER_REPLICATED_SUBSCRIPTION_UPDATE = _pb.REPLICATED_SUBSCRIPTION_UPDATE

__all__ = [
    "MessageMetadata", "SingleMessageMetadata", "KeyValue",
    "COMPRESSION_NONE", "COMPRESSION_LZ4", "COMPRESSION_ZLIB", "COMPRESSION_ZSTD", "COMPRESSION_SNAPPY",
    "MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST", "MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE",
    "MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT", "MARKER_REPLICATED_SUBSCRIPTION_UPDATE",
]
