"""``magnetar audit``: the cross-region consistency audit of a replicated namespace (or of some topics), as a
Spark job (``spark/audit``).

It reads every region's copy of every topic (the Magnetar data source when installed, else through the
brokers), asks the admin API where each topic's messages belong (the namespace's replication clusters or the
topic's override), compares replicated subscriptions through their snapshots, and writes ``report.json`` and
Parquet of every violation under ``--out``; a summary table goes to the terminal.

Exit codes: 0 when no violation was found; 1 when one was; 2 when the audit could not run (bad options, a
region unreachable, Spark failed).
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Optional

import typer


def _error(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def _conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            _error(f"--conf takes KEY=VALUE, not {pair!r}")
        conf[key.strip()] = value
    return conf


def audit(
    topology: pathlib.Path = typer.Option(..., "--topology", help="The deployment's topology.json, or the data "
                                          "directory holding it (magnetar up --data-dir)."),
    namespace: Optional[str] = typer.Option(None, "--namespace", help="Audit every topic of tenant/namespace."),
    topics: list[str] = typer.Option([], "--topic", help="Audit this topic (repeatable; instead of --namespace)."),
    regions: list[str] = typer.Option([], "--region", help="Read only this region (repeatable; default: all)."),
    master: str = typer.Option("local[*]", "--master", help="Spark master URL, passed through (local[2], "
                               "spark://host:7077, ...)."),
    conf: list[str] = typer.Option([], "--conf", help="A Spark setting KEY=VALUE (repeatable)."),
    out: Optional[pathlib.Path] = typer.Option(None, "--out", help="Directory for report.json and violations/ "
                                               "(default: ./magnetar-audit-<UTC time>)."),
    reader: str = typer.Option("auto", "--reader", help="auto (the data source when installed), source, or "
                               "brokers."),
    subscriptions: bool = typer.Option(True, "--subscriptions/--no-subscriptions",
                                       help="Compare replicated subscriptions through their snapshots."),
    grace_s: float = typer.Option(10.0, "--subscription-grace", min=0, help="Seconds a region may take to "
                                  "catch up with a replicated subscription before it counts as diverged."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of tables."),
) -> None:
    """Reconcile every region's copy of a replicated namespace: missing, duplicated, reordered, changed and
    stray messages, replication delay, replicated-subscription divergence."""
    from rich.console import Console

    from spark.audit import AuditError, read_topology, run_session, summary
    from spark.audit.runner import audit_deployment

    if (namespace is None) == (not topics):
        _error("give either --namespace tenant/namespace or one or more --topic")
    if reader not in ("auto", "source", "brokers"):
        _error(f"--reader is auto, source or brokers, not {reader!r}")
    settings = _conf(conf)
    try:  # refused before Spark starts
        deployment = read_topology(topology).select(regions or None)
    except AuditError as err:
        _error(str(err))
    out_dir = out if out is not None else \
        pathlib.Path(f"magnetar-audit-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    try:
        with run_session(master=master, conf=settings) as spark:
            report = audit_deployment(spark, deployment, namespace=namespace, topics=topics, out_dir=out_dir,
                                      reader=reader, subscriptions=subscriptions, grace_s=grace_s)
    except AuditError as err:
        _error(str(err))
    except OSError as err:
        _error(f"cannot write {out_dir}: {err}")
    except Exception as err:  # Spark's own (Py4J, analysis, a lost executor): the audit did not run
        first = str(err).splitlines()[0] if str(err) else ""
        _error(f"the Spark job failed: {type(err).__name__}: {first}")
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        console = Console()
        for part in summary(report):
            console.print(part)
        console.print(f"report: {out_dir / 'report.json'}; violations: {out_dir / 'violations'}/<check>/ (Parquet)")
    raise typer.Exit(code=0 if report["ok"] else 1)
