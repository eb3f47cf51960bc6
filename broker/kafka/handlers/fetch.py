"""Fetch (1) v4..v11: entries as record batches v2, with a long poll.

Theory of operation
-------------------
For each partition the handler finds the entry holding ``fetch_offset`` (``find_position_by_index``) and reads
from there with a non-durable cursor, converting each entry into one record batch whose base offset is the
index of its first message (``records.entry_to_batch``); a batch may start before ``fetch_offset`` (a
consumer skips the records it did not ask for, as with compressed batches in Kafka). Reads stop at the
partition's ``max_bytes`` (at least one entry, so a large entry always makes progress) and at the request's
``max_bytes``. A connection keeps each partition's cursor with the offset it stopped at, so the next fetch
of a consumer that keeps up starts where the last one ended, without a search.

Long poll: when fewer than ``min_bytes`` were read, the handler waits for new entries on any of the
partitions' cursors (``wait_for_entries``, woken by appends), up to ``max_wait_time`` (capped by
``kafka_fetch_max_wait_ms``), and reads again.

Offsets out of range: beyond the high watermark (the index after the last durable message), before the
first retained message or before the log start offset DeleteRecords stored (``log_start.py``) →
OFFSET_OUT_OF_RANGE (the consumer resets by its policy).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Optional

from broker.managed_ledger.api import Position
from magnetar.errors import MagnetarError
from magnetar.protocol.frames import split_broker_entry_metadata
from magnetar.topic_name import InvalidTopicNameError

from .. import log_start, names
from ..codec import ErrorCode
from ..records import entry_messages, records_to_batch
from ..structs import as_dict, make
from ..topics import NotLeaderError
from .produce import error_code_of

log = logging.getLogger("broker.kafka.handlers.fetch")

_CURSORS_PER_CONNECTION_MAX = 1024
_ENTRIES_PER_READ_MAX = 500
_INT32_MAX = (1 << 31) - 1


@dataclass
class _Read:
    name: str
    index: int
    offset: int
    max_bytes: int
    error: int = ErrorCode.NONE
    topic: Any = None
    cursor: Any = None
    pulsar_topic: str = ""
    chunks: list = field(default_factory=list)
    size: int = 0
    high_watermark: int = -1
    log_start: int = -1

    def done(self) -> bool:
        return self.error != ErrorCode.NONE or self.size >= self.max_bytes


async def fetch(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    loop = asyncio.get_running_loop()
    wait_s = max(0, min(body["max_wait_time"], server.config.fetch_max_wait_ms)) / 1000
    deadline = loop.time() + wait_s
    min_bytes = body["min_bytes"]
    budget = body.get("max_bytes", _INT32_MAX)
    if budget is None or budget <= 0:
        budget = _INT32_MAX
    reads = [_Read(t["topic"], p["partition"], p["fetch_offset"], max(p["max_bytes"], 1))
             for t in body["topics"] for p in t["partitions"]]
    cursors = _cursor_cache(ctx, server)
    await asyncio.gather(*(_open(server, ctx, read, cursors) for read in reads))
    total = 0
    while True:
        for read in reads:
            if read.cursor is None or read.done() or total >= budget:
                continue
            total += await _read_more(read, budget - total, cursors)
        remaining = deadline - loop.time()
        if total >= max(min_bytes, 1) or remaining <= 0 or total >= budget:
            break
        waiting = [r for r in reads if r.cursor is not None and not r.done()]
        if not waiting:
            break
        if not await _wait_any(waiting, remaining):
            break
    for read in reads:
        if read.topic is not None and read.error == ErrorCode.NONE:
            read.high_watermark = _high_watermark(read.topic)
    topics: dict[str, list] = {}
    for read in reads:
        topics.setdefault(read.name, []).append({
            "partition": read.index, "error_code": read.error, "highwater_offset": read.high_watermark,
            "last_stable_offset": read.high_watermark, "log_start_offset": read.log_start,
            "aborted_transactions": None if read.error else [], "preferred_read_replica": -1,
            "message_set": b"".join(read.chunks)})
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0,
                                        "topics": [{"topics": n, "partitions": p} for n, p in topics.items()]})


def _cursor_cache(ctx: Any, server: Any) -> dict:
    conn = ctx.extra.get("connection")
    state = conn.state if conn is not None else {}
    return state.setdefault("fetch_cursors", {})


def _high_watermark(topic: Any) -> int:
    return topic.ml.last_confirmed_index + 1


async def _open(server: Any, ctx: Any, read: _Read, cursors: dict) -> None:
    try:
        topic_name = server.topics.resolve(read.name)
        if not await server.topics.allowed(ctx, topic_name, "consume"):
            read.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            return
        count = await server.topics.partitions(topic_name, at_least=read.index)
        pulsar_topic = names.partition_topic(topic_name, count, read.index) if count is not None else None
        if pulsar_topic is None:
            read.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return
        topic = await server.topics.local(pulsar_topic)
    except InvalidTopicNameError:
        read.error = ErrorCode.INVALID_TOPIC_EXCEPTION
        return
    except (MagnetarError, NotLeaderError) as exc:
        read.error = error_code_of(exc)
        return
    read.topic, read.pulsar_topic = topic, pulsar_topic
    ml = topic.ml
    read.high_watermark = _high_watermark(topic)
    if read.offset < log_start.stored(ml):  # below what DeleteRecords left
        cursors.pop(pulsar_topic, None)
        await _out_of_range(read, ml)
        return
    cached = cursors.get(pulsar_topic)
    if cached is not None and cached[0] is ml and cached[1] == read.offset:
        read.cursor = cached[2]
        return
    if read.offset > read.high_watermark or read.offset < 0:
        await _out_of_range(read, ml)
        return
    try:
        position = await ml.find_position_by_index(read.offset)
    except LookupError:  # IndexOutOfRangeError: trimmed, or beyond the end
        await _out_of_range(read, ml)
        return
    except MagnetarError as exc:
        read.error = error_code_of(exc)
        return
    cursor = ml.new_non_durable_cursor(Position(position.ledger_id, position.entry_id - 1),
                                       name=f"kafka-fetch-{id(read)}")
    read.cursor = cursor
    if len(cursors) >= _CURSORS_PER_CONNECTION_MAX:
        cursors.pop(next(iter(cursors)))
    cursors[pulsar_topic] = (ml, read.offset, cursor)


async def _out_of_range(read: _Read, ml: Any) -> None:
    read.error = ErrorCode.OFFSET_OUT_OF_RANGE
    try:
        read.log_start = await log_start.log_start_offset(ml)
    except Exception:
        read.log_start = -1


async def _read_more(read: _Read, budget: int, cursors: dict) -> int:
    """Reads what the cursor has now into ``read``; the bytes added."""
    limit = min(read.max_bytes - read.size, budget)
    try:
        entries = await read.cursor.read_entries(_ENTRIES_PER_READ_MAX, max_bytes=max(limit, 1))
    except Exception as exc:  # the managed ledger closed under us (unload): the client asks again
        log.info("[%s] fetch read failed: %s", read.pulsar_topic, exc)
        read.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        cursors.pop(read.pulsar_topic, None)
        return 0
    added = 0
    next_offset = None
    for entry in entries:
        batch, last = _entry_batch(read.pulsar_topic, entry)
        if last is not None:
            next_offset = last + 1
        if batch is None:
            continue
        if read.size and read.size + len(batch) > read.max_bytes:
            # the cursor moved past it: next fetch starts again from this entry (cache dropped below)
            next_offset = None
            cursors.pop(read.pulsar_topic, None)
            break
        read.chunks.append(batch)
        read.size += len(batch)
        added += len(batch)
    if next_offset is not None and read.pulsar_topic in cursors:
        ml, _, cursor = cursors[read.pulsar_topic]
        if cursor is read.cursor:
            cursors[read.pulsar_topic] = (ml, next_offset, cursor)
    return added


def _entry_batch(topic: str, entry: Any) -> tuple[Optional[bytes], Optional[int]]:
    """(record batch, index of the entry's last message) of a stored entry; the batch is None for entries
    Kafka consumers do not see (markers, undecodable ones) and the index None when it has none."""
    try:
        bem, rest = split_broker_entry_metadata(entry.data)
    except Exception:
        return None, None
    if bem is None or not bem.HasField("index"):
        return None, None
    try:
        records = entry_messages(rest)
    except Exception as exc:
        log.warning("[%s] entry %s cannot be converted for Kafka consumers: %s", topic, entry.position, exc)
        return None, bem.index
    if not records:
        return None, bem.index
    return records_to_batch(records, bem.index - len(records) + 1), bem.index


async def _wait_any(reads: list[_Read], timeout_s: float) -> bool:
    """True when a cursor has new entries before ``timeout_s``."""
    tasks = [asyncio.create_task(r.cursor.wait_for_entries(timeout_s)) for r in reads]
    try:
        done, _ = await asyncio.wait(tasks, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        return any(not t.cancelled() and t.exception() is None and t.result() for t in done)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


HANDLERS = {1: (4, 11, fetch)}
