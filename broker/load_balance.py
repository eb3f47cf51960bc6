"""Load-balancing decisions, pure: where an unowned bundle goes, which bundles to split, which to shed.

Theory of operation
-------------------
Every broker publishes a load report (:class:`config_store.brokers.BrokerLoad`, Pulsar's
``LocalBrokerData``): message rates and throughput in and out, and the same per bundle (``lastStats``).
Pulsar measures a broker's *usage* of each resource (CPU, memory, NIC in/out) as a fraction of that
resource's capacity. A Python broker's capacity is not something it can measure, so a broker's usage of a
resource here is its **share of the region's total** of that resource (message rate in, message rate out,
bytes/s in, bytes/s out), and its *score* is the weighted maximum over resources, as Pulsar's
``getMaxResourceUsageWithWeight``. Totals below a significance floor (:data:`RATE_FLOOR_MSGS_S`,
:data:`THROUGHPUT_FLOOR_BYTES_S`) are measured against the floor instead, so an almost idle region has
scores near 0 everywhere rather than one broker at 1.0 for a trickle of messages.

* Placement (:func:`choose_broker`): the brokers whose score is within :data:`PLACEMENT_TOLERANCE` of the
  lowest are equally good; among them the one with the fewest bundles, then topics, then the lowest
  per-(bundle, broker) rendezvous hash wins (what placement did before it knew rates: an idle region
  still spreads bundles evenly, and every broker breaks ties the same way).
* Splitting (:func:`bundles_to_split`): a bundle over any of Pulsar's ``loadBalancerNamespaceBundleMax*``
  thresholds (topics, sessions, message rate in+out, bandwidth in+out) is split, unless it holds a single
  topic (a split cannot help) or its namespace is at the maximum number of bundles.
* Shedding (:func:`bundles_to_shed`): Pulsar's ``ThresholdShedder``: each broker's score is smoothed with
  its history (``history_fraction`` of the old value); a broker above the average by more than the
  threshold sheds its largest bundles (by throughput) until the throughput marked reaches the share it is
  over (plus a 5% margin) -- at least one bundle, never its last one, never a bundle unloaded within the
  grace period (the caller passes those), nothing when less than ``min_throughput_bytes_s`` would move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterable, Mapping

from config_store.brokers import BrokerLoad, BundleStats

from .bundles import NamespaceBundle, rendezvous

__all__ = ["PLACEMENT_TOLERANCE", "ResourceWeights", "SplitThresholds", "bundles_to_shed", "bundles_to_split",
           "choose_broker", "scores"]

MIB = 1024 * 1024
RATE_FLOOR_MSGS_S = 10.0
THROUGHPUT_FLOOR_BYTES_S = 10.0 * 1024
PLACEMENT_TOLERANCE = 0.05
_SHED_MARGIN = 0.05  # Pulsar's ADDITIONAL_THRESHOLD_PERCENT_MARGIN


@dataclass(frozen=True)
class ResourceWeights:
    """How much each resource counts in a broker's score (Pulsar's ``loadBalancer*ResourceWeight``)."""

    msg_rate_in: float = 1.0
    msg_rate_out: float = 1.0
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0

    def pairs(self) -> tuple[tuple[str, float, float], ...]:
        """(BrokerLoad attribute, weight, significance floor) per resource."""
        return (("msg_rate_in", self.msg_rate_in, RATE_FLOOR_MSGS_S),
                ("msg_rate_out", self.msg_rate_out, RATE_FLOOR_MSGS_S),
                ("msg_throughput_in", self.bandwidth_in, THROUGHPUT_FLOOR_BYTES_S),
                ("msg_throughput_out", self.bandwidth_out, THROUGHPUT_FLOOR_BYTES_S))


@dataclass(frozen=True)
class SplitThresholds:
    """Pulsar's ``loadBalancerNamespaceBundleMax*``: a bundle over any of them is split (0: not checked)."""

    max_topics: int = 1000
    max_sessions: int = 1000
    max_msg_rate: float = 30_000.0
    max_bandwidth_mbytes: float = 100.0

    def exceeded(self, s: BundleStats) -> str | None:
        """Which threshold ``s`` is over (for the log), or None."""
        if self.max_topics > 0 and s.topics > self.max_topics:
            return f"{s.topics} topics > {self.max_topics}"
        if self.max_sessions > 0 and s.sessions > self.max_sessions:
            return f"{s.sessions} sessions > {self.max_sessions}"
        if self.max_msg_rate > 0 and s.msg_rate > self.max_msg_rate:
            return f"{s.msg_rate:.0f} msg/s > {self.max_msg_rate:g}"
        if self.max_bandwidth_mbytes > 0 and s.msg_throughput > self.max_bandwidth_mbytes * MIB:
            return f"{s.msg_throughput / MIB:.1f} MB/s > {self.max_bandwidth_mbytes:g}"
        return None


def scores(loads: Mapping[str, BrokerLoad], weights: ResourceWeights = ResourceWeights()) -> dict[str, float]:
    """Each broker's weighted maximum over resources of its share of the region's total (see the module
    docstring); in ``[0, max weight]``."""
    out = {broker: 0.0 for broker in loads}
    for attribute, weight, floor in weights.pairs():
        total = max(sum(getattr(load, attribute) for load in loads.values()), floor)
        for broker, load in loads.items():
            out[broker] = max(out[broker], weight * getattr(load, attribute) / total)
    return out


def choose_broker(loads: Mapping[str, BrokerLoad], bundle: NamespaceBundle, *,
                  weights: ResourceWeights = ResourceWeights(), tolerance: float = PLACEMENT_TOLERANCE) -> str:
    """The broker an unowned ``bundle`` goes to, among ``loads`` (not empty): lowest score within
    ``tolerance``, then fewest bundles, topics, then the rendezvous hash."""
    if not loads:
        raise ValueError("no broker to choose from")
    by_score = scores(loads, weights)
    best = min(by_score.values())
    close = [broker for broker, score in by_score.items() if score <= best + tolerance]
    return min(close, key=lambda b: (loads[b].num_bundles, loads[b].num_topics, rendezvous(bundle, b), b))


def namespace_of(bundle: str) -> str:
    """``tenant/ns`` of a bundle key ``tenant/ns/0x.._0x..``."""
    return bundle.rsplit("/", 1)[0]


def bundles_to_split(stats: Iterable[BundleStats], *, bundle_counts: Mapping[str, int], thresholds: SplitThresholds,
                     max_bundles: int) -> list[tuple[str, str]]:
    """``(bundle, reason)`` of each bundle to split, busiest first, as Pulsar's ``BundleSplitterTask``: over
    a threshold, more than one topic, and its namespace (``bundle_counts``: bundles per ``tenant/ns``) under
    ``max_bundles`` counting the splits decided before it."""
    counts = dict(bundle_counts)
    chosen: list[tuple[str, str]] = []
    for s in sorted(stats, key=lambda s: (-s.msg_throughput, -s.msg_rate, -s.topics, s.bundle)):
        reason = thresholds.exceeded(s)
        if reason is None or s.topics <= 1:
            continue
        ns = namespace_of(s.bundle)
        if counts.get(ns, 1) >= max_bundles:
            continue
        counts[ns] = counts.get(ns, 1) + 1
        chosen.append((s.bundle, reason))
    return chosen


def bundles_to_shed(loads: Mapping[str, BrokerLoad], *, history: Mapping[str, float], threshold: float,
                    history_fraction: float, min_throughput_bytes_s: float, recently_unloaded: Collection[str],
                    weights: ResourceWeights = ResourceWeights()) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Pulsar's ThresholdShedder (see the module docstring).

    Args:
        loads: every live broker's last report.
        history: each broker's smoothed score from the previous run (missing: starts at its current score).
        threshold: how far above the average score a broker may be (0.1 is Pulsar's 10%).
        history_fraction: weight of the old smoothed score (Pulsar ``loadBalancerHistoryResourcePercentage``).
        min_throughput_bytes_s: a broker that would move less than this sheds nothing.
        recently_unloaded: bundles inside their grace period: never chosen.

    Returns:
        (bundles to unload per broker, the new smoothed scores to pass as ``history`` next time).
    """
    current = scores(loads, weights)
    smoothed = {b: (history[b] * history_fraction + (1 - history_fraction) * current[b]) if b in history
                else current[b] for b in loads}
    if len(loads) < 2:
        return {}, smoothed
    average = sum(smoothed.values()) / len(smoothed)
    if average <= 0:
        return {}, smoothed
    chosen: dict[str, list[str]] = {}
    for broker, load in sorted(loads.items()):
        usage = smoothed[broker]
        if usage <= average + threshold:
            continue
        throughput = load.msg_throughput_in + load.msg_throughput_out
        to_offload = throughput * (usage - average - threshold + _SHED_MARGIN)
        if to_offload < min_throughput_bytes_s or len(load.bundle_stats) <= 1:
            continue
        candidates = sorted((s for s in load.bundle_stats if s.bundle not in recently_unloaded),
                            key=lambda s: (-s.msg_throughput, -s.msg_rate, s.bundle))
        marked = 0.0
        picked: list[str] = []
        for s in candidates:
            if picked and marked >= to_offload:
                break
            if len(picked) + 1 >= len(load.bundle_stats):
                break  # never a broker's last bundle
            picked.append(s.bundle)
            marked += s.msg_throughput
        if picked:
            chosen[broker] = picked
    return chosen, smoothed
