"""Writes the dashboards' JSON: ``python -m observability.grafana.generate [--out DIR] [--check] [--metrics]``.

The output is deterministic (sorted keys, two-space indent, panel ids numbered in order, no timestamps), so
the committed files change only when a definition does, and ``--check`` (or the unit test) can tell a
definition whose JSON was not regenerated. ``--metrics`` prints every metric name the panels query.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Callable, Iterator

from grafanalib._gen import DashboardEncoder

from . import DASHBOARDS_DIR, bookies, messaging, overview, proxy, replication, zookeeper

# file name (without .json) -> the definition
DASHBOARDS: dict[str, Callable] = {
    "overview": overview.dashboard,
    "messaging": messaging.dashboard,
    "replication": replication.dashboard,
    "bookies": bookies.dashboard,
    "proxy": proxy.dashboard,
    "zookeeper": zookeeper.dashboard,
}

# a metric name in a selector: an identifier directly followed by ``{`` (every panel selects with matchers)
_SELECTED = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")


def render(name: str) -> str:
    """The JSON text of dashboard ``name``."""
    return json.dumps(DASHBOARDS[name]().to_json_data(), sort_keys=True, indent=2, cls=DashboardEncoder,
                      ensure_ascii=False) + "\n"


def write(out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Writes every dashboard to ``out_dir/<name>.json``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in DASHBOARDS:
        path = out_dir / f"{name}.json"
        path.write_text(render(name), encoding="utf-8")
        written.append(path)
    return written


def stale(out_dir: pathlib.Path) -> list[str]:
    """What differs between the definitions and ``out_dir``: files missing, different or unknown."""
    problems = []
    for name in DASHBOARDS:
        path = out_dir / f"{name}.json"
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif path.read_text(encoding="utf-8") != render(name):
            problems.append(f"{path} differs from its definition")
    problems.extend(f"{path} has no definition" for path in sorted(out_dir.glob("*.json"))
                    if path.stem not in DASHBOARDS)
    return problems


def expressions(dashboard: dict) -> Iterator[tuple[str, str]]:
    """(panel title, expression) of every query of a dashboard's JSON."""
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            yield panel.get("title", ""), target.get("expr", "")


def metric_names(exprs: list[str]) -> list[str]:
    """The metric names the expressions select, sorted."""
    return sorted({name for expr in exprs for name in _SELECTED.findall(expr)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m observability.grafana.generate", description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=DASHBOARDS_DIR, help="directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the JSON is not current")
    parser.add_argument("--metrics", action="store_true", help="print the metric names the panels query")
    args = parser.parse_args(argv)
    if args.metrics:
        exprs = [expr for name in DASHBOARDS for _, expr in expressions(json.loads(render(name)))]
        print("\n".join(metric_names(exprs)))
        return 0
    if args.check:
        problems = stale(args.out)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run: python -m observability.grafana.generate", file=sys.stderr)
        return 1 if problems else 0
    for path in write(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
