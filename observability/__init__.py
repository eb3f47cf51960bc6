"""Observability: the ``/metrics`` endpoint every Magnetar process serves, the Prometheus scrape configuration
and alert rules (``prometheus/``), the Grafana dashboards (``grafana/``), their pictures (``render/``) and the
check of both against a live Prometheus (``check.py``). See docs/observability.md.

``serve_metrics(registry, host, port)`` serves a prometheus_client registry at ``/metrics`` (and
``/health``) on its own thread and returns a handle with ``.port`` and ``.close()``.

Every process that serves metrics imports this package, which turns off prometheus_client's ``*_created``
series (a creation timestamp per counter, histogram and summary child): no dashboard or rule reads them,
Pulsar's brokers do not export them, and they would double the samples of a broker with many topics.
"""

import prometheus_client

from .http import MetricsServer, serve_metrics

prometheus_client.disable_created_metrics()

__all__ = ["MetricsServer", "serve_metrics"]
