"""DeleteRecords (21) v0..v2: moves each partition's log start offset (Kafka's low watermark) up.

For each (topic, partition, offset): offset -1 means the high watermark; an offset above the high watermark
or below -1 is OFFSET_OUT_OF_RANGE; one at or below the current low watermark changes nothing. Otherwise the
offset is stored as the partition's log start offset (:mod:`broker.kafka.log_start`) before the answer, which
carries the new low watermark. Needs the tenant's admin under authorization (as truncating a Pulsar topic
does): TOPIC_AUTHORIZATION_FAILED otherwise. A partition another broker owns: NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from magnetar.errors import MagnetarError
from magnetar.topic_name import InvalidTopicNameError

from .. import log_start, names
from ..codec import ErrorCode
from ..structs import as_dict, make
from ..topics import NotLeaderError
from .produce import error_code_of

log = logging.getLogger("broker.kafka.handlers.delete_records")

HIGH_WATERMARK = -1


async def delete_records(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    timeout_s = body["timeout_ms"] / 1000 if body.get("timeout_ms", 0) > 0 else None
    lock = server.state.setdefault("delete_records_lock", asyncio.Lock())  # no lost update between requests
    topics = []
    for item in body["topics"]:
        partitions = []
        for p in item["partitions"]:
            try:
                async with asyncio.timeout(timeout_s):
                    async with lock:
                        partitions.append(await _one(server, ctx, item["name"], p["partition_index"], p["offset"]))
            except TimeoutError:
                partitions.append(_answer(p["partition_index"], ErrorCode.REQUEST_TIMED_OUT))
        topics.append({"name": item["name"], "partitions": partitions})
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "topics": topics})


def _answer(index: int, code: int, low_watermark: int = -1) -> dict:
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": code}


async def _one(server: Any, ctx: Any, name: str, index: int, offset: int) -> dict:
    try:
        topic_name = server.topics.resolve(name)
        if not await server.topics.allowed(ctx, topic_name, "admin"):
            return _answer(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        count = await server.topics.partitions(topic_name, at_least=index)
        pulsar_topic = names.partition_topic(topic_name, count, index) if count is not None else None
        if pulsar_topic is None:
            return _answer(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        ml = (await server.topics.local(pulsar_topic)).ml
        high_watermark = ml.last_confirmed_index + 1
        low = await log_start.log_start_offset(ml)
        if offset == HIGH_WATERMARK:
            offset = high_watermark
        if offset < 0 or offset > high_watermark:
            return _answer(index, ErrorCode.OFFSET_OUT_OF_RANGE, low)
        if offset <= low:
            return _answer(index, ErrorCode.NONE, low)
        await log_start.store(ml, offset)
        log.info("[%s] records below offset %d deleted for Kafka clients (DeleteRecords from %s)",
                 pulsar_topic, offset, ctx.peer)
        return _answer(index, ErrorCode.NONE, offset)
    except InvalidTopicNameError:
        return _answer(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    except (MagnetarError, NotLeaderError) as exc:
        return _answer(index, error_code_of(exc))


HANDLERS = {21: (0, 2, delete_records)}
