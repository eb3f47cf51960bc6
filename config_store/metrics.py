"""ZooKeeper session events of a process's metadata stores, as a Prometheus counter.

``magnetar_zookeeper_session_events_total{cluster, name, event}`` counts each store's session transitions
since the process started: ``event`` is ``connected`` (a new session: the first one, or a fresh one after an
expiry), ``suspended`` (the connection dropped; the session may live on), ``reconnected`` (the same session
resumed, ephemeral nodes intact) or ``expired`` (the session is gone with its ephemeral nodes). ``name`` says
which store, with the values of Pulsar's metadata-store series: ``metadata-store`` (the region's ZooKeeper)
and ``configuration-metadata-store`` (the global configuration store, when it is another ensemble).

Apache Pulsar exports no session-event series (its ``pulsar_metadata_store_*`` series time operations), so
the name is Magnetar's own (DESIGN §8). Every (store, event) pair is exported from the start, at 0, so an
alert such as ``increase(magnetar_zookeeper_session_events_total{event="expired"}[5m]) > 0`` always has a
series to evaluate. The counts are kept by :class:`~config_store.store.MetadataStore` (plain integers bumped
on the event loop); this collector only reads them at scrape time. Any process that opens metadata stores
(broker, bookie) registers one with its own registry.
"""

from __future__ import annotations

from typing import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from .store import MetadataStore, SessionEvent

SESSION_EVENTS = "magnetar_zookeeper_session_events"  # counter: the exposition adds _total
# SessionEvent -> the ``event`` label value
EVENT_LABELS = {SessionEvent.CONNECTED: "connected", SessionEvent.SUSPENDED: "suspended",
                SessionEvent.RECONNECTED: "reconnected", SessionEvent.LOST: "expired"}
LOCAL_STORE = "metadata-store"
CONFIGURATION_STORE = "configuration-metadata-store"
_HELP = "ZooKeeper session events of this process's metadata stores (connected, suspended, reconnected, expired)"


class SessionEventsCollector(Collector):
    """Exports the session event counts of ``stores`` (``{name label: store}``) with ``cluster``."""

    def __init__(self, stores: Mapping[str, MetadataStore], *, cluster: str) -> None:
        self._stores = dict(stores)
        self._cluster = cluster

    def describe(self) -> list:
        return [CounterMetricFamily(SESSION_EVENTS, _HELP, labels=["cluster", "name", "event"])]

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(SESSION_EVENTS, _HELP, labels=["cluster", "name", "event"])
        for name, store in self._stores.items():
            counts = store.session_event_counts
            for event, label in EVENT_LABELS.items():
                family.add_metric([self._cluster, name, label], counts[event])
        yield family


def process_stores(local: MetadataStore, configuration: MetadataStore | None) -> dict[str, MetadataStore]:
    """The ``name`` labels of a process's stores: the configuration store is listed apart only when it is
    another store than the local one (a single-ZooKeeper deployment shares one)."""
    stores = {LOCAL_STORE: local}
    if configuration is not None and configuration is not local:
        stores[CONFIGURATION_STORE] = configuration
    return stores
