"""Topic compaction, the running part (Pulsar's ``TwoPhaseCompactor`` and ``PersistentTopic.triggerCompaction``).

Theory of operation. One :class:`TopicCompaction` per persistent topic. ``trigger()`` starts one compaction
task (a second trigger while it runs is refused: ``CompactionInProgressError``, 409 over REST). The task:

1. opens the durable cursor ``__compaction`` (created at the earliest entry; it holds back trimming like any
   durable cursor, so nothing not yet compacted is trimmed);
2. fixes the new horizon = the last confirmed entry now;
3. phase one reads the *previous compacted view* (the previous compacted ledger's records, then the topic
   after the previous horizon, up to the new horizon) and folds it into the latest message per key
   (``compaction_logic.LatestPerKey``); phase two reads it again and writes the survivors, re-batched, to a
   new ledger created with the managed ledger's ledger client and quorums;
4. closes that ledger, then moves the ``__compaction`` cursor's mark-delete to the horizon with the cursor
   property ``CompactedTopicLedger`` = the new ledger id, persisted at once (Pulsar stores both the same
   way): this is the commit point. A crash before it leaves the previous compaction in force (the new ledger
   is orphaned: Pulsar leaks it the same way); after it, the new one;
5. serves the new view and deletes the previous compacted ledger.

On load, the view is restored lazily (first ``read_compacted`` subscriber, stats, or compaction) from the
cursor: horizon = its mark-delete, ledger = its property. The ledger is read once to index the original
positions of its records (Pulsar binary-searches the ledger through a cache instead).

Status (``GET .../compaction``) is this broker's memory, as Pulsar's: NOT_RUN after a reload.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from typing import TYPE_CHECKING, AsyncIterator, Optional

from broker.managed_ledger.api import Entry, InitialPosition, Position
from magnetar.protocol.message_id import MessageId

from .view import CompactedLedger
from .logic import (COMPACTED_LEDGER_PROPERTY, COMPACTION_CURSOR, LatestPerKey, compact_entry, encode_record,
                               iter_batches)
from ..entries import entry_info
from ..stats import CompactionStats
from ...errors import BrokerServiceError, NotAllowedError

if TYPE_CHECKING:
    from ..topic import Topic

log = logging.getLogger("broker.service.topics.compaction.compactor")

_READ_BATCH_ENTRIES = 100
_WRITES_IN_FLIGHT_MAX = 100


class CompactionStatus(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus.Status`` names."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionInProgressError(NotAllowedError):
    """A compaction of this topic is already running (REST 409, as Pulsar's ``AlreadyRunningException``)."""

    http_status = 409


class CompactionFailedError(BrokerServiceError):
    """The compacted view cannot be built or loaded (no ledger client, an unreadable compacted ledger)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class TopicCompaction:
    """Compaction state of one topic; see the module docstring."""

    def __init__(self, topic: "Topic") -> None:
        self.topic = topic
        self.status = CompactionStatus.NOT_RUN
        self.last_error: Optional[str] = None
        self.view: Optional[CompactedLedger] = None
        self.last_removed_event_count = 0
        self.last_succeed_ms = 0
        self.last_failed_ms = 0
        self.last_duration_ms = 0
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._task: Optional[asyncio.Task] = None
        self._closed = False
        self.log_prefix = f"[{topic.name}][{COMPACTION_CURSOR}]"

    # ------------------------------------------------------------------------------------- public face

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def backlog_entries(self) -> Optional[int]:
        """Entries written since the last compaction (the ``__compaction`` cursor's backlog); None when no
        compaction ever ran (the automatic-compaction policy then counts the whole topic)."""
        cursor = self.topic.ml.cursors.get(COMPACTION_CURSOR)
        return None if cursor is None else cursor.backlog_entries()

    def trigger(self) -> None:
        """Starts a compaction; CompactionInProgressError if one is running."""
        if self._closed:
            raise CompactionFailedError(f"topic {self.topic.name} is closing")
        if self.running:
            raise CompactionInProgressError(f"compaction of {self.topic.name} is already running")
        self.status = CompactionStatus.RUNNING
        self.last_error = None
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"compaction {self.topic.name}")

    async def wait(self) -> None:
        """Until the running compaction (if any) ends (tests, tools)."""
        task = self._task
        if task is not None:
            await asyncio.wait({task})

    def status_json(self) -> dict:
        """Pulsar's ``LongRunningProcessStatus``."""
        return {"status": self.status.value, "lastError": self.last_error or ""}

    def stats(self) -> CompactionStats:
        """The topic stats' ``compaction`` section."""
        return CompactionStats(last_compaction_removed_event_count=self.last_removed_event_count,
                               last_compaction_succeed_timestamp_ms=self.last_succeed_ms,
                               last_compaction_failed_timestamp_ms=self.last_failed_ms,
                               last_compaction_duration_ms=self.last_duration_ms)

    def internal_stats(self) -> dict:
        """Pulsar's internal-stats ``compactedLedger`` (-1s when there is none, or it is not loaded yet)."""
        if self.view is None:
            return {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False}
        return self.view.internal_stats()

    async def last_message_id(self) -> Optional[MessageId]:
        """GET_LAST_MESSAGE_ID for a ``read_compacted`` consumer while nothing was written after the horizon
        (as Pulsar): the last compacted message, or ``-1:-1`` when compaction removed everything; None when
        the topic has entries after the horizon (the topic's own last message applies)."""
        view = await self.ensure_loaded()
        if view is None or self.topic.ml.last_confirmed_position > view.horizon:
            return None
        if not view.positions:
            return MessageId(-1, -1)
        last = view.positions[-1]
        (entry,) = await view.read(len(view.positions) - 1, len(view.positions) - 1)
        info = entry_info(entry.data)
        batch_index = info.num_messages - 1 if info.metadata.HasField("num_messages_in_batch") else -1
        topic_name = self.topic.topic_name
        return MessageId(last.ledger_id, last.entry_id, topic_name.partition_index if topic_name.is_partition else -1,
                         batch_index)

    def compacted_ledger_id(self) -> Optional[int]:
        """The compacted ledger in force as stored on the cursor (loaded or not)."""
        cursor = self.topic.ml.cursors.get(COMPACTION_CURSOR)
        props = getattr(cursor, "properties", None) or {}
        return props.get(COMPACTED_LEDGER_PROPERTY)

    async def ensure_loaded(self) -> Optional[CompactedLedger]:
        """The compacted view in force, restored from the ``__compaction`` cursor on first use."""
        if self._loaded:
            return self.view
        async with self._load_lock:
            if not self._loaded:
                ledger_id = self.compacted_ledger_id()
                if ledger_id is not None:
                    horizon = self.topic.ml.cursors[COMPACTION_CURSOR].mark_delete_position
                    self.view = await self._open_view(int(ledger_id), horizon)
                    log.info("%s compacted ledger %d restored (horizon %s, %d entries)", self.log_prefix,
                             ledger_id, horizon, len(self.view.positions))
                self._loaded = True
        return self.view

    async def close(self, *, delete: bool = False) -> None:
        """Stops a running compaction (idempotent); with ``delete`` (topic deletion) also deletes the
        compacted ledger."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if delete:
            ledger_id = self.view.ledger_id if self.view is not None else self.compacted_ledger_id()
            if ledger_id is not None:
                await self._delete_ledger_quietly(int(ledger_id))
            self.view = None

    # ------------------------------------------------------------------------------------- the run

    def _client(self):
        client = getattr(self.topic.ml, "ledger_client", None)
        if client is None:
            raise CompactionFailedError(f"topic {self.topic.name}: compaction needs bookie storage "
                                        "(this managed ledger has no ledger client)")
        return client

    async def _run(self) -> None:
        started = time.monotonic()
        try:
            removed = await self._compact()
        except asyncio.CancelledError:
            self.status, self.last_error = CompactionStatus.ERROR, "cancelled (topic unloaded)"
            raise
        except Exception as exc:
            self.status, self.last_error = CompactionStatus.ERROR, f"{type(exc).__name__}: {exc}"
            self.last_failed_ms = _now_ms()
            log.warning("%s compaction failed: %s", self.log_prefix, self.last_error, exc_info=True)
            return
        finally:
            self.last_duration_ms = int((time.monotonic() - started) * 1000)
        self.status = CompactionStatus.SUCCESS
        self.last_removed_event_count = removed
        self.last_succeed_ms = _now_ms()

    async def _compact(self) -> int:
        ml = self.topic.ml
        client = self._client()
        cursor = await ml.open_cursor(COMPACTION_CURSOR, initial_position=InitialPosition.EARLIEST)
        previous = await self.ensure_loaded()
        horizon = ml.last_confirmed_position
        if horizon.entry_id < 0 or (previous is not None and horizon <= previous.horizon):
            log.info("%s nothing new to compact (horizon %s)", self.log_prefix, horizon)
            return 0
        log.info("%s compacting up to %s (previous %s)", self.log_prefix, horizon,
                 f"ledger {previous.ledger_id} up to {previous.horizon}" if previous else "none")
        latest = LatestPerKey()
        async for entry in self._source(previous, horizon):
            latest.add(entry.position, entry.data)
        c = ml.config
        writer = await client.create_ledger(
            ensemble_size=c.ensemble_size, write_quorum_size=c.write_quorum_size, ack_quorum_size=c.ack_quorum_size,
            custom_metadata={"component": "compacted-ledger", "managed-ledger": ml.name})
        try:
            positions, size, kept = await self._write_survivors(writer, previous, horizon, latest)
            await writer.close()
            handle = await client.open_ledger(writer.ledger_id, recovery=False)
            await cursor.mark_delete(horizon, properties={COMPACTED_LEDGER_PROPERTY: writer.ledger_id})
            await cursor.flush()
        except BaseException:
            await self._delete_ledger_quietly(writer.ledger_id)
            raise
        self.view = CompactedLedger(writer.ledger_id, horizon, tuple(positions), size, handle)
        log.info("%s compacted ledger %d: %d entries, %d messages kept of %d (horizon %s)", self.log_prefix,
                 writer.ledger_id, len(positions), kept, latest.messages_seen, horizon)
        if previous is not None:
            await self._delete_ledger_quietly(previous.ledger_id)
        return latest.messages_seen - kept

    async def _write_survivors(self, writer, previous: Optional[CompactedLedger], horizon: Position,
                               latest: LatestPerKey) -> tuple[list[Position], int, int]:
        positions: list[Position] = []
        size = kept = 0
        in_flight: list[asyncio.Future] = []
        async for entry in self._source(previous, horizon):
            data, n = compact_entry(entry.position, entry.data, latest)
            if data is None:
                continue
            record = encode_record(entry.position, data)
            in_flight.append(writer.add_nowait(record))
            positions.append(entry.position)
            size += len(record)
            kept += n
            if len(in_flight) >= _WRITES_IN_FLIGHT_MAX:
                await asyncio.gather(*in_flight)
                in_flight.clear()
        await asyncio.gather(*in_flight)
        return positions, size, kept

    async def _source(self, previous: Optional[CompactedLedger], horizon: Position) -> AsyncIterator[Entry]:
        """The previous compacted view up to ``horizon``, in position order."""
        ml = self.topic.ml
        if previous is not None:
            for first, last in iter_batches(0, len(previous.positions), _READ_BATCH_ENTRIES):
                for entry in await previous.read(first, last):
                    yield entry
            start = previous.horizon
        else:
            first_pos = ml.first_position()
            start = Position(first_pos.ledger_id, first_pos.entry_id - 1)
        reader = ml.new_non_durable_cursor(start, name=f"{COMPACTION_CURSOR}-reader-{uuid.uuid4().hex[:8]}")
        while True:
            entries = await reader.read_entries(_READ_BATCH_ENTRIES)
            if not entries:
                return
            for entry in entries:
                if entry.position > horizon:
                    return
                yield entry
            if entries[-1].position >= horizon:
                return

    async def _open_view(self, ledger_id: int, horizon: Position) -> CompactedLedger:
        client = self._client()
        try:
            handle = await client.open_ledger(ledger_id, recovery=False)
            positions: list[Position] = []
            size = 0
            for first, last in iter_batches(0, handle.last_add_confirmed + 1, _READ_BATCH_ENTRIES):
                view = CompactedLedger(ledger_id, horizon, (), 0, handle)
                for entry in await view.read(first, last):
                    positions.append(entry.position)
                    size += len(entry.data) + 16
        except Exception as exc:
            raise CompactionFailedError(f"topic {self.topic.name}: cannot read compacted ledger {ledger_id}: "
                                        f"{exc}") from exc
        return CompactedLedger(ledger_id, horizon, tuple(positions), size, handle)

    async def _delete_ledger_quietly(self, ledger_id: int) -> None:
        try:
            await self._client().delete_ledger(ledger_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s could not delete compacted ledger %d: %s", self.log_prefix, ledger_id, exc)
