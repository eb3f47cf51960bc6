"""ListOffsets (2) v1..v3: earliest (-2), latest (-1), or the first offset whose record timestamp is at or
after a time.

(aiokafka 0.14 declares v4/v5's ``current_leader_epoch`` as int64 where Kafka's specification has int32, so
the listener stops at v3, which every client reads alike.)

By time: a binary search over the retained entries by the largest record timestamp of each entry (record
timestamps of one partition are assumed to grow, as a producer's do), then the first record of that entry at
or after the time. No such record: offset -1, as Kafka answers.
"""

from __future__ import annotations

import logging
from typing import Any

from magnetar.errors import MagnetarError
from magnetar.protocol.frames import split_broker_entry_metadata
from magnetar.topic_name import InvalidTopicNameError

from .. import log_start, names
from ..codec import ErrorCode
from ..records import entry_messages
from ..structs import as_dict, make
from ..topics import NotLeaderError
from .produce import error_code_of

log = logging.getLogger("broker.kafka.handlers.offsets")

LATEST, EARLIEST = -1, -2


async def list_offsets(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    topics = []
    for item in body["topics"]:
        partitions = [await _one(server, ctx, item["topic"], p["partition"], p["timestamp"])
                      for p in item["partitions"]]
        topics.append({"topic": item["topic"], "partitions": partitions})
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "topics": topics})


def _answer(index: int, code: int, offset: int = -1, timestamp: int = -1) -> dict:
    return {"partition": index, "error_code": code, "timestamp": timestamp, "offset": offset, "leader_epoch": -1,
            "offsets": [offset] if offset >= 0 else []}


async def _one(server: Any, ctx: Any, name: str, index: int, timestamp: int) -> dict:
    try:
        topic_name = server.topics.resolve(name)
        if not await server.topics.allowed(ctx, topic_name, "consume"):
            return _answer(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        count = await server.topics.partitions(topic_name, at_least=index)
        pulsar_topic = names.partition_topic(topic_name, count, index) if count is not None else None
        if pulsar_topic is None:
            return _answer(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        topic = await server.topics.local(pulsar_topic)
        ml = topic.ml
        if timestamp == LATEST:
            return _answer(index, ErrorCode.NONE, ml.last_confirmed_index + 1)
        if timestamp == EARLIEST:
            return _answer(index, ErrorCode.NONE, await log_start.log_start_offset(ml))
        if timestamp < 0:
            return _answer(index, ErrorCode.INVALID_REQUEST)
        answer = await _by_time(ml, index, timestamp)
        if 0 <= answer["offset"] < log_start.stored(ml):  # below what DeleteRecords left: the first kept
            answer = await _by_time(ml, index, timestamp, at_least=log_start.stored(ml))
        return answer
    except InvalidTopicNameError:
        return _answer(index, ErrorCode.INVALID_TOPIC_EXCEPTION)
    except (MagnetarError, NotLeaderError) as exc:
        return _answer(index, error_code_of(exc))


def _entry_records(data: bytes) -> tuple[int, list]:
    """(index of the entry's first message or -1, its records) of stored entry ``data``."""
    try:
        bem, rest = split_broker_entry_metadata(data)
        records = entry_messages(rest)
    except Exception:
        return -1, []
    if bem is None or not bem.HasField("index") or not records:
        return -1, []
    return bem.index - len(records) + 1, records


def _max_time(data: bytes) -> int:
    base, records = _entry_records(data)
    return max((r.timestamp for r in records), default=-1) if base >= 0 else -1


async def _by_time(ml: Any, index: int, timestamp: int, *, at_least: int = 0) -> dict:
    """The first record at or after ``timestamp`` (and at offset ``at_least`` or later)."""
    if at_least:
        position = await ml.find_position_by_index(at_least)
    else:
        position = await ml.find_position_by_publish_time(timestamp, _max_time)
    while True:
        if position > ml.last_confirmed_position:  # the tail: every entry is older
            return _answer(index, ErrorCode.NONE)
        entry = await ml.read_entry(position)
        base, records = _entry_records(entry.data)
        for i, record in enumerate(records):
            if record.timestamp >= timestamp and base + i >= at_least:
                return _answer(index, ErrorCode.NONE, base + i, record.timestamp)
        position = ml.next_position(position)  # an entry without records at or after the time (a marker)


HANDLERS = {2: (1, 3, list_offsets)}
