"""The region's brokers as Kafka sees them: nodes with ids, hosts and ports.

Each broker registers its advertised Kafka listeners under ``/brokers/<id>`` (``protocols.kafka``, Pulsar's
``LocalBrokerData.protocols``), so any broker can name the leader of a partition another one owns. A Kafka
node id is an int32: the CRC-32 of the broker id (stable across restarts, the same on every broker).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any, Optional

from .config import KafkaListener, parse_kafka_listeners

__all__ = ["KAFKA_PROTOCOL", "Node", "ClusterView", "node_id_of", "format_listeners"]

KAFKA_PROTOCOL = "kafka"
_CACHE_S = 1.0


def node_id_of(broker_id: str) -> int:
    return zlib.crc32(broker_id.encode("utf-8")) & 0x7FFFFFFF


def format_listeners(listeners: tuple[KafkaListener, ...]) -> str:
    return ",".join(listener.url() for listener in listeners)


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    broker_id: str
    http_url: str


class ClusterView:
    """Live brokers serving Kafka, read from the broker registry (cached for a second)."""

    def __init__(self, registry: Any, *, cluster: str, broker_id: str) -> None:
        self._registry = registry
        self.cluster = cluster
        self.broker_id = broker_id
        self._cache: Optional[tuple[float, list[tuple[str, str, tuple[KafkaListener, ...]]]]] = None

    async def _brokers(self) -> list[tuple[str, str, tuple[KafkaListener, ...]]]:
        now = time.monotonic()
        if self._cache is not None and now - self._cache[0] < _CACHE_S:
            return self._cache[1]
        found = []
        for broker_id, reg in sorted((await self._registry.list_brokers()).items()):
            if reg.cluster and reg.cluster != self.cluster:
                continue
            text = reg.protocol(KAFKA_PROTOCOL)
            if not text:
                continue
            try:
                listeners = parse_kafka_listeners(text, allow_zero_port=False)
            except ValueError:
                continue  # an unreadable registration is skipped, as the registry skips them
            found.append((broker_id, reg.web_service_url, listeners))
        self._cache = (now, found)
        return found

    def invalidate(self) -> None:
        self._cache = None

    async def nodes(self, listener_name: str) -> list[Node]:
        """Brokers with a Kafka listener named ``listener_name`` (the one the client came in on)."""
        out = []
        for broker_id, http_url, listeners in await self._brokers():
            listener = next((l for l in listeners if l.name == listener_name), None)
            if listener is not None:
                out.append(Node(node_id_of(broker_id), listener.host, listener.port, broker_id, http_url))
        return out

    async def node_for_http_url(self, http_url: str, listener_name: str) -> Optional[Node]:
        for attempt in range(2):
            for node in await self.nodes(listener_name):
                if node.http_url == http_url:
                    return node
            if attempt == 0:
                self.invalidate()  # a broker that just registered
        return None
