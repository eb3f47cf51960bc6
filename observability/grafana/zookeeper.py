"""ZooKeeper: each region's metadata store and the global configuration store (``cluster="global"``).

Series under the names ZooKeeper's Prometheus metrics provider gives them (from the ``mntr`` four-letter
word): znodes and data size, client connections and outstanding requests, request latency, watches,
packets, ephemeral nodes, open file descriptors; and what Magnetar's processes saw of their sessions
(expired, suspended, reconnected), the cause an operator looks for when brokers lose ownership.
"""

from __future__ import annotations

from .kit import CLUSTER, RATE, Query, build_dashboard, cluster_variable, eq, sel, stat, timeseries

UID = "magnetar-zookeeper"

_SERVERS = sel(CLUSTER)
_BY_SERVER = "sum by (cluster, instance)"
_LEGEND = "{{cluster}} {{instance}}"


def _per_server(metric: str, suffix: str = "") -> Query:
    return Query(f"{_BY_SERVER} ({metric}{_SERVERS})", f"{_LEGEND}{suffix}")


def dashboard():
    panels = [
        stat("Servers up", "ZooKeeper servers Prometheus reaches now, of those it scrapes.",
             Query(f'sum(up{sel(eq("job", "zookeeper"), CLUSTER)})', "up"),
             Query(f'count(up{sel(eq("job", "zookeeper"), CLUSTER)})', "scraped")),
        stat("Znodes", "Znodes over the selected servers.", Query(f"sum(znode_count{_SERVERS})", "znodes")),
        stat("Connections", "Client connections open.", Query(f"sum(num_alive_connections{_SERVERS})", "clients")),
        stat("Watches", "Watches set.", Query(f"sum(watch_count{_SERVERS})", "watches")),
        stat("Outstanding requests", "Requests queued and not yet answered.",
             Query(f"sum(outstanding_requests{_SERVERS})", "queued"), red_at=10),
        stat("Max latency", "Slowest request since the server's counters were last reset.",
             Query(f"max(max_latency{_SERVERS})", "max"), unit="ms"),
        timeseries("Znodes", "Znodes, per server.", _per_server("znode_count")),
        timeseries("Data size", "Approximate bytes of data held, per server.",
                   _per_server("approximate_data_size"), unit="bytes"),
        timeseries("Connections", "Client connections open, per server.", _per_server("num_alive_connections")),
        timeseries("Outstanding requests", "Requests queued and not yet answered, per server.",
                   _per_server("outstanding_requests")),
        timeseries("Request latency", "Minimum, average and maximum request latency, per server.",
                   _per_server("min_latency", " min"), _per_server("avg_latency", " avg"),
                   _per_server("max_latency", " max"), unit="ms"),
        timeseries("Watches", "Watches set, per server.", _per_server("watch_count")),
        timeseries("Packets", "Packets received and sent per second, per server.",
                   Query(f"{_BY_SERVER} (rate(packets_received{_SERVERS}{RATE}))", f"{_LEGEND} received"),
                   Query(f"{_BY_SERVER} (rate(packets_sent{_SERVERS}{RATE}))", f"{_LEGEND} sent"), unit="pps"),
        timeseries("Ephemeral nodes", "Ephemeral znodes (sessions' registrations and locks), per server.",
                   _per_server("ephemerals_count")),
        timeseries("Open file descriptors", "File descriptors the server holds open.",
                   _per_server("open_file_descriptor_count")),
        timeseries("Client session events", "ZooKeeper sessions of Magnetar's processes expired, suspended "
                   "(connection lost) or reconnected in the window, per region, process kind, store (the "
                   "region's metadata store or the configuration store) and event.",
                   Query(f"sum by (cluster, job, name, event) (increase(magnetar_zookeeper_session_events_total"
                         f"{_SERVERS}{RATE}))", "{{cluster}} {{job}} {{name}} {{event}}")),
    ]
    return build_dashboard(uid=UID, title="Magnetar / ZooKeeper", tags=["zookeeper"], panels=panels,
                           description="ZooKeeper servers of every region and the global configuration store: "
                                       "znodes, connections, outstanding requests, latency, watches, packets; "
                                       "client session events.",
                           variables=[cluster_variable("zookeeper")])
