"""Replicated-subscription divergence: is each region's replicated subscription where the snapshots say it must be?

Theory of operation
-------------------

Positions of different regions cannot be compared directly; the replicated-subscriptions snapshots link them.
A SNAPSHOT marker stored in region R's topic (``replicate_to`` = R, so it never leaves R) says: "local
position L corresponds to position P_c in region c": everything region c had stored up to P_c is stored in R
before L. When R's subscription S has acknowledged past a snapshot (its mark-delete M_R >= L), R's broker sends
an UPDATE that moves S in every region c to P_c. So the promise (DESIGN §6) is, for every region c:

    M_c >= P_c(newest snapshot of R at or before M_R)

The check reads, per region, each replicated subscription's mark-delete position from the admin API
(``internalStats``: a cursor whose ``pulsar.replicated.subscription`` property is set), and finds R's newest
SNAPSHOT marker stored at or before M_R by reading R's ledgers backwards from M_R straight from the bookies
(markers are never delivered to consumers, and the data source skips them). A marker stored at or before
M_R has its L before it, so it is one R's subscription has passed; a later marker whose L is still before M_R
would only ask more, so choosing the marker by its own position never asks more than the promise does.

An UPDATE takes a moment to travel, so a region found behind is read again until ``grace_s`` has passed
(mark-delete positions only move forward, short of a seek): only a region still behind then is reported.
Not checked, and said so: a subscription whose region has no snapshot within ``scan_entries_max`` entries
before its mark-delete (none taken yet, or trimmed away), and regions the audit does not read.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

from pyspark.sql.types import StringType, StructField, StructType

from magnetar.admin_client import AdminClient, AdminError
from magnetar.protocol import pb
from magnetar.protocol.frames import parse_entry
from magnetar.topic_name import TopicName

from .errors import AuditError
from .policies import admin_clients
from .topology import Topology

__all__ = ["DIVERGENCE_SCHEMA", "Position", "Snapshot", "SubscriptionOutcome", "SubscriptionState",
           "check_subscriptions", "divergences"]

REPLICATED_PROPERTY = "pulsar.replicated.subscription"
_INTERNAL_CURSOR_PREFIXES = ("pulsar.repl.", "pulsar.dedup")
_U64 = 1 << 64

DIVERGENCE_SCHEMA = StructType([StructField(name, StringType(), nullable) for name, nullable in (
    ("topic", False), ("subscription", False), ("source_region", False), ("region", False),
    ("source_position", False), ("snapshot_position", False), ("required_position", False), ("position", True))])
"""One row per (subscription, region behind): where the source region is, the snapshot it passed, the position
that snapshot requires in ``region``, and where ``region`` is (null: the subscription does not exist there)."""


class Position(NamedTuple):
    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> "Position":
        ledger, _, entry = str(text).partition(":")
        return cls(int(ledger), int(entry))


@dataclass(frozen=True)
class Snapshot:
    """A SNAPSHOT marker: ``local`` corresponds to ``clusters[c]`` in each other region c."""

    local: Position
    clusters: Mapping[str, Position]
    stored_at: Position


@dataclass(frozen=True)
class SubscriptionOutcome:
    """The replicated-subscription check, done outside Spark (admin APIs and snapshot markers).

    Attributes:
        checked: False when it could not run (``reason`` says why).
        rows: one dict per divergence (see :mod:`spark.audit.subscriptions`).
        subscriptions: (topic, region, subscription) triples compared.
    """

    checked: bool
    reason: str = ""
    rows: Sequence[Mapping[str, Any]] = ()
    subscriptions: int = 0
    notes: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class SubscriptionState:
    """One subscription in one region; ``snapshot``: the newest one at or before ``mark_delete`` (or None)."""

    topic: str
    region: str
    subscription: str
    mark_delete: Optional[Position]
    replicated: bool = True
    snapshot: Optional[Snapshot] = None


def divergences(states: Iterable[SubscriptionState], regions: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    """The regions behind what another region's passed snapshot requires (pure; see the module docstring).

    Args:
        states: every subscription read, replicated or not (a region's copy may not be flagged yet).
        regions: compare only these regions (default: every region of ``states``).
    """
    states = list(states)
    index = {(s.topic, s.region, s.subscription): s for s in states}
    wanted = set(regions) if regions is not None else {s.region for s in states}
    rows = []
    for s in states:
        if not s.replicated or s.snapshot is None or s.mark_delete is None:
            continue
        for region, required in sorted(s.snapshot.clusters.items()):
            if region == s.region or region not in wanted:
                continue
            other = index.get((s.topic, region, s.subscription))
            position = other.mark_delete if other is not None else None
            if position is not None and position >= required:
                continue
            rows.append({"topic": s.topic, "subscription": s.subscription, "source_region": s.region,
                         "region": region, "source_position": str(s.mark_delete),
                         "snapshot_position": str(s.snapshot.local), "required_position": str(required),
                         "position": None if position is None else str(position)})
    return rows


def _signed(value: int) -> int:
    return value - _U64 if value >= 1 << 63 else value


def _marker_position(mid: pb.MarkersMessageIdData) -> Position:
    return Position(_signed(mid.ledger_id), _signed(mid.entry_id))


def decode_snapshot(entry: bytes, stored_at: Position) -> Optional[Snapshot]:
    """The snapshot a stored entry carries, or None when it is not a SNAPSHOT marker (or does not parse)."""
    try:
        parsed = parse_entry(entry, require_checksum=False)
    except Exception:
        return None
    md = parsed.metadata
    if not md.HasField("marker_type") or md.marker_type != pb.REPLICATED_SUBSCRIPTION_SNAPSHOT:
        return None
    try:
        marker = pb.ReplicatedSubscriptionsSnapshot.FromString(bytes(parsed.payload))
    except Exception:
        return None
    if not marker.HasField("local_message_id"):
        return None
    clusters = {c.cluster: _marker_position(c.message_id) for c in marker.clusters}
    return Snapshot(_marker_position(marker.local_message_id), clusters, stored_at)


# ------------------------------------------------------------------------------------------ I/O


def _internal_stats(client: AdminClient, topic: str) -> Optional[dict]:
    try:
        return client.get(f"/admin/v2/{TopicName.parse(topic).rest_path}/internalStats")
    except AdminError as e:
        if e.status == 404:
            return None
        raise AuditError(f"reading the internal stats of {topic} failed: {e}") from None


def _subscriptions(stats: Mapping[str, Any]) -> dict[str, tuple[Position, bool]]:
    """Subscription -> (mark-delete, replicated) from a topic's internal stats (replicator and dedup cursors
    left out)."""
    found = {}
    for name, cursor in (stats.get("cursors") or {}).items():
        if name.startswith(_INTERNAL_CURSOR_PREFIXES):
            continue
        try:
            position = Position.parse(cursor["markDeletePosition"])
        except (KeyError, ValueError):
            continue
        flag = (cursor.get("properties") or {}).get(REPLICATED_PROPERTY)
        found[name] = (position, str(flag).lower() in ("1", "true"))
    return found


async def newest_snapshot(client: Any, ledgers: Sequence[int], mark_delete: Position, *,
                          scan_entries_max: int, chunk_entries: int = 256) -> Optional[Snapshot]:
    """R's newest SNAPSHOT marker stored at or before ``mark_delete``, reading backwards (ledgers opened without
    recovery: the broker keeps writing its open ledger). None when none is found within ``scan_entries_max``."""
    scanned = 0
    for ledger_id in sorted((lid for lid in ledgers if lid <= mark_delete.ledger_id), reverse=True):
        try:
            handle = await client.open_ledger(ledger_id, recovery=False)
        except Exception:
            return None  # trimmed away: older ledgers are gone too
        high = handle.last_add_confirmed
        if ledger_id == mark_delete.ledger_id:
            high = min(high, mark_delete.entry_id)
        while high >= 0:
            if scanned >= scan_entries_max:
                return None
            low = max(0, high - chunk_entries + 1, high - (scan_entries_max - scanned) + 1)
            entries = await handle.read(low, high)
            scanned += len(entries)
            for entry in reversed(entries):
                snapshot = decode_snapshot(entry.payload, Position(ledger_id, entry.entry_id))
                if snapshot is not None:
                    return snapshot
            high = low - 1
    return None


async def _scan_region(zk_connect: str, wanted: Mapping[tuple[str, str], tuple[Sequence[int], Position]],
                       scan_entries_max: int) -> dict[tuple[str, str], Optional[Snapshot]]:
    from bookie.client import LedgerClient
    from config_store import KazooMetadataStore, RegionStore

    store = KazooMetadataStore(zk_connect)
    await store.start()
    try:
        async with LedgerClient(RegionStore(store)) as client:
            found = {}
            for key, (ledgers, mark_delete) in wanted.items():
                found[key] = await newest_snapshot(client, ledgers, mark_delete, scan_entries_max=scan_entries_max)
            return found
    finally:
        await store.close()


def _read_positions(clients: Mapping[str, AdminClient], topics: Sequence[str]
                    ) -> tuple[dict[tuple[str, str, str], tuple[Position, bool]], dict[tuple[str, str], list[int]]]:
    positions: dict[tuple[str, str, str], tuple[Position, bool]] = {}
    ledgers: dict[tuple[str, str], list[int]] = {}
    for region, client in clients.items():
        for topic in topics:
            stats = _internal_stats(client, topic)
            if stats is None:
                continue
            ledgers[(region, topic)] = [int(x["ledgerId"]) for x in stats.get("ledgers") or []]
            for name, value in _subscriptions(stats).items():
                positions[(region, topic, name)] = value
    return positions, ledgers


def check_subscriptions(topology: Topology, topics: Sequence[str], *, grace_s: float = 10.0,
                        scan_entries_max: int = 20_000, poll_s: float = 0.5) -> SubscriptionOutcome:
    """Runs the check over ``topics`` (partitions, as the data source names them) in every region of
    ``topology``.

    Raises:
        AuditError: a region's admin API or bookies could not be read.
    """
    clients = admin_clients(topology)
    positions, ledgers = _read_positions(clients, topics)
    replicated = {k: v for k, v in positions.items() if v[1]}
    if not replicated:
        return SubscriptionOutcome(checked=True, subscriptions=0, notes=["no replicated subscription to compare"])
    no_zk = sorted({r for r, _, _ in replicated if not topology.regions[r].zk_connect})
    if no_zk:
        return SubscriptionOutcome(checked=False, reason=f"no ZooKeeper known for {', '.join(no_zk)}: the "
                                   "snapshot markers are read from the bookies")
    snapshots: dict[tuple[str, str, str], Optional[Snapshot]] = {}
    for region in sorted({r for r, _, _ in replicated}):
        wanted = {(topic, sub): (ledgers.get((region, topic), []), pos)
                  for (r, topic, sub), (pos, _) in replicated.items() if r == region}
        try:
            found = asyncio.run(_scan_region(topology.regions[region].zk_connect, wanted, scan_entries_max))
        except Exception as e:
            raise AuditError(f"{region}: reading the snapshot markers failed: {e}") from e
        snapshots.update({(region, topic, sub): snap for (topic, sub), snap in found.items()})

    def states(current: Mapping[tuple[str, str, str], tuple[Position, bool]]) -> list[SubscriptionState]:
        return [SubscriptionState(topic, region, sub, pos, flag, snapshots.get((region, topic, sub)))
                for (region, topic, sub), (pos, flag) in current.items()]

    rows = divergences(states(positions), topology.names)
    deadline = time.monotonic() + grace_s
    while rows and time.monotonic() < deadline:
        time.sleep(poll_s)
        behind = sorted({r["region"] for r in rows})
        fresh, _ = _read_positions({r: clients[r] for r in behind}, sorted({r["topic"] for r in rows}))
        for key, (pos, flag) in fresh.items():
            old = positions.get(key)
            positions[key] = (pos, old[1] if old is not None else flag)
        rows = divergences(states(positions), topology.names)
    unchecked = sorted(f"{sub} on {topic} in {region}" for (region, topic, sub), snap in snapshots.items()
                       if snap is None)
    notes = [f"no snapshot found before the mark-delete position of {u}: not compared" for u in unchecked]
    return SubscriptionOutcome(checked=True, rows=rows, subscriptions=len(replicated), notes=notes)
