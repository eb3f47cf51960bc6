"""The audit's input: every region's copies of the topics, as one DataFrame.

:func:`load` is the switch point between the two readers: the Magnetar data source
(``spark.read.format("magnetar")``, registered by ``magnetar.spark.register``) when it is installed, else
:mod:`spark.audit.broker_reader`, which reads through the brokers on the driver.
"""

from __future__ import annotations

import pathlib
from typing import Optional, Sequence, Union

from pyspark.sql import DataFrame, SparkSession

from .broker_reader import SCHEMA, read_rows
from .errors import AuditError
from .topology import Topology, read_topology

__all__ = ["load", "source_available"]


def source_available(spark: SparkSession) -> bool:
    """Registers the Magnetar data source with ``spark`` if it is installed; False when it is not (neither
    ``magnetar.spark`` nor the ``spark.source`` it loads can be imported)."""
    try:
        from magnetar.spark import register

        register(spark)
    except ImportError:
        return False
    return True


def _topology_file(topology: Topology) -> str:
    if topology.path is None:
        raise AuditError("the data source reads the regions from a topology.json: give its path")
    return str(topology.path)


def load(spark: SparkSession, topology: Union[Topology, str, pathlib.Path], topics: Sequence[str], *,
         regions: Optional[Sequence[str]] = None, use_source: Optional[bool] = None) -> DataFrame:
    """Every region's copies of ``topics`` (names of topics, partitions or partitioned topics).

    Args:
        topology: a :class:`Topology`, or the path of a ``topology.json`` (or of its data directory).
        regions: read only these regions (default: every region of the topology).
        use_source: force (True) or avoid (False) the data source; None: the source when installed.

    Raises:
        AuditError: ``use_source`` is True and the data source is not installed; a region cannot be read.
    """
    if not isinstance(topology, Topology):
        topology = read_topology(topology)
    topology = topology.select(list(regions) if regions else None)
    if not topics:
        return spark.createDataFrame([], SCHEMA)
    if use_source is not False and source_available(spark):
        return (spark.read.format("magnetar")
                .option("topology", _topology_file(topology))
                .option("regions", ",".join(topology.names))
                .option("topics", ",".join(topics))
                .option("startingOffsets", "earliest")
                .option("endingOffsets", "latest")
                .option("decodeSchema", "false")  # the payload's bytes: what the audit hashes
                .load())
    if use_source:
        raise AuditError("the Magnetar data source (magnetar.spark) is not installed")
    return spark.createDataFrame(read_rows(topology, topics), SCHEMA)
