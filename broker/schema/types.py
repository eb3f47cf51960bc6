"""Schema values, type names, compatibility strategies and the wire form of schema versions (pure).

* Type names are Pulsar's ``SchemaType`` names (``STRING``, ``JSON``, ``AVRO``, ...), the form the admin REST
  API and the stored records use; :data:`PROTO_TYPE_NAMES` maps the binary protocol's ``Schema.Type`` numbers
  to them (proto ``None`` = 0 is what a client sends for BYTES/NONE: "no schema").
* A version is an integer 0, 1, 2, ... per topic; on the wire (PRODUCER_SUCCESS, message metadata,
  GET_SCHEMA) it is 8 bytes, big-endian, as Pulsar's ``LongSchemaVersion.bytes()``. Pulsar reads only the
  first 8 bytes of what it is given (brokers before 2.4.0 wrote 64), and so does :func:`decode_version`.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from config_store.models import SCHEMA_COMPATIBILITY_STRATEGIES

VERSION_SIZE_BYTES = 8

# Proto ``Schema.Type`` number -> Pulsar ``SchemaType`` name.
PROTO_TYPE_NAMES: dict[int, str] = {
    0: "NONE", 1: "STRING", 2: "JSON", 3: "PROTOBUF", 4: "AVRO", 5: "BOOLEAN", 6: "INT8", 7: "INT16", 8: "INT32",
    9: "INT64", 10: "FLOAT", 11: "DOUBLE", 12: "DATE", 13: "TIME", 14: "TIMESTAMP", 15: "KEY_VALUE",
    16: "INSTANT", 17: "LOCAL_DATE", 18: "LOCAL_TIME", 19: "LOCAL_DATE_TIME", 20: "PROTOBUF_NATIVE",
    21: "AUTO_CONSUME", 22: "EXTERNAL",
}
TYPE_PROTO_NUMBERS: dict[str, int] = {name: number for number, name in PROTO_TYPE_NAMES.items()}

# Types whose schema data is an Avro schema definition, checked by Avro's schema resolution rules.
AVRO_BASED_TYPES = frozenset({"AVRO", "JSON"})
# Fixed-layout types: nothing to describe, so their schema data must be empty (as Pulsar's validator asks).
PRIMITIVE_TYPES = frozenset({"BOOLEAN", "INT8", "INT16", "INT32", "INT64", "FLOAT", "DOUBLE", "DATE", "TIME",
                             "TIMESTAMP", "INSTANT", "LOCAL_DATE", "LOCAL_TIME", "LOCAL_DATE_TIME"})
# Never stored: "no schema" (BYTES, NONE) and the types a client resolves itself.
UNSTORED_TYPES = frozenset({"NONE", "BYTES", "AUTO", "AUTO_CONSUME", "AUTO_PUBLISH"})
STORABLE_TYPES = frozenset(TYPE_PROTO_NUMBERS) - UNSTORED_TYPES


class Strategy(enum.StrEnum):
    """A namespace's ``schema_compatibility_strategy`` (Pulsar's ``SchemaCompatibilityStrategy``)."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        """Checked against every version since the last delete, not only the latest."""
        return self in (Strategy.BACKWARD_TRANSITIVE, Strategy.FORWARD_TRANSITIVE, Strategy.FULL_TRANSITIVE)


assert {s.value for s in Strategy} == set(SCHEMA_COMPATIBILITY_STRATEGIES)

# What UNDEFINED means: the broker-wide default, FULL in Pulsar (``schemaCompatibilityStrategy``).
DEFAULT_STRATEGY = Strategy.FULL


def effective_strategy(namespace_value: str | None, default: Strategy = DEFAULT_STRATEGY) -> Strategy:
    """The strategy that applies: the namespace's unless UNDEFINED (or unset), else ``default``."""
    if not namespace_value or namespace_value == Strategy.UNDEFINED:
        return default
    return Strategy(namespace_value)


@dataclass(frozen=True)
class SchemaData:
    """One schema as a client or an admin gives it, or as stored for one version.

    Attributes:
        type: a Pulsar ``SchemaType`` name (``JSON``, ``AVRO``, ``STRING``, ...).
        data: the definition (UTF-8 JSON of an Avro schema for AVRO and JSON; empty for primitive types).
        properties: free key/value pairs, kept with the version (not part of identity or compatibility).
        timestamp_ms: when the version was stored (0 for a schema not stored yet).
        deleted: a deletion marker (a version that ends the history before it; never served).
    """

    type: str
    data: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    timestamp_ms: int = 0
    deleted: bool = False


def encode_version(version: int) -> bytes:
    """A schema version as the 8 big-endian bytes the protocol carries."""
    return struct.pack(">q", version)


def decode_version(raw: bytes) -> int:
    """The version in ``raw`` (its first 8 bytes, big-endian, signed); ValueError if shorter."""
    if len(raw) < VERSION_SIZE_BYTES:
        raise ValueError(f"a schema version is {VERSION_SIZE_BYTES} bytes, got {len(raw)}")
    return struct.unpack_from(">q", raw)[0]
