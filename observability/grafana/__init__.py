"""Grafana dashboards as code: overview, messaging, geo-replication, bookies, proxy and ZooKeeper.

The dashboards are Python (one module each, built with grafanalib, a test extra) and their JSON is generated
into ``dashboards/`` and committed, so an operator needs neither Python nor grafanalib to load them:
``python -m observability.grafana.generate`` rewrites the JSON, ``--check`` says whether it is current.
``provisioning/`` holds what Grafana reads at start (a Prometheus data source with uid :data:`DATASOURCE_UID`
and a provider of the ``dashboards/`` folder); docker-compose.yml mounts both.

Importing this package needs no grafanalib: the paths, the data source and the macros (``macros.py``) are what
other code (the renderer, tests) uses to read the committed JSON.
"""

import pathlib

HERE = pathlib.Path(__file__).resolve().parent
DASHBOARDS_DIR = HERE / "dashboards"
PROVISIONING_DIR = HERE / "provisioning"
DATASOURCE_UID = "magnetar-prometheus"  # the provisioned data source every dashboard defaults to
DATASOURCE_NAME = "Magnetar Prometheus"

from .macros import MACROS, MacroError, macros_in, substitute  # noqa: E402


def dashboard_files() -> list[pathlib.Path]:
    """The committed dashboard JSON files, by name."""
    return sorted(DASHBOARDS_DIR.glob("*.json"))


__all__ = ["DASHBOARDS_DIR", "DATASOURCE_NAME", "DATASOURCE_UID", "MACROS", "MacroError", "PROVISIONING_DIR",
           "dashboard_files", "macros_in", "substitute"]
