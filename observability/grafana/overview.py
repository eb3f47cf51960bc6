"""Overview: every region at a glance.

What an operator looks at first: are the processes of each region up (brokers, bookies, proxies, ZooKeeper,
bookies writable), how much is published and dispatched per region, how much is stored and waiting
(backlog), how far replication to each remote region lags, and the brokers' publish latency.
"""

from __future__ import annotations

from .kit import CLUSTER, Query, eq, build_dashboard, cluster_variable, sel, stat, timeseries

UID = "magnetar-overview"


def _up(job: str, title: str, what: str) -> object:
    return stat(f"{title} up", f"{what} Prometheus reaches now, of those it scrapes.",
                Query(f'sum(up{sel(eq("job", job), CLUSTER)})', "up"),
                Query(f'count(up{sel(eq("job", job), CLUSTER)})', "scraped"))


def dashboard():
    broker = sel(CLUSTER)
    panels = [
        _up("broker", "Brokers", "Brokers"),
        _up("bookie", "Bookies", "Bookies"),
        stat("Bookies writable", "Bookies accepting adds (bookie_SERVER_STATUS = 1), and those read-only "
             "(low disk).", Query(f"sum(bookie_SERVER_STATUS{broker})", "writable"),
             Query(f"sum(1 - bookie_SERVER_STATUS{broker})", "read-only")),
        _up("proxy", "Proxies", "Region proxies"),
        _up("zookeeper", "ZooKeeper", "ZooKeeper servers (the regions' and, under All, the global one)"),
        stat("Topics", "Topics loaded on the brokers of the selected regions.",
             Query(f"count(pulsar_rate_in{broker})", "topics")),
        timeseries("Publish rate", "Messages per second published, per region.",
                   Query(f"sum by (cluster) (pulsar_rate_in{broker})", "{{cluster}}"), unit="mps"),
        timeseries("Dispatch rate", "Messages per second dispatched to consumers, per region.",
                   Query(f"sum by (cluster) (pulsar_rate_out{broker})", "{{cluster}}"), unit="mps"),
        timeseries("Throughput", "Bytes per second published (in) and dispatched (out), per region.",
                   Query(f"sum by (cluster) (pulsar_throughput_in{broker})", "{{cluster}} in"),
                   Query(f"sum by (cluster) (pulsar_throughput_out{broker})", "{{cluster}} out"), unit="Bps"),
        timeseries("Storage size", "Bytes stored by the topics of each region (before replication to bookies).",
                   Query(f"sum by (cluster) (pulsar_storage_size{broker})", "{{cluster}}"), unit="bytes"),
        timeseries("Backlog", "Entries not yet acknowledged, over every subscription, per region.",
                   Query(f"sum by (cluster) (pulsar_msg_backlog{broker})", "{{cluster}}"), unit="short"),
        timeseries("Replication backlog", "Entries not yet replicated, from each region to each remote one.",
                   Query(f"sum by (cluster, remote_cluster) (pulsar_replication_backlog{broker})",
                         "{{cluster}} → {{remote_cluster}}"), unit="short"),
        timeseries("Publish latency p99", "99th percentile of the brokers' publish latency (SEND to entry "
                   "stored), the slowest broker of each region.",
                   Query(f'max by (cluster) (pulsar_broker_publish_latency{sel(CLUSTER, eq("quantile", "0.99"))})',
                         "{{cluster}}"), unit="ms"),
        timeseries("Client connections", "Client connections open at the brokers and at the region proxies.",
                   Query(f"sum by (cluster) (pulsar_active_connections{broker})", "{{cluster}} brokers"),
                   Query(f"sum by (cluster) (pulsar_proxy_active_connections{broker})", "{{cluster}} proxy"),
                   unit="short"),
    ]
    return build_dashboard(uid=UID, title="Magnetar / Overview", tags=["overview"], panels=panels,
                           description="Every region at a glance: processes up, rates, storage, backlog, "
                                       "replication backlog, publish latency.",
                           variables=[cluster_variable("broker")])
