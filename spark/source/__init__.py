"""The Magnetar data source for Spark: topics read straight from a region's bookies, one row per message.

Public face: :class:`MagnetarDataSource` (register it with ``magnetar.spark.register(spark)``), the row
schema (:data:`COLUMNS`, :func:`spark_schema`) and the errors. Rooms inside: ``options`` (what the user
asks), ``offsets`` and ``planning`` (positions and splits, pure), ``decode`` (entries to Arrow rows, pure),
``discovery`` (admin API and ZooKeeper, on the driver), ``runtime`` (the event loop and connections in a
worker, reading splits), ``datasource`` (Spark's classes).
"""

from .errors import SourceDataError, SourceError, SourceOptionError, SourceUnavailableError
from .schema import ARROW_SCHEMA, COLUMNS, spark_schema

__all__ = [
    "ARROW_SCHEMA", "COLUMNS", "MagnetarDataSource", "SourceDataError", "SourceError", "SourceOptionError",
    "SourceUnavailableError", "spark_schema",
]


def __getattr__(name: str):
    # pyspark is imported only when the data source itself is asked for.
    if name == "MagnetarDataSource":
        from .datasource import MagnetarDataSource

        return MagnetarDataSource
    raise AttributeError(name)
