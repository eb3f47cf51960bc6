"""Compatibility decisions between schemas (pure: no I/O; Avro resolution by the ``avro`` package).

Theory of operation, following Pulsar's ``SchemaRegistryServiceImpl`` and its per-type checks:

* **Identity.** Two schemas are the same when their types are equal and, for AVRO and JSON, their parsed
  Avro schemas are equal (so whitespace and key order do not matter), else their bytes are equal. Properties
  take no part. A producer whose schema is the same as a stored version gets that version, whatever the
  strategy.
* **Which versions a new schema is checked against.** ``BACKWARD``, ``FORWARD``, ``FULL`` and
  ``ALWAYS_INCOMPATIBLE``: the latest; the ``*_TRANSITIVE`` strategies: every version since the last delete.
  ``ALWAYS_COMPATIBLE``: none (a change of type included). A history that is empty accepts anything.
* **Types.** A schema of another type than a version it is checked against is incompatible
  ("Incompatible schema: exists schema type JSON, new schema type STRING"). AVRO and JSON are then checked by
  Avro's schema resolution rules (``avro.compatibility.ReaderWriterCompatibilityChecker``): BACKWARD = the
  new schema can read what the old wrote; FORWARD = the old can read what the new writes; FULL = both.
  Record names take no part: Pulsar checks with Java Avro's resolver (``ValidateMutualRead`` over
  ``Resolver``), which matches records by their fields and compares names only for enums and fixed (their
  unqualified names), while the Python checker would refuse ``User2`` reading ``User``. (The Avro
  specification's "Schema Resolution" lists a record name match too; Java Avro leaves it out to keep its
  older behaviour, and Pulsar's answers are the ones clients meet.)
  JSON definitions in the pre-Avro Jackson format are accepted against Avro ones either way, and checked by
  their ``id`` against each other, as Pulsar does. Every other type (STRING, primitives, PROTOBUF,
  KEY_VALUE, ...) is compatible with itself under every strategy but ALWAYS_INCOMPATIBLE.
* **Consumers** (SUBSCRIBE with a schema) are checked with BACKWARD against the latest for BACKWARD,
  FORWARD, FORWARD_TRANSITIVE and FULL, and with the strategy against every version otherwise, as Pulsar's
  ``checkConsumerCompatibility``. Unlike Pulsar, a consumer schema identical to a stored version is always
  accepted (Pulsar refuses it under ALWAYS_INCOMPATIBLE).
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import avro.errors
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityResult, SchemaCompatibilityType

from .errors import IncompatibleSchemaError, InvalidSchemaDataError
from .types import AVRO_BASED_TYPES, PRIMITIVE_TYPES, STORABLE_TYPES, SchemaData, Strategy

Candidate = tuple[int, SchemaData]  # (version, schema)

_BACKWARD = (Strategy.BACKWARD, Strategy.BACKWARD_TRANSITIVE)
_FORWARD = (Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE)
_FULL = (Strategy.FULL, Strategy.FULL_TRANSITIVE)


# ---------------------------------------------------------------------------------------------- parsing


def parse_avro(data: bytes) -> Optional[avro.schema.Schema]:
    """The Avro schema ``data`` defines, or None if it is not one. Names are not checked strictly and
    defaults not validated (Pulsar's parser settings)."""
    try:
        return avro.schema.parse(data.decode("utf-8"), validate_names=False)
    except (UnicodeDecodeError, avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError,
            RecursionError):
        return None


def _legacy_json_schema(data: bytes) -> Optional[dict]:
    """A JSON definition in the pre-Avro (Jackson ``JsonSchema``) format: any JSON object that is not Avro."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def validate(schema: SchemaData) -> None:
    """Refuses a definition malformed for its type (InvalidSchemaDataError), as Pulsar's validators do."""
    if schema.type not in STORABLE_TYPES:
        raise InvalidSchemaDataError(f"schema type {schema.type!r} cannot be stored: expected one of "
                                     f"{', '.join(sorted(STORABLE_TYPES))} (BYTES means no schema)")
    if schema.type in AVRO_BASED_TYPES:
        parsed = parse_avro(schema.data)
        if parsed is None:
            if schema.type == "JSON" and _legacy_json_schema(schema.data) is not None:
                return
            raise InvalidSchemaDataError(f"Invalid schema definition data for {schema.type} schema: "
                                         "not an Avro schema definition")
        if schema.type == "AVRO" and isinstance(parsed, avro.schema.UnionSchema):
            raise InvalidSchemaDataError("Avro schema typed [UNION] is not supported")
    elif schema.type in PRIMITIVE_TYPES and schema.data:
        raise InvalidSchemaDataError(f"Invalid schema definition data for primitive schemas: length of schema "
                                     f"data should be zero, but {len(schema.data)} bytes is found")


# ---------------------------------------------------------------------------------------------- identity


def same_schema(a: SchemaData, b: SchemaData) -> bool:
    if a.type != b.type:
        return False
    if a.data == b.data:
        return True
    if a.type in AVRO_BASED_TYPES:
        pa, pb = parse_avro(a.data), parse_avro(b.data)
        return pa is not None and pb is not None and pa == pb
    return False


def find_identical(history: Sequence[Candidate], schema: SchemaData) -> Optional[int]:
    """The version in ``history`` (oldest first) holding the same schema as ``schema``, or None."""
    for version, stored in history:
        if not stored.deleted and same_schema(stored, schema):
            return version
    return None


# ---------------------------------------------------------------------------------------------- checks


def check_producer(history: Sequence[Candidate], schema: SchemaData, strategy: Strategy) -> None:
    """Raises IncompatibleSchemaError unless ``schema`` may become the next version after ``history`` (the
    live versions since the last delete, oldest first) under ``strategy`` (not UNDEFINED: resolve it first)."""
    if not history or strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    candidates = history if strategy.transitive else history[-1:]
    _check(candidates, schema, strategy)


def check_consumer(history: Sequence[Candidate], schema: SchemaData, strategy: Strategy) -> None:
    """Raises IncompatibleSchemaError unless a consumer reading with ``schema`` may subscribe (see the module
    docstring); ``history`` must not be empty."""
    if strategy is Strategy.ALWAYS_COMPATIBLE or find_identical(history, schema) is not None:
        return
    if strategy in (Strategy.BACKWARD, Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE, Strategy.FULL):
        _check(history[-1:], schema, Strategy.BACKWARD)
    else:
        _check(history, schema, strategy)


def _check(candidates: Sequence[Candidate], schema: SchemaData, strategy: Strategy) -> None:
    for version, stored in candidates:
        if stored.type != schema.type:
            raise IncompatibleSchemaError(f"Incompatible schema: exists schema type {stored.type} (version "
                                          f"{version}), new schema type {schema.type}")
    for version, stored in candidates:
        if same_schema(stored, schema):
            continue
        if strategy is Strategy.ALWAYS_INCOMPATIBLE:
            raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE: only the schemas "
                                          "already stored are accepted")
        if schema.type in AVRO_BASED_TYPES:
            _check_avro_based(version, stored, schema, strategy)


def _check_avro_based(version: int, stored: SchemaData, schema: SchemaData, strategy: Strategy) -> None:
    old, new = parse_avro(stored.data), parse_avro(schema.data)
    if old is not None and new is not None:
        _check_avro(version, old, new, strategy)
    elif schema.type == "JSON" and old is None and new is None:
        old_legacy, new_legacy = _legacy_json_schema(stored.data), _legacy_json_schema(schema.data)
        if old_legacy is not None and new_legacy is not None and old_legacy.get("id") != new_legacy.get("id"):
            raise IncompatibleSchemaError(f"Incompatible schema: the JSON schema id {new_legacy.get('id')!r} "
                                          f"differs from {old_legacy.get('id')!r} of version {version}")
    elif new is None and not (schema.type == "JSON" and _legacy_json_schema(schema.data) is not None):
        raise InvalidSchemaDataError(f"Invalid schema definition data for {schema.type} schema")
    # Otherwise one side is Avro and the other legacy JSON (accepted, as Pulsar), or the stored one is corrupt.


class _ResolutionChecker(ReaderWriterCompatibilityChecker):
    """Avro's reader/writer checker with records matched by their fields whatever their names, as Java Avro's
    ``Resolver`` (what Pulsar checks with) does; enums and fixed keep the name check."""

    def calculate_compatibility(self, reader: avro.schema.Schema, writer: avro.schema.Schema,
                                location: list[str]) -> SchemaCompatibilityResult:
        if reader.type == writer.type == "record":
            return self.check_reader_writer_record_fields(reader, writer, location)
        return super().calculate_compatibility(reader, writer, location)


def _check_avro(version: int, old: avro.schema.Schema, new: avro.schema.Schema, strategy: Strategy) -> None:
    directions = []
    if strategy in _BACKWARD or strategy in _FULL:
        directions.append(("the new schema cannot read data written with", new, old))
    if strategy in _FORWARD or strategy in _FULL:
        directions.append(("data written with the new schema cannot be read by", old, new))
    for what, reader, writer in directions:
        result = _ResolutionChecker().get_compatibility(reader, writer)
        if result.compatibility is SchemaCompatibilityType.incompatible:
            reasons = ", ".join(sorted(i.value for i in result.incompatibilities)) or "incompatible"
            details = "; ".join(sorted(result.messages))
            where = ", ".join(sorted(result.locations))
            raise IncompatibleSchemaError(
                f"Incompatible schema with strategy {strategy.value}: {what} version {version} "
                f"({reasons} at {where}{': ' + details if details else ''})")
