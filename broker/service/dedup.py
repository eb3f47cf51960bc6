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
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
from typing import Optional

from broker.managed_ledger.api import InitialPosition, ManagedCursor, ManagedLedger, Position

from .entries import peek_metadata
from .tasks import shielded

log = logging.getLogger("broker.service.dedup")

CURSOR_NAME = "pulsar.dedup"
_NO_POSITION = Position(-1, -1)
_RECOVERY_READ_BATCH = 500


class Status(enum.Enum):
    NEW = 1
    DUPLICATE = 2  # answered at once (or once the original is stored)


class Deduplication:
    def __init__(self, ml: ManagedLedger, *, snapshot_interval_entries: int = 1000,
                 recent_positions_max: int = 10_000) -> None:
        self.ml = ml
        self.enabled = False
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
        self.log_prefix = f"[{ml.name}][dedup]"

    @property
    def supports_snapshot(self) -> bool:
        return self._cursor is not None and hasattr(self._cursor, "properties")

    # --------------------------------------------------------------------------------- lifecycle

    async def enable(self) -> None:
        """Turns deduplication on: opens the ``pulsar.dedup`` cursor and rebuilds the state from it."""
        if self.enabled:
            return
        cursor = await shielded(self.ml.open_cursor(CURSOR_NAME, initial_position=InitialPosition.EARLIEST))
        self._cursor = cursor
        props = dict(getattr(cursor, "properties", None) or {})
        self.highest_persisted = {k: int(v) for k, v in props.items()}
        replayed = 0
        reader = self.ml.new_non_durable_cursor(cursor.mark_delete_position, name="pulsar.dedup.recovery")
        while True:
            entries = await reader.read_entries(_RECOVERY_READ_BATCH)
            if not entries:
                break
            for entry in entries:
                self._learn(entry.data, entry.position)
            replayed += len(entries)
        self.highest_pushed = dict(self.highest_persisted)
        self.enabled = True
        log.info("%s enabled: %d producers known, %d entries replayed", self.log_prefix,
                 len(self.highest_persisted), replayed)

    async def disable(self) -> None:
        """Turns deduplication off and deletes the snapshot cursor (it would hold back retention)."""
        if not self.enabled and CURSOR_NAME not in self.ml.cursors:
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
        if self.enabled:
            await self._wait_snapshot()
            await self.snapshot()

    def _learn(self, data: bytes, position: Position) -> None:
        try:
            md = peek_metadata(data)
        except Exception:
            return
        if md.HasField("marker_type"):
            return
        seq = md.sequence_id
        if md.highest_sequence_id > seq:
            seq = md.highest_sequence_id
        elif md.HasField("num_messages_in_batch"):
            seq += max(md.num_messages_in_batch, 1) - 1  # as Topic.publish counts a batch without one
        name = md.producer_name
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
        return self.highest_persisted.get(producer_name, -1) if self.enabled else -1

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
            await shielded(cursor.mark_delete(position, properties=dict(self.highest_persisted)))
        except Exception as exc:
            log.warning("%s snapshot at %s failed: %s", self.log_prefix, position, exc)

    async def _wait_snapshot(self) -> None:
        task = self._snapshot_task
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)

    def stats_status(self) -> str:
        return "Enabled" if self.enabled else "Disabled"
