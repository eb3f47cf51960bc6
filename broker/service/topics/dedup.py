"""Message deduplication, as Pulsar's ``MessageDeduplication``.

Per producer name the topic keeps the highest sequence id *pushed* (sent to storage) and *persisted*
(stored). With deduplication on, a SEND whose (highest) sequence id is

* above the pushed one is new: stored, and the pushed id moves up;
* at or below the persisted one is a duplicate: not stored, answered with the original position when it
  is still remembered (``recent_positions_max`` answers are kept), else with ``-1:-1`` as Pulsar does;
* in between is still being stored: answered with the original's outcome once it is known.

A failed append resets pushed to persisted (the client re-sends; the retry must not look like a duplicate).

Durability: the persisted ids are snapshotted as the properties of the durable cursor ``pulsar.dedup``,
whose mark-delete position is the entry the snapshot covers, every ``snapshot_interval_entries`` entries
and at close. A broker taking the topic over reads the snapshot and replays the entries after it (the
producer name and sequence ids are in each entry's metadata), so the state survives failover. When the
cursor implementation offers no ``properties`` the snapshot position is never advanced, and recovery
replays the whole retained topic instead.

Replicated entries (geo-replication): a replicator producer (named ``pulsar.repl.<origin cluster>``) sends
each entry with its position in the origin topic, encoded as the SEND's sequence id
(:func:`origin_sequence_id`), and the entry carries that position in the metadata property
:data:`SOURCE_POSITION_PROPERTY`. Those sends are deduplicated as any producer's, under the replicator's
name, whether or not the namespace asks for deduplication (:meth:`Deduplication.track_replicated`), so a
replicator that re-sends after a restart or a failover on either side adds no copy: replication is
exactly-once per origin position. Recovery learns the replicator's highest position from the property.

Idempotent Kafka producers (``broker/kafka/``) publish under names starting with :data:`KAFKA_IDEMPOTENT_PREFIX`
(``kafka.idempotent.<producer id>.<epoch>``) with their record sequence numbers as sequence ids; like
replicators, they are deduplicated whether or not the namespace asks for it (``track_replicated`` turns on
tracking for both), so a retried batch is answered as a duplicate and stored once.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
from typing import Optional

from broker.managed_ledger.api import InitialPosition, ManagedCursor, ManagedLedger, Position

from .entries import peek_metadata
from ..tasks import shielded

log = logging.getLogger("broker.service.topics.dedup")

CURSOR_NAME = "pulsar.dedup"
REPLICATOR_PREFIX = "pulsar.repl."
SOURCE_POSITION_PROPERTY = "__magnetar.repl.source_position"
REPLICATED_FLAG = "__replicated"  # snapshot-cursor property: replicated entries are (or were) stored here
_NO_POSITION = Position(-1, -1)
_RECOVERY_READ_BATCH = 500


def origin_sequence_id(ledger_id: int, entry_id: int) -> int:
    """The sequence id a replicator sends for the origin entry at ``ledger_id:entry_id``: increasing with the
    position (ledger ids grow within a topic; an entry id stays below 2**32)."""
    return (ledger_id << 32) | entry_id


KAFKA_IDEMPOTENT_PREFIX = "kafka.idempotent."


def always_deduplicated(producer_name: str) -> bool:
    """Replicators and idempotent Kafka producers: deduplicated once tracking is on, whatever the policy."""
    return producer_name.startswith(REPLICATOR_PREFIX) or producer_name.startswith(KAFKA_IDEMPOTENT_PREFIX)


def is_replicator(producer_name: str) -> bool:
    return producer_name.startswith(REPLICATOR_PREFIX)


class Status(enum.Enum):
    NEW = 1
    DUPLICATE = 2  # answered at once (or once the original is stored)


class Deduplication:
    def __init__(self, ml: ManagedLedger, *, snapshot_interval_entries: int = 1000,
                 recent_positions_max: int = 10_000) -> None:
        self.ml = ml
        self.enabled = False  # the namespace policy: every producer is deduplicated
        self.replicated = False  # replicator producers are deduplicated (whatever the policy)
        self.snapshot_interval_entries = snapshot_interval_entries
        self.recent_positions_max = recent_positions_max
        self.highest_pushed: dict[str, int] = {}
        self.highest_persisted: dict[str, int] = {}
        self._recent: collections.OrderedDict[tuple[str, int], Position] = collections.OrderedDict()
        self._inflight: dict[tuple[str, int], asyncio.Future] = {}
        self._cursor: Optional[ManagedCursor] = None
        self._since_snapshot = 0
        self._last_persisted_position: Optional[Position] = None
        self._snapshot_task: Optional[asyncio.Task] = None
        self._open_lock = asyncio.Lock()
        self.log_prefix = f"[{ml.name}][dedup]"

    @property
    def supports_snapshot(self) -> bool:
        return self._cursor is not None and hasattr(self._cursor, "properties")

    # --------------------------------------------------------------------------------- lifecycle

    @property
    def tracking(self) -> bool:
        """True while any producer's sequence ids are tracked (the snapshot cursor is open)."""
        return self.enabled or self.replicated

    def applies_to(self, producer_name: str) -> bool:
        return self.enabled or (self.replicated and always_deduplicated(producer_name))

    async def enable(self) -> None:
        """Turns deduplication on for every producer (namespace policy)."""
        if self.enabled:
            return
        await self._open(for_all=True)

    async def track_replicated(self) -> None:
        """Turns deduplication on for replicator producers (a replicator attached to this topic)."""
        if self.tracking:
            self.replicated = True
            return
        await self._open(for_all=False)

    async def _open(self, *, for_all: bool) -> None:
        """Opens the ``pulsar.dedup`` cursor and rebuilds the state from its snapshot plus the entries after it."""
        async with self._open_lock:
            if self.tracking:  # another caller opened it while this one waited
                self.enabled = self.enabled or for_all
                self.replicated = self.replicated or not for_all
                return
            await self._open_locked(for_all=for_all)

    async def _open_locked(self, *, for_all: bool) -> None:
        # A new snapshot cursor starts at the beginning, so that enabling deduplication learns from what is
        # stored; for replicators alone it starts at the end: no replicated entry can predate the cursor,
        # since the cursor is created before the first one is stored and is kept (REPLICATED_FLAG) after.
        initial = InitialPosition.EARLIEST if for_all or CURSOR_NAME in self.ml.cursors else InitialPosition.LATEST
        cursor = await shielded(self.ml.open_cursor(CURSOR_NAME, initial_position=initial))
        self._cursor = cursor
        props = dict(getattr(cursor, "properties", None) or {})
        if not for_all and not props.get(REPLICATED_FLAG) and self.supports_snapshot:
            props[REPLICATED_FLAG] = 1
            await shielded(cursor.mark_delete(cursor.mark_delete_position, properties=props))
        self.highest_persisted = {k: int(v) for k, v in props.items()
                                  if k != REPLICATED_FLAG and (for_all or always_deduplicated(k))}
        replayed = 0
        reader = self.ml.new_non_durable_cursor(cursor.mark_delete_position, name="pulsar.dedup.recovery")
        while True:
            entries = await reader.read_entries(_RECOVERY_READ_BATCH)
            if not entries:
                break
            for entry in entries:
                self._learn(entry.data, entry.position, all_producers=for_all)
            replayed += len(entries)
        self.highest_pushed = dict(self.highest_persisted)
        if for_all:
            self.enabled = True
        else:
            self.replicated = True
        log.info("%s %s: %d producers known, %d entries replayed", self.log_prefix,
                 "enabled" if for_all else "tracking replicators", len(self.highest_persisted), replayed)

    async def disable(self) -> None:
        """Turns the policy off; deletes the snapshot cursor (it holds back retention) unless replicators
        still need it."""
        if self.replicated:
            self.enabled = False
            for name in [n for n in self.highest_persisted if not always_deduplicated(n)]:
                self.highest_persisted.pop(name, None)
                self.highest_pushed.pop(name, None)
            return
        if not self.enabled and CURSOR_NAME not in self.ml.cursors:
            return
        stored = getattr(self.ml.cursors.get(CURSOR_NAME), "properties", None) or {}
        if stored.get(REPLICATED_FLAG) or any(always_deduplicated(n) for n in stored):  # keep the replicators' state
            self.enabled = False
            await self.track_replicated()
            await self.disable()
            return
        self.enabled = False
        await self._wait_snapshot()
        self.highest_pushed.clear()
        self.highest_persisted.clear()
        self._recent.clear()
        self._cursor = None
        if CURSOR_NAME in self.ml.cursors:
            try:
                await shielded(self.ml.delete_cursor(CURSOR_NAME))
            except Exception as exc:
                log.warning("%s deleting the cursor failed: %s", self.log_prefix, exc)

    async def close(self) -> None:
        """Takes a last snapshot (unload)."""
        if self.tracking:
            await self._wait_snapshot()
            await self.snapshot()

    def _learn(self, data: bytes, position: Position, *, all_producers: bool = True) -> None:
        try:
            md = peek_metadata(data)
        except Exception:
            return
        if md.HasField("replicated_from"):
            source = next((p.value for p in md.properties if p.key == SOURCE_POSITION_PROPERTY), None)
            if source is None:
                return
            try:
                ledger_id, entry_id = (int(x) for x in source.split(":"))
            except ValueError:
                return
            name, seq = REPLICATOR_PREFIX + md.replicated_from, origin_sequence_id(ledger_id, entry_id)
        elif md.HasField("marker_type") or not (all_producers or always_deduplicated(md.producer_name)):
            return
        else:
            name, seq = md.producer_name, md.sequence_id
            if md.highest_sequence_id > seq:
                seq = md.highest_sequence_id
            elif md.HasField("num_messages_in_batch"):
                seq += max(md.num_messages_in_batch, 1) - 1  # as Topic.publish counts a batch without one
        if seq > self.highest_persisted.get(name, -1):
            self.highest_persisted[name] = seq
        self._remember(name, seq, position)
        self._last_persisted_position = position

    def _remember(self, name: str, seq: int, position: Position) -> None:
        recent = self._recent
        recent[(name, seq)] = position
        if len(recent) > self.recent_positions_max:
            recent.popitem(last=False)

    # --------------------------------------------------------------------------------- publish path

    def last_sequence_id(self, producer_name: str) -> int:
        return self.highest_persisted.get(producer_name, -1) if self.applies_to(producer_name) else -1

    def check(self, producer_name: str, sequence_id: int, highest_sequence_id: int
              ) -> tuple[Status, Optional[asyncio.Future]]:
        """Classifies a SEND. For DUPLICATE returns the future to answer its receipt with."""
        seq = max(sequence_id, highest_sequence_id)
        pushed = self.highest_pushed.get(producer_name, -1)
        if seq > pushed:
            return Status.NEW, None
        loop = asyncio.get_running_loop()
        inflight = self._inflight.get((producer_name, seq))
        if inflight is not None:  # stored or not yet, its outcome answers the duplicate
            return Status.DUPLICATE, inflight
        fut = loop.create_future()
        fut.set_result(self._recent.get((producer_name, seq), _NO_POSITION))
        return Status.DUPLICATE, fut

    def pushed(self, producer_name: str, sequence_id: int, highest_sequence_id: int,
               future: "asyncio.Future[Position]") -> None:
        """A NEW SEND went to storage with ``future``."""
        seq = max(sequence_id, highest_sequence_id)
        self.highest_pushed[producer_name] = seq
        key = (producer_name, seq)
        self._inflight[key] = future
        future.add_done_callback(lambda f: self._stored(key, f))

    def _stored(self, key: tuple[str, int], future: asyncio.Future) -> None:
        self._inflight.pop(key, None)
        name, seq = key
        if future.cancelled() or future.exception() is not None:
            self.highest_pushed[name] = self.highest_persisted.get(name, -1)
            return
        position = future.result()
        if seq > self.highest_persisted.get(name, -1):
            self.highest_persisted[name] = seq
        self._remember(name, seq, position)
        self._last_persisted_position = position
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_interval_entries and self.supports_snapshot and \
                (self._snapshot_task is None or self._snapshot_task.done()):
            self._snapshot_task = asyncio.get_running_loop().create_task(self.snapshot(),
                                                                         name=f"snapshot {self.log_prefix}")

    # --------------------------------------------------------------------------------- snapshots

    async def snapshot(self) -> None:
        """Persists the persisted ids as the dedup cursor's properties at the last stored position."""
        cursor = self._cursor
        position = self._last_persisted_position
        if cursor is None or position is None or not self.supports_snapshot:
            return
        self._since_snapshot = 0
        if position < cursor.mark_delete_position:
            return
        try:
            props = dict(self.highest_persisted)
            if self.replicated:
                props[REPLICATED_FLAG] = 1
            await shielded(cursor.mark_delete(position, properties=props))
        except Exception as exc:
            log.warning("%s snapshot at %s failed: %s", self.log_prefix, position, exc)

    async def _wait_snapshot(self) -> None:
        task = self._snapshot_task
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)

    def stats_status(self) -> str:
        return "Enabled" if self.enabled else "Disabled"
