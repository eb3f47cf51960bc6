"""What a Grafana dashboard asks for, as plain data: panels, their queries, and the text Grafana would show.

Pure functions only (no I/O, no matplotlib), so the rules Grafana applies are tested on their own:

* **Panels** (:func:`panels_of`): the dashboard JSON model keeps panels in ``panels[]``; a ``row`` panel is a
  heading, and a collapsed row carries its panels inside its own ``panels[]``; old dashboards keep them in
  ``rows[].panels[]``. Every panel with at least one visible ``targets[].expr`` is drawn, numbered in the
  order Grafana lists them; the others (rows, text) are reported as skipped.
* **Template variables** (:func:`substitute`): ``$name``, ``${name}`` (``${name:format}`` too) and
  ``[[name]]`` are replaced by the value of a known variable; an unknown name is left as it is, as Grafana
  does (so ``label_replace``'s ``$1`` survives), and reported.
* **Legends** (:func:`legend`): ``{{label}}`` takes the series' label value (empty when absent); an empty
  ``legendFormat`` (or ``__auto``) names the series ``metric{label="value", ...}`` as Grafana does.
* **Units** live in ``fieldConfig.defaults.unit`` (``yaxes[0].format`` for the old ``graph`` panel).
"""

from __future__ import annotations

import enum
import math
import re
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

from .errors import RenderInputError

# Prometheus refuses a range query of more points than this per series.
MAX_POINTS = 11_000

DEFAULT_VARIABLES = ("cluster", "namespace", "topic")
ALL_VALUE = ".*"

_DURATION_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """``15m``, ``30s``, ``1h30m``, ``500ms`` or a plain number of seconds, as seconds (> 0)."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _DURATION_UNITS_S[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise RenderInputError(f"not a duration: {text!r} (e.g. 15m, 30s, 1h30m, 500ms)") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise RenderInputError(f"a duration must be positive: {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A PromQL duration for ``seconds``: the largest unit that divides it (``1m``, ``90s``, ``500ms``)."""
    ms = max(1, round(seconds * 1000))
    for unit, size_ms in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size_ms == 0:
            return f"{ms // size_ms}{unit}"
    return f"{ms}ms"


def check_resolution(range_s: float, step_s: float) -> None:
    """Prometheus answers at most :data:`MAX_POINTS` points per series: refuse before asking."""
    if range_s / step_s > MAX_POINTS:
        raise RenderInputError(f"range {format_duration(range_s)} at step {format_duration(step_s)} is "
                               f"{range_s / step_s:,.0f} points; Prometheus allows {MAX_POINTS:,}: raise --step")


def parse_var_options(options: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """``--var name=value`` options (repeatable; a name given twice selects both values)."""
    values: dict[str, list[str]] = {}
    for option in options:
        name, sep, value = option.partition("=")
        name = name.strip().lstrip("$")
        if not sep or not re.fullmatch(r"\w+", name):
            raise RenderInputError(f"--var wants name=value (e.g. cluster=us-east), not {option!r}")
        values.setdefault(name, []).append(value)
    return {name: tuple(vals) for name, vals in values.items()}


def template_names(dashboard: Mapping[str, Any]) -> list[str]:
    """Names of the dashboard's own template variables (``templating.list[].name``)."""
    templating = dashboard.get("templating") or {}
    entries = templating.get("list") if isinstance(templating, Mapping) else None
    return [str(e["name"]) for e in entries or () if isinstance(e, Mapping) and e.get("name")]


def variables_for(dashboard: Mapping[str, Any], chosen: Mapping[str, Sequence[str]], *,
                  step_s: float, range_s: float) -> dict[str, str]:
    """The value of every variable a query of ``dashboard`` may use.

    ``cluster``, ``namespace``, ``topic`` and the dashboard's own variables match everything (``.*``, Grafana's
    "All") unless ``chosen`` names values: one value is used as it is (a regex, like Grafana's), several become
    ``(a|b)``. ``$__rate_interval`` is four steps but at least 1m (two scrapes in every window at the usual
    15 s scrape interval), ``$__interval`` the step.
    """
    values = {name: ALL_VALUE for name in (*DEFAULT_VARIABLES, *template_names(dashboard))}
    for name, vals in chosen.items():
        values[name] = vals[0] if len(vals) == 1 else "(" + "|".join(vals) + ")"
    values.update({
        "__rate_interval": format_duration(max(4 * step_s, 60.0)),
        "__interval": format_duration(step_s),
        "__interval_ms": str(max(1, round(step_s * 1000))),
        "__range": format_duration(range_s),
        "__range_s": str(round(range_s)),
    })
    return values


# Grafana's variable syntaxes: $name, [[name]] / [[name:format]], ${name} / ${name:format} / ${name.field}.
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+)(?::\w+)?\]\]|\$\{(\w+)(?:\.[^:}]+)?(?::[^}]+)?\}")


class Substituted(NamedTuple):
    expr: str
    unknown: tuple[str, ...]  # variable names left as they were (not digits: those are regex back-references)


def substitute(expr: str, values: Mapping[str, str]) -> Substituted:
    """``expr`` with every known template variable replaced by its value."""
    unknown: list[str] = []

    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name in values:
            return values[name]
        if not name.isdigit() and name not in unknown:
            unknown.append(name)
        return match.group(0)

    return Substituted(_VARIABLE.sub(replace, expr), tuple(unknown))


_LEGEND_LABEL = re.compile(r"\{\{\s*(.+?)\s*\}\}")


def legend(legend_format: str, labels: Mapping[str, str], expr: str) -> str:
    """The name Grafana gives a series of ``expr`` with ``labels``."""
    if legend_format and legend_format != "__auto":
        return _LEGEND_LABEL.sub(lambda m: str(labels.get(m.group(1), "")), legend_format)
    name = labels.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__")
    if not name and not rest:
        return expr
    return f"{name}{{{rest}}}" if rest else name


def slug(text: str, *, max_chars: int = 60) -> str:
    """A file-name-safe form of a title: lower case, ``-`` between words (``panel`` when nothing is left)."""
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:max_chars].rstrip("-")
    return out or "panel"


class PanelKind(enum.Enum):
    TIMESERIES = "timeseries"  # lines over time: timeseries, graph and anything else that has queries
    STAT = "stat"  # one big number per series: stat, singlestat, bargauge
    GAUGE = "gauge"  # a number on an arc between min and max
    TABLE = "table"  # one row per series: its labels and its value


# Panels whose queries are not PromQL (logs are LogQL) or that have no query at all.
_NOT_DRAWN = {"row", "text", "news", "dashlist", "alertlist", "annolist", "logs", "nodeGraph", "welcome"}

_KINDS = {"stat": PanelKind.STAT, "singlestat": PanelKind.STAT, "bargauge": PanelKind.STAT,
          "gauge": PanelKind.GAUGE, "table": PanelKind.TABLE, "table-old": PanelKind.TABLE}


class Target(NamedTuple):
    expr: str
    legend_format: str
    ref_id: str


class Panel(NamedTuple):
    """One panel to draw. ``number`` is its place among the drawn panels of the dashboard (1-based)."""

    number: int
    title: str
    type: str
    kind: PanelKind
    targets: tuple[Target, ...]
    unit: str
    decimals: Optional[int]
    reduce: str  # Grafana's reducer for stat/gauge/table: lastNotNull, mean, max, ...
    min: Optional[float]
    max: Optional[float]
    row: str  # title of the row it sits under ('' before the first row)

    @property
    def file_name(self) -> str:
        return f"{self.number:02d}-{slug(self.title)}.png"


class Skipped(NamedTuple):
    title: str
    type: str
    reason: str


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _targets(raw: Mapping[str, Any]) -> tuple[Target, ...]:
    targets = []
    for i, t in enumerate(raw.get("targets") or ()):
        if not isinstance(t, Mapping) or t.get("hide") is True:
            continue
        expr = t.get("expr")
        if isinstance(expr, str) and expr.strip():
            ref_id = str(t.get("refId") or chr(ord("A") + i % 26))
            targets.append(Target(expr.strip(), str(t.get("legendFormat") or ""), ref_id))
    return tuple(targets)


def _unit(raw: Mapping[str, Any]) -> str:
    defaults = (raw.get("fieldConfig") or {}).get("defaults") or {}
    unit = defaults.get("unit")
    if not unit and raw.get("yaxes"):
        unit = (raw["yaxes"][0] or {}).get("format")
    return str(unit or raw.get("format") or "")


def _reduce(raw: Mapping[str, Any]) -> str:
    calcs = ((raw.get("options") or {}).get("reduceOptions") or {}).get("calcs")
    if isinstance(calcs, list) and calcs and isinstance(calcs[0], str):
        return calcs[0]
    return str(raw.get("valueName") or "lastNotNull")  # singlestat's valueName ("current", "avg", ...)


def _flatten(panels: Iterable[Any], row: str) -> Iterable[tuple[Mapping[str, Any], str]]:
    for raw in panels:
        if not isinstance(raw, Mapping):
            continue
        if raw.get("type") == "row":
            row = str(raw.get("title") or "")
            yield raw, row
            yield from _flatten(raw.get("panels") or (), row)
        else:
            yield raw, row


def panels_of(dashboard: Mapping[str, Any]) -> tuple[list[Panel], list[Skipped]]:
    """Every panel of a dashboard JSON model to draw, and those that have nothing to draw."""
    if not isinstance(dashboard, Mapping):
        raise RenderInputError("a dashboard is a JSON object with panels[]")
    raw_panels = list(dashboard.get("panels") or ())
    for row in dashboard.get("rows") or ():  # the pre-5.0 layout
        if isinstance(row, Mapping):
            raw_panels.append({"type": "row", "title": row.get("title", ""), "panels": row.get("panels") or []})
    drawn: list[Panel] = []
    skipped: list[Skipped] = []
    for raw, row in _flatten(raw_panels, ""):
        kind_name = str(raw.get("type") or "")
        title = str(raw.get("title") or "")
        targets = _targets(raw)
        if kind_name == "row":
            continue
        if kind_name in _NOT_DRAWN or not targets:
            reason = "not a Prometheus panel" if kind_name in _NOT_DRAWN else "no PromQL query (targets[].expr)"
            skipped.append(Skipped(title, kind_name, reason))
            continue
        defaults = (raw.get("fieldConfig") or {}).get("defaults") or {}
        decimals = defaults.get("decimals", raw.get("decimals"))
        drawn.append(Panel(
            number=len(drawn) + 1, title=title, type=kind_name,
            kind=_KINDS.get(kind_name, PanelKind.TIMESERIES), targets=targets, unit=_unit(raw),
            decimals=int(decimals) if _number(decimals) is not None else None,
            reduce=_reduce(raw), min=_number(defaults.get("min")), max=_number(defaults.get("max")), row=row,
        ))
    return drawn, skipped


def reduce_values(values: Sequence[float], how: str) -> float:
    """A series' values reduced as Grafana's ``reduceOptions.calcs[0]`` says (NaN when there is none)."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan
    how = {"current": "lastNotNull", "avg": "mean", "total": "sum", "last": "lastNotNull",
           "first": "firstNotNull"}.get(how, how)
    if how == "mean":
        return sum(finite) / len(finite)
    if how == "max":
        return max(finite)
    if how == "min":
        return min(finite)
    if how == "sum":
        return sum(finite)
    if how == "firstNotNull":
        return finite[0]
    if how == "count":
        return float(len(finite))
    return finite[-1]


def with_gaps(times: Sequence[float], values: Sequence[float], step_s: float) -> tuple[list[float], list[float]]:
    """Points with a NaN inserted where samples are missing, so a line is broken there as in Grafana."""
    out_t: list[float] = []
    out_v: list[float] = []
    for t, v in zip(times, values):
        if out_t and t - out_t[-1] > 1.5 * step_s:
            out_t.append(out_t[-1] + step_s)
            out_v.append(math.nan)
        out_t.append(t)
        out_v.append(v)
    return out_t, out_v
