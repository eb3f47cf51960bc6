"""The columns the audit reads: the data source's contract (``spark.read.format("magnetar")``), one row per
message copy, every region's copies in one DataFrame told apart by ``__region``.

Two optional columns make the audit more exact when the source provides them:

* ``__replicateTo`` (array<string>): the message's own ``replicate_to`` (pulsar-client's per-message
  ``replication_clusters``; ``disable_replication`` sends ``["__local__"]``). Without it every message is
  expected in all of its topic's replication clusters.
* ``__brokerPublishTime`` (timestamp): when this region's broker stored this copy. A replicated copy keeps
  the origin's ``publish_time`` (the replicator forwards the metadata as stored, as Pulsar does), so
  ``__publishTime`` alone makes every replication delay 0; the broker's own timestamp measures it.
"""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructField,
                               StructType, TimestampType)

__all__ = [
    "BATCH_INDEX", "BROKER_PUBLISH_TIME", "BROKER_PUBLISH_TIME_FIELD", "CONTRACT_SCHEMA", "ENTRY_ID", "EVENT_TIME",
    "KEY", "LEDGER_ID", "LOCAL_ONLY", "MESSAGE_ID", "PRODUCER_NAME", "PROPERTIES", "PUBLISH_TIME", "REGION",
    "REPLICATED_FROM", "REPLICATE_TO", "REPLICATE_TO_FIELD", "REPLICATOR_PROPERTY_PREFIX", "REQUIRED",
    "SEQUENCE_ID", "TOPIC", "VALUE", "missing_columns",
]

VALUE = "value"
KEY = "__key"
TOPIC = "__topic"
MESSAGE_ID = "__messageId"
PUBLISH_TIME = "__publishTime"
EVENT_TIME = "__eventTime"
PROPERTIES = "__messageProperties"
REGION = "__region"
PRODUCER_NAME = "__producerName"
SEQUENCE_ID = "__sequenceId"
REPLICATED_FROM = "__replicatedFrom"
LEDGER_ID = "__ledgerId"
ENTRY_ID = "__entryId"
BATCH_INDEX = "__batchIndex"
# Optional (see the module docstring).
REPLICATE_TO = "__replicateTo"
BROKER_PUBLISH_TIME = "__brokerPublishTime"

# What pulsar-client's disable_replication puts in replicate_to: "this cluster only".
LOCAL_ONLY = "__local__"
# Properties a Magnetar replicator adds to the copies it sends (the origin position); not the application's.
REPLICATOR_PROPERTY_PREFIX = "__magnetar.repl."

CONTRACT_SCHEMA = StructType([
    StructField(VALUE, BinaryType(), False),
    StructField(KEY, StringType(), True),
    StructField(TOPIC, StringType(), False),
    StructField(MESSAGE_ID, BinaryType(), False),
    StructField(PUBLISH_TIME, TimestampType(), False),
    StructField(EVENT_TIME, TimestampType(), True),
    StructField(PROPERTIES, MapType(StringType(), StringType()), False),
    StructField(REGION, StringType(), False),
    StructField(PRODUCER_NAME, StringType(), False),
    StructField(SEQUENCE_ID, LongType(), False),
    StructField(REPLICATED_FROM, StringType(), True),
    StructField(LEDGER_ID, LongType(), False),
    StructField(ENTRY_ID, LongType(), False),
    StructField(BATCH_INDEX, IntegerType(), False),
])
"""The contract's schema (the audit needs all but ``__messageId`` and ``__eventTime``)."""

REPLICATE_TO_FIELD = StructField(REPLICATE_TO, ArrayType(StringType()), True)
BROKER_PUBLISH_TIME_FIELD = StructField(BROKER_PUBLISH_TIME, TimestampType(), True)

REQUIRED = (VALUE, KEY, TOPIC, PUBLISH_TIME, PROPERTIES, REGION, PRODUCER_NAME, SEQUENCE_ID, REPLICATED_FROM,
            LEDGER_ID, ENTRY_ID, BATCH_INDEX)


def missing_columns(columns: list[str]) -> list[str]:
    """The required columns absent from ``columns``."""
    have = set(columns)
    return [c for c in REQUIRED if c not in have]
