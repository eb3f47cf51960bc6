"""Pictures of Grafana dashboards without Grafana: ``magnetar dashboards render``.

``render_dashboards(RenderOptions(prometheus_url=..., out_dir=...))`` draws every panel of the packaged
dashboards (``observability/grafana/dashboards/*.json``) or of given files from a live Prometheus, one PNG
per panel, with ``manifest.json`` and ``index.html``. Rooms: :mod:`.model` (what a dashboard asks for, pure),
:mod:`.units` (Grafana's units as text, pure), :mod:`.prometheus` (the HTTP API), :mod:`.draw` (matplotlib),
:mod:`.run` (the command's steps). matplotlib is imported only when a panel is drawn.
"""

from .errors import PrometheusUnreachable, QueryFailed, RenderError, RenderInputError
from .run import DASHBOARDS_DIR, RenderOptions, Report, render_dashboards

__all__ = ["DASHBOARDS_DIR", "PrometheusUnreachable", "QueryFailed", "RenderError", "RenderInputError",
           "RenderOptions", "Report", "render_dashboards"]
