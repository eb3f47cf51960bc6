"""The small interface through which a topic starts and stops its replicators (DESIGN §2).

The broker does not import the ``replicator`` room (which builds on the broker's cursors and topics); the
broker process entry point hands the service a :class:`ReplicationProvider`, and each loaded topic asks it
for a :class:`TopicReplication` that follows the topic's replication clusters.

What the broker itself does for geo-replication lives in the publish path (``Topic.publish``): entries
from a replicator producer (``pulsar.repl.<origin cluster>``) are deduplicated by their origin position
(``dedup``), counted as replication inbound per origin cluster, and replicated markers are handed to
:meth:`TopicReplication.on_marker` once stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, Sequence

if TYPE_CHECKING:
    from broker.managed_ledger.api import Position
    from magnetar.protocol.metadata import MessageMetadata

    from .stats import ReplicatorStats
    from .topic import Topic

REPLICATOR_CURSOR_PREFIX = "pulsar.repl."


def is_replication_cursor(name: str) -> bool:
    return name.startswith(REPLICATOR_CURSOR_PREFIX)


class TopicReplication(Protocol):
    """The replicators of one topic (one per remote cluster) and its replicated-subscriptions controller."""

    @property
    def replicated_subscriptions(self) -> Optional[Any]:
        """The topic's ``ReplicatedSubscriptionsController`` (None while the topic replicates nowhere)."""

    async def set_clusters(self, clusters: Sequence[str]) -> None:
        """The topic's replication clusters changed (the local one may be among them): starts a replicator
        for every new remote cluster, stops those no longer named and deletes their cursors."""

    def on_marker(self, position: "Position", metadata: "MessageMetadata", payload: bytes) -> None:
        """A marker that came from another cluster by replication is stored at ``position``."""

    def tick(self) -> None:
        """Closes a stats window (rates)."""

    def stats(self) -> dict[str, "ReplicatorStats"]:
        """Per remote cluster: the outbound side of the topic stats' ``replication`` section."""

    async def close(self) -> None:
        """Stops every replicator (keeping its cursor): the topic is unloading."""


class ReplicationProvider(Protocol):
    def attach(self, topic: "Topic") -> TopicReplication:
        """The replication of a topic being loaded (``set_clusters`` follows from its policies)."""

    async def close(self) -> None:
        """Closes the connections to remote clusters (after every topic is closed)."""
