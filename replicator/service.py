"""Geo-replication as a broker sees it: the provider the broker process hands to its ``BrokerService``
(``broker.service.topics.replication.ReplicationProvider``) and, per loaded topic, the set of its replicators.

A topic's replication clusters (topic-level override, else the namespace's ``replication_clusters``)
decide which replicators run: one per remote cluster named, none for the local one. The broker calls
``set_clusters`` when the topic loads and whenever the policy changes in the global store (watched), so
adding a region starts replication to it (from that moment on, as Pulsar does) and removing one stops it
and deletes its cursor. While the topic replicates anywhere, it also runs a replicated-subscriptions
controller (``replicator.snapshots``), which answers other clusters' snapshot requests and, when the topic
has replicated subscriptions, takes snapshots of its own.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from broker.managed_ledger.api import Position
from magnetar.protocol import pb

from .clients import RemoteClients
from .markers import encode_marker_entry
from .replicator import Replicator
from .snapshots import ReplicatedSubscriptionsController

if TYPE_CHECKING:
    from broker.service.topics.stats import ReplicatorStats
    from config_store import ConfigurationStore

log = logging.getLogger("replicator.service")


@dataclass(frozen=True)
class ReplicationSettings:
    """Broker settings of geo-replication (``broker.toml``: ``replication_*``, ``replicated_subscriptions_*``)."""

    read_batch_max: int = 100
    pending_max: int = 500
    backoff_max_s: float = 5.0
    snapshot_interval_s: float = 1.0
    snapshot_timeout_s: float = 30.0
    keep_alive_interval_s: float = 30.0  # of the connections to remote clusters (the broker's keep_alive_interval_ms)


class TopicReplicators:
    """The replicators of one topic (``broker.service.topics.replication.TopicReplication``)."""

    def __init__(self, service: "ReplicationService", topic: Any) -> None:
        self.service = service
        self.topic = topic
        self.replicators: dict[str, Replicator] = {}
        self._controller: Optional[ReplicatedSubscriptionsController] = None
        self._markers: collections.deque[tuple[Position, pb.MessageMetadata, bytes]] = collections.deque()
        self._marker_task: Optional[asyncio.Task] = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def replicated_subscriptions(self) -> Optional[ReplicatedSubscriptionsController]:
        return self._controller

    def remote_clusters(self) -> list[str]:
        return sorted(self.replicators)

    async def set_clusters(self, clusters: Sequence[str]) -> None:
        local = self.service.local_cluster
        wanted = {c for c in clusters if c and c != local}
        async with self._lock:
            if self._closed:
                return
            for remote in sorted(set(self.replicators) - wanted):
                replicator = self.replicators.pop(remote)
                await replicator.delete()
            for remote in sorted(wanted - set(self.replicators)):
                replicator = Replicator(self.topic, local_cluster=local, remote_cluster=remote,
                                        clients=self.service.clients,
                                        read_batch_max=self.service.settings.read_batch_max,
                                        pending_max=self.service.settings.pending_max,
                                        backoff_max_s=self.service.settings.backoff_max_s)
                await replicator.start()
                self.replicators[remote] = replicator
            if self.replicators and self._controller is None:
                self._controller = self._new_controller()
                if self._controller is not None:
                    self._controller.start()
            elif not self.replicators and self._controller is not None:
                controller, self._controller = self._controller, None
                await controller.close()

    def _new_controller(self) -> ReplicatedSubscriptionsController:

        topic = self.topic
        settings = self.service.settings
        return ReplicatedSubscriptionsController(
            topic_name=topic.name, local_cluster=self.service.local_cluster, write_marker=self._write_marker,
            remote_clusters=self.remote_clusters, apply_update=topic.apply_replicated_subscription_update,
            has_replicated_subscriptions=lambda: any(s.replicated and s.durable for s in topic.subscriptions.values()),
            last_position=lambda: topic.ml.last_confirmed_position,
            snapshot_interval_s=settings.snapshot_interval_s, snapshot_timeout_s=settings.snapshot_timeout_s)

    async def _write_marker(self, marker_type: int, message: Any, replicate_to: Sequence[str]) -> Position:
        entry = encode_marker_entry(marker_type, message, replicate_to=replicate_to)
        return await self.topic.ml.add_entry(entry)

    def on_marker(self, position: Position, metadata: pb.MessageMetadata, payload: bytes) -> None:
        """Queues a replicated marker for the controller; markers are handled one at a time, in stored order."""
        if self._controller is None:
            return
        self._markers.append((position, metadata, payload))
        if self._marker_task is None or self._marker_task.done():
            self._marker_task = asyncio.get_running_loop().create_task(
                self._handle_markers(), name=f"markers {self.topic.name}")
            self._marker_task.add_done_callback(_log_failure)

    async def _handle_markers(self) -> None:
        while self._markers:
            position, metadata, payload = self._markers.popleft()
            controller = self._controller
            if controller is not None:
                await controller.on_marker(position, metadata, payload)

    def tick(self) -> None:
        for replicator in self.replicators.values():
            replicator.tick()

    def stats(self) -> dict[str, "ReplicatorStats"]:
        return {remote: r.stats() for remote, r in sorted(self.replicators.items())}

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._controller is not None:
                controller, self._controller = self._controller, None
                await controller.close()
            if self._marker_task is not None:
                self._marker_task.cancel()
                await asyncio.gather(self._marker_task, return_exceptions=True)
            replicators, self.replicators = list(self.replicators.values()), {}
            await asyncio.gather(*(r.close() for r in replicators), return_exceptions=True)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("%s failed: %s", task.get_name(), task.exception())


class ReplicationService:
    """What the broker process hands to ``BrokerService(replication=...)``.

    ``auth``, ``ssl_context`` and ``prefer_tls`` are the broker's own credentials towards remote clusters
    (``broker_client_*`` settings; see :class:`~replicator.clients.RemoteClients`).
    """

    def __init__(self, configuration: "ConfigurationStore", *, local_cluster: str,
                 settings: Optional[ReplicationSettings] = None, auth: Any = None, ssl_context: Any = None,
                 prefer_tls: bool = False) -> None:
        self.configuration = configuration
        self.local_cluster = local_cluster
        self.settings = settings or ReplicationSettings()
        self.clients = RemoteClients(configuration, backoff_max_s=self.settings.backoff_max_s, auth=auth,
                                     ssl_context=ssl_context, prefer_tls=prefer_tls,
                                     keep_alive_interval_s=self.settings.keep_alive_interval_s)

    def attach(self, topic: Any) -> TopicReplicators:
        return TopicReplicators(self, topic)

    async def close(self) -> None:
        await self.clients.close()
