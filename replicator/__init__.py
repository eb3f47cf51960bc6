"""Geo-replication (DESIGN §2): one replicator per (topic, remote cluster) — a durable cursor on the local
managed ledger plus a producer to the remote cluster — and replicated subscriptions (snapshot markers).

The broker process wires :class:`ReplicationService` into its ``BrokerService``.
"""

from .markers import decode_marker, encode_marker_entry, marker_id_to_position, position_to_marker_id
from .replicator import Replicator
from .service import ReplicationService, ReplicationSettings
from .snapshots import ReplicatedSubscriptionsController
from .subscription_snapshots import SnapshotCache

__all__ = ["ReplicatedSubscriptionsController", "ReplicationService", "ReplicationSettings", "Replicator",
           "SnapshotCache", "decode_marker", "encode_marker_entry", "marker_id_to_position",
           "position_to_marker_id"]
