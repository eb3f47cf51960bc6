"""Observability: the ``/metrics`` endpoint every Magnetar process serves (and, later, dashboards and
Prometheus configuration).

``serve_metrics(registry, host, port)`` serves a prometheus_client registry at ``/metrics`` (and
``/health``) on its own thread and returns a handle with ``.port`` and ``.close()``.
"""

from .http import MetricsServer, serve_metrics

__all__ = ["MetricsServer", "serve_metrics"]
