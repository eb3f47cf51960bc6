"""The alert rules under observability/prometheus/rules/, checked with the real ``promtool`` (Debian's
prometheus package, installed by scripts/ensure-prometheus): ``promtool check rules`` accepts every file,
``promtool test rules`` passes every unit test in observability/prometheus/tests/ (synthetic series that fire
each alert and series that must not), and every alert carries what an operator's routing and reading need:
a severity, a summary and a description naming the region, and a ``cluster`` label that survives its
expression (aggregations keep it in their ``by`` clause)."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "observability" / "prometheus"
RULE_FILES = sorted((PROMETHEUS / "rules").glob("*.yml"))
TEST_FILES = sorted((PROMETHEUS / "tests").glob("*.yml"))
SEVERITIES = {"critical", "warning"}
PROMTOOL_TIMEOUT_S = 60

# PromQL aggregation operators; each must be written `op by (cluster, ...) (expr)` so the alert keeps `cluster`.
_AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|group|count|stddev|stdvar|topk|bottomk|quantile|count_values)\b\s*(by|without)?\s*\(")
_VECTOR_MATCHING = re.compile(r"\b(on|ignoring)\s*\(([^)]*)\)")


def promtool(*args: str | pathlib.Path) -> subprocess.CompletedProcess[str]:
    """Runs the real promtool; fails the test with a way forward when it is not installed."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not installed: run scripts/ensure-prometheus (Debian's prometheus package)")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT_S,
                          check=False)


def assert_promtool_ok(result: subprocess.CompletedProcess[str]) -> None:
    if result.returncode != 0:
        pytest.fail(f"{' '.join(result.args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")


def load(path: pathlib.Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path.name}: not a YAML mapping"
    return data


def alert_rules() -> list[tuple[str, dict[str, Any]]]:
    """(file name, rule) of every alerting rule."""
    found = []
    for path in RULE_FILES:
        for group in load(path)["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    found.append((path.name, rule))
    return found


ALERTS = alert_rules()


def aggregation_problems(expr: str) -> list[str]:
    """Why an expression could lose its ``cluster`` label (empty when it keeps it)."""
    problems = []
    for match in _AGGREGATION.finditer(expr):
        op, clause = match.group(1), match.group(2)
        if clause != "by":
            problems.append(f"`{op}` must be written `{op} by (cluster, ...) (...)`")
            continue
        grouping = expr[match.end():expr.index(")", match.end())]
        if "cluster" not in {label.strip() for label in grouping.split(",")}:
            problems.append(f"`{op} by ({grouping})` drops cluster")
    for match in _VECTOR_MATCHING.finditer(expr):
        if match.group(1) == "ignoring" and "cluster" in match.group(2):
            problems.append(f"`{match.group(0)}` ignores cluster")
        if match.group(1) == "on" and "cluster" not in match.group(2):
            problems.append(f"`{match.group(0)}` does not match on cluster")
    return problems


def test_there_are_rules_and_unit_tests() -> None:
    assert RULE_FILES, "no rule file under observability/prometheus/rules/"
    assert TEST_FILES, "no promtool unit test under observability/prometheus/tests/"
    names = [rule["alert"] for _, rule in ALERTS]
    assert len(names) == len(set(names)), f"alert names repeat: {sorted(names)}"


def test_promtool_check_rules() -> None:
    assert_promtool_ok(promtool("check", "rules", *RULE_FILES))


def test_promtool_test_rules() -> None:
    assert_promtool_ok(promtool("test", "rules", *TEST_FILES))


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: pathlib.Path) -> None:
    """The unit tests can fail: a copy of one whose expected label is wrong makes promtool exit non-zero."""
    source = PROMETHEUS / "tests" / "availability.test.yml"
    data = load(source)
    data["rule_files"] = [str((source.parent / f).resolve()) for f in data["rule_files"]]
    expected = next(a for t in data["tests"] for case in t["alert_rule_test"] for a in case.get("exp_alerts", []))
    expected["exp_labels"]["cluster"] = "no-such-region"
    broken = tmp_path / "broken.test.yml"
    broken.write_text(yaml.safe_dump(data))
    result = promtool("test", "rules", broken)
    assert result.returncode != 0
    assert "no-such-region" in result.stdout + result.stderr


@pytest.mark.parametrize(("file", "rule"), ALERTS, ids=[rule["alert"] for _, rule in ALERTS])
def test_alert_has_severity_summary_description_and_cluster(file: str, rule: dict[str, Any]) -> None:
    name = rule["alert"]
    labels = rule.get("labels", {})
    annotations = rule.get("annotations", {})
    assert labels.get("severity") in SEVERITIES, f"{file}: {name} needs a severity in {sorted(SEVERITIES)}"
    assert "cluster" not in labels, f"{file}: {name} must take cluster from its series, not set it"
    for key in ("summary", "description"):
        text = annotations.get(key, "")
        assert text.strip(), f"{file}: {name} has no {key}"
        assert "$labels.cluster" in text, f"{file}: {name}'s {key} does not name the region ($labels.cluster)"
    assert aggregation_problems(rule["expr"]) == [], f"{file}: {name}"


def test_the_cluster_check_catches_an_aggregation_that_drops_it() -> None:
    assert aggregation_problems('sum by (cluster, instance) (rate(x_total[5m])) > 1') == []
    assert aggregation_problems('max by (instance) (x)') != []
    assert aggregation_problems('sum(x) by (cluster)') != []
    assert aggregation_problems('sum without (cluster) (x)') != []
    assert aggregation_problems('a / on (instance) b') != []


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    """Each alert has a promtool case where it fires (with labels and annotations to match) and one where it
    must not (below its threshold, still pending, or resolved)."""
    fired: set[str] = set()
    quiet: set[str] = set()
    tested_files: set[pathlib.Path] = set()
    for path in TEST_FILES:
        data = load(path)
        tested_files.update((path.parent / f).resolve() for f in data["rule_files"])
        for test in data["tests"]:
            for case in test.get("alert_rule_test", []):
                alerts = case.get("exp_alerts") or []
                (fired if alerts else quiet).add(case["alertname"])
                for alert in alerts:
                    assert "cluster" in alert.get("exp_labels", {}), f"{path.name}: {case['alertname']}"
                    assert set(alert.get("exp_annotations", {})) >= {"summary", "description"}, \
                        f"{path.name}: {case['alertname']} at {case['eval_time']} does not check its annotations"
    names = {rule["alert"] for _, rule in ALERTS}
    assert names - fired == set(), "alerts no unit test sees firing"
    assert names - quiet == set(), "alerts no unit test sees quiet"
    assert {p.resolve() for p in RULE_FILES} - tested_files == set(), "rule files no unit test loads"
