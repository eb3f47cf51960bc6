"""Geo-replication (DESIGN §2): one replicator per (topic, remote cluster) — a durable cursor on the local
managed ledger plus a producer to the remote cluster — and replicated subscriptions (snapshot markers).

The broker process wires :class:`ReplicationService` into its ``BrokerService``.
"""

from .replicator import Replicator
from .service import ReplicationService, ReplicationSettings

__all__ = ["ReplicationService", "ReplicationSettings", "Replicator"]
