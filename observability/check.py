"""Whether every dashboard panel and every alert rule means something on a live Prometheus.

A dashboard whose panel queries a name nobody exports shows "No data" forever, and an alert rule over a missing
series never fires: both fail silently. :func:`check` asks a running Prometheus (a deployment's, under load)
about each of them:

* a **panel target**: its expression, with the Grafana macros replaced as ``magnetar dashboards render`` does
  (variables match everything, intervals are 1m), must be accepted and return at least one series;
* an **alert rule**: its expression must be accepted (it parses and evaluates) and each series selector in it
  (``name{matchers}``, without the comparison that makes the alert fire) must return at least one series. A
  healthy deployment does not fire its alerts, so the whole expression is expected to return nothing.

``magnetar dashboards check --prometheus URL`` prints the result and exits 1 when anything fails; the e2e test
of the observability plane runs the same check.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from .grafana.macros import substitute
from .render.errors import QueryFailed
from .render.model import panels_of
from .render.prometheus import PrometheusClient
from .render.run import load_dashboard

PACKAGE = pathlib.Path(__file__).resolve().parent
DASHBOARDS = PACKAGE / "grafana" / "dashboards"
RULES = PACKAGE / "prometheus" / "rules"
# rules files whose series come from one process kind that a deployment may not run: file -> scrape job
RULE_FILE_JOBS = {"autorecovery.yml": "autorecovery"}

# Words of PromQL that look like metric names but are not (operators, modifiers).
_KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
                       "bool", "offset", "atan2", "inf", "nan"})
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGES = re.compile(r"\[[^\]]*\]")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)?\s*(\{[^}]*\})?")


@dataclass(frozen=True)
class Probe:
    """One expression asked of Prometheus.

    Attributes:
        where: ``dashboard / panel`` or ``rules file / alert`` (with `` / selector`` for a rule's selector).
        expr: the expression as sent.
        series: how many series it returned (None: it failed).
        error: Prometheus's refusal, or "".
        must_return: whether an empty answer is a failure.
    """

    where: str
    expr: str
    series: Optional[int]
    error: str = ""
    must_return: bool = True

    @property
    def ok(self) -> bool:
        return not self.error and (not self.must_return or bool(self.series))


def selectors(expr: str) -> list[str]:
    """The series selectors of a PromQL expression (``name{matchers}``, ``name``, ``{__name__=~...}``), in order,
    without duplicates: what must exist for the expression to mean something."""
    strings: list[str] = []

    def keep(match: re.Match) -> str:  # label values may hold anything: set them aside while scanning
        strings.append(match.group(0))
        return f'"\x00{len(strings) - 1}\x00"'

    text = _LABEL_LISTS.sub(" ", _STRINGS.sub(keep, expr))
    text = _RANGES.sub(" ", text)
    found: list[str] = []
    for match in _SELECTOR.finditer(text):
        name, matchers = match.group(1), match.group(2)
        if not name and not matchers:
            continue
        after = text[match.end():].lstrip()
        if name and not matchers and (after.startswith("(") or name.lower() in _KEYWORDS):
            continue  # a function call or an operator
        if name and name.lower() in _KEYWORDS:
            continue
        selector = (name or "") + (matchers or "")
        selector = re.sub(r'"\x00(\d+)\x00"', lambda m: strings[int(m.group(1))], selector)
        if selector not in found:
            found.append(selector)
    return found


def dashboard_targets(files: Sequence[pathlib.Path]) -> list[tuple[str, str]]:
    """(``dashboard / panel``, expression with macros replaced) for every target of every drawn panel."""
    out = []
    for path in files:
        dashboard = load_dashboard(path)
        panels, _skipped = panels_of(dashboard)
        for panel in panels:
            for target in panel.targets:
                out.append((f"{path.stem} / {panel.title}", substitute(target.expr)))
    return out


def rule_expressions(files: Sequence[pathlib.Path]) -> list[tuple[str, str]]:
    """(``file / alert``, expression) for every rule of every rules file (YAML: loaded with PyYAML when present,
    else with a minimal reader of the ``alert:``/``record:`` and ``expr:`` lines our files use)."""
    out = []
    for path in files:
        for group in _load_rules(path):
            for rule in group.get("rules") or ():
                name = rule.get("alert") or rule.get("record") or "?"
                out.append((f"{path.name} / {name}", str(rule["expr"]).strip()))
    return out


def _load_rules(path: pathlib.Path) -> list[dict[str, Any]]:
    import yaml  # PyYAML: a test extra; the CLI says so when it is missing

    doc = yaml.safe_load(path.read_text()) or {}
    return list(doc.get("groups") or ())


def check(prometheus_url: str, *, dashboards: Iterable[pathlib.Path] = (), rules: Iterable[pathlib.Path] = (),
          timeout_s: float = 30.0) -> list[Probe]:
    """Asks Prometheus about every panel target of ``dashboards`` and every rule of ``rules`` (default: the
    packaged ones)."""
    client = PrometheusClient(prometheus_url, timeout_s=timeout_s)
    client.check()
    dashboards = list(dashboards) or sorted(DASHBOARDS.glob("*.json"))
    rules = list(rules) or sorted(RULES.glob("*.yml"))
    probes = [_ask(client, where, expr) for where, expr in dashboard_targets(dashboards)]
    for where, expr in rule_expressions(rules):
        # a rules file about one optional process kind (e.g. auto-recovery) can only find series where that
        # kind is scraped: its selectors must answer there, and are asked without being required elsewhere
        job = RULE_FILE_JOBS.get(where.split(" / ")[0])
        required = job is None or client.query(f'up{{job="{job}"}}') > 0
        probes.append(_ask(client, where, expr, must_return=False))
        probes.extend(_ask(client, f"{where} / {selector}", selector, must_return=required)
                      for selector in selectors(expr))
    return probes


def _ask(client: PrometheusClient, where: str, expr: str, *, must_return: bool = True) -> Probe:
    try:
        return Probe(where, expr, client.query(expr), must_return=must_return)
    except QueryFailed as err:
        return Probe(where, expr, None, error=str(err), must_return=must_return)
