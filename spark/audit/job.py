"""Runs the audit: the checks of :mod:`spark.audit.checks` computed, every violation written as Parquet (one
directory per check under ``<out>/violations/``, plain Parquet that any Spark reads without Magnetar), and the
report of :mod:`spark.audit.report` assembled and written as ``<out>/report.json``.

The per-copy and per-message aggregates are cached: every check and count is computed from them, so the input
is read once. Every violation DataFrame is cached too, then the report's counts (rows, messages, each check,
in flight) come from one aggregation over all of them, and the delay percentiles per direction and per topic
from one grouping-sets aggregation: each Spark job costs a fixed second or so of planning, code generation and
scheduling however small its input, so a small audit's time is its number of jobs (about 8 jobs with nothing to
report, from about 15 when each count was its own job).
"""

from __future__ import annotations

import pathlib
import time
from typing import Any, Mapping, Optional, Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from . import columns as C
from .checks import CHECKS, AuditFrames, build, delay_tables
from .report import EXAMPLES_MAX, assemble, tally, write_json
from .subscriptions import DIVERGENCE_SCHEMA, SubscriptionOutcome

__all__ = ["run_audit"]

_ORDER = ["topic", "region", "origin", "producer", "seq", "batch"]


_ROWS, _MESSAGES, _IN_FLIGHT = "rows", "messages", "in_flight"  # tally kinds besides the checks' names


def _examples(df: DataFrame, order: Sequence[str]) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.orderBy(*order).limit(EXAMPLES_MAX).collect()]


def _tallies(frames: AuditFrames) -> dict[str, list[tuple[str, Optional[str], Optional[str], int]]]:
    """Kind -> ``(topic, origin, region, n)`` rows, in one job: ``rows`` (copies per topic and region, origin
    None), ``messages`` (per topic and origin, region None), ``in_flight`` and each check (rows per topic,
    origin and region)."""
    null = F.lit(None).cast("string")
    parts = [
        frames.per_copy.select(F.lit(_ROWS).alias("kind"), "topic", null.alias("origin"), "region",
                               F.col("copies").cast("long").alias("n")),
        frames.per_message.select(F.lit(_MESSAGES).alias("kind"), "topic", "origin", null.alias("region"),
                                  F.lit(1).cast("long").alias("n")),
        *[df.select(F.lit(kind).alias("kind"), "topic", "origin", "region", F.lit(1).cast("long").alias("n"))
          for kind, df in [(_IN_FLIGHT, frames.in_flight), *frames.violations.items()]],
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    found: dict[str, list[tuple[str, Optional[str], Optional[str], int]]] = {}
    for r in union.groupBy("kind", "topic", "origin", "region").agg(F.sum("n").alias("n")).collect():
        found.setdefault(r["kind"], []).append((r["topic"], r["origin"], r["region"], int(r["n"])))
    return found


def _run_check(name: str, df: DataFrame, counts: Sequence[tuple[str, Optional[str], Optional[str], int]],
               out_dir: Optional[pathlib.Path]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if out_dir is not None:
        df.write.mode("overwrite").parquet(str(out_dir / "violations" / name))
        result["parquet"] = f"violations/{name}"
    result = {**tally(counts), **result}
    result["examples"] = _examples(df, _ORDER) if result["count"] else []
    return result


def _subscription_check(outcome: Optional[SubscriptionOutcome], spark: Any,
                        out_dir: Optional[pathlib.Path]) -> dict[str, Any]:
    if outcome is None:
        return {"checked": False, "reason": "not asked for", "count": 0}
    if not outcome.checked:
        return {"checked": False, "reason": outcome.reason, "count": 0}
    rows = [dict(r) for r in outcome.rows]
    result: dict[str, Any] = {"checked": True, "subscriptions": outcome.subscriptions}
    if out_dir is not None:
        spark.createDataFrame([tuple(r[f.name] for f in DIVERGENCE_SCHEMA.fields) for r in rows], DIVERGENCE_SCHEMA) \
            .coalesce(1).write.mode("overwrite").parquet(str(out_dir / "violations" / "subscription_divergence"))
        result["parquet"] = "violations/subscription_divergence"
    result.update(tally((r["topic"], r["source_region"], r["region"], 1) for r in rows))
    order = ("topic", "subscription", "source_region", "region")
    result["examples"] = sorted(rows, key=lambda r: tuple(r[k] for k in order))[:EXAMPLES_MAX]
    return result


def run_audit(
    df: DataFrame,
    expected: Mapping[str, Sequence[str]],
    *,
    topics: Sequence[str],
    regions: Sequence[str],
    out_dir: Optional[pathlib.Path] = None,
    reader: str = "source",
    subscriptions: Optional[SubscriptionOutcome] = None,
    replicated_up_to: Optional[Mapping[tuple[str, str, str], int]] = None,
    run: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """Audits ``df`` (every region's copies) and returns the report; with ``out_dir`` writes it there too.

    Args:
        expected: topic -> the regions its messages belong in (see :func:`spark.audit.checks.build`).
        topics: the topics audited (for the report; a topic without a message still appears).
        regions: the regions read.
        reader: which reader built ``df`` ("source" or "brokers"), for the report.
        subscriptions: the replicated-subscription check's outcome (None: not asked for).
        replicated_up_to: how far each replicator got when the input was read (see
            :func:`spark.audit.checks.build`); absent copies beyond it are reported as in flight.
        run: what describes this run (Spark master...), kept under ``run`` in the report.

    Raises:
        AuditInputError: the input lacks a column, or no region is expected.
    """
    started = time.monotonic()
    frames: AuditFrames = build(df, expected, default_regions=regions, replicated_up_to=replicated_up_to)
    # Cached before any job runs, so that every later plan finds them (the first job fills them).
    cached = [frames.per_copy, frames.per_message, *frames.violations.values()]
    for frame in cached:
        frame.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = _tallies(frames)
        checks = {name: _run_check(name, frames.violations[name], counts.get(name, []), out_dir) for name in CHECKS}
        in_flight = tally(counts.get(_IN_FLIGHT, []))
        by_direction, by_topic = delay_tables(frames.delays)
    finally:
        for frame in cached:
            frame.unpersist()
    checks["subscription_divergence"] = _subscription_check(subscriptions, df.sparkSession, out_dir)
    notes = list(subscriptions.notes) if subscriptions is not None else []
    has_rt = C.REPLICATE_TO in df.columns
    if not has_rt:
        notes.append("the input has no __replicateTo: every message is expected in all of its topic's replication "
                     "clusters (messages sent with disable_replication or replication_clusters show as missing)")
    if frames.arrival_column == C.PUBLISH_TIME:
        notes.append("delays come from __publishTime, which a replicated copy keeps from its origin: they are 0 "
                     "unless brokers record their own publish time (__brokerPublishTime)")
    report = assemble(
        topics=topics, regions=regions, expected=expected,
        inputs={"reader": reader, "replicate_to": has_rt, "arrival": frames.arrival_column},
        rows=[(topic, region, n) for topic, _origin, region, n in counts.get(_ROWS, [])],
        messages=[(topic, origin, n) for topic, origin, _region, n in counts.get(_MESSAGES, [])],
        checks=checks, in_flight=in_flight, delays_by_direction=by_direction, delays_by_topic=by_topic, notes=notes,
        run={**dict(run or {}), "elapsed_s": round(time.monotonic() - started, 3),
             "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "out_dir": str(out_dir) if out_dir is not None else None},
    )
    if out_dir is not None:
        write_json(report, out_dir / "report.json")
    return report
