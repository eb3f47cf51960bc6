"""A broker's load report, measured from the topics it serves (the ``set_load_source`` of ownership).

Reads only what the hot path already keeps: each topic's ``msg_in`` / ``bytes_in`` rate meters, its
producers, and each subscription's consumers with their ``msg_out`` / ``bytes_out`` meters (the same meters
behind the topic stats and ``pulsar_rate_in`` / ``pulsar_rate_out``). No asyncio, no I/O: the caller passes
the topics and how to find a topic's bundle, so tests can hand in plain objects.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from config_store.brokers import BrokerLoad, BundleStats

from .bundles import NamespaceBundle

__all__ = ["BUNDLE_STATS_MAX", "measure_load"]

# A load report lives in one ZooKeeper node (1 MB at most): about 200 bytes a bundle.
BUNDLE_STATS_MAX = 2000


def _rate(meter: Any) -> float:
    return float(meter.rate()) if meter is not None else 0.0


def topic_load(topic: Any) -> tuple[int, int, float, float, float, float]:
    """(producers, consumers, msg/s in, msg/s out, bytes/s in, bytes/s out) of one served topic."""
    producers = len(getattr(topic, "producers", None) or ())
    consumers = 0
    rate_out = throughput_out = 0.0
    for sub in list((getattr(topic, "subscriptions", None) or {}).values()):
        for consumer in getattr(sub, "consumers", None) or ():
            consumers += 1
            rate_out += _rate(getattr(consumer, "msg_out", None))
            throughput_out += _rate(getattr(consumer, "bytes_out", None))
    return (producers, consumers, _rate(getattr(topic, "msg_in", None)), rate_out,
            _rate(getattr(topic, "bytes_in", None)), throughput_out)


def measure_load(topics: Mapping[str, Any], bundle_of: Callable[[str], Optional[NamespaceBundle]], *,
                 connections: int = 0) -> BrokerLoad:
    """The load of the topics served here, per bundle and in total (``num_bundles`` is left 0: bundles
    are counted by ownership, which also knows owned bundles without topics)."""
    per_bundle: dict[str, list[float]] = {}
    totals = [0.0] * 6
    for name, topic in list(topics.items()):
        try:
            values = topic_load(topic)
            bundle = bundle_of(name)
        except Exception:  # a topic closing under us: skip it this time
            continue
        for i, v in enumerate(values):
            totals[i] += v
        if bundle is None:
            continue
        row = per_bundle.setdefault(str(bundle), [0.0] * 7)
        row[0] += 1
        for i, v in enumerate(values):
            row[i + 1] += v
    stats = [BundleStats(bundle=key, topics=int(r[0]), producer_count=int(r[1]), consumer_count=int(r[2]),
                         msg_rate_in=r[3], msg_rate_out=r[4], msg_throughput_in=r[5], msg_throughput_out=r[6])
             for key, r in per_bundle.items()]
    if len(stats) > BUNDLE_STATS_MAX:
        stats = sorted(stats, key=lambda s: (-s.msg_throughput, -s.msg_rate, -s.topics))[:BUNDLE_STATS_MAX]
    return BrokerLoad(num_topics=len(topics), num_producers=int(totals[0]), num_consumers=int(totals[1]),
                      connections=connections, msg_rate_in=totals[2], msg_rate_out=totals[3],
                      msg_throughput_in=totals[4], msg_throughput_out=totals[5],
                      bundle_stats=tuple(sorted(stats, key=lambda s: s.bundle)))
