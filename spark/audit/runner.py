"""The audit of a deployment end to end, as ``magnetar audit`` runs it: topics and their expected regions from
the admin APIs, every region's copies loaded, replicated subscriptions compared, the checks run and written.
"""

from __future__ import annotations

import pathlib
from typing import Any, Mapping, Optional, Sequence, Union

from pyspark.sql import SparkSession

from .errors import AuditInputError
from .job import run_audit
from .load import load, source_available
from .policies import admin_clients, expected_regions, namespace_topics, parse_topics, replicated_up_to
from .subscriptions import check_subscriptions
from .topology import Topology, read_topology

__all__ = ["audit_deployment"]


def audit_deployment(
    spark: SparkSession,
    topology: Union[Topology, str, pathlib.Path],
    *,
    namespace: Optional[str] = None,
    topics: Sequence[str] = (),
    regions: Optional[Sequence[str]] = None,
    out_dir: Optional[pathlib.Path] = None,
    reader: str = "auto",
    subscriptions: bool = True,
    grace_s: float = 10.0,
    run: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """Audits ``namespace`` (every topic of it in any region) or ``topics``; returns the report.

    Args:
        reader: "auto" (the data source when installed, else through the brokers), "source" or "brokers".
        subscriptions: compare replicated subscriptions (``grace_s``: how long a region may take to catch up).

    Raises:
        AuditInputError: neither or both of namespace and topics, a topic without replication clusters.
        AuditError: a region could not be read.
    """
    if (namespace is None) == (not topics):
        raise AuditInputError("give either a namespace or topics")
    if reader not in ("auto", "source", "brokers"):
        raise AuditInputError(f"the reader is auto, source or brokers, not {reader!r}")
    deployment = topology if isinstance(topology, Topology) else read_topology(topology)
    deployment = deployment.select(list(regions) if regions else None)
    clients = admin_clients(deployment)
    names = namespace_topics(clients, namespace) if namespace else parse_topics(topics)
    expected = expected_regions(clients, names)
    empty = [t for t, rs in expected.items() if not rs]
    if empty:
        raise AuditInputError(f"no replication clusters for {', '.join(empty)}")
    use = {"auto": None, "source": True, "brokers": False}[reader]
    used = "source" if use is not False and source_available(spark) else "brokers"
    watermarks = replicated_up_to(clients, names)  # before the input is read: see spark.audit.checks
    df = load(spark, deployment, names, use_source=use)
    outcome = check_subscriptions(deployment, names, grace_s=grace_s) if subscriptions and names else None
    described = {**dict(run or {}), "master": spark.sparkContext.master, "spark": spark.version}
    return run_audit(df, expected, topics=names, regions=deployment.names, out_dir=out_dir, reader=used,
                     subscriptions=outcome, replicated_up_to=watermarks, run=described)
