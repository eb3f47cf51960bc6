"""Proxy: each region's gateway, under Pulsar's proxy names (``pulsar_proxy_*``) and Magnetar's own.

Connections (open, spliced to a broker, opened and refused per second), the binary protocol it relays
(operations and bytes), the requests it answers itself by asking the brokers (lookups, partitioned
metadata, topic lists, schemas) and those refused over the concurrency limit, and security: clients refused
while authenticating, by reason, and lookups refused by authorization, by operation.
"""

from __future__ import annotations

from .kit import CLUSTER, RATE, Query, build_dashboard, cluster_variable, eq, sel, stat, timeseries

UID = "magnetar-proxy"

_PROXIES = sel(CLUSTER)
_BY_PROXY = "sum by (cluster, instance)"
_LEGEND = "{{cluster}} {{instance}}"
# request kind (legend) -> (requests counter, refused-over-the-limit counter), as proxy/metrics.py exports them
_REQUESTS = (
    ("lookup", "pulsar_proxy_lookup_requests_total", "pulsar_proxy_rejected_lookup_requests_total"),
    ("partitioned metadata", "pulsar_proxy_partitions_metadata_requests_total",
     "pulsar_proxy_rejected_partitions_metadata_requests_total"),
    ("topics of namespace", "pulsar_proxy_get_topics_of_namespace_requests_total",
     "pulsar_proxy_rejected_get_topics_of_namespace_requests_total"),
    ("schema", "pulsar_proxy_get_schema_requests_total", "magnetar_proxy_rejected_get_schema_requests_total"),
)


def _per_second(metric: str, legend: str) -> Query:
    return Query(f"sum by (cluster) (rate({metric}{_PROXIES}{RATE}))", f"{{{{cluster}}}} {legend}")


def dashboard():
    panels = [
        stat("Proxies up", "Proxies Prometheus reaches now, of those it scrapes.",
             Query(f'sum(up{sel(eq("job", "proxy"), CLUSTER)})', "up"),
             Query(f'count(up{sel(eq("job", "proxy"), CLUSTER)})', "scraped"), width=6),
        stat("Active connections", "Client connections open at the selected proxies.",
             Query(f"sum(pulsar_proxy_active_connections{_PROXIES})", "open"), width=6),
        stat("Lookups", "Lookups per second the selected proxies answer.",
             Query(f"sum(rate(pulsar_proxy_lookup_requests_total{_PROXIES}{RATE}))", "lookups"), unit="reqps",
             width=6),
        stat("Authentication failures", "Clients per second refused while authenticating.",
             # the counter has a series per reason once one happened: none yet reads as 0, not as no data
             Query(f"sum(rate(magnetar_proxy_auth_failures_total{_PROXIES}{RATE})) or vector(0)", "refused"),
             unit="reqps",
             width=6, red_at=1),
        timeseries("Connections", "Client connections open, and those spliced to a broker (the rest answer "
                   "lookups), per proxy.",
                   Query(f"{_BY_PROXY} (pulsar_proxy_active_connections{_PROXIES})", f"{_LEGEND} open"),
                   Query(f"{_BY_PROXY} (magnetar_proxy_relayed_connections{_PROXIES})", f"{_LEGEND} relayed")),
        timeseries("New and rejected connections", "Connections opened, and refused over the connection limits, "
                   "per second.",
                   _per_second("pulsar_proxy_new_connections_total", "new"),
                   _per_second("pulsar_proxy_rejected_connections_total", "rejected"), unit="cps"),
        timeseries("Binary protocol operations", "Reads relayed between clients and brokers per second, per proxy.",
                   Query(f"{_BY_PROXY} (rate(pulsar_proxy_binary_ops_total{_PROXIES}{RATE}))", _LEGEND), unit="ops"),
        timeseries("Binary protocol bytes", "Bytes relayed between clients and brokers per second, per proxy.",
                   Query(f"{_BY_PROXY} (rate(pulsar_proxy_binary_bytes_total{_PROXIES}{RATE}))", _LEGEND),
                   unit="Bps"),
        timeseries("Requests answered", "Lookups, partitioned metadata, topic lists and schemas per second.",
                   *[_per_second(requests, kind) for kind, requests, _ in _REQUESTS], unit="reqps"),
        timeseries("Requests rejected", "Requests per second refused because too many were in flight.",
                   *[_per_second(rejected, kind) for kind, _, rejected in _REQUESTS], unit="reqps"),
        timeseries("Authentication failures by reason", "Clients refused while authenticating (TLS or CONNECT), "
                   "per second and reason.",
                   Query(f"sum by (cluster, reason) (rate(magnetar_proxy_auth_failures_total{_PROXIES}{RATE}))",
                         "{{cluster}} {{reason}}"), unit="reqps"),
        timeseries("Authorization failures", "Lookups refused because the client's role may not use the topic, "
                   "per second and operation.",
                   Query(f"sum by (cluster, operation) (rate(magnetar_proxy_authorization_failures_total{_PROXIES}"
                         f"{RATE}))", "{{cluster}} {{operation}}"), unit="reqps"),
        timeseries("Connection errors", "Per second: TLS or CONNECT not finished in time, CONNECTs naming a host "
                   "that is no broker of the region, brokers that could not be reached.",
                   _per_second("magnetar_proxy_handshake_timeouts_total", "handshake timeouts"),
                   _per_second("magnetar_proxy_denied_targets_total", "denied targets"),
                   _per_second("magnetar_proxy_broker_connect_failures_total", "broker unreachable"), unit="ops"),
        timeseries("Credential refreshes", "Expired credentials clients replaced on live lookup connections, per "
                   "second.", _per_second("magnetar_proxy_auth_refreshes_total", "refreshed"), unit="ops"),
    ]
    return build_dashboard(uid=UID, title="Magnetar / Proxy", tags=["proxy"], panels=panels,
                           description="Region proxies: connections, relayed operations and bytes, lookups and "
                                       "their rejections, authentication and authorization failures.",
                           variables=[cluster_variable("proxy")])
