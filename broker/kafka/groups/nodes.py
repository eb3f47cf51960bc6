"""The Kafka address of a group's coordinator: the broker owning its coordination topic, as Kafka clients
reach it on the listener they came in on.

Brokers register their advertised Kafka listeners with the region (``/brokers/<id>``, ``protocols.kafka``,
read through the listener's :class:`broker.kafka.cluster.ClusterView`), so the owner found by a lookup is
named by its registration: the same node id and address Metadata answers give. Before this broker's own
registration is readable (or without a registry: a broker of tests), its configured listeners answer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from .placement import KafkaNode, node_id_for

if TYPE_CHECKING:
    from broker.ownership_api import LookupResult

log = logging.getLogger("broker.kafka.groups")

_WILDCARDS = ("", "0.0.0.0", "::")


class NodeLocator:
    """Turns an ownership lookup into a :class:`KafkaNode` (None: unknown for now; the client retries)."""

    def __init__(self, service: Any, kafka_config: Any) -> None:
        self.service = service
        self.config = kafka_config
        self._view: Any = None

    def _cluster(self) -> Any:
        if self._view is None:
            ownership = getattr(self.service, "ownership", None)
            registry, broker_id = getattr(ownership, "registry", None), getattr(ownership, "broker_id", None)
            if registry is None or broker_id is None:
                return None
            from broker.kafka.cluster import ClusterView

            self._view = ClusterView(registry, cluster=self.service.cluster_name, broker_id=broker_id)
        return self._view

    async def locate(self, found: "LookupResult", listener_name: str) -> Optional[KafkaNode]:
        listener_name = (listener_name or "PLAINTEXT").upper()
        view = self._cluster()
        if view is not None:
            if found.is_self:
                nodes = [n for n in await view.nodes(listener_name) if n.broker_id == view.broker_id]
                node = nodes[0] if nodes else None
            else:
                node = await view.node_for_http_url(found.http_url, listener_name)
            if node is not None:
                return KafkaNode(node.node_id, node.host, node.port)
        if found.is_self:
            return self.configured_self(listener_name)
        log.warning("broker %s has no registered Kafka listener %s", found.http_url or found.broker_service_url,
                    listener_name)
        return None

    def configured_self(self, listener_name: str) -> Optional[KafkaNode]:
        """This broker from its own settings (a port-0 listener has no known port here: None)."""
        listeners = self.config.advertised() or self.config.bound_listeners()
        chosen = next((entry for entry in listeners if entry.name == listener_name), None)
        chosen = chosen or (listeners[0] if listeners else None)
        if chosen is None or not chosen.port:
            return None
        host = chosen.host if chosen.host not in _WILDCARDS else self.config.advertised_host
        broker_id = getattr(getattr(self.service, "ownership", None), "broker_id", None)
        if broker_id is not None:
            from broker.kafka.cluster import node_id_of

            return KafkaNode(node_id_of(broker_id), host, chosen.port)
        return KafkaNode(node_id_for(self.service.service_url), host, chosen.port)
