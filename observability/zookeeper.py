"""ZooKeeper's own numbers on ``/metrics``, named as ZooKeeper's Prometheus metrics provider names them.

Why this exists: ZooKeeper 3.6+ can serve Prometheus metrics itself (``metricsProvider.className =
...PrometheusMetricsProvider``), but Debian's ``zookeeper`` 3.8 package does not ship that provider's jar (nor the
Prometheus Java client it needs), and Magnetar installs nothing from Maven. Every number that provider serves is
also in ZooKeeper's ``mntr`` four-letter word (whitelisted in the ``zoo.cfg`` Magnetar writes), so the
``magnetar zookeeper`` wrapper serves ``/metrics`` itself, asking ``mntr`` at each scrape.

Theory of operation. :func:`parse_mntr` reads mntr's ``zk_<name>\\t<value>`` lines; :func:`metric_families`
(pure) turns them into the families the provider would serve for the same numbers:

* what ZooKeeper registers as a gauge (``znode_count``, ``watch_count``, ``num_alive_connections``,
  ``outstanding_requests``, ``approximate_data_size``, ``avg_latency``, ...: :data:`GAUGES`) is a gauge of that name;
* a summary, which mntr prints as ``avg_X min_X max_X cnt_X sum_X`` (and ``p50_X p95_X p99_X p999_X`` when
  ZooKeeper keeps percentiles), is the summary ``X`` with ``X_count``, ``X_sum`` and the quantiles mntr has
  (0.5, 0.95, 0.99, 0.999; the provider's own sketches give 0.5, 0.9, 0.99): mntr's min, max and average are
  not part of a Prometheus summary and are left out;
* a per-namespace (or per-server) set, mntr's ``<key>_write_per_namespace``, is ``write_per_namespace{key="<key>"}``;
* every other number is one of ZooKeeper's counters: counter ``X``, written ``X_total`` as Prometheus clients
  write counters.

Besides ZooKeeper's names: ``magnetar_zookeeper_up`` (1 when ZooKeeper answered mntr with its numbers, 0 when it
is down or not serving yet: the wrapper's endpoint answers either way, so Prometheus' ``up`` alone says nothing
about ZooKeeper), ``magnetar_zookeeper_server_state{state}`` (1 for the state mntr reports, 0 for the others),
and the five server gauges of Pulsar's reference (``zookeeper_server_znode_count``, ``..._data_size_bytes``,
``..._connections``, ``..._watches_count``, ``..._ephemerals_count``) that Pulsar's ZooKeeper dashboards query.
ZooKeeper's latencies are in milliseconds, as ZooKeeper reports them.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from magnetar import zookeeper as zk

from .http import MetricsServer, serve_metrics

__all__ = ["GAUGES", "MntrCollector", "metric_families", "parse_mntr", "serve_zookeeper_metrics"]

log = logging.getLogger("observability.zookeeper")

# ZooKeeperServer.registerMetrics (and the quorum peers' leader/follower gauges): name -> what it is.
GAUGES: dict[str, str] = {
    "znode_count": "The number of znodes",
    "watch_count": "The number of watches set by clients",
    "ephemerals_count": "The number of ephemeral znodes",
    "approximate_data_size": "The approximate size of the data tree in bytes",
    "num_alive_connections": "The number of open client connections",
    "outstanding_requests": "The number of requests queued and not yet answered",
    "avg_latency": "Average request latency in milliseconds since the server started",
    "max_latency": "Highest request latency in milliseconds since the server started",
    "min_latency": "Lowest request latency in milliseconds since the server started",
    "packets_received": "Packets received from clients since the server started",
    "packets_sent": "Packets sent to clients since the server started",
    "uptime": "Milliseconds since the server started serving",
    "global_sessions": "The number of global sessions",
    "local_sessions": "The number of local sessions",
    "open_file_descriptor_count": "Open file descriptors of the ZooKeeper process",
    "max_file_descriptor_count": "The file descriptor limit of the ZooKeeper process",
    "connection_drop_probability": "The probability a new connection is dropped (connection throttling)",
    "last_client_response_size": "Size in bytes of the last response to a client (-1: none yet)",
    "max_client_response_size": "Largest response to a client in bytes (-1: none yet)",
    "min_client_response_size": "Smallest response to a client in bytes (-1: none yet)",
    "outstanding_tls_handshake": "TLS handshakes in progress",
    "auth_failed_count": "Client authentication failures",
    "non_mtls_remote_conn_count": "Remote connections without mutual TLS",
    "non_mtls_local_conn_count": "Local connections without mutual TLS",
    "quorum_size": "Servers in the quorum",
    "learners": "Learners connected to the leader",
    "synced_followers": "Followers in sync with the leader",
    "synced_non_voting_followers": "Non-voting followers in sync with the leader",
    "synced_observers": "Observers in sync with the leader",
    "pending_syncs": "Syncs pending at the leader",
    "leader_uptime": "Milliseconds since this server became leader",
    "last_proposal_size": "Size in bytes of the last proposal",
    "max_proposal_size": "Largest proposal in bytes",
    "min_proposal_size": "Smallest proposal in bytes",
    "peer_state": "The quorum peer's state",
}

# Sets ZooKeeper keys by namespace (or server id): mntr prints them as "<key>_<set>", the provider as set{key=...}.
_KEYED_SETS = ("write_per_namespace", "read_per_namespace", "ack_latency", "quota_count_limit_per_namespace",
               "quota_bytes_limit_per_namespace", "quota_count_usage_per_namespace",
               "quota_bytes_usage_per_namespace", "quota_exceeded_error_per_namespace")
_GAUGE_SETS = frozenset(s for s in _KEYED_SETS if s.startswith("quota_") and not s.startswith("quota_exceeded"))
_KEYED_RE = re.compile(r"^(?P<key>.+)_(?P<set>" + "|".join(_KEYED_SETS) + r")$")
_SUMMARY_PARTS = ("avg", "min", "max", "cnt", "sum", "p50", "p95", "p99", "p999")
_QUANTILES = {"p50": "0.5", "p95": "0.95", "p99": "0.99", "p999": "0.999"}
_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# Pulsar's reference names for ZooKeeper's server gauges (Pulsar's own ZooKeeper wrapper serves these).
PULSAR_NAMES: dict[str, tuple[str, str]] = {
    "zookeeper_server_znode_count": ("znode_count", "The number of z-nodes stored"),
    "zookeeper_server_data_size_bytes": ("approximate_data_size", "The total size of all z-nodes stored"),
    "zookeeper_server_connections": ("num_alive_connections", "The number of currently opened connections"),
    "zookeeper_server_watches_count": ("watch_count", "The number of watchers registered"),
    "zookeeper_server_ephemerals_count": ("ephemerals_count", "The number of ephemeral z-nodes"),
}
SERVER_STATES = ("standalone", "leader", "follower", "observer", "read-only")


def parse_mntr(text: str) -> dict[str, str]:
    """``zk_<name>\\t<value>`` lines -> {name: value}; other lines (e.g. "not currently serving") are ignored."""
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition("\t")
        if sep and name.startswith("zk_") and len(name) > 3:
            found[name[3:]] = value.strip()
    return found


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def metric_families(values: Mapping[str, str]) -> list[Metric]:
    """The families for one mntr answer (see the module docstring); ``values`` as :func:`parse_mntr` gives them."""
    numbers = {k: n for k, v in values.items() if (n := _number(v)) is not None and _NAME_RE.match(k)}
    summaries = {k[4:] for k in numbers if k.startswith("cnt_") and f"sum_{k[4:]}" in numbers}
    in_summary = {f"{part}_{name}" for name in summaries for part in _SUMMARY_PARTS}
    families: dict[str, Metric] = {}

    def family(name: str, kind: str, help_text: str) -> Metric:
        if name not in families:
            cls = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}.get(kind)
            families[name] = cls(name, help_text) if cls else Metric(name, help_text, kind)
        return families[name]

    for name in sorted(summaries):
        base, labels = _keyed(name)
        metric = family(base, "summary", f"ZooKeeper's {base} summary (times in milliseconds)")
        for part, quantile in _QUANTILES.items():
            if f"{part}_{name}" in numbers:
                metric.add_sample(base, {**labels, "quantile": quantile}, numbers[f"{part}_{name}"])
        metric.add_sample(f"{base}_count", labels, numbers[f"cnt_{name}"])
        metric.add_sample(f"{base}_sum", labels, numbers[f"sum_{name}"])
    for name, value in sorted(numbers.items()):
        if name in in_summary:
            continue
        if name in GAUGES:
            family(name, "gauge", GAUGES[name]).add_metric([], value)
            continue
        base, labels = _keyed(name)
        if base in _GAUGE_SETS:
            gauge = family(base, "gauge", f"ZooKeeper's {base}")
            gauge.add_sample(base, labels, value)
        elif value >= 0:  # a counter never goes below zero; anything that does is not one of ZooKeeper's counters
            counter = family(base, "counter", f"ZooKeeper's {base} counter")
            counter.add_sample(f"{counter.name}_total", labels, value)
    for name, (source, help_text) in PULSAR_NAMES.items():
        if source in numbers:
            family(name, "gauge", help_text).add_metric([], numbers[source])
    return list(families.values())


def _keyed(name: str) -> tuple[str, dict[str, str]]:
    """("<key>_write_per_namespace" ->) ("write_per_namespace", {"key": "<key>"}); other names unchanged."""
    match = _KEYED_RE.match(name)
    if match is None:
        return name, {}
    return match["set"], {"key": match["key"]}


def state_families(values: Mapping[str, str] | None) -> list[Metric]:
    """``magnetar_zookeeper_up`` and ``magnetar_zookeeper_server_state``; ``values`` None: ZooKeeper did not answer."""
    up = GaugeMetricFamily("magnetar_zookeeper_up",
                           "1 when ZooKeeper answered mntr with its numbers (serving), 0 when down or not serving")
    up.add_metric([], 1 if values else 0)
    current = (values or {}).get("server_state", "")
    state = GaugeMetricFamily("magnetar_zookeeper_server_state", "1 for the server state mntr reports, else 0",
                              labels=["state"])
    for name in SERVER_STATES + ((current,) if current and current not in SERVER_STATES else ()):
        state.add_metric([name], 1 if name == current else 0)
    return [up, state]


class MntrCollector:
    """A prometheus_client collector asking one ZooKeeper server ``mntr`` at every scrape."""

    def __init__(self, host: str, port: int, *, timeout_s: float = 2.0) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s

    def describe(self) -> Iterable[Metric]:
        return []  # names depend on the server's answer; registering must not ask it

    def collect(self) -> Iterator[Metric]:
        try:
            answer = zk.four_letter_word(self.host, self.port, "mntr", timeout_s=self.timeout_s)
        except OSError as err:
            log.debug("mntr at %s:%d failed: %s", self.host, self.port, err)
            answer = b""
        values = parse_mntr(answer.decode("utf-8", errors="replace"))
        yield from state_families(values or None)
        yield from metric_families(values)


def serve_zookeeper_metrics(*, zk_host: str, zk_port: int, host: str, port: int) -> MetricsServer:
    """Serves ``/metrics`` (and ``/health``: 200 while ZooKeeper answers ``ruok``) at ``host:port``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MntrCollector(zk_host, zk_port))

    def health() -> tuple[bool, str]:
        return (True, "ok") if zk.is_healthy(zk_host, zk_port) else (False, f"ZooKeeper at {zk_host}:{zk_port} does not answer ruok")

    return serve_metrics(registry, host, port, health=health)
