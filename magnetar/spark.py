"""Spark integration entry point: ``magnetar.spark.register(spark)`` makes ``format("magnetar")`` available.

The data source lives in the ``spark`` room (``spark.source``); it is imported here only when asked for, so
``magnetar`` itself never needs pyspark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Registers the ``magnetar`` data source on the SparkSession ``spark`` (idempotent)."""
    from spark.source.datasource import MagnetarDataSource

    spark.dataSource.register(MagnetarDataSource)
