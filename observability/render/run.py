"""``magnetar dashboards render``: every panel of some Grafana dashboards, drawn from a live Prometheus.

The run, in order: resolve the dashboards (names of the packaged ones, or files) and read them all, so a
bad file stops the run before anything is written; check that Prometheus answers; then per dashboard, per
panel: substitute the template variables in each query, ask ``/api/v1/query_range`` over the same window for
every panel (``end`` is taken once), name the series from ``legendFormat``, draw one PNG
``OUT/<dashboard>/<NN>-<slug>.png``. ``OUT/manifest.json`` lists every panel with its file, status
(``ok``, ``no data``, ``error``) and series count; ``OUT/index.html`` shows the pictures.

A query Prometheus refuses fails its panel only (drawn as the error, listed in :attr:`Report.failures`);
an unreachable Prometheus stops the run.
"""

from __future__ import annotations

import dataclasses
import html
import json
import pathlib
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import observability

from .errors import QueryFailed, RenderInputError
from .model import (Panel, check_resolution, format_duration, legend, panels_of, slug, substitute,
                    variables_for)
from .prometheus import PrometheusClient

DASHBOARDS_DIR = pathlib.Path(observability.__file__).resolve().parent / "grafana" / "dashboards"


@dataclasses.dataclass(frozen=True)
class RenderOptions:
    """What to render, from where, over which window.

    Attributes:
        prometheus_url: base URL of the Prometheus server.
        out_dir: where the pictures, ``manifest.json`` and ``index.html`` go.
        dashboards: packaged dashboard names (``replication``) or JSON files; empty: every packaged one.
        range_s / step_s: the window ending now (or at ``end_s``) and the resolution.
        variables: template variable values (``cluster`` → ``("us-east",)``); unnamed ones match all.
        dashboards_dir: where packaged dashboards are looked up.
    """

    prometheus_url: str
    out_dir: pathlib.Path
    dashboards: tuple[str, ...] = ()
    range_s: float = 900.0
    step_s: float = 15.0
    variables: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    end_s: Optional[float] = None
    timeout_s: float = 30.0
    dashboards_dir: pathlib.Path = DASHBOARDS_DIR


@dataclasses.dataclass
class Report:
    manifest: dict[str, Any]
    failures: list[QueryFailed]
    manifest_path: pathlib.Path
    index_path: pathlib.Path


def resolve_dashboards(names: Sequence[str], directory: pathlib.Path) -> list[pathlib.Path]:
    """The dashboard files ``names`` mean (a path to a file, or a packaged dashboard's name)."""
    available = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not names:
        if not available:
            raise RenderInputError(f"no dashboards in {directory}: pass --dashboard FILE")
        return available
    files = []
    for name in names:
        path = pathlib.Path(name)
        if path.is_file():
            files.append(path)
        elif (directory / f"{name.removesuffix('.json')}.json").is_file():
            files.append(directory / f"{name.removesuffix('.json')}.json")
        else:
            known = ", ".join(p.stem for p in available) or f"none in {directory}"
            raise RenderInputError(f"no dashboard {name!r}: neither a file nor a packaged dashboard ({known})")
    return files


def load_dashboard(path: pathlib.Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise RenderInputError(f"cannot read dashboard {path}: {err}") from None
    except ValueError as err:
        raise RenderInputError(f"dashboard {path} is not JSON: {err}") from None
    if isinstance(data, dict) and isinstance(data.get("dashboard"), dict):  # the API's {"dashboard": ...} wrapper
        data = data["dashboard"]
    if not isinstance(data, dict) or not isinstance(data.get("panels", data.get("rows")), list):
        raise RenderInputError(f"dashboard {path} has no panels[] (is it a Grafana dashboard JSON model?)")
    return data


def _render_panel(
    client: PrometheusClient, panel: Panel, values: Mapping[str, str], *, directory: pathlib.Path, start_s: float,
    end_s: float, step_s: float, where: str,
) -> tuple[dict[str, Any], Optional[QueryFailed]]:
    from .draw import Named, draw, draw_error

    entry: dict[str, Any] = {"number": panel.number, "title": panel.title, "type": panel.type, "row": panel.row,
                             "unit": panel.unit, "file": f"{directory.name}/{panel.file_name}", "queries": []}
    named: list[Named] = []
    failure: Optional[QueryFailed] = None
    for target in panel.targets:
        expr, unknown = substitute(target.expr, values)
        query: dict[str, Any] = {"ref_id": target.ref_id, "expr": expr}
        if unknown:
            query["unknown_variables"] = list(unknown)
        entry["queries"].append(query)
        try:
            found = client.query_range(expr, start_s=start_s, end_s=end_s, step_s=step_s)
        except QueryFailed as err:
            failure = failure or err.for_panel(f"{where} / {panel.number:02d} {panel.title}")
            query["error"] = err.reason
            continue
        query["series"] = len(found)
        named += [Named(legend(target.legend_format, s.labels, expr), s.labels, s.times, s.values) for s in found]
    entry["series"] = len(named)
    path = directory / panel.file_name
    if failure is not None:
        draw_error(path, panel, str(failure))
        entry["status"] = "error"
        entry["error"] = str(failure)
    else:
        draw(path, panel, named, start_s=start_s, end_s=end_s, step_s=step_s)
        entry["status"] = "ok" if named else "no data"
    return entry, failure


def render_dashboards(options: RenderOptions, *, log: Callable[[str], None] = lambda line: None) -> Report:
    """Renders every panel of the dashboards ``options`` names; see the module docstring."""
    check_resolution(options.range_s, options.step_s)
    files = resolve_dashboards(options.dashboards, options.dashboards_dir)
    loaded = [(path, load_dashboard(path)) for path in files]
    planned = [(path, data, *panels_of(data)) for path, data in loaded]
    names = [slug(path.stem) for path in files]
    if len(set(names)) != len(names):
        raise RenderInputError(f"two dashboards would share a folder: {', '.join(map(str, files))}")
    client = PrometheusClient(options.prometheus_url, timeout_s=options.timeout_s)
    version = client.check()
    end_s = options.end_s if options.end_s is not None else time.time()
    start_s = end_s - options.range_s
    out_dir = options.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "prometheus": client.url, "prometheus_version": version, "start": start_s, "end": end_s,
        "range": format_duration(options.range_s), "step": format_duration(options.step_s),
        "variables": {k: list(v) for k, v in options.variables.items()}, "dashboards": [],
    }
    failures: list[QueryFailed] = []
    for name, (path, data, panels, skipped) in zip(names, planned):
        values = variables_for(data, options.variables, step_s=options.step_s, range_s=options.range_s)
        title = str(data.get("title") or name)
        entries = []
        for old in (out_dir / name).glob("[0-9][0-9]-*.png"):  # a panel since removed must not linger
            old.unlink()
        for panel in panels:
            entry, failure = _render_panel(client, panel, values, directory=out_dir / name, start_s=start_s,
                                           end_s=end_s, step_s=options.step_s, where=name)
            entries.append(entry)
            if failure is not None:
                failures.append(failure)
        manifest["dashboards"].append({
            "name": name, "title": title, "source": str(path), "panels": entries,
            "skipped": [s._asdict() for s in skipped],
        })
        no_data = sum(e["status"] == "no data" for e in entries)
        errors = sum(e["status"] == "error" for e in entries)
        log(f"{name}: {len(entries)} panels ({no_data} without data, {errors} failed) in {out_dir / name}")
    manifest_path = out_dir / "manifest.json"
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    index_path = out_dir / "index.html"
    index_path.write_text(_index_html(manifest))
    return Report(manifest, failures, manifest_path, index_path)


def _index_html(manifest: Mapping[str, Any]) -> str:
    esc = html.escape
    parts = [
        "<!doctype html><meta charset='utf-8'><title>Magnetar dashboards</title>",
        "<style>body{font-family:sans-serif;margin:1em}figure{display:inline-block;margin:.5em;vertical-align:top}"
        "img{max-width:48vw;border:1px solid #ddd}figcaption{font-size:small;color:#555}"
        ".error{color:#d44a3a}</style>",
        f"<p>From {esc(str(manifest['prometheus']))}: the last {esc(manifest['range'])} at step "
        f"{esc(manifest['step'])}, until {esc(time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(manifest['end'])))}."
        "</p>",
    ]
    for dashboard in manifest["dashboards"]:
        parts.append(f"<h2>{esc(dashboard['title'])}</h2>")
        for panel in dashboard["panels"]:
            status = panel["status"]
            css = " class='error'" if status == "error" else ""
            parts.append(f"<figure><a href='{esc(panel['file'])}'><img src='{esc(panel['file'])}' "
                         f"alt='{esc(panel['title'])}'></a><figcaption{css}>{panel['number']:02d} "
                         f"{esc(panel['title'])}: {panel['series']} series, {esc(status)}</figcaption></figure>")
    return "\n".join(parts) + "\n"
