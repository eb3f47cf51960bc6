"""A Spark session for the audit: ``spark.session`` (the data source's helper, which also registers the source)
with the audit's settings when it is there, else a session built here.

Spark's Python workers must run this interpreter (the venv that has Magnetar and pyarrow), so
``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` are set before the session starts.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

from pyspark.sql import SparkSession

__all__ = ["session"]

_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Small shuffles for local runs; adaptive execution coalesces further (a cluster run may pass its own).
    "spark.sql.shuffle.partitions": "16",
    "spark.sql.adaptive.enabled": "true",
}


def session(master: str = "local[*]", app_name: str = "magnetar-audit",
            conf: Optional[Mapping[str, str]] = None) -> SparkSession:
    """The session (``master`` passed through to Spark); ``conf`` overrides the audit's defaults."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {**_DEFAULTS, **dict(conf or {})}
    try:
        from spark.session import session as shared  # the data source's helper, once it exists
    except ImportError:
        shared = None
    if shared is not None:
        spark = shared(master=master, app_name=app_name, conf=settings)
    else:
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
