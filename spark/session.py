"""A local (or cluster) Spark session with the Magnetar source registered.

PySpark starts its Python workers with ``PYSPARK_PYTHON``; without it they run whatever ``python3`` is on the
PATH, which lacks Magnetar's packages (and pyarrow of the right version). ``session()`` points both the
driver and the workers at this interpreter before the JVM starts, keeps Spark's console quiet (WARN), uses
few shuffle partitions (a test's DataFrames are small; 200 tasks per shuffle would dominate its time), and
registers ``spark.read.format("magnetar")``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Optional

__all__ = ["session"]

_DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Arrow batches from the source go to the JVM as they are; keep Python workers between tasks (the
    # source caches its ZooKeeper and bookie connections per worker process).
    "spark.python.worker.reuse": "true",
}


def session(master: str = "local[*]", app_name: str = "magnetar", conf: Optional[Mapping[str, Any]] = None,
            *, log_level: str = "WARN"):
    """Returns a started SparkSession (``getOrCreate``) with the ``magnetar`` data source registered.

    Args:
        master: ``local[*]``, ``local[2]``, ``spark://host:7077``...
        app_name: the application's name in Spark's UI and logs.
        conf: more Spark settings (they win over the defaults above).
        log_level: Spark's log level once started (its start-up banner is printed before this applies).
    """
    from pyspark.sql import SparkSession

    import magnetar.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**_DEFAULT_CONF, **dict(conf or {})}.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    magnetar.spark.register(spark)
    return spark
