"""The rows the source returns: one per message, in Spark's and Arrow's terms (the two must agree exactly).

Spark checks each Arrow record batch a Python data source yields against the Arrow form of the declared
schema (types *and* nullability), so :data:`ARROW_SCHEMA` is written out to match what
``pyspark.sql.pandas.types.to_arrow_schema(SCHEMA, timezone="UTC")`` makes (a unit test holds them equal).

==========================  ===========================  ===================================================
column                      type                         meaning
==========================  ===========================  ===================================================
``value``                   binary                       the payload
``__key``                   string, nullable             partition key
``__topic``                 string                       the topic (a partition's own name)
``__messageId``             binary                       ``MessageIdData`` as pulsar-client serializes it
``__publishTime``           timestamp                    publish time (the producer's, kept by replication)
``__eventTime``             timestamp, nullable          event time if set
``__messageProperties``     map<string,string>           properties
``__region``                string                       the region (cluster) this copy was read from
``__producerName``          string                       producer name (the origin's for replicated copies)
``__sequenceId``            long                         sequence id (a batch's + index when not stored)
``__replicatedFrom``        string, nullable             origin cluster of a replicated copy
``__ledgerId``              long
``__entryId``               long
``__batchIndex``            int                          -1 for a non-batched entry, else index in batch
``__replicateTo``           array<string>                the message's own ``replicate_to`` (pulsar-client's
                                                         ``replication_clusters``; ``disable_replication``
                                                         sends ``["__local__"]``), empty when unset
``__brokerPublishTime``     timestamp, nullable          when this region's broker stored the entry (broker
                                                         entry metadata; null for entries stored without it)
``__index``                 long, nullable               the message's broker entry index in this region's
                                                         copy of the topic (null when stored without one)
==========================  ===========================  ===================================================
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["ARROW_SCHEMA", "COLUMNS", "arrow_schema", "spark_schema"]

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_PROPERTIES = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))
_CLUSTERS = pa.list_(pa.field("element", pa.string(), nullable=False))

# (name, Spark DDL type, Arrow type, nullable)
_COLUMNS: tuple[tuple[str, str, pa.DataType, bool], ...] = (
    ("value", "binary", pa.binary(), False),
    ("__key", "string", pa.string(), True),
    ("__topic", "string", pa.string(), False),
    ("__messageId", "binary", pa.binary(), False),
    ("__publishTime", "timestamp", _TIMESTAMP, False),
    ("__eventTime", "timestamp", _TIMESTAMP, True),
    ("__messageProperties", "map<string,string>", _PROPERTIES, False),
    ("__region", "string", pa.string(), False),
    ("__producerName", "string", pa.string(), False),
    ("__sequenceId", "bigint", pa.int64(), False),
    ("__replicatedFrom", "string", pa.string(), True),
    ("__ledgerId", "bigint", pa.int64(), False),
    ("__entryId", "bigint", pa.int64(), False),
    ("__batchIndex", "int", pa.int32(), False),
    ("__replicateTo", "array<string>", _CLUSTERS, False),
    ("__brokerPublishTime", "timestamp", _TIMESTAMP, True),
    ("__index", "bigint", pa.int64(), True),
)

COLUMNS: tuple[str, ...] = tuple(name for name, *_ in _COLUMNS)
ARROW_SCHEMA = pa.schema([pa.field(name, arrow, nullable=nullable) for name, _, arrow, nullable in _COLUMNS])


def spark_schema(value=None):
    """The Spark ``StructType`` (built on demand: this module is also used where pyspark is not imported).

    With ``value`` (a :class:`~spark.source.values.ValueSchema`), the schema's fields come first, in place of
    ``value``.
    """
    base = _base_spark_schema()
    if value is None:
        return base
    from pyspark.sql.types import StructType

    return StructType([*value.spark_fields(), *base.fields[1:]])


def arrow_schema(value=None) -> pa.Schema:
    """The Arrow schema of the record batches for :func:`spark_schema` ``(value)``, as Spark expects it."""
    if value is None:
        return ARROW_SCHEMA
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(value), timezone="UTC")


def _base_spark_schema():
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructField,
                                   StructType, TimestampType)

    types = {"binary": BinaryType(), "string": StringType(), "timestamp": TimestampType(), "bigint": LongType(),
             "int": IntegerType(), "map<string,string>": MapType(StringType(), StringType(), valueContainsNull=False),
             "array<string>": ArrayType(StringType(), containsNull=False)}
    return StructType([StructField(name, types[ddl], nullable) for name, ddl, _, nullable in _COLUMNS])
