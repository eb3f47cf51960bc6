"""The snapshots one replicated subscription has read and not yet passed (pure).

A dispatcher that meets a SNAPSHOT marker hands it to its subscription, which keeps it here: "local
position L corresponds to position P_c in each remote cluster c". Once the subscription's mark-delete
position reaches L, everything up to P_c in cluster c may be acknowledged there too, so the newest snapshot
passed is taken (with every older one) and turned into an UPDATE marker.

The cache is bounded (Pulsar's ``replicatedSubscriptionsSnapshotMaxCachedPerSubscription``, 10): when full,
the oldest snapshot goes. Losing snapshots only makes updates coarser, never wrong: each snapshot is valid on
its own. Held in memory only; after a restart the dispatcher reads the markers past mark-delete again.
"""

from __future__ import annotations

import collections
from typing import Optional

from broker.managed_ledger.api import Position
from magnetar.protocol import pb
from magnetar.protocol.errors import ProtocolError

from .markers import cluster_positions, decode_marker, marker_id_to_position

__all__ = ["SnapshotCache"]


class SnapshotCache:
    """Snapshots ordered by local position, at most ``max_snapshots`` of them."""

    def __init__(self, max_snapshots: int = 10) -> None:
        if max_snapshots < 1:
            raise ValueError(f"max_snapshots must be at least 1, not {max_snapshots}")
        self.max_snapshots = max_snapshots
        self._snapshots: collections.deque[tuple[Position, dict[str, Position]]] = collections.deque()

    def __len__(self) -> int:
        return len(self._snapshots)

    def add(self, local: Position, clusters: dict[str, Position]) -> None:
        """Keeps a snapshot; one at or before the newest held is ignored (a re-read after a rewind)."""
        if self._snapshots and local <= self._snapshots[-1][0]:
            return
        self._snapshots.append((local, dict(clusters)))
        while len(self._snapshots) > self.max_snapshots:
            self._snapshots.popleft()

    def add_marker(self, metadata: pb.MessageMetadata, payload: bytes) -> None:
        """Keeps the snapshot a SNAPSHOT marker entry carries.

        Raises:
            ProtocolError: the entry is not a SNAPSHOT marker, or its payload does not parse.
        """
        marker = decode_marker(metadata, payload)
        if not isinstance(marker, pb.ReplicatedSubscriptionsSnapshot):
            raise ProtocolError(f"{pb.MarkerType.Name(metadata.marker_type)} marker is not a snapshot")
        if not marker.HasField("local_message_id"):
            raise ProtocolError(f"snapshot {marker.snapshot_id!r} has no local position")
        self.add(marker_id_to_position(marker.local_message_id), cluster_positions(marker.clusters))

    def advance(self, mark_delete: Position) -> Optional[dict[str, Position]]:
        """The remote positions of the newest snapshot at or before ``mark_delete`` (None if there is
        none); that snapshot and every older one are dropped."""
        found: Optional[dict[str, Position]] = None
        while self._snapshots and self._snapshots[0][0] <= mark_delete:
            found = self._snapshots.popleft()[1]
        return found
