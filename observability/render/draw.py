"""Drawing one panel as a PNG with matplotlib (the Agg canvas; no pyplot, no display, no global state).

Each function takes the panel (:class:`~observability.render.model.Panel`) and its series already named
(:class:`Named`), and writes one file. The look follows Grafana's where it matters to a reader: a time
series panel is lines with a legend and the unit on the y axis, a line broken where samples are missing;
a stat panel is its reduced value in large coloured type over a faint sparkline; a gauge is that value on
an arc between the panel's min and max; a table is one row per series. A panel without series says
"No data", as Grafana does.
"""

from __future__ import annotations

import datetime
import math
import pathlib
from typing import NamedTuple, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, DateFormatter
from matplotlib.figure import Figure
from matplotlib.patches import Wedge
from matplotlib.ticker import FuncFormatter

from .model import Panel, PanelKind, reduce_values, with_gaps
from .units import format_value, unit_label

LEGEND_MAX = 12  # entries shown; the rest are counted in one line
TABLE_ROWS_MAX = 20
STAT_CELLS_MAX = 12
DPI = 100
_VALUE_COLOUR = "#299c46"  # Grafana's green
_MUTED = "#6e6e6e"


class Named(NamedTuple):
    """A series with the name its legend gives it."""

    name: str
    labels: dict[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]


def _figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _title(fig: Figure, panel: Panel, subtitle: str = "") -> None:
    fig.suptitle(panel.title or "(untitled)", x=0.01, ha="left", fontsize=12, fontweight="bold")
    if subtitle:
        fig.text(0.99, 0.975, subtitle, ha="right", va="top", fontsize=8, color=_MUTED)


def _save(fig: Figure, path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")


def _no_data(fig: Figure, ax) -> None:
    ax.text(0.5, 0.5, "No data", ha="center", va="center", fontsize=20, color=_MUTED, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _clip(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def draw_timeseries(path: pathlib.Path, panel: Panel, series: Sequence[Named], *, start_s: float, end_s: float,
                    step_s: float) -> None:
    fig = _figure(10, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    _title(fig, panel, panel.row)
    if not series:
        _no_data(fig, ax)
        _save(fig, path)
        return
    for s in series:
        times, values = with_gaps(s.times, s.values, step_s)
        ax.plot([datetime.datetime.fromtimestamp(t) for t in times], values, linewidth=1.4,
                label=_clip(s.name or " "))
    ax.set_xlim(datetime.datetime.fromtimestamp(start_s), datetime.datetime.fromtimestamp(end_s))
    locator = AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S" if end_s - start_s <= 600 else "%H:%M"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_value(v, panel.unit, decimals=panel.decimals)))
    ax.set_ylabel(unit_label(panel.unit))
    ax.grid(True, color="#e0e0e0", linewidth=0.6)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles, labels = ax.get_legend_handles_labels()
    if len(handles) > LEGEND_MAX:
        extra = len(handles) - LEGEND_MAX
        handles, labels = handles[:LEGEND_MAX], labels[:LEGEND_MAX]
        labels[-1] += f"   (+{extra} more series)"
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0, -0.12), ncol=2 if len(handles) > 4 else 1,
              fontsize=8, frameon=False)
    _save(fig, path)


def _stat_cell(fig: Figure, ax, panel: Panel, s: Named, value: float, *, named: bool) -> None:
    ax.set_axis_off()
    finite = [v for v in s.values if not math.isnan(v) and not math.isinf(v)]
    if len(finite) > 1 and panel.kind is PanelKind.STAT:  # the sparkline behind the number
        spark = fig.add_axes(ax.get_position(), zorder=ax.get_zorder() - 1)
        spark.fill_between(range(len(finite)), finite, min(finite), color=_VALUE_COLOUR, alpha=0.12, linewidth=0)
        spark.set_axis_off()
    text = format_value(value, panel.unit, decimals=panel.decimals) if not math.isnan(value) else "No data"
    size = 40 if len(text) < 10 else 28
    if panel.kind is PanelKind.GAUGE:
        low = panel.min if panel.min is not None else 0.0
        high = panel.max if panel.max is not None else 100.0
        share = 0.0 if math.isnan(value) or high <= low else min(max((value - low) / (high - low), 0.0), 1.0)
        ax.set_xlim(-1.1, 1.1)
        ax.set_ylim(-0.35, 1.1)
        ax.set_aspect("equal")
        ax.add_patch(Wedge((0, 0), 1.0, 0, 180, width=0.22, color="#e6e6e6"))
        ax.add_patch(Wedge((0, 0), 1.0, 180 - 180 * share, 180, width=0.22, color=_VALUE_COLOUR))
        ax.text(0, 0.15, text, ha="center", va="center", fontsize=size * 0.7, color=_VALUE_COLOUR, fontweight="bold")
        ax.text(-1, -0.2, format_value(low, panel.unit), ha="center", fontsize=7, color=_MUTED)
        ax.text(1, -0.2, format_value(high, panel.unit), ha="center", fontsize=7, color=_MUTED)
    else:
        ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=size, color=_VALUE_COLOUR, fontweight="bold",
                transform=ax.transAxes)
    if named and s.name:  # as Grafana's text mode "auto": a single value goes without its name
        ax.text(0.5, 0.02, _clip(s.name, 50), ha="center", va="bottom", fontsize=8, color=_MUTED,
                transform=ax.transAxes)


def draw_stat(path: pathlib.Path, panel: Panel, series: Sequence[Named]) -> None:
    """Stat and gauge panels: one cell per series (at most :data:`STAT_CELLS_MAX`), its reduced value big."""
    cells = list(series[:STAT_CELLS_MAX])
    columns = min(len(cells), 4) or 1
    rows = max(1, math.ceil(len(cells) / columns))
    fig = _figure(max(5.0, 2.8 * columns), 0.6 + 2.4 * rows)
    more = f"   (+{len(series) - len(cells)} more series)" if len(series) > len(cells) else ""
    _title(fig, panel, f"{panel.reduce}{more}")
    if not cells:
        _no_data(fig, fig.add_subplot(1, 1, 1))
    for i, s in enumerate(cells):
        _stat_cell(fig, fig.add_subplot(rows, columns, i + 1), panel, s, reduce_values(s.values, panel.reduce),
                   named=len(series) > 1)
    _save(fig, path)


def draw_table(path: pathlib.Path, panel: Panel, series: Sequence[Named]) -> None:
    """One row per series: its labels (those that differ between rows, at most six) and its reduced value."""
    shown = list(series[:TABLE_ROWS_MAX])
    keys: list[str] = []
    for s in shown:
        keys += [k for k in s.labels if k not in keys and k != "__name__"]
    varying = [k for k in keys if len({s.labels.get(k, "") for s in shown}) > 1] or keys
    columns = varying[:6]
    fig = _figure(10, 0.9 + 0.3 * max(len(shown), 3))
    ax = fig.add_subplot(1, 1, 1)
    more = f"(+{len(series) - len(shown)} more rows)" if len(series) > len(shown) else ""
    _title(fig, panel, more)
    if not shown:
        _no_data(fig, ax)
        _save(fig, path)
        return
    ax.set_axis_off()
    cells = [[_clip(s.labels.get(k, ""), 40) for k in columns]
             + [format_value(reduce_values(s.values, panel.reduce), panel.unit, decimals=panel.decimals)]
             for s in shown]
    header = (columns or ["series"]) + ["Value"]
    if not columns:
        cells = [[_clip(s.name, 60)] + row for s, row in zip(shown, cells)]
    table = ax.table(cellText=cells, colLabels=header, loc="upper center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (row, column), cell in table.get_celld().items():
        cell.set_edgecolor("#d0d0d0")
        if row == 0:
            cell.set_facecolor("#f0f0f0")
            cell.set_text_props(fontweight="bold")
        elif column == len(header) - 1:
            cell.set_text_props(color=_VALUE_COLOUR, fontweight="bold")
    _save(fig, path)


def draw_error(path: pathlib.Path, panel: Panel, message: str) -> None:
    """A panel whose query failed: its title and the error, so the index still shows every panel."""
    fig = _figure(10, 3)
    ax = fig.add_subplot(1, 1, 1)
    _title(fig, panel, panel.row)
    ax.set_axis_off()
    ax.text(0.01, 0.9, "Query failed", fontsize=14, color="#d44a3a", fontweight="bold", va="top",
            transform=ax.transAxes)
    ax.text(0.01, 0.7, _clip(message, 600), fontsize=8, va="top", wrap=True, family="monospace",
            transform=ax.transAxes)
    _save(fig, path)


def draw(path: pathlib.Path, panel: Panel, series: Sequence[Named], *, start_s: float, end_s: float,
         step_s: float) -> None:
    """Draws ``panel`` as its kind wants."""
    if panel.kind in (PanelKind.STAT, PanelKind.GAUGE):
        draw_stat(path, panel, series)
    elif panel.kind is PanelKind.TABLE:
        draw_table(path, panel, series)
    else:
        draw_timeseries(path, panel, series, start_s=start_s, end_s=end_s, step_s=step_s)
