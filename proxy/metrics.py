"""The proxy's metrics: Apache Pulsar's proxy names where Pulsar has one, ``magnetar_proxy_*`` otherwise.

Pulsar's proxy (``ProxyService``, ``LookupProxyHandler``) exports ``pulsar_proxy_active_connections`` (gauge),
``pulsar_proxy_new_connections``, ``pulsar_proxy_rejected_connections``, ``pulsar_proxy_binary_ops``,
``pulsar_proxy_binary_bytes``, ``pulsar_proxy_lookup_requests``, ``pulsar_proxy_partitions_metadata_requests``,
``pulsar_proxy_get_topics_of_namespace_requests``, ``pulsar_proxy_get_schema_requests`` and the
``pulsar_proxy_rejected_*_requests`` counters of lookups refused by ``maxConcurrentLookupRequests``; counters are
exposed with the ``_total`` suffix, as Pulsar's Prometheus client exposes them. Binary ops and bytes count what
the proxy forwards in either direction once a connection is spliced to its broker (one op per read).

The counts are plain integers on :class:`ProxyStats`, incremented on the event loop without a lock (the relay
counts every read it forwards) and turned into metric families when scraped (:class:`ProxyCollector`, registered
in the registry given, so tests use a fresh one).
"""

from __future__ import annotations

import collections
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["LOOKUP_KINDS", "ProxyCollector", "ProxyStats"]

# request kind -> (Pulsar's request counter, counter of the same requests refused over the limit)
LOOKUP_KINDS: dict[str, tuple[str, str]] = {
    "lookup": ("pulsar_proxy_lookup_requests", "pulsar_proxy_rejected_lookup_requests"),
    "partitions_metadata": ("pulsar_proxy_partitions_metadata_requests",
                            "pulsar_proxy_rejected_partitions_metadata_requests"),
    "get_topics_of_namespace": ("pulsar_proxy_get_topics_of_namespace_requests",
                                "pulsar_proxy_rejected_get_topics_of_namespace_requests"),
    # Pulsar does not limit schema requests; Magnetar does, so this refusal has a Magnetar name.
    "get_schema": ("pulsar_proxy_get_schema_requests", "magnetar_proxy_rejected_get_schema_requests"),
}


class ProxyStats:
    """What the proxy counts (see the module docstring)."""

    def __init__(self) -> None:
        self.new_connections = 0
        self.rejected_connections = 0
        self.binary_ops = 0
        self.binary_bytes = 0
        self.requests: collections.Counter[str] = collections.Counter()
        self.rejected_requests: collections.Counter[str] = collections.Counter()
        self.auth_failures: collections.Counter[str] = collections.Counter()
        self.authorization_failures: collections.Counter[str] = collections.Counter()
        self.auth_refreshes = 0
        self.handshake_timeouts = 0
        self.denied_targets = 0
        self.broker_connect_failures = 0


class ProxyCollector:
    """Renders :class:`ProxyStats` (and the live gauges) as metric families at scrape time.

    Args:
        stats: the counts.
        active_connections: the number of client connections open now.
        relayed_connections: how many of them are spliced to a broker.
    """

    def __init__(self, stats: ProxyStats, *, active_connections: Callable[[], int],
                 relayed_connections: Callable[[], int]) -> None:
        self.stats = stats
        self._active = active_connections
        self._relayed = relayed_connections

    def register(self, registry: CollectorRegistry) -> "ProxyCollector":
        registry.register(self)
        return self

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        yield GaugeMetricFamily("pulsar_proxy_active_connections",
                                "Number of connections currently active in the proxy", value=self._active())
        yield GaugeMetricFamily("magnetar_proxy_relayed_connections",
                                "Client connections spliced to a broker (the rest answer lookups)",
                                value=self._relayed())
        for name, doc, value in (
            ("pulsar_proxy_new_connections", "Counter of connections being opened in the proxy", s.new_connections),
            ("pulsar_proxy_rejected_connections", "Counter for connections rejected due to throttling",
             s.rejected_connections),
            ("pulsar_proxy_binary_ops", "Counter of proxy operations", s.binary_ops),
            ("pulsar_proxy_binary_bytes", "Counter of proxy bytes", s.binary_bytes),
            ("magnetar_proxy_handshake_timeouts", "Connections closed for not finishing TLS and CONNECT in time",
             s.handshake_timeouts),
            ("magnetar_proxy_denied_targets", "CONNECTs naming a proxy_to_broker_url that is not a registered "
             "broker of the region", s.denied_targets),
            ("magnetar_proxy_broker_connect_failures", "Forwarded connections whose broker could not be reached "
             "or refused the proxy", s.broker_connect_failures),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        for kind, (requests, rejected) in LOOKUP_KINDS.items():
            label = kind.replace("_", " ")
            yield CounterMetricFamily(requests, f"Counter of {label} requests", value=s.requests[kind])
            yield CounterMetricFamily(rejected, f"Counter of {label} requests rejected due to throttling",
                                      value=s.rejected_requests[kind])
        failures = CounterMetricFamily("magnetar_proxy_auth_failures",
                                       "Clients refused while authenticating (TLS or CONNECT), by reason",
                                       labels=["reason"])
        for reason, count in sorted(s.auth_failures.items()):
            failures.add_metric([reason], count)
        yield failures
        refused = CounterMetricFamily("magnetar_proxy_authorization_failures",
                                      "Lookups refused because the client's role may not look the topic up, by "
                                      "operation", labels=["operation"])
        for operation, count in sorted(s.authorization_failures.items()):
            refused.add_metric([operation], count)
        yield refused
        yield CounterMetricFamily("magnetar_proxy_auth_refreshes", "Expired credentials a client replaced on a "
                                  "live lookup connection (AUTH_CHALLENGE answered)", value=s.auth_refreshes)
