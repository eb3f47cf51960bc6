"""What ``make demo`` shows of its geo job: the report's tables, the geo-replication dashboard drawn from the
deployment's Prometheus (``magnetar dashboards render``), and the Spark consistency audit of the demo's
namespace (``magnetar audit``). ``clusters/demo.py`` runs the jobs and adds these outcomes to its verdict.
"""

from __future__ import annotations

import pathlib
from typing import Any

from rich.console import Console
from rich.table import Table



# -------------------------------------------------------------------------------------------------- report


def print_geo_report(report: dict[str, Any], console: Console, failover_subscription: str) -> None:
    """The geo job's report as tables: delays per direction, topic stats, the failover, the checks."""
    regions = report["regions"]
    table = Table(title=f"Replication delay: send to receipt, {report['messages_per_region']:,} msgs of "
                        f"{report['size_bytes']} B per region at {report['rate_per_region']:,.0f} msg/s")
    for col in ("direction", "messages", "p50 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="left" if col == "direction" else "right")
    for key, d in report["delay_ms"].items():
        table.add_row(key, f"{d['count']:,}", f"{d.get('p50', 0):.1f}", f"{d.get('p99', 0):.1f}",
                      f"{d.get('max', 0):.1f}")
    console.print(table)

    table = Table(title=f"Topic stats of {report['topic']} (backlogs in entries, as Pulsar counts them)")
    for col in ("region", "msgs in", "sub backlog", "to", "repl backlog", "repl msgs out", "repl delay s",
                "connected"):
        table.add_column(col, justify="left" if col in ("region", "to") else "right")
    for r in regions:
        st = report["stats"].get(r) or {"replication": {}}
        for remote, x in st["replication"].items():
            table.add_row(r, f"{st['msgInCounter']:,}", str(st["subscriptionBacklog"]), remote,
                          str(x["replicationBacklog"]), f"{x['msgOutCounter'] or 0:,}",
                          f"{x['replicationDelayInSeconds'] or 0:.3f}", "yes" if x["connected"] else "[red]no[/red]")
    console.print(table)

    fo = report["failover"]
    if fo.get("resumed_at_seq") is not None:
        console.print(
            f"Failover ({report['failover_topic']}, subscription {failover_subscription}): {fo['messages']:,} "
            f"messages; #0..#{fo['last_acked_seq']} acknowledged in {fo['from']}; {fo['to']}'s subscription "
            f"settled {fo['followed_after_s']} s after the consumer left; resumed there at #{fo['resumed_at_seq']} "
            f"({fo['redelivered']} delivered again, {fo['redelivered'] / fo['rate']:.1f} s of traffic at "
            f"{fo['rate']:,.0f} msg/s: acknowledged after the last snapshot passed; one snapshot a second).")

    table = Table(title="Checks")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail")
    for c in report["checks"]:
        table.add_row(c["name"], "[green]pass[/green]" if c["ok"] else "[red]FAIL[/red]", c["detail"])
    console.print(table)


# -------------------------------------------------------------------------------------------------- pictures


def draw_replication_dashboard(topo: dict[str, Any], out: pathlib.Path, console: Console) -> bool:
    """Draws the geo-replication dashboard from the deployment's Prometheus as PNG files (what Grafana would show
    for the last 10 minutes), and says where; False when a panel could not be drawn."""
    from observability.render import RenderError, RenderOptions, render_dashboards

    try:
        drawn = render_dashboards(RenderOptions(prometheus_url=topo["prometheus"]["url"], out_dir=out,
                                                dashboards=("replication",), range_s=600, step_s=5))
    except RenderError as exc:
        console.print(f"[red]the replication dashboard could not be drawn: {exc}[/red]")
        return False
    panels = drawn.manifest["dashboards"][0]["panels"]
    with_data = sum(1 for p in panels if p.get("series"))
    console.print(f"\nThe geo-replication dashboard, drawn from Prometheus ({len(panels)} panels, {with_data} with "
                  f"data): {drawn.index_path}", markup=False)
    for failure in drawn.failures:
        console.print(f"[red]  {failure}[/red]")
    return not drawn.failures


# -------------------------------------------------------------------------------------------------- audit


def run_audit(data_dir: pathlib.Path, topo: dict[str, Any], namespace: str, console: Console) -> bool:
    """The Spark consistency audit (``magnetar audit``) of the demo's namespace in every region, on
    ``local[2]``: its summary is shown and its report and violations are written under ``<data-dir>/audit``.
    True when it found no violation."""
    from spark.audit import AuditError, run_session, summary
    from spark.audit.runner import audit_deployment

    out = data_dir / "audit"
    console.print(f"\nThe consistency audit of {namespace} (Spark, local[2], read straight from each region's "
                  f"bookies)...", markup=False)
    # No unloading first: the data source reads each open ledger up to its newest entry (the brokers' ledger
    # writers send an explicit LAC once adds stop; docs/spark.md).
    try:
        with run_session(master="local[2]") as spark:  # a session the caller already runs stays running
            report = audit_deployment(spark, data_dir / "topology.json", namespace=namespace, out_dir=out)
    except AuditError as exc:
        console.print(f"[red]the audit could not run: {exc}[/red]")
        return False
    for part in summary(report):
        console.print(part)
    console.print(f"audit report: {out / 'report.json'}", markup=False)
    return bool(report["ok"])
