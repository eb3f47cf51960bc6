"""A Spark session for the audit, until ``spark.session`` (the data source's helper) is on main: then that one
is used, and only the audit's runtime settings are applied on top.

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
        spark = shared(master=master, app_name=app_name)
        for key, value in settings.items():
            try:
                spark.conf.set(key, value)
            except Exception:  # a static setting of a session that already runs stays as it is
                pass
    else:
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
