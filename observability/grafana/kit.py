"""Building blocks every Magnetar dashboard is made of (grafanalib underneath).

A dashboard is described as a list of :class:`PanelSpec` (what to ask Prometheus, how to show it, how wide)
and a list of template variables; :func:`build_dashboard` lays the panels out left to right on Grafana's
24-column grid, numbers them in order (so ids are stable from one generation to the next) and points every
panel and query at the ``datasource`` variable, whose default is the provisioned Prometheus
(:data:`DATASOURCE_UID`). The same JSON therefore loads unchanged in the compose Grafana and, by picking a
data source, in any other Grafana.

Panels never use Grafana rows: every panel carries queries, so anything that walks the JSON (the renderer,
the live test) finds a query in each.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Sequence

import attr
from grafanalib import core as g

from magnetar.errors import MagnetarError

from . import DATASOURCE_NAME, DATASOURCE_UID

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24
SCHEMA_VERSION = 39  # the JSON is written in the shape of Grafana 10/11 (datasource refs, fieldConfig)

# Label matchers the panels combine (values are Grafana macros, see macros.py)
CLUSTER = 'cluster=~"$cluster"'
NAMESPACE = 'namespace=~"$namespace"'
TOPIC = 'topic=~"$topic"'
TOPICS = f"{{{CLUSTER}, {NAMESPACE}, {TOPIC}}}"  # the selector of a topic series under all three variables
RATE = "[$__rate_interval]"


class DefinitionError(MagnetarError):
    """A dashboard definition that cannot be laid out (names the panel)."""


def eq(label: str, value: str) -> str:
    """An equality matcher: ``eq("job", "broker")`` -> ``job="broker"``."""
    return f'{label}="{value}"'


def sel(*matchers: str) -> str:
    """A label selector: ``sel(CLUSTER, 'success="true"')`` -> ``{cluster=~"$cluster", success="true"}``."""
    return "{" + ", ".join(matchers) + "}"


@dataclasses.dataclass(frozen=True)
class Query:
    """One PromQL query of a panel and the legend of its series (Grafana's ``{{label}}`` templates)."""

    expr: str
    legend: str = ""


@dataclasses.dataclass(frozen=True)
class PanelSpec:
    """What a panel shows; placed and numbered by :func:`build_dashboard`."""

    kind: Literal["timeseries", "stat"]
    title: str
    queries: tuple[Query, ...]
    description: str
    unit: str = "short"
    width: int = 12
    height: int = 8
    stacked: bool = False
    bars: bool = False
    red_at: float | None = None  # a threshold from which the value is shown red (stat panels)


def timeseries(title: str, description: str, *queries: Query, unit: str = "short", width: int = 12,
               height: int = 8, stacked: bool = False, bars: bool = False) -> PanelSpec:
    return PanelSpec("timeseries", title, queries, description, unit, width, height, stacked, bars)


def stat(title: str, description: str, *queries: Query, unit: str = "short", width: int = 4, height: int = 4,
         red_at: float | None = None) -> PanelSpec:
    return PanelSpec("stat", title, queries, description, unit, width, height, red_at=red_at)


@attr.s
class _Variable(g.Template):
    """grafanalib's Template, with "All" shown as Grafana itself writes it and the query's definition."""

    def to_json_data(self) -> dict:
        data = super().to_json_data()
        if self.default == "$__all":
            data["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
        if self.type == "query":
            data["definition"] = self.query
        return data


def datasource_variable() -> g.Template:
    """The Prometheus data source every panel queries; the provisioned one is the default."""
    variable = _Variable(name="datasource", label="Data source", query="prometheus", type="datasource",
                         default=DATASOURCE_UID, regex="", refresh=g.REFRESH_ON_DASHBOARD_LOAD)
    variable._current = {"selected": True, "text": DATASOURCE_NAME, "value": DATASOURCE_UID}
    return variable


def query_variable(name: str, label: str, metric: str, *matchers: str) -> g.Template:
    """A multi-value variable of a label's values, ``label_values(metric{matchers}, name)``, "All" = ``.*``."""
    selector = metric + (sel(*matchers) if matchers else "")
    return _Variable(name=name, label=label, query=f"label_values({selector}, {name})", dataSource=DATASOURCE,
                     default="$__all", includeAll=True, multi=True, allValue=".*",
                     refresh=g.REFRESH_ON_TIME_RANGE_CHANGE, sort=g.SORT_ALPHA_ASC)


def cluster_variable(job: str) -> g.Template:
    """The regions whose ``job`` targets Prometheus scrapes (every target carries ``cluster``)."""
    return query_variable("cluster", "Cluster", "up", eq("job", job))


def namespace_variable() -> g.Template:
    return query_variable("namespace", "Namespace", "pulsar_rate_in", CLUSTER)


def topic_variable() -> g.Template:
    return query_variable("topic", "Topic", "pulsar_rate_in", CLUSTER, NAMESPACE)


def _targets(queries: Sequence[Query]) -> list[g.Target]:
    return [g.Target(expr=q.expr, legendFormat=q.legend, refId=chr(ord("A") + i), datasource=DATASOURCE,
                     intervalFactor=1) for i, q in enumerate(queries)]


def _thresholds(red_at: float | None) -> list[dict]:
    steps = [{"color": "green", "value": None}]
    if red_at is not None:
        steps.append({"color": "red", "value": red_at})
    return steps


def _panel(spec: PanelSpec, panel_id: int, pos: g.GridPos) -> g.Panel:
    common = dict(title=spec.title, description=spec.description, id=panel_id, gridPos=pos,
                  dataSource=DATASOURCE, targets=_targets(spec.queries), thresholds=_thresholds(spec.red_at))
    if spec.kind == "stat":
        text = "value_and_name" if len(spec.queries) > 1 else "auto"
        return g.Stat(format=spec.unit, reduceCalc="lastNotNull", graphMode="area", noValue="no data",
                      textMode=text, **common)
    return g.TimeSeries(unit=spec.unit, drawStyle="bars" if spec.bars else "line",
                        fillOpacity=60 if spec.bars else 10, stacking={"mode": "normal"} if spec.stacked else {},
                        legendDisplayMode="table", legendCalcs=["lastNotNull", "max"], tooltipMode="multi",
                        tooltipSort="desc", spanNulls=True, **common)


def layout(specs: Sequence[PanelSpec]) -> list[g.GridPos]:
    """Grid positions, left to right, a new line when a panel no longer fits (line height: its tallest)."""
    positions, x, y, line_height = [], 0, 0, 0
    for spec in specs:
        if not 0 < spec.width <= GRID_COLUMNS:
            raise DefinitionError(f"panel {spec.title!r}: width {spec.width} is not 1..{GRID_COLUMNS}")
        if x + spec.width > GRID_COLUMNS:
            x, y, line_height = 0, y + line_height, 0
        positions.append(g.GridPos(h=spec.height, w=spec.width, x=x, y=y))
        x += spec.width
        line_height = max(line_height, spec.height)
    return positions


def build_dashboard(*, uid: str, title: str, description: str, tags: Sequence[str],
                    variables: Sequence[g.Template], panels: Sequence[PanelSpec]) -> g.Dashboard:
    """A dashboard of ``panels`` (ids 1..n in order) with the data source variable first."""
    built = [_panel(spec, i, pos) for i, (spec, pos) in enumerate(zip(panels, layout(panels)), start=1)]
    return g.Dashboard(
        uid=uid, title=title, description=description, tags=["magnetar", *tags], panels=built,
        templating=g.Templating(list=[datasource_variable(), *variables]), time=g.Time("now-1h", "now"),
        refresh="10s", timezone="browser", editable=True, graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        schemaVersion=SCHEMA_VERSION,
    )
