"""The replicated-subscriptions controller of one topic: snapshots across clusters, and updates.

Theory of operation
-------------------

A replicated subscription exists in every cluster of a topic; acknowledging in one cluster must move it in
the others. Positions differ from cluster to cluster, so the controllers write *markers* into the topic
(``markers.py``), which the replicators carry like data, and build *snapshots*: "local position L
corresponds to position P_c in cluster c", valid in the sense that every message stored in cluster c up to
P_c is also stored here before L. As Pulsar does it:

1. **Request.** Every ``snapshot_interval_s``, if the topic has a replicated subscription, a remote cluster
   and new data since the last completed snapshot started, and no snapshot is pending, the controller writes
   a SNAPSHOT_REQUEST {snapshot id, source = local} (no ``replicate_to``: it reaches every remote cluster).
2. **Response.** A controller receiving a request from another cluster (stored at p) answers with a
   SNAPSHOT_RESPONSE {snapshot id, (local cluster, p)} replicated to the source only. Everything the source
   had sent before its request is before p; everything this cluster wrote before p reaches the source before
   the response does (replication keeps order), so the response's local position is a valid L for P = p.
3. **Completion.** Once every remote cluster answered, a snapshot over a single remote cluster is complete.
   With several remote clusters a second round runs (a new request, same snapshot id): a message from a third
   cluster may have reached a remote cluster before that cluster's first response but not yet reached us;
   by the time the second round's responses arrive it has. The SNAPSHOT marker {L = where the last response
   is stored here, P_c of each remote cluster's last response} is written with ``replicate_to`` = the local
   cluster, so it never leaves. A snapshot pending longer than ``snapshot_timeout_s`` is dropped.
4. **Update.** Each replicated subscription caches the snapshots its dispatcher reads
   (:class:`~replicator.subscription_snapshots.SnapshotCache`); when its mark-delete position passes one it
   calls :meth:`ReplicatedSubscriptionsController.subscription_advanced`, and an UPDATE marker {subscription,
   P_c for each c} goes to every remote cluster, whose controller calls ``apply_update`` with its own P.

**New data.** The markers themselves are entries of the topic, so "the last entry moved" cannot be the test
for new data, or two idle clusters would trade snapshots forever (each one's markers would look like news to
the other). The controller knows every marker position in the topic: its own (returned by ``write_marker``)
and those from other clusters (``on_marker``). Entry ids within a ledger are consecutive, so when the last
entry is in the same ledger as the position already covered and every entry in between is a known marker,
there is nothing new; otherwise (another ledger, an unknown entry) it takes the safe side and snapshots.

Errors writing markers are logged and counted, never raised into the caller: a lost marker only delays
a snapshot or an update.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, Sequence

from broker.managed_ledger.api import Position
from magnetar.protocol import pb
from magnetar.protocol.errors import ProtocolError

from . import markers
from .markers import MarkerMessage
from .subscription_snapshots import SnapshotCache

__all__ = ["ControllerState", "ReplicatedSubscriptionsController"]

log = logging.getLogger("replicator.snapshots")

WriteMarker = Callable[[int, MarkerMessage, Sequence[str]], Awaitable[Position]]

# Marker positions tracked above the covered position; past this the controller forgets them and takes the
# safe side (one extra snapshot), so a topic that never snapshots cannot grow the set without bound.
_MARKERS_TRACKED_MAX = 10_000
_HANDLED = frozenset((pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE,
                      pb.REPLICATED_SUBSCRIPTION_UPDATE))


class ControllerState(enum.Enum):
    INIT = "init"
    STARTED = "started"
    CLOSED = "closed"


@dataclass
class _PendingSnapshot:
    """A snapshot between its first request and its SNAPSHOT marker."""

    snapshot_id: str
    remotes: frozenset[str]
    started_s: float
    start_last: Position  # the last entry when it started: the data this snapshot covers
    rounds: int
    round: int = 1
    responses: dict[str, Position] = field(default_factory=dict)  # remote cluster -> its position, this round
    last_response: Optional[Position] = None  # where the latest response is stored locally


class ReplicatedSubscriptionsController:
    """See the module docstring. All arguments are keyword-only.

    Args:
        topic_name: for log lines.
        local_cluster: this cluster's name.
        write_marker: stores a marker in the local topic: ``(marker type, message, replicate_to)`` -> its
            position.
        remote_clusters: the topic's current remote clusters (the local one is ignored if present).
        apply_update: ``(subscription name, position in this cluster)``: moves (or creates) the local
            subscription forward after an UPDATE from another cluster.
        has_replicated_subscriptions: whether the topic has a replicated subscription now.
        last_position: the position of the last entry stored in the local topic.
        snapshot_interval_s: how often a snapshot may start.
        snapshot_timeout_s: a pending snapshot older than this is dropped.
        max_cached_snapshots: the size of each subscription's :class:`SnapshotCache`.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        *,
        topic_name: str,
        local_cluster: str,
        write_marker: WriteMarker,
        remote_clusters: Callable[[], list[str]],
        apply_update: Callable[[str, Position], Awaitable[None]],
        has_replicated_subscriptions: Callable[[], bool],
        last_position: Callable[[], Position],
        snapshot_interval_s: float = 1.0,
        snapshot_timeout_s: float = 30.0,
        max_cached_snapshots: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic_name = topic_name
        self.local_cluster = local_cluster
        self.snapshot_interval_s = snapshot_interval_s
        self.snapshot_timeout_s = snapshot_timeout_s
        self.max_cached_snapshots = max_cached_snapshots
        self._write_marker = write_marker
        self._remote_clusters = remote_clusters
        self._apply_update = apply_update
        self._has_replicated_subscriptions = has_replicated_subscriptions
        self._last_position = last_position
        self._clock = clock
        self.state = ControllerState.INIT
        self._task: Optional[asyncio.Task] = None
        self._update_task: Optional[asyncio.Task] = None
        self._pending: Optional[_PendingSnapshot] = None
        self._covered: Optional[Position] = None  # no new data up to here
        self._markers: set[Position] = set()  # known marker positions above _covered
        self._updates: dict[str, dict[str, Position]] = {}  # subscription -> remote positions, to write
        self.log_prefix = f"[{topic_name}][{local_cluster}]"
        self.snapshots_started = 0
        self.snapshots_completed = 0
        self.snapshots_timed_out = 0
        self.responses_sent = 0
        self.updates_written = 0
        self.updates_applied = 0
        self.write_errors = 0

    # --------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Starts the periodic snapshot task (idempotent; a closed controller stays closed)."""
        if self.state is not ControllerState.INIT:
            return
        self.state = ControllerState.STARTED
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"snapshots {self.log_prefix}")
        self._task.add_done_callback(self._task_done)

    async def close(self) -> None:
        """Stops the periodic task and any UPDATE write in flight (idempotent)."""
        self.state = ControllerState.CLOSED
        self._pending = None
        self._updates.clear()
        tasks = [t for t in (self._task, self._update_task) if t is not None]
        self._task = self._update_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> "ReplicatedSubscriptionsController":
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _task_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s snapshot task died: %r", self.log_prefix, task.exception())

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s snapshot round failed", self.log_prefix)
            await asyncio.sleep(self.snapshot_interval_s)

    # --------------------------------------------------------------------------------- snapshots

    def new_snapshot_cache(self) -> SnapshotCache:
        """A cache for one replicated subscription of this topic (the broker does not import this room)."""
        return SnapshotCache(self.max_cached_snapshots)

    async def tick(self) -> None:
        """One step of the periodic work: drops a timed-out snapshot, then starts one if it is due."""
        if self.state is ControllerState.CLOSED:
            return
        self._expire_pending()
        if self._pending is not None:
            return
        remotes = frozenset(c for c in self._remote_clusters() if c != self.local_cluster)
        if not remotes or not self._has_replicated_subscriptions():
            self._forget_coverage()  # nothing to snapshot for: the next snapshot starts from scratch
            return
        last = self._last_position()
        if self._new_data(last):
            await self._start_snapshot(remotes, last)

    def _expire_pending(self) -> None:
        pending = self._pending
        if pending is not None and self._clock() - pending.started_s >= self.snapshot_timeout_s:
            self._pending = None
            self.snapshots_timed_out += 1
            missing = sorted(pending.remotes - pending.responses.keys())
            log.warning("%s snapshot %s timed out after %.1fs in round %d, waiting for %s", self.log_prefix,
                        pending.snapshot_id, self.snapshot_timeout_s, pending.round, ", ".join(missing))

    def _new_data(self, last: Position) -> bool:
        """Whether an entry that is not a known marker was stored after the covered position."""
        covered = self._covered
        if covered is None:
            return True
        if last <= covered:
            return False
        if last.ledger_id != covered.ledger_id:
            return True
        known = sum(1 for m in self._markers if m.ledger_id == covered.ledger_id and m <= last)
        if known < last.entry_id - covered.entry_id:
            return True
        self._cover(last)
        return False

    def _cover(self, position: Position) -> None:
        if self._covered is None or position > self._covered:
            self._covered = position
            self._markers = {m for m in self._markers if m > position}

    def _forget_coverage(self) -> None:
        self._covered = None
        self._markers.clear()

    def _note_marker(self, position: Position) -> None:
        if self._covered is not None and position <= self._covered:
            return
        if len(self._markers) >= _MARKERS_TRACKED_MAX:
            self._forget_coverage()
            return
        self._markers.add(position)

    async def _start_snapshot(self, remotes: frozenset[str], last: Position) -> None:
        pending = _PendingSnapshot(str(uuid.uuid4()), remotes, self._clock(), last, rounds=2 if len(remotes) > 1 else 1)
        self._pending = pending
        self.snapshots_started += 1
        log.debug("%s snapshot %s started towards %s", self.log_prefix, pending.snapshot_id, ", ".join(sorted(remotes)))
        await self._send_request(pending)

    async def _send_request(self, pending: _PendingSnapshot) -> None:
        request = markers.snapshot_request(pending.snapshot_id, self.local_cluster)
        if await self._write(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, request, ()) is None:
            if self._pending is pending:
                self._pending = None  # a new snapshot starts at the next tick

    async def _on_response(self, position: Position, response: pb.ReplicatedSubscriptionsSnapshotResponse) -> None:
        pending = self._pending
        if pending is None or response.snapshot_id != pending.snapshot_id:
            log.debug("%s response to snapshot %s, which is not pending", self.log_prefix, response.snapshot_id)
            return
        cluster = response.cluster.cluster
        if cluster not in pending.remotes or cluster in pending.responses:
            return
        pending.responses[cluster] = markers.marker_id_to_position(response.cluster.message_id)
        pending.last_response = position
        if len(pending.responses) < len(pending.remotes):
            return
        if pending.round < pending.rounds:
            pending.round += 1
            pending.responses = {}
            await self._send_request(pending)
            return
        self._pending = None
        await self._complete(pending)

    async def _complete(self, pending: _PendingSnapshot) -> None:
        assert pending.last_response is not None
        message = markers.snapshot(pending.snapshot_id, pending.last_response, pending.responses)
        if await self._write(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT, message, (self.local_cluster,)) is None:
            return
        self.snapshots_completed += 1
        self._cover(pending.start_last)
        log.debug("%s snapshot %s complete: local %s, %s", self.log_prefix, pending.snapshot_id,
                  pending.last_response, pending.responses)

    async def _respond(self, position: Position, request: pb.ReplicatedSubscriptionsSnapshotRequest) -> None:
        source = request.source_cluster
        if not source or source == self.local_cluster:
            return
        response = markers.snapshot_response(request.snapshot_id, self.local_cluster, position)
        if await self._write(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE, response, (source,)) is not None:
            self.responses_sent += 1

    # --------------------------------------------------------------------------------- markers in

    async def on_marker(self, position: Position, metadata: pb.MessageMetadata, payload: bytes) -> None:
        """A marker that came from another cluster by replication is stored locally at ``position``.

        Markers that originate here (``replicated_from`` unset or naming this cluster) and types other than
        request, response and update are only noted as markers; undecodable ones are logged.
        """
        self._note_marker(position)
        origin = metadata.replicated_from or self.local_cluster
        if self.state is ControllerState.CLOSED or origin == self.local_cluster:
            return
        if metadata.marker_type not in _HANDLED:
            return
        try:
            marker = markers.decode_marker(metadata, payload)
        except ProtocolError as exc:
            log.warning("%s ignoring a marker from %s at %s: %s", self.log_prefix, origin, position, exc)
            return
        if isinstance(marker, pb.ReplicatedSubscriptionsSnapshotRequest):
            await self._respond(position, marker)
        elif isinstance(marker, pb.ReplicatedSubscriptionsSnapshotResponse):
            await self._on_response(position, marker)
        elif isinstance(marker, pb.ReplicatedSubscriptionsUpdate):
            await self._on_update(origin, marker)

    async def _on_update(self, origin: str, update: pb.ReplicatedSubscriptionsUpdate) -> None:
        ours = markers.cluster_positions(update.clusters).get(self.local_cluster)
        if ours is None:
            return
        try:
            await self._apply_update(update.subscription_name, ours)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s applying %s's update of subscription %r to %s failed: %s", self.log_prefix, origin,
                        update.subscription_name, ours, exc)
            return
        self.updates_applied += 1

    # --------------------------------------------------------------------------------- updates out

    def subscription_advanced(self, subscription_name: str, clusters: dict[str, Position]) -> None:
        """A replicated subscription's mark-delete passed a snapshot: schedules its UPDATE marker.

        Updates of one subscription not yet written are coalesced (the newest wins: positions only grow).
        """
        if self.state is ControllerState.CLOSED or not clusters:
            return
        self._updates.pop(subscription_name, None)
        self._updates[subscription_name] = dict(clusters)
        if self._update_task is None or self._update_task.done():
            self._update_task = asyncio.get_running_loop().create_task(
                self._write_updates(), name=f"snapshot updates {self.log_prefix}")

    async def flush(self) -> None:
        """Waits until the UPDATE markers scheduled so far are written (or failed)."""
        while self._update_task is not None and not self._update_task.done():
            await asyncio.wait({self._update_task})

    async def _write_updates(self) -> None:
        while self._updates:
            name = next(iter(self._updates))
            clusters = self._updates.pop(name)
            if await self._write(pb.REPLICATED_SUBSCRIPTION_UPDATE, markers.update(name, clusters), ()) is not None:
                self.updates_written += 1

    # --------------------------------------------------------------------------------- helpers

    async def _write(self, marker_type: int, message: MarkerMessage, replicate_to: Sequence[str]) -> Optional[Position]:
        """Writes a marker; None (logged) when that failed."""
        try:
            position = await self._write_marker(marker_type, message, replicate_to)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.write_errors += 1
            log.warning("%s writing a %s marker failed: %s", self.log_prefix, pb.MarkerType.Name(marker_type), exc)
            return None
        self._note_marker(position)
        return position

    @property
    def pending_snapshots(self) -> int:
        """Snapshots started and neither completed nor timed out (0 or 1: one at a time per topic); the
        broker sums them as ``pulsar_replicated_subscriptions_pending_snapshots``."""
        return 0 if self._pending is None else 1

    def stats(self) -> dict:
        """Counters since the controller was created, and the snapshot pending now (0 or 1)."""
        return {
            "snapshots_started": self.snapshots_started,
            "snapshots_completed": self.snapshots_completed,
            "snapshots_timed_out": self.snapshots_timed_out,
            "snapshots_pending": self.pending_snapshots,
            "responses_sent": self.responses_sent,
            "updates_written": self.updates_written,
            "updates_applied": self.updates_applied,
            "marker_write_errors": self.write_errors,
        }
