"""Geo-replication: what each region sends to and receives from every remote region.

Rates and throughput out (the local replicators) and in (what remote replicators publish here), the
replication backlog (entries not yet sent) and delay (age of the oldest unsent entry) per remote cluster and
per topic, whether the replicators are connected, and the replicated subscriptions' snapshots still waiting for
the remote regions' answers.
"""

from __future__ import annotations

from .kit import (CLUSTER, TOPICS, Query, build_dashboard, cluster_variable, namespace_variable, sel, stat,
                  timeseries, topic_variable)

UID = "magnetar-replication"

_BY_REMOTE = "sum by (cluster, remote_cluster)"
_ROUTE = "{{cluster}} → {{remote_cluster}}"


def dashboard():
    panels = [
        stat("Replication backlog", "Entries not yet replicated, over every topic and remote region.",
             Query(f"sum(pulsar_replication_backlog{TOPICS})", "entries"), width=6),
        stat("Largest replication delay", "Age of the oldest entry not yet replicated, over every topic.",
             Query(f"max(pulsar_replication_delay_in_seconds{TOPICS})", "delay"), unit="s", width=6, red_at=60),
        stat("Replicators connected", "Replicators connected to their remote region, of all replicators.",
             Query(f"sum(pulsar_replication_connected_count{TOPICS})", "connected"),
             Query(f"count(pulsar_replication_connected_count{TOPICS})", "replicators"), width=6),
        stat("Snapshots pending", "Replicated-subscription snapshots waiting for the remote regions' answers.",
             Query(f"sum(pulsar_replicated_subscriptions_pending_snapshots{sel(CLUSTER)})", "pending"), width=6),
        timeseries("Replication rate out", "Messages per second sent to each remote region.",
                   Query(f"{_BY_REMOTE} (pulsar_replication_rate_out{TOPICS})", _ROUTE), unit="mps"),
        timeseries("Replication rate in", "Messages per second received from each remote region.",
                   Query(f"{_BY_REMOTE} (pulsar_replication_rate_in{TOPICS})", "{{cluster}} ← {{remote_cluster}}"),
                   unit="mps"),
        timeseries("Replication throughput out", "Bytes per second sent to each remote region.",
                   Query(f"{_BY_REMOTE} (pulsar_replication_throughput_out{TOPICS})", _ROUTE), unit="Bps"),
        timeseries("Replication throughput in", "Bytes per second received from each remote region.",
                   Query(f"{_BY_REMOTE} (pulsar_replication_throughput_in{TOPICS})",
                         "{{cluster}} ← {{remote_cluster}}"), unit="Bps"),
        timeseries("Replication backlog per remote cluster", "Entries not yet sent to each remote region.",
                   Query(f"{_BY_REMOTE} (pulsar_replication_backlog{TOPICS})", _ROUTE)),
        timeseries("Replication delay per remote cluster", "Age of the oldest entry not yet sent to each remote "
                   "region (the topic that lags most).",
                   Query(f"max by (cluster, remote_cluster) (pulsar_replication_delay_in_seconds{TOPICS})", _ROUTE),
                   unit="s"),
        timeseries("Replication backlog per topic", "The ten topics with the most entries not yet replicated.",
                   Query(f"topk(10, sum by (topic, remote_cluster) (pulsar_replication_backlog{TOPICS}))",
                         "{{topic}} → {{remote_cluster}}")),
        timeseries("Replication delay per topic", "The ten topics whose oldest unreplicated entry is oldest.",
                   Query(f"topk(10, max by (topic, remote_cluster) (pulsar_replication_delay_in_seconds{TOPICS}))",
                         "{{topic}} → {{remote_cluster}}"), unit="s"),
        timeseries("Replicators connected", "Connected replicators, per route.",
                   Query(f"{_BY_REMOTE} (pulsar_replication_connected_count{TOPICS})", _ROUTE)),
        timeseries("Replicated-subscription snapshots pending", "Snapshots a region started and is still "
                   "waiting on (a replicated subscription's position can only move to a completed snapshot).",
                   Query(f"sum by (cluster) (pulsar_replicated_subscriptions_pending_snapshots{sel(CLUSTER)})",
                         "{{cluster}}")),
    ]
    return build_dashboard(uid=UID, title="Magnetar / Geo-replication", tags=["replication"], panels=panels,
                           description="Replication between regions: rate in and out, backlog and delay per remote "
                                       "cluster and topic, replicators connected, replicated-subscription "
                                       "snapshots pending.",
                           variables=[cluster_variable("broker"), namespace_variable(), topic_variable()])
