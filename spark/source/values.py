"""A JSON or Avro topic's values as columns (pure: no I/O; pyspark imported only where Spark types are made).

A topic whose schema (the broker's schema registry) is JSON or AVRO stores, for each message, JSON text or Avro
binary written with an Avro record schema (a JSON schema is an Avro record definition too, as Pulsar's). As the
pulsar-spark connector does, the record's fields become top-level columns, ahead of the ``__`` metadata columns,
instead of the ``value`` column; a field's Spark type follows spark-avro's mapping:

==================================  ==========================================================================
Avro                                Spark
==================================  ==========================================================================
null, boolean, int, long            (a field of type null is refused), boolean, int, bigint
float, double, string, bytes/fixed  float, double, string, binary
enum                                string
array / map                         array / map<string, ...>
record                              struct
``["null", T]`` (either order)      T, nullable (any other field is not nullable)
==================================  ==========================================================================

Other unions are refused (:class:`~spark.source.errors.SourceOptionError`), and so are field names that
collide with the metadata columns. Logical types read as their underlying type. Each message is decoded with
the topic's latest schema version (the one found when the read was defined).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any, Optional

import pyarrow as pa

from .errors import SourceOptionError

__all__ = ["ValueSchema", "DECODED_TYPES"]

DECODED_TYPES = ("JSON", "AVRO")
_PRIMITIVES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
               "double": pa.float64(), "string": pa.string(), "bytes": pa.binary()}


def _arrow(option: str, node: Any, named: dict[str, Any]) -> tuple[pa.DataType, bool]:
    """The Arrow type of an Avro type (as Spark's Arrow conversion makes it) and whether it is nullable."""
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1 or len(node) > 2:
            raise SourceOptionError(option, f"the union {json.dumps(node)} is not supported (only [\"null\", T])")
        inner, _ = _arrow(option, branches[0], named)
        return inner, len(node) == 2
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return _PRIMITIVES[node], False
        if node in named:
            return _arrow(option, named[node], named)
        raise SourceOptionError(option, f"the Avro type {node!r} is not supported")
    if not isinstance(node, dict) or "type" not in node:
        raise SourceOptionError(option, f"not an Avro type: {json.dumps(node)}")
    kind = node["type"]
    if isinstance(kind, (list, dict)):
        return _arrow(option, kind, named)
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind], False
    if "name" in node:
        named[node["name"]] = node
    if kind == "fixed":
        return pa.binary(), False
    if kind == "enum":
        return pa.string(), False
    if kind == "array":
        item, item_null = _arrow(option, node.get("items"), named)
        return pa.list_(pa.field("element", item, nullable=item_null)), False
    if kind == "map":
        value, value_null = _arrow(option, node.get("values"), named)
        return pa.map_(pa.string(), pa.field("value", value, nullable=value_null)), False
    if kind == "record":
        return pa.struct(_fields(option, node, named)), False
    raise SourceOptionError(option, f"the Avro type {kind!r} is not supported")


def _fields(option: str, record: dict, named: dict[str, Any]) -> list[pa.Field]:
    out = []
    for f in record.get("fields") or []:
        arrow, nullable = _arrow(option, f.get("type"), named)
        out.append(pa.field(str(f.get("name")), arrow, nullable=nullable))
    return out


@dataclass(frozen=True)
class ValueSchema:
    """The schema of the topics read: ``kind`` (JSON or AVRO) and its Avro record ``definition`` (text)."""

    kind: str
    definition: str
    arrow: pa.StructType = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        option = "topic"
        if self.kind not in DECODED_TYPES:
            raise SourceOptionError(option, f"a {self.kind} schema is read as bytes, not as columns")
        try:
            record = json.loads(self.definition)
        except ValueError as e:
            raise SourceOptionError(option, f"the topic's {self.kind} schema is not JSON: {e}") from None
        if not isinstance(record, dict) or record.get("type") != "record":
            raise SourceOptionError(option, f"the topic's {self.kind} schema is not an Avro record: "
                                            f"{self.definition[:200]}")
        fields = _fields(option, record, {})
        clash = [f.name for f in fields if f.name.startswith("__") or f.name == "value"]
        if clash:
            raise SourceOptionError(option, f"schema fields {clash} collide with the source's own columns")
        object.__setattr__(self, "arrow", pa.struct(fields))

    @property
    def fields(self) -> list[pa.Field]:
        return list(self.arrow)

    def spark_fields(self) -> list:
        """The value columns as Spark ``StructField``s."""
        from pyspark.sql.pandas.types import from_arrow_type
        from pyspark.sql.types import StructField

        return [StructField(f.name, from_arrow_type(f.type), f.nullable) for f in self.arrow]

    def decoder(self) -> "ValueDecoder":
        return ValueDecoder(self)


class ValueDecoder:
    """Decodes payloads into the Arrow columns of the schema's fields (one per field, in order)."""

    def __init__(self, schema: ValueSchema) -> None:
        self.schema = schema
        self._reader = None
        if schema.kind == "AVRO":
            import avro.io
            import avro.schema

            self._reader = avro.io.DatumReader(avro.schema.parse(schema.definition))

    def decode(self, payload: bytes) -> dict:
        """One payload as a dict of field values. Raises ValueError when it is not of the schema."""
        if self._reader is None:
            value = json.loads(payload)
            if not isinstance(value, dict):
                raise ValueError(f"a JSON object was expected, not {type(value).__name__}")
            return value
        import avro.io

        try:
            return self._reader.read(avro.io.BinaryDecoder(io.BytesIO(payload)))
        except Exception as e:  # noqa: BLE001 - the avro library raises many kinds for bad bytes
            raise ValueError(f"not Avro of the schema: {e!r}") from None

    def columns(self, values: list[dict], target: pa.StructType) -> list[pa.Array]:
        """The field columns of decoded values, of the ``target`` types (the Arrow form Spark expects of the
        value columns; maps given as dicts become Arrow maps)."""
        struct = pa.array([_for_arrow(v, target) for v in values], type=target)
        return [struct.field(i) for i in range(struct.type.num_fields)]


def _for_arrow(value: Any, arrow: pa.DataType) -> Any:
    """``value`` in the shape pyarrow builds ``arrow`` from (maps: lists of pairs), recursively."""
    if value is None:
        return None
    if pa.types.is_struct(arrow):
        if not isinstance(value, dict):
            raise ValueError(f"a record was expected, not {value!r}")
        return {f.name: _for_arrow(value.get(f.name), f.type) for f in arrow}
    if pa.types.is_map(arrow):
        return [(str(k), _for_arrow(v, arrow.item_type)) for k, v in value.items()]
    if pa.types.is_list(arrow):
        return [_for_arrow(v, arrow.value_type) for v in value]
    return value


def parse_schema_answer(answer: Optional[dict]) -> Optional[ValueSchema]:
    """The admin API's ``GET .../schema`` answer as a ValueSchema; None when it is not JSON or AVRO."""
    if not answer or str(answer.get("type", "")).upper() not in DECODED_TYPES:
        return None
    return ValueSchema(str(answer["type"]).upper(), str(answer.get("data", "")))
