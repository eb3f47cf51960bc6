"""The deployment's Prometheus: Debian's ``prometheus`` server, run by the supervisor like any other process.

A topology with a ``[prometheus]`` table gets one, named ``prometheus``, started last (every process it scrapes
is healthy by then) and stopped first. Its configuration is written from the plan into its process dir at every
``up`` (``observability.prometheus``): every instance whose endpoints name a ``metrics`` URL is a target of the
job named as its kind, labelled with its region (deployment-wide ones ``global``). In a secured topology the
proxies' ``https://`` ``/metrics`` is scraped with the deployment's CA and the ``prometheus`` role's client
certificate (``clusters.security``). Its data (``--storage.tsdb.path``) is in ``<data-dir>/prometheus/data``,
kept small by ``retention_s`` and ``retention_size_bytes``; it is healthy once ``/-/ready`` answers 200.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import urllib.request
from typing import TYPE_CHECKING, Any, Optional

from magnetar.errors import InstallError
from observability.prometheus import GLOBAL_CLUSTER, ScrapeTarget, TlsClientFiles, render, rules_glob, scrape_config

from . import security
from .kind_base import GLOBAL, Instance, ProcessKind
from .topology import PrometheusSettings, Topology

if TYPE_CHECKING:
    from .kinds import Plan

INSTALL_HINT = ("Prometheus was not found. Install it with `scripts/ensure-prometheus` (Debian's `prometheus` "
                "package: `sudo apt-get install -y prometheus`), or put a `prometheus` binary on PATH.")


def find_prometheus() -> str:
    """The ``prometheus`` server binary (PATH, then Debian's ``/usr/bin/prometheus``); InstallError if missing."""
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
    if not found:
        raise InstallError(INSTALL_HINT)
    return found


def scrape_targets(plan: "Plan") -> list[ScrapeTarget]:
    """Every instance of the plan that serves ``/metrics``, as a target of the job named as its kind."""
    return [
        ScrapeTarget(job=inst.kind, metrics_url=endpoints["metrics"],
                     cluster=inst.region if inst.region is not GLOBAL else GLOBAL_CLUSTER)
        for inst in plan.instances
        if inst.kind != PrometheusKind.name and "metrics" in (endpoints := plan.endpoints(inst))
    ]


def config_of(plan: "Plan", settings: PrometheusSettings) -> dict[str, Any]:
    """The Prometheus configuration of a plan (see the module docstring)."""
    tls: Optional[TlsClientFiles] = None
    if plan.topology.secured:
        sec = plan.security
        client = sec.client(security.PROMETHEUS_ROLE)
        tls = TlsClientFiles(ca_file=str(sec.ca_file), cert_file=str(client.cert_file), key_file=str(client.key_file))
    return scrape_config(scrape_targets(plan), scrape_interval_s=settings.scrape_interval_s,
                         rule_files=[rules_glob()], tls=tls)


class PrometheusKind(ProcessKind):
    """Debian's Prometheus, scraping the deployment (see the module docstring)."""

    name = "prometheus"
    tier = 40
    shown = ("url",)
    in_root_namespace = True  # with regions apart, it scrapes their direct addresses from the host

    def instances(self, topology: Topology) -> list[Instance]:
        s = topology.prometheus
        if s is None:
            return []
        return [Instance(name="prometheus", kind=self.name, region=GLOBAL, slot="prometheus", many=False, index=1,
                         host=s.host, ports={"web": s.port}, settings=s)]

    def config_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "prometheus.yml"

    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        s: PrometheusSettings = inst.settings
        binary = find_prometheus()
        path = self.config_path(inst, plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(config_of(plan, s), header=(
            f"Written by the Magnetar supervisor for {plan.topology.name} at every `magnetar up`; edit the topology "
            f"instead.\nJSON is YAML: Prometheus reads this file as it is.")))
        argv = [
            binary,
            f"--config.file={path}",
            f"--storage.tsdb.path={plan.process_dir(inst) / 'data'}",
            f"--storage.tsdb.retention.time={s.retention_s}s",
            f"--storage.tsdb.retention.size={s.retention_size_bytes}B",
            f"--web.listen-address={inst.host}:{inst.ports['web']}",
        ]
        if s.enable_lifecycle:
            argv.append("--web.enable-lifecycle")
        return argv

    def url(self, inst: Instance) -> str:
        return f"http://{inst.host}:{inst.ports['web']}"

    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        try:
            with urllib.request.urlopen(f"{self.url(inst)}/-/ready", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        return {"url": self.url(inst), "config": str(self.config_path(inst, plan)), "rule_files": rules_glob()}
