"""``spark.read.format("magnetar")`` and ``spark.readStream.format("magnetar")`` (PySpark's Python DataSource API).

Spark calls :meth:`MagnetarDataSource.schema` when the DataFrame is defined: the options are checked there,
so a bad one fails ``load()`` before anything connects. The batch reader plans its splits in
``partitions()`` (on the driver's planning worker: admin API, ZooKeeper, bookies' LACs) and each Spark
task reads one split straight from the bookies in ``read()``. The stream reader keeps per-topic offsets
(:mod:`spark.source.offsets`); each micro-batch reads every topic from its previous end to what is confirmed
now. Readers are pickled to the executors, so they hold only options and plain values.
"""

from __future__ import annotations

import logging
from typing import Iterator, Optional

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from .discovery import Region, initial_offsets, latest_offsets, plan_batch, plan_stream, resolve_regions, value_schema
from .errors import SourceOptionError, SourceUnavailableError
from .offsets import offsets_from_json, offsets_to_json
from .options import SourceOptions, parse_options
from .runtime import read_split
from .schema import spark_schema
from .values import ValueSchema

__all__ = ["MagnetarDataSource"]

log = logging.getLogger("spark.source")


class MagnetarDataSource(DataSource):
    """The ``magnetar`` format: one row per message of the topics read (see :mod:`spark.source.schema`); topics
    with a JSON or Avro schema give its fields as columns (:mod:`spark.source.values`)."""

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self):
        options = parse_options(self.options)  # refuse bad options when the DataFrame is defined
        try:
            return spark_schema(value_schema(options))
        except SourceUnavailableError as e:
            # Defining a DataFrame needs no region (a stream may start later): unreachable now, the reader asks
            # again, and says so if the topics turn out to have a JSON/Avro schema.
            log.warning("the topics' schema is unknown (%s): reading value bytes", e)
            return spark_schema(None)

    def reader(self, schema) -> "MagnetarReader":
        options = parse_options(self.options)
        return MagnetarReader(options, _check_schema(schema, options))

    def streamReader(self, schema) -> "MagnetarStreamReader":
        options = parse_options(self.options, streaming=True)
        return MagnetarStreamReader(options, _check_schema(schema, options))


def _check_schema(schema, options) -> Optional[ValueSchema]:
    """The topics' value schema now; refuses a schema other than the one it gives (a schema passed to the
    reader, or the topics' schema changed since the DataFrame was defined)."""
    values = value_schema(options)
    if schema is not None and schema != spark_schema(values):
        raise SourceOptionError("schema", "the magnetar source's schema is the topics' (their JSON/Avro fields, or "
                                          "value bytes) and the metadata columns: do not pass one to the reader, "
                                          "and define the DataFrame again when a topic's schema changed")
    return values


def _partitions(splits) -> list[InputPartition]:
    return [InputPartition(split) for split in splits]


class MagnetarReader(DataSourceReader):
    """A bounded read: the splits planned once, each read by one task."""

    def __init__(self, options: SourceOptions, values: Optional[ValueSchema] = None) -> None:
        self.options = options
        self.values = values

    def partitions(self):
        return _partitions(plan_batch(self.options))

    def read(self, partition: InputPartition) -> Iterator:
        if partition.value is None:
            return iter(())
        return read_split(partition.value, self.options.rows_per_batch, self.values)


class MagnetarStreamReader(DataSourceStreamReader):
    """An unbounded read with offsets ``{region: {topic: {"ledgerId", "entryId"}}}`` (next entry to read)."""

    def __init__(self, options: SourceOptions, values: Optional[ValueSchema] = None) -> None:
        self.options = options
        self.values = values
        self._regions: list[Region] | None = None

    def __getstate__(self):
        return {"options": self.options, "values": self.values, "_regions": None}

    def regions(self) -> list[Region]:
        if self._regions is None:
            self._regions = resolve_regions(self.options)
        return self._regions

    def initialOffset(self) -> dict:
        return offsets_to_json(initial_offsets(self.options, self.regions()))

    def latestOffset(self, start: dict, limit=None) -> dict:
        return offsets_to_json(latest_offsets(self.options, self.regions(), offsets_from_json(start or {})))

    def partitions(self, start: dict, end: dict):
        return _partitions(plan_stream(self.options, self.regions(), offsets_from_json(start or {}),
                                       offsets_from_json(end)))

    def read(self, partition: InputPartition) -> Iterator:
        return read_split(partition.value, self.options.rows_per_batch, self.values)

    def commit(self, end: dict) -> None:
        """Nothing to release: the source holds no subscription or cursor."""
