"""The audit's report: a JSON document, and a readable summary of it (pure, apart from writing the file).

Shape (``version`` 1)::

    {"version": 1, "ok": bool, "violations": <total>,
     "topics": [...], "regions": [...], "expected_regions": {topic: [region, ...]},
     "inputs": {"reader": "source" | "brokers", "replicate_to": bool, "arrival": "<column>"},
     "rows": {"total": n, "by_region": {region: n}, "by_topic": {topic: {region: n}}},
     "messages": {"total": n, "by_topic": {topic: {origin: n}}},
     "checks": {<check>: {"count": n, "by_topic": {...}, "by_region": {...}, "by_direction": {"a -> b": n},
                          "examples": [row, ...], "parquet": "violations/<check>"},
                "subscription_divergence": {... or "checked": false, "reason": "..."}},
     "in_flight": {"count": n, "by_topic": ..., "by_region": ..., "by_direction": ...},   # not violations
     "replication_delay": {"arrival": "<column>", "by_direction": {"a -> b": {count, p50_ms, p99_ms, min_ms,
                           max_ms}}, "by_topic": {topic: {"a -> b": {...}}}},
     "notes": [...],
     "run": {...}}          # what differs between runs of the same audit: time, Spark master, paths

A direction ``a -> b`` is (origin region, region where the violation or the copy is). Counts are rows of the
check's violations: ``missing`` and ``stray`` one per (message, region), ``duplicate`` one per (message,
region) held more than once, ``order`` one per message stored after a higher id, ``payload_mismatch`` one per
(message, region) whose copy differs from the reference.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Iterable, Mapping, Optional, Sequence

__all__ = ["EXAMPLES_MAX", "assemble", "comparable", "direction", "summary", "tally", "write_json"]

EXAMPLES_MAX = 20


def direction(origin: str, region: str) -> str:
    return f"{origin} -> {region}"


def tally(rows: Iterable[tuple[str, str, str, int]]) -> dict[str, Any]:
    """``(topic, origin, region, count)`` rows folded into a check's counts."""
    count = 0
    by_topic: dict[str, int] = {}
    by_region: dict[str, int] = {}
    by_direction: dict[str, int] = {}
    for topic, origin, region, n in rows:
        count += n
        by_topic[topic] = by_topic.get(topic, 0) + n
        by_region[region] = by_region.get(region, 0) + n
        key = direction(origin, region)
        by_direction[key] = by_direction.get(key, 0) + n
    return {"count": count, "by_topic": dict(sorted(by_topic.items())), "by_region": dict(sorted(by_region.items())),
            "by_direction": dict(sorted(by_direction.items()))}


def _delay(row: Mapping[str, Any]) -> dict[str, Any]:
    def ms(value: Any) -> Optional[float]:
        return None if value is None else round(float(value), 3)
    return {"count": int(row["count"]), "p50_ms": ms(row["p50_ms"]), "p99_ms": ms(row["p99_ms"]),
            "min_ms": ms(row["min_ms"]), "max_ms": ms(row["max_ms"])}


def assemble(
    *,
    topics: Sequence[str],
    regions: Sequence[str],
    expected: Mapping[str, Sequence[str]],
    inputs: Mapping[str, Any],
    rows: Iterable[tuple[str, str, int]],
    messages: Iterable[tuple[str, str, int]],
    checks: Mapping[str, dict[str, Any]],
    in_flight: Optional[Mapping[str, Any]] = None,
    delays_by_direction: Iterable[Mapping[str, Any]],
    delays_by_topic: Iterable[Mapping[str, Any]],
    notes: Sequence[str] = (),
    run: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """The report document (see the module docstring).

    Args:
        rows: ``(topic, region, rows)``; messages: ``(topic, origin, messages)``.
        checks: check name -> its :func:`tally` plus ``examples`` / ``parquet`` (a check that did not run has
            ``checked: false`` and a ``reason``).
        in_flight: the :func:`tally` of copies not yet delivered by their replicator (not violations).
        delays_by_direction / delays_by_topic: rows with ``origin``, ``region`` (and ``topic``), ``count``,
            ``p50_ms``, ``p99_ms``, ``min_ms``, ``max_ms``.
    """
    by_region: dict[str, int] = {r: 0 for r in regions}
    by_topic_rows: dict[str, dict[str, int]] = {}
    for topic, region, n in rows:
        by_region[region] = by_region.get(region, 0) + n
        by_topic_rows.setdefault(topic, {})[region] = n
    by_topic_messages: dict[str, dict[str, int]] = {}
    for topic, origin, n in messages:
        by_topic_messages.setdefault(topic, {})[origin] = n
    delay_topics: dict[str, dict[str, Any]] = {}
    for row in delays_by_topic:
        delay_topics.setdefault(row["topic"], {})[direction(row["origin"], row["region"])] = _delay(row)
    violations = sum(c.get("count", 0) for c in checks.values())
    return {
        "version": 1,
        "ok": violations == 0,
        "violations": violations,
        "topics": sorted(topics),
        "regions": list(regions),
        "expected_regions": {t: sorted(rs) for t, rs in sorted(expected.items())},
        "inputs": dict(inputs),
        "rows": {"total": sum(by_region.values()), "by_region": dict(sorted(by_region.items())),
                 "by_topic": {t: dict(sorted(v.items())) for t, v in sorted(by_topic_rows.items())}},
        "messages": {"total": sum(sum(v.values()) for v in by_topic_messages.values()),
                     "by_topic": {t: dict(sorted(v.items())) for t, v in sorted(by_topic_messages.items())}},
        "checks": dict(checks),
        "in_flight": dict(in_flight or tally([])),
        "replication_delay": {
            "arrival": inputs.get("arrival"),
            "by_direction": {direction(r["origin"], r["region"]): _delay(r)
                             for r in sorted(delays_by_direction, key=lambda r: (r["origin"], r["region"]))},
            "by_topic": {t: dict(sorted(v.items())) for t, v in sorted(delay_topics.items())},
        },
        "notes": list(notes),
        "run": dict(run or {}),
    }


def comparable(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report without what differs between two runs of the same audit (``run``)."""
    return {k: v for k, v in report.items() if k != "run"}


def write_json(report: Mapping[str, Any], path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def summary(report: Mapping[str, Any]) -> list[Any]:
    """Rich renderables: rows per region, one line per check, delays per direction, notes."""
    from rich.table import Table
    from rich.text import Text

    regions = list(report["regions"])
    out: list[Any] = []
    status = Text("OK: no violation" if report["ok"] else f"{report['violations']} violation(s)",
                  style="bold green" if report["ok"] else "bold red")
    out.append(Text.assemble("Consistency audit of ", (f"{len(report['topics'])} topic(s)", "bold"), " in ",
                             (", ".join(regions), "bold"), ": ", status))
    rows = Table(title="Rows read", title_justify="left")
    rows.add_column("topic")
    for region in regions:
        rows.add_column(region, justify="right")
    for topic, counts in report["rows"]["by_topic"].items():
        rows.add_row(topic, *[f"{counts.get(r, 0):,}" for r in regions])
    rows.add_row(Text("total", style="bold"), *[f"{report['rows']['by_region'].get(r, 0):,}" for r in regions])
    out.append(rows)
    checks = Table(title="Checks", title_justify="left")
    checks.add_column("check")
    checks.add_column("violations", justify="right")
    checks.add_column("by direction (origin -> region)")
    checks.add_column("example")
    for name, check in report["checks"].items():
        if check.get("checked") is False:
            checks.add_row(name, Text("not checked", style="yellow"), check.get("reason", ""), "")
            continue
        count = check["count"]
        where = ", ".join(f"{d}: {n}" for d, n in check["by_direction"].items())
        example = _example(check["examples"][0]) if check.get("examples") else ""
        checks.add_row(name, Text(f"{count:,}", style="red" if count else "green"), where, example)
    out.append(checks)
    delays = report["replication_delay"]
    table = Table(title=f"Replication delay (arrival: {delays['arrival']})", title_justify="left")
    for col in ("direction", "copies", "p50 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="left" if col == "direction" else "right")
    for d, stats in delays["by_direction"].items():
        table.add_row(d, f"{stats['count']:,}", _ms(stats["p50_ms"]), _ms(stats["p99_ms"]), _ms(stats["max_ms"]))
    out.append(table)
    pending = report.get("in_flight", {})
    if pending.get("count"):
        out.append(Text(f"in flight (not yet replicated, not violations): {pending['count']:,} copies; "
                        + ", ".join(f"{d}: {n}" for d, n in pending["by_direction"].items()), style="yellow"))
    for note in report.get("notes", ()):
        out.append(Text(f"note: {note}", style="yellow"))
    return out


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _example(row: Mapping[str, Any]) -> str:
    parts = [f"{k}={row[k]}" for k in ("region", "topic", "producer", "seq", "subscription") if row.get(k) is not None]
    return " ".join(parts)
