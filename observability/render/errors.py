"""The renderer's errors: one root, and the three ways a render goes wrong.

Bad input (an option, a dashboard file) is the operator's to fix and nothing is written; an unreachable
Prometheus stops the run (every later query would fail the same way); a query Prometheus refuses belongs to
one panel, so the run draws the rest and reports each failed panel with its expression.
"""

from __future__ import annotations

from magnetar.errors import MagnetarError


class RenderError(MagnetarError):
    """Root of every error of ``magnetar dashboards render``."""


class RenderInputError(RenderError):
    """An option or a dashboard file is malformed or missing; nothing was rendered."""


class PrometheusUnreachable(RenderError):
    """Prometheus did not answer (connection refused, timeout, not a Prometheus API)."""

    retriable = True


class QueryFailed(RenderError):
    """Prometheus refused or failed one query (a PromQL syntax error, an execution error, a timeout).

    Attributes:
        expr: the expression as sent (template variables substituted).
        reason: Prometheus's own error text.
        panel: ``dashboard / panel title`` once the renderer knows it (empty from the client).
    """

    def __init__(self, expr: str, reason: str, *, panel: str = "") -> None:
        self.expr = expr
        self.reason = reason
        self.panel = panel
        where = f"panel {panel!r}: " if panel else ""
        super().__init__(f"{where}query failed: {reason}\n    expr: {expr}")

    def for_panel(self, panel: str) -> "QueryFailed":
        return QueryFailed(self.expr, self.reason, panel=panel)
