"""The Grafana macros a dashboard expression may contain, and how to turn an expression into plain PromQL.

Grafana replaces ``$cluster``, ``$namespace`` and ``$topic`` (the dashboards' template variables, whose "All"
value is ``.*``) and ``$__rate_interval`` / ``$__interval`` (range widths it derives from the scrape interval and
the panel's resolution) before it sends a query. Anything that evaluates a panel outside Grafana (the
``magnetar dashboards render`` pictures, the live test, the unit test's PromQL parse) substitutes the same
values, so an expression is only ever allowed these five macros.

Pure: no Grafana, no grafanalib, no I/O (imported by code that runs without the test extra).
"""

from __future__ import annotations

import re

from magnetar.errors import MagnetarError

# macro -> what it stands for outside Grafana ("All" for a variable; a range a 5 s scrape fills for an interval)
MACROS: dict[str, str] = {
    "$cluster": ".*",
    "$namespace": ".*",
    "$topic": ".*",
    "$__rate_interval": "1m",
    "$__interval": "1m",
}
VARIABLES = ("cluster", "namespace", "topic")  # the template variables (macros a person chooses)

# ``$name`` and ``${name}`` (Grafana's two spellings); the longest name wins, so ``$__rate_interval`` is one macro
_MACRO = re.compile(r"\$\{(\w+)\}|\$(\w+)")


class MacroError(MagnetarError):
    """An expression uses a Grafana macro outside :data:`MACROS`."""


def macros_in(expr: str) -> list[str]:
    """The macros an expression uses, normalised to ``$name``, in order of appearance."""
    return ["$" + (braced or bare) for braced, bare in _MACRO.findall(expr)]


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """``expr`` with every macro replaced by its value in ``values`` (default :data:`MACROS`).

    Raises:
        MacroError: the expression uses a macro that is not allowed (names it and the expression).
    """
    table = MACROS if values is None else values

    def replace(match: re.Match) -> str:
        name = "$" + (match.group(1) or match.group(2))
        if name not in table:
            raise MacroError(f"{name} is not one of the allowed macros {sorted(table)} in: {expr}")
        return table[name]

    return _MACRO.sub(replace, expr)
