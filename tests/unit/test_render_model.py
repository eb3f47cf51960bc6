"""What the dashboard renderer reads from a dashboard: panels, template variables, legends, durations."""

from __future__ import annotations

import json
import math
import pathlib

import pytest

from observability.render.errors import RenderInputError
from observability.render.model import (
    PanelKind, check_resolution, format_duration, legend, panels_of, parse_duration, parse_var_options,
    reduce_values, slug, substitute, variables_for, with_gaps,
)

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "data" / "dashboards" / "render-fixture.json"


def _values(chosen=None, *, step_s=15.0, range_s=900.0, dashboard=None):
    return variables_for(dashboard or {}, chosen or {}, step_s=step_s, range_s=range_s)


# -- template variables --------------------------------------------------------------------------------

def test_every_variable_syntax_is_substituted():
    values = _values({"cluster": ("us-east",)})
    expr = 'a{cluster=~"$cluster"} + b{cluster=~"${cluster}"} + c{cluster=~"[[cluster]]"} + d{c=~"${cluster:regex}"}'
    assert substitute(expr, values).expr == ('a{cluster=~"us-east"} + b{cluster=~"us-east"} + '
                                             'c{cluster=~"us-east"} + d{c=~"us-east"}')


def test_unset_variables_match_everything_and_several_values_make_an_alternation():
    values = _values({"cluster": ("us-east", "us-west")})
    out = substitute('x{cluster=~"$cluster", namespace=~"$namespace", topic=~"$topic"}', values)
    assert out.expr == 'x{cluster=~"(us-east|us-west)", namespace=~".*", topic=~".*"}'
    assert out.unknown == ()


def test_a_dashboards_own_variables_are_known():
    dashboard = {"templating": {"list": [{"name": "instance"}, {"name": "cluster"}]}}
    assert substitute('up{instance=~"$instance"}', _values(dashboard=dashboard)).expr == 'up{instance=~".*"}'


@pytest.mark.parametrize("step_s, rate, interval", [(15, "1m", "15s"), (30, "2m", "30s"), (1, "1m", "1s"),
                                                    (20, "80s", "20s")])
def test_interval_macros_follow_the_step(step_s, rate, interval):
    values = _values(step_s=step_s)
    out = substitute("rate(x[$__rate_interval]) / $__interval", values).expr
    assert out == f"rate(x[{rate}]) / {interval}"


def test_rate_interval_is_not_mistaken_for_interval():
    assert substitute("[$__rate_interval] [$__interval] [$__interval_ms]", _values(step_s=15)).expr == \
        "[1m] [15s] [15000]"


def test_unknown_names_stay_as_grafana_leaves_them_and_back_references_are_not_reported():
    out = substitute('label_replace(x{a="$nope"}, "d", "$1", "s", "(.*)")', _values())
    assert out.expr == 'label_replace(x{a="$nope"}, "d", "$1", "s", "(.*)")'
    assert out.unknown == ("nope",)


def test_var_options_parse_and_reject_malformed():
    assert parse_var_options(["cluster=us-east", "$topic=t1", "topic=t2", "namespace="]) == {
        "cluster": ("us-east",), "topic": ("t1", "t2"), "namespace": ("",)}
    for bad in ("cluster", "=x", "a b=c"):
        with pytest.raises(RenderInputError, match="name=value"):
            parse_var_options([bad])


# -- legends -------------------------------------------------------------------------------------------

def test_legend_format_takes_label_values_and_blanks_missing_ones():
    labels = {"__name__": "pulsar_rate_in", "cluster": "us-east", "topic": "t"}
    assert legend("{{cluster}} / {{ topic }}", labels, "x") == "us-east / t"
    assert legend("{{remote_cluster}}->{{cluster}}", labels, "x") == "->us-east"


def test_empty_legend_names_the_series_as_grafana_does():
    labels = {"__name__": "up", "job": "broker", "instance": "h:1"}
    assert legend("", labels, "up") == 'up{job="broker", instance="h:1"}'
    assert legend("__auto", {"job": "b"}, "sum(up)") == '{job="b"}'
    assert legend("", {"__name__": "up"}, "up") == "up"
    assert legend("", {}, "sum(rate(x[1m]))") == "sum(rate(x[1m]))"


# -- durations -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [("15m", 900), ("30s", 30), ("1h30m", 5400), ("500ms", 0.5),
                                           ("2d", 172800), ("45", 45), ("1.5m", 90)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "m15", "15x", "1h 30m", "0s", "-5", "nan", "inf"])
def test_parse_duration_rejects(text):
    with pytest.raises(RenderInputError):
        parse_duration(text)


@pytest.mark.parametrize("seconds, text", [(60, "1m"), (90, "90s"), (0.5, "500ms"), (3600, "1h"), (86400, "1d"),
                                           (15, "15s")])
def test_format_duration_is_promql(seconds, text):
    assert format_duration(seconds) == text


def test_too_many_points_are_refused_before_asking():
    check_resolution(11_000, 1)
    with pytest.raises(RenderInputError, match="raise --step"):
        check_resolution(86400, 1)


# -- panels --------------------------------------------------------------------------------------------

def test_fixture_panels_in_order_rows_flattened_text_skipped():
    panels, skipped = panels_of(json.loads(FIXTURE.read_text()))
    assert [(p.number, p.title, p.kind) for p in panels] == [
        (1, "Request rate", PanelKind.TIMESERIES), (2, "Queue size", PanelKind.TIMESERIES),
        (3, "Requests so far", PanelKind.STAT), (4, "Queue fill", PanelKind.GAUGE),
        (5, "Targets up", PanelKind.TABLE), (6, "Topic backlog (absent)", PanelKind.TIMESERIES)]
    assert [p.unit for p in panels] == ["reqps", "bytes", "short", "percent", "", "short"]
    assert [p.row for p in panels] == ["Traffic"] * 4 + ["Details"] * 2
    assert panels[3].min == 0 and panels[3].max == 100
    assert [t.ref_id for t in panels[5].targets] == ["A"]  # the hidden target B is not queried
    assert [s.title for s in skipped] == ["Notes"]
    assert panels[5].file_name == "06-topic-backlog-absent.png"


def test_old_rows_layout_and_singlestat():
    dashboard = {"rows": [{"title": "R", "panels": [
        {"type": "singlestat", "title": "Up", "format": "percentunit", "valueName": "avg",
         "targets": [{"expr": "avg(up)"}]}]}]}
    (panel,), _ = panels_of(dashboard)
    assert (panel.kind, panel.unit, panel.reduce, panel.row) == (PanelKind.STAT, "percentunit", "avg", "R")


def test_panels_without_promql_are_skipped():
    dashboard = {"panels": [{"type": "logs", "title": "Logs", "targets": [{"expr": '{app="broker"}'}]},
                            {"type": "text", "title": "Read me"}]}
    panels, skipped = panels_of(dashboard)
    assert panels == []
    assert [(s.title, s.reason) for s in skipped] == [("Logs", "not a Prometheus panel"),
                                                      ("Read me", "not a Prometheus panel")]


def test_not_a_dashboard_is_refused():
    with pytest.raises(RenderInputError):
        panels_of([1, 2])


def test_grafanalib_output_is_understood():
    core = pytest.importorskip("grafanalib.core")
    from grafanalib._gen import DashboardEncoder

    dashboard = core.Dashboard(title="g", panels=[
        core.RowPanel(title="r", collapsed=True, gridPos=core.GridPos(h=1, w=24, x=0, y=0), panels=[
            core.TimeSeries(title="ts", unit="bytes", gridPos=core.GridPos(h=8, w=12, x=0, y=1),
                            targets=[core.Target(expr="rate(a[$__rate_interval])", legendFormat="{{instance}}")])]),
        core.Graph(title="graph", yAxes=core.single_y_axis(format="s"), gridPos=core.GridPos(h=8, w=12, x=0, y=9),
                   targets=[core.Target(expr="b")]),
        core.Stat(title="stat", format="percent", reduceCalc="lastNotNull", gridPos=core.GridPos(h=4, w=6, x=0, y=17),
                  targets=[core.Target(expr="c")]),
        core.GaugePanel(title="gauge", format="percent", gridPos=core.GridPos(h=4, w=6, x=6, y=17),
                        targets=[core.Target(expr="d")]),
        core.Table(title="table", unit="short", gridPos=core.GridPos(h=4, w=6, x=12, y=17),
                   targets=[core.Target(expr="e")]),
    ]).auto_panel_ids()
    model = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    panels, _ = panels_of(model)
    assert [(p.title, p.kind, p.unit) for p in panels] == [
        ("ts", PanelKind.TIMESERIES, "bytes"), ("graph", PanelKind.TIMESERIES, "s"),
        ("stat", PanelKind.STAT, "percent"), ("gauge", PanelKind.GAUGE, "percent"),
        ("table", PanelKind.TABLE, "short")]
    assert panels[0].targets[0].legend_format == "{{instance}}"
    assert panels[2].reduce == "lastNotNull"


def test_slug():
    assert slug("Replication backlog (msgs) / remote") == "replication-backlog-msgs-remote"
    assert slug("  ") == "panel"
    assert len(slug("x" * 200)) == 60


# -- values --------------------------------------------------------------------------------------------

def test_reduce_values_skips_nan():
    values = [1.0, math.nan, 3.0, 2.0, math.nan]
    assert reduce_values(values, "lastNotNull") == 2.0
    assert reduce_values(values, "mean") == 2.0
    assert reduce_values(values, "max") == 3.0
    assert reduce_values(values, "firstNotNull") == 1.0
    assert reduce_values(values, "current") == 2.0
    assert math.isnan(reduce_values([math.nan], "mean"))


def test_missing_samples_break_the_line():
    times, values = with_gaps([0, 15, 30, 90, 105], [1, 2, 3, 4, 5], 15)
    assert times == [0, 15, 30, 45, 90, 105]
    assert math.isnan(values[3]) and values[4] == 4
