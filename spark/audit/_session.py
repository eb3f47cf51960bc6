"""A Spark session for the audit: ``spark.session`` (the data source's helper, which also registers the source)
with the audit's settings when it is there, else a session built here.

Spark's Python workers must run this interpreter (the venv that has Magnetar and pyarrow), so
``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` are set before the session starts.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import Iterator, Mapping, Optional

from pyspark.sql import SparkSession

__all__ = ["session", "run_session"]

_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Shuffle partitions: see _shuffle_partitions. Adaptive execution coalesces small ones further.
    "spark.sql.shuffle.partitions": "16",
    "spark.sql.adaptive.enabled": "true",
}

_LOCAL = re.compile(r"local(?:\[(\*|[0-9]+)(?:,\s*[0-9]+)?\])?")


def _shuffle_partitions(master: str) -> Optional[int]:
    """Twice the cores of a ``local`` master (None for a cluster: the default above, or the caller's ``conf``).

    Every map task of a shuffle writes one block per shuffle partition however little data it has, and adaptive
    execution only merges them on the reading side; on a 2-core ``local[2]``, 4 partitions rather than 16 took
    the audit of 1,200 rows from about 21 to 13 CPU-seconds and did not slow the 1M-message bench
    (docs/spark.md, "Speed")."""
    found = _LOCAL.fullmatch(master.strip())
    if found is None:
        return None
    cores = found.group(1)
    if cores is None:
        return 2
    if cores == "*":
        return 2 * len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2 * (os.cpu_count() or 1)
    return 2 * max(1, int(cores))


def session(master: str = "local[*]", app_name: str = "magnetar-audit",
            conf: Optional[Mapping[str, str]] = None) -> SparkSession:
    """The session (``master`` passed through to Spark); ``conf`` overrides the audit's defaults."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = _shuffle_partitions(master)
    defaults = {**_DEFAULTS, **({"spark.sql.shuffle.partitions": str(local)} if local else {})}
    settings = {**defaults, **dict(conf or {})}
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


@contextmanager
def run_session(master: str = "local[*]", app_name: str = "magnetar-audit",
                conf: Optional[Mapping[str, str]] = None) -> Iterator[SparkSession]:
    """:func:`session` for one run, stopped when the run ends.

    A session this thread already has running (a caller's: an application's, the test run's shared one) is used
    as it is, with its owner's settings, and left running: Spark keeps one context per process, so stopping it
    would stop the caller's too (it did: ``magnetar demo`` run inside the test run stopped the shared session)."""
    running = SparkSession.getActiveSession()
    if running is not None:
        yield running
        return
    spark = session(master, app_name, conf)
    try:
        yield spark
    finally:
        spark.stop()
