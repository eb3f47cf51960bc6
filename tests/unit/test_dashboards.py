"""The Grafana dashboards as code (observability/grafana/): the committed JSON is what the Python definitions
generate, every panel queries Prometheus with an expression that parses as PromQL (checked by promtool, a real
PromQL parser, once the allowed Grafana macros are substituted), every macro is an allowed one and every
variable it names exists, and the provisioning YAML names the data source the dashboards default to."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from observability.grafana import (DASHBOARDS_DIR, DATASOURCE_NAME, DATASOURCE_UID, MACROS, PROVISIONING_DIR,
                                   MacroError, dashboard_files, macros_in, substitute)
from observability.grafana import generate, kit

DASHBOARDS: dict[str, dict[str, Any]] = {p.stem: json.loads(p.read_text()) for p in dashboard_files()}
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+), (?P<label>\w+)\)$")


def panels(name: str) -> list[dict[str, Any]]:
    return DASHBOARDS[name]["panels"]


def variables(name: str) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}


def every_query() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expression) of every target of every committed dashboard."""
    return [(name, title, expr) for name, dashboard in sorted(DASHBOARDS.items())
            for title, expr in generate.expressions(dashboard)]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run scripts/ensure-prometheus (make install does)")
    return path


def check_as_recording_rules(tmp_path: pathlib.Path, exprs: dict[str, str]) -> subprocess.CompletedProcess:
    """``promtool check rules`` on a file holding each expression as a recording rule (promtool parses each)."""
    rules = [{"record": record, "expr": expr} for record, expr in exprs.items()]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    return subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_the_committed_json_is_what_the_definitions_generate(tmp_path: pathlib.Path) -> None:
    written = generate.write(tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in dashboard_files()), (
        "observability/grafana/dashboards/ does not hold exactly the defined dashboards: "
        "run python -m observability.grafana.generate")
    for path in written:
        assert path.read_bytes() == (DASHBOARDS_DIR / path.name).read_bytes(), (
            f"{path.name} is not what its definition generates: run python -m observability.grafana.generate")
    assert generate.stale(DASHBOARDS_DIR) == []


def test_generation_is_deterministic(tmp_path: pathlib.Path) -> None:
    first = [p.read_bytes() for p in generate.write(tmp_path / "a")]
    second = [p.read_bytes() for p in generate.write(tmp_path / "b")]
    assert first == second


def test_a_changed_definition_is_reported_stale(tmp_path: pathlib.Path) -> None:
    generate.write(tmp_path)
    path = tmp_path / "overview.json"
    path.write_text(path.read_text().replace("pulsar_rate_in", "pulsar_rate_inn", 1))
    (tmp_path / "orphan.json").write_text("{}")
    problems = generate.stale(tmp_path)
    assert any("overview.json differs" in p for p in problems) and any("orphan.json" in p for p in problems)
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_the_expected_dashboards_exist_with_unique_uids_and_titles() -> None:
    assert set(DASHBOARDS) == {"overview", "messaging", "replication", "bookies", "proxy", "zookeeper"}
    uids = [d["uid"] for d in DASHBOARDS.values()]
    titles = [d["title"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == len(uids) and len(set(titles)) == len(titles)
    for name, dashboard in DASHBOARDS.items():
        assert dashboard["uid"] == f"magnetar-{name}" and dashboard["id"] is None
        assert "magnetar" in dashboard["tags"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_queries_prometheus_with_a_non_empty_expression(name: str) -> None:
    found = panels(name)
    assert len(found) >= 6
    for panel in found:
        assert panel["type"] in ("timeseries", "stat"), panel["title"]
        assert panel["targets"], f"{name}: panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"{name}: panel {panel['title']!r} has an empty expression"
            assert target["datasource"] == DATASOURCE_REF
        assert panel["datasource"] == DATASOURCE_REF
        assert [t["refId"] for t in panel["targets"]] == [chr(ord("A") + i) for i in range(len(panel["targets"]))]
        assert panel["title"] and panel["description"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_have_stable_ids_and_do_not_overlap_on_the_grid(name: str) -> None:
    found = panels(name)
    assert [p["id"] for p in found] == list(range(1, len(found) + 1))
    cells: set[tuple[int, int]] = set()
    for panel in found:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= kit.GRID_COLUMNS, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not area & cells, f"{name}: panel {panel['title']!r} overlaps another"
        cells |= area


def test_every_macro_is_allowed_and_every_variable_it_names_exists() -> None:
    for name, title, expr in every_query():
        defined = set(variables(name))
        for macro in macros_in(expr):
            assert macro in MACROS, f"{name}/{title}: {macro} is not an allowed macro: {expr}"
            if not macro.startswith("$__"):
                assert macro[1:] in defined, f"{name}/{title}: ${macro[1:]} is not a variable of the dashboard"
        assert "$" not in substitute(expr)


def test_every_expression_and_variable_query_parses_as_promql(tmp_path: pathlib.Path) -> None:
    exprs = {}
    for index, (name, _, expr) in enumerate(every_query()):
        exprs[f"dashboard:{name}:query_{index}"] = substitute(expr)
    for name in DASHBOARDS:
        for variable in variables(name).values():
            if variable["type"] == "query":
                match = LABEL_VALUES.match(variable["query"])
                assert match, f"{name}: variable {variable['name']} is not label_values(selector, label)"
                exprs[f"dashboard:{name}:variable_{variable['name']}"] = substitute(match["selector"])
    assert len(exprs) > 100
    result = check_as_recording_rules(tmp_path, exprs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_the_promql_check_rejects_a_broken_expression(tmp_path: pathlib.Path) -> None:
    result = check_as_recording_rules(tmp_path, {"dashboard:broken": 'sum by (cluster (pulsar_rate_in{cluster=~".*"})'})
    assert result.returncode != 0 and "parse error" in result.stdout + result.stderr


def test_every_expression_selects_a_metric() -> None:
    for name, title, expr in every_query():
        assert generate.metric_names([expr]), f"{name}/{title}: no metric selected in {expr}"
    names = generate.metric_names([expr for _, _, expr in every_query()])
    for expected in ("pulsar_rate_in", "pulsar_replication_delay_in_seconds", "bookie_journal_JOURNAL_SYNC",
                     "pulsar_proxy_active_connections", "znode_count", "pulsar_storage_write_latency_overflow",
                     "pulsar_entry_size_le_overflow"):
        assert expected in names


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_variables_select_cluster_namespace_and_topic_from_the_data_source(name: str) -> None:
    found = variables(name)
    expected = {"datasource", "cluster"} | ({"namespace", "topic"} if name in ("messaging", "replication") else set())
    assert set(found) == expected
    assert list(found)[0] == "datasource"
    source = found["datasource"]
    assert source["type"] == "datasource" and source["query"] == "prometheus"
    assert source["current"]["value"] == DATASOURCE_UID and source["current"]["text"] == DATASOURCE_NAME
    for variable in (v for v in found.values() if v["type"] == "query"):
        assert LABEL_VALUES.match(variable["query"])["label"] == variable["name"]
        assert variable["datasource"] == DATASOURCE_REF
        assert variable["includeAll"] and variable["multi"] and variable["allValue"] == MACROS["$cluster"]
        assert variable["current"]["value"] == ["$__all"]


def test_the_topic_variable_depends_on_cluster_and_namespace() -> None:
    found = variables("messaging")
    assert 'cluster=~"$cluster"' in found["namespace"]["query"]
    assert 'cluster=~"$cluster"' in found["topic"]["query"] and 'namespace=~"$namespace"' in found["topic"]["query"]


def test_the_provisioned_data_source_is_the_one_the_dashboards_default_to() -> None:
    config = yaml.safe_load((PROVISIONING_DIR / "datasources" / "magnetar.yml").read_text())
    assert config["apiVersion"] == 1
    [source] = config["datasources"]
    assert (source["uid"], source["name"], source["type"]) == (DATASOURCE_UID, DATASOURCE_NAME, "prometheus")
    assert source["access"] == "proxy" and source["isDefault"] is True
    assert re.fullmatch(r"\d+s", source["jsonData"]["timeInterval"])
    for name in DASHBOARDS:
        assert variables(name)["datasource"]["current"]["value"] == source["uid"]


def test_the_dashboard_provider_loads_a_folder_of_json_files() -> None:
    config = yaml.safe_load((PROVISIONING_DIR / "dashboards" / "magnetar.yml").read_text())
    assert config["apiVersion"] == 1
    [provider] = config["providers"]
    assert provider["type"] == "file" and provider["folder"] == "Magnetar"
    assert pathlib.PurePosixPath(provider["options"]["path"]).is_absolute()
    assert provider["allowUiUpdates"] is False  # the repository is the source of the JSON


def test_macros_are_substituted_and_unknown_ones_refused() -> None:
    assert substitute('rate(x{cluster=~"$cluster"}[$__rate_interval])') == 'rate(x{cluster=~".*"}[1m])'
    assert substitute('x{topic=~"${topic}"}') == 'x{topic=~".*"}'
    assert macros_in('x{a=~"$cluster", b=~"${namespace}"}[$__interval]') == ["$cluster", "$namespace", "$__interval"]
    with pytest.raises(MacroError, match=r"\$instance"):
        substitute('up{instance=~"$instance"}')


def test_a_panel_wider_than_the_grid_is_refused() -> None:
    with pytest.raises(kit.DefinitionError, match="too wide"):
        kit.layout([kit.timeseries("too wide", "", kit.Query("up"), width=25)])
