"""Building aiokafka response Structs of any version from one description (pure).

A handler describes its answer once, as nested dicts holding the fields of the newest version it serves;
:func:`make` builds the Struct of the version asked for, taking from each dict the fields that version's
schema has (a field the dict lacks takes its type's zero: 0, None for strings and bytes, [] for arrays,
False). Requests are read the other way with :func:`as_dict` (aiokafka's ``to_object``).
"""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.types import (Array, Boolean, Bytes, CompactBytes, CompactString, Int8, Int16, Int32, Int64,
                                     Schema, String, TaggedFields, UnsignedVarInt32, VarInt32, VarInt64)

__all__ = ["make", "as_dict"]

_INTS = (Int8, Int16, Int32, Int64, UnsignedVarInt32, VarInt32, VarInt64)


def _zero(field: Any) -> Any:
    if isinstance(field, Array) or field is Array:
        return []
    if field is Boolean:
        return False
    if field is TaggedFields:
        return {}
    if isinstance(field, (String, CompactString)) or field in (Bytes, CompactBytes):
        return None
    if isinstance(field, Schema):
        return _build(field, {})
    if field in _INTS:
        return 0
    return None


def _value(field: Any, value: Any) -> Any:
    if isinstance(field, Schema):
        return _build(field, value)
    if isinstance(field, Array) and value is not None:
        inner = field.array_of
        if isinstance(inner, Schema):
            return [_build(inner, item) if isinstance(item, dict) else item for item in value]
        return list(value)
    return value


def _build(schema: Schema, data: dict) -> tuple:
    return tuple(_value(field, data[name]) if name in data else _zero(field)
                 for name, field in zip(schema.names, schema.fields))


def make(cls: type, data: dict) -> Any:
    """An instance of Struct class ``cls`` from ``data`` (see the module docstring)."""
    return cls(*_build(cls.SCHEMA, data))


def as_dict(struct: Any) -> dict:
    """A request Struct as nested dicts (field names as in its schema)."""
    return struct.to_object()
