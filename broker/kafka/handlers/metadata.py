"""Metadata (3), v0..v5: the region's brokers with Kafka listeners, and for each topic its partitions with
their leader, the broker that owns the Pulsar partition (looked up, so an unowned bundle gets an owner now).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from magnetar.errors import MagnetarError
from magnetar.topic_name import InvalidTopicNameError, TopicName

from .. import names
from ..codec import ErrorCode
from ..structs import as_dict, make

log = logging.getLogger("broker.kafka.handlers.metadata")
_LOOKUP_CONCURRENCY = 32


async def metadata(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    requested = body.get("topics")
    version = ctx.api_version
    auto_create = body.get("allow_auto_topic_creation", True) if version >= 4 else True
    nodes = await server.nodes(ctx.listener_name)
    by_http = {n.http_url: n for n in nodes if n.http_url}
    if requested is None or (version == 0 and not requested):
        topics = await _all_topics(server)
        auto_create = False
    else:
        topics = list(dict.fromkeys(requested))
    limit = asyncio.Semaphore(_LOOKUP_CONCURRENCY)
    answers = await asyncio.gather(*(_topic(server, name, auto_create, by_http, ctx, limit) for name in topics))
    return make(request.RESPONSE_TYPE, {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": n.node_id, "host": n.host, "port": n.port, "rack": None} for n in nodes],
        "cluster_id": server.cluster_name,
        "controller_id": min((n.node_id for n in nodes), default=server.node_id),  # the same on every broker
        "topics": answers,
    })


async def _all_topics(server: Any) -> list[str]:
    config = server.config
    listed = await server.service.topics_of_namespace(config.tenant, config.namespace)
    bases = {}
    for name in listed:
        try:
            topic = TopicName.parse(name)
        except InvalidTopicNameError:
            continue
        bases[str(topic.base if topic.is_partition else topic)] = None
    return [server.topics.kafka_name(TopicName.parse(b)) for b in bases]


def _topic_error(name: str, code: int) -> dict:
    return {"error_code": code, "topic": name, "is_internal": False, "partitions": []}


async def _topic(server: Any, name: str, auto_create: bool, by_http: dict, ctx: Any,
                 limit: asyncio.Semaphore) -> dict:
    try:
        topic = server.topics.resolve(name)
    except InvalidTopicNameError:
        return _topic_error(name, ErrorCode.INVALID_TOPIC_EXCEPTION)
    try:
        if not await server.topics.allowed(ctx, topic, "lookup"):
            return _topic_error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        count = await server.topics.ensure(topic, create=auto_create, fresh=True)
    except MagnetarError as exc:
        log.info("metadata of %s: %s", topic, exc)
        return _topic_error(name, ErrorCode.LEADER_NOT_AVAILABLE)
    if count is None:
        return _topic_error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    partitions = await asyncio.gather(*(
        _partition(server, names.partition_topic(topic, count, i), i, by_http, ctx, limit)
        for i in range(names.kafka_partition_count(count))))
    return {"error_code": ErrorCode.NONE, "topic": name, "is_internal": False, "partitions": partitions}


async def _partition(server: Any, pulsar_topic: str, index: int, by_http: dict, ctx: Any,
                     limit: asyncio.Semaphore) -> dict:
    leader = -1
    async with limit:
        try:
            result = await server.topics.lookup(pulsar_topic)
        except MagnetarError as exc:
            log.info("lookup of %s: %s", pulsar_topic, exc)
        else:
            if result.is_self:
                leader = server.node_id
            else:
                node = by_http.get(result.http_url)
                if node is None:
                    node = await server.cluster.node_for_http_url(result.http_url, ctx.listener_name)
                if node is not None:
                    leader = node.node_id
    replicas = [leader] if leader >= 0 else []
    return {"error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition": index, "leader": leader, "replicas": replicas, "isr": replicas, "offline_replicas": []}


HANDLERS = {3: (0, 5, metadata)}
