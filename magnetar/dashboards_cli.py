"""``magnetar dashboards render``: pictures of the Grafana dashboards from a live Prometheus, without Grafana.

Exit codes: 0 when every panel was drawn (a panel without data is drawn as "No data" and still counts);
1 when Prometheus is unreachable or a query failed (each failed panel is named with its expression);
2 for bad options or dashboard files (nothing is rendered). The renderer (and matplotlib) load only when
the command runs.
"""

from __future__ import annotations

import pathlib

import typer

dashboards_app = typer.Typer(help="Grafana dashboards: render them as pictures, check them against Prometheus.",
                             no_args_is_help=True)


def _error(message: str, code: int) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=code)


@dashboards_app.command()
def render(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus base URL, e.g. http://127.0.0.1:9090 "
                                   "(topology.json's prometheus.url)."),
    out: pathlib.Path = typer.Option(..., "--out", help="Directory for <dashboard>/<NN>-<panel>.png, "
                                     "manifest.json and index.html."),
    dashboards: list[str] = typer.Option([], "--dashboard", help="A packaged dashboard's name (e.g. replication) "
                                         "or a dashboard JSON file (repeatable; default: every packaged one)."),
    range_: str = typer.Option("15m", "--range", help="The window ending now (15m, 1h, 90s)."),
    step: str = typer.Option("15s", "--step", help="Resolution; $__interval is the step, $__rate_interval "
                             "four steps but at least 1m."),
    var: list[str] = typer.Option([], "--var", help="A template variable's value, e.g. cluster=us-east (a regex, "
                                  "as in Grafana; repeat a name for several values). Unset ones match all."),
    timeout_s: float = typer.Option(30.0, "--timeout", min=1, help="Seconds per Prometheus request."),
) -> None:
    """Draw every panel of Grafana dashboards from live Prometheus data as PNG (matplotlib)."""
    from observability.render import RenderError, RenderInputError, RenderOptions, render_dashboards
    from observability.render.model import parse_duration, parse_var_options

    try:
        options = RenderOptions(prometheus_url=prometheus, out_dir=out, dashboards=tuple(dashboards),
                                range_s=parse_duration(range_), step_s=parse_duration(step),
                                variables=parse_var_options(var), timeout_s=timeout_s)
        report = render_dashboards(options, log=typer.echo)
    except RenderInputError as err:
        _error(str(err), 2)
    except RenderError as err:  # Prometheus unreachable
        _error(str(err), 1)
    except OSError as err:  # the output directory cannot be written
        _error(f"cannot write {out}: {err}", 2)
    panels = sum(len(d["panels"]) for d in report.manifest["dashboards"])
    typer.echo(f"{panels} panels drawn: {report.index_path} (manifest {report.manifest_path})")
    if report.failures:
        for failure in report.failures:
            typer.secho(f"error: {failure}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1)


@dashboards_app.command()
def check(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus base URL (topology.json's prometheus.url)."),
    dashboards: list[pathlib.Path] = typer.Option([], "--dashboard", help="A dashboard JSON file (repeatable; "
                                                  "default: every packaged one)."),
    rules: list[pathlib.Path] = typer.Option([], "--rules", help="A rules file (repeatable; default: every "
                                             "packaged one)."),
    show_all: bool = typer.Option(False, "--all", help="List every expression, not only the failing ones."),
    timeout_s: float = typer.Option(30.0, "--timeout", min=1, help="Seconds per Prometheus request."),
) -> None:
    """Every panel query returns series and every alert rule parses over series that exist (exit 1 otherwise)."""
    from observability.check import check as run_check
    from observability.render import RenderError

    try:
        probes = run_check(prometheus, dashboards=dashboards, rules=rules, timeout_s=timeout_s)
    except RenderError as err:
        _error(str(err), 1)
    except ImportError as err:  # PyYAML reads the rules files
        _error(f"{err}: install the test extra (pip install -e '.[test]') to read the rules files", 2)
    failed = [p for p in probes if not p.ok]
    for probe in probes if show_all else failed:
        status = "ok" if probe.ok else ("error: " + probe.error if probe.error else "no series")
        typer.echo(f"{status:>10}  {probe.where}\n            {probe.expr}")
    typer.echo(f"{len(probes) - len(failed)} of {len(probes)} expressions ok")
    if failed:
        raise typer.Exit(code=1)
