"""The scrape configuration of a deployment's Prometheus, made from the processes it runs (pure).

One job per process kind, named as the kind (:data:`JOBS`: ``zookeeper``, ``bookie``, ``broker``, ``proxy``),
each target labelled ``cluster="<region>"`` as Pulsar's dashboards expect (``cluster="global"`` for the global
configuration-store ZooKeeper); ``instance`` stays Prometheus' own (``host:port``). A job's scheme and path come
from its targets' ``/metrics`` URLs: ZooKeepers (their wrapper), bookies and brokers serve plain HTTP, brokers on
their admin port, where ``/metrics`` needs no credentials even in a secured deployment (Pulsar's
``authenticateMetricsEndpoint`` is off by default); a proxy serves only HTTPS, so its job verifies the proxy's
certificate with the deployment's CA and presents a client certificate of its own (:class:`TlsClientFiles`),
which a proxy that requires trusted client certificates asks for. ``/metrics`` itself is open at a proxy too.

The scrape interval is also the rule evaluation interval, and ``rule_files`` names the installed package's
``observability/prometheus/rules/*.yml`` (:func:`rules_glob`), so the deployment's Prometheus evaluates Magnetar's
alert rules as they are shipped.
"""

from __future__ import annotations

import json
import pathlib
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from magnetar.errors import ConfigError

JOBS = ("zookeeper", "bookie", "broker", "proxy")
GLOBAL_CLUSTER = "global"
_SCRAPE_TIMEOUT_MAX_S = 10.0


@dataclass(frozen=True)
class ScrapeTarget:
    """One process to scrape.

    Attributes:
        job: its process kind (one of :data:`JOBS` for Magnetar's own processes).
        metrics_url: where it serves Prometheus' text format, e.g. ``http://127.0.0.1:8080/metrics``.
        cluster: its region, or :data:`GLOBAL_CLUSTER` for deployment-wide processes.
    """

    job: str
    metrics_url: str
    cluster: str


@dataclass(frozen=True)
class TlsClientFiles:
    """What Prometheus needs for an ``https://`` target: the CA to verify it, and its own client certificate."""

    ca_file: str
    cert_file: str
    key_file: str


def rules_glob() -> str:
    """The absolute glob of the alert rule files of the installed ``observability`` package."""
    return str(pathlib.Path(__file__).resolve().parent / "rules" / "*.yml")


def duration(seconds: float) -> str:
    """A Prometheus duration: ``5s``, ``1500ms``."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scrape_config(
    targets: Iterable[ScrapeTarget],
    *,
    scrape_interval_s: float,
    rule_files: Sequence[str] = (),
    tls: Optional[TlsClientFiles] = None,
) -> dict[str, Any]:
    """Prometheus' configuration (as a mapping) scraping ``targets``; see the module docstring.

    Raises ConfigError when a job's targets disagree on scheme or path, or an ``https://`` target has no ``tls``.
    """
    by_job: dict[str, list[ScrapeTarget]] = {}
    for target in targets:
        by_job.setdefault(target.job, []).append(target)
    order = [j for j in JOBS if j in by_job] + sorted(j for j in by_job if j not in JOBS)
    interval = duration(scrape_interval_s)
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "scrape_timeout": duration(min(scrape_interval_s, _SCRAPE_TIMEOUT_MAX_S)),
        },
        "rule_files": list(rule_files),
        "scrape_configs": [_job(job, by_job[job], tls) for job in order],
    }


def _job(job: str, targets: list[ScrapeTarget], tls: Optional[TlsClientFiles]) -> dict[str, Any]:
    urls = [urllib.parse.urlsplit(t.metrics_url) for t in targets]
    schemes = {u.scheme for u in urls}
    paths = {u.path or "/metrics" for u in urls}
    if len(schemes) != 1 or len(paths) != 1:
        raise ConfigError(f"the {job} targets disagree on how they serve metrics: "
                          f"{', '.join(sorted(t.metrics_url for t in targets))}")
    scheme, path = schemes.pop(), paths.pop()
    if scheme not in ("http", "https"):
        raise ConfigError(f"the {job} targets serve metrics over {scheme}://, not http:// or https://")
    by_cluster: dict[str, list[str]] = {}
    for target, url in zip(targets, urls):
        by_cluster.setdefault(target.cluster, []).append(url.netloc)
    config: dict[str, Any] = {"job_name": job, "scheme": scheme, "metrics_path": path}
    if scheme == "https":
        if tls is None:
            raise ConfigError(f"the {job} targets serve metrics over https:// but no CA and client certificate are given")
        config["tls_config"] = {"ca_file": tls.ca_file, "cert_file": tls.cert_file, "key_file": tls.key_file}
    config["static_configs"] = [{"targets": addresses, "labels": {"cluster": cluster}}
                                for cluster, addresses in by_cluster.items()]
    return config


def render(config: dict[str, Any], *, header: str = "") -> str:
    """The configuration file: a comment, then the mapping as JSON (which is YAML, and needs no YAML library)."""
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + json.dumps(config, indent=2) + "\n"
