"""CreateTopics (19) v0..3, DeleteTopics (20) v0..3, CreatePartitions (37) v0..1, DescribeConfigs (32) v0..2.

Topics are created as partitioned topics (Kafka always has partitions); replication factor and replica
assignments are accepted and ignored (durability is the namespace's ledger quorums); topic configs are
refused (INVALID_CONFIG): Magnetar sets retention and the like with namespace and topic policies.
DescribeConfigs answers a few read-only values derived from the broker's settings and namespace policies.
"""

from __future__ import annotations

import logging
from typing import Any

from config_store.errors import MetadataError as StoreError
from config_store.errors import NotFoundError
from magnetar.errors import MagnetarError
from magnetar.topic_name import InvalidTopicNameError

from ..admin_calls import AdminCallError, AdminCalls
from ..codec import ErrorCode
from ..structs import as_dict, make

log = logging.getLogger("broker.kafka.handlers.admin")

_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4
_DEFAULT_CONFIG, _STATIC_BROKER_CONFIG = 5, 4  # config_source values


def admin_calls(server: Any) -> AdminCalls:
    calls = server.state.get("admin")
    if calls is None:
        calls = server.state["admin"] = AdminCalls(server.admin_url, server.http_session)
    return calls


def _error(topic: str, code: int, message: str | None = None) -> dict:
    return {"topic": topic, "error_code": code, "error_message": message}


async def create_topics(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    validate_only = bool(body.get("validate_only", False))
    results = []
    seen: set[str] = set()
    for item in body["create_topic_requests"]:
        name = item["topic"]
        if name in seen:
            results.append(_error(name, ErrorCode.INVALID_REQUEST, "topic named twice in one request"))
            continue
        seen.add(name)
        results.append(await _create_one(server, ctx, name, item, validate_only))
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "topic_errors": results})


async def _create_one(server: Any, ctx: Any, name: str, item: dict, validate_only: bool) -> dict:
    try:
        topic = server.topics.resolve(name)
    except InvalidTopicNameError as exc:
        return _error(name, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc))
    if not await server.topics.allowed(ctx, topic, "admin"):
        return _error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not administer {topic.tenant}")
    count = item["num_partitions"]
    maximum = server.config.max_partitions_per_topic
    if not 1 <= count <= maximum:
        return _error(name, ErrorCode.INVALID_PARTITIONS, f"num_partitions must be in 1..{maximum}, not {count}")
    if item.get("replica_assignment"):
        return _error(name, ErrorCode.INVALID_REQUEST, "replica assignments are not supported")
    if item.get("configs"):
        keys = ", ".join(c["config_key"] for c in item["configs"])
        return _error(name, ErrorCode.INVALID_CONFIG,
                      f"topic configs ({keys}) are not supported: use namespace or topic policies")
    try:
        if await server.topics.partitions(topic, fresh=True) is not None:
            return _error(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic} already exists")
        if validate_only:
            return _error(name, ErrorCode.NONE)
        if not await server.topics.create(topic, count):
            return _error(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic} already exists")
    except NotFoundError as exc:
        return _error(name, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc))
    except (StoreError, MagnetarError) as exc:
        return _error(name, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    return _error(name, ErrorCode.NONE)


async def delete_topics(server: Any, request: Any, ctx: Any) -> Any:
    results = []
    for name in dict.fromkeys(as_dict(request)["topics"] or []):
        results.append({"topic": name, "error_code": await _delete_one(server, ctx, name)})
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "topic_error_codes": results})


async def _delete_one(server: Any, ctx: Any, name: str) -> int:
    try:
        topic = server.topics.resolve(name)
        if not await server.topics.allowed(ctx, topic, "admin"):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        count = await server.topics.partitions(topic, fresh=True)
    except InvalidTopicNameError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    except MagnetarError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if count is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    suffix = "/partitions" if count else ""
    try:
        await admin_calls(server).call("DELETE", f"{topic.rest_path}{suffix}?force=true")
    except AdminCallError as exc:
        log.info("delete of %s: %s", topic, exc)
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if exc.status == 404 else ErrorCode.UNKNOWN_SERVER_ERROR
    except Exception as exc:  # the admin API unreachable
        log.warning("delete of %s failed: %s", topic, exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR
    server.topics.forget(topic)
    log.info("[%s] deleted through Kafka", topic)
    return ErrorCode.NONE


async def create_partitions(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    validate_only = bool(body.get("validate_only", False))
    results = []
    for item in body["topic_partitions"]:
        name = item["topic"]
        new = item["new_partitions"]
        results.append(await _grow_one(server, ctx, name, new["count"], new.get("assignment"), validate_only))
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "topic_errors": results})


async def _grow_one(server: Any, ctx: Any, name: str, count: int, assignment: Any, validate_only: bool) -> dict:
    try:
        topic = server.topics.resolve(name)
        if not await server.topics.allowed(ctx, topic, "admin"):
            return _error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not administer it")
        current = await server.topics.partitions(topic, fresh=True)
    except InvalidTopicNameError as exc:
        return _error(name, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc))
    except MagnetarError as exc:
        return _error(name, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    if current is None:
        return _error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} does not exist")
    if current == 0:
        return _error(name, ErrorCode.INVALID_PARTITIONS, f"{topic} is a non-partitioned Pulsar topic")
    if assignment:
        return _error(name, ErrorCode.INVALID_REQUEST, "replica assignments are not supported")
    maximum = server.config.max_partitions_per_topic
    if not current < count <= maximum:
        return _error(name, ErrorCode.INVALID_PARTITIONS,
                      f"the partition count must grow from {current} (at most {maximum}), not to {count}")
    if validate_only:
        return _error(name, ErrorCode.NONE)
    try:
        await admin_calls(server).call("POST", f"{topic.rest_path}/partitions", count)
        server.topics.forget(topic)
    except AdminCallError as exc:
        code = ErrorCode.INVALID_PARTITIONS if exc.status == 409 else ErrorCode.UNKNOWN_SERVER_ERROR
        return _error(name, code, exc.message)
    except Exception as exc:
        return _error(name, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    return _error(name, ErrorCode.NONE)


async def describe_configs(server: Any, request: Any, ctx: Any) -> Any:
    resources = []
    for item in as_dict(request)["resources"]:
        rtype, rname, wanted = item["resource_type"], item["resource_name"], item["config_names"]
        entry = {"resource_type": rtype, "resource_name": rname, "error_code": ErrorCode.NONE,
                 "error_message": None, "config_entries": []}
        try:
            if rtype == _TOPIC_RESOURCE:
                configs = await _topic_configs(server, rname)
            elif rtype == _BROKER_RESOURCE:
                configs = _broker_configs(server)
            else:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not supported")
        except _Refused as exc:
            entry.update(error_code=exc.code, error_message=exc.message)
        else:
            source = _DEFAULT_CONFIG if rtype == _TOPIC_RESOURCE else _STATIC_BROKER_CONFIG
            entry["config_entries"] = [
                {"config_names": key, "config_value": value, "read_only": True, "config_source": source,
                 "is_default": False, "is_sensitive": False, "config_synonyms": []}
                for key, value in configs.items() if not wanted or key in wanted]
        resources.append(entry)
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "resources": resources})


class _Refused(MagnetarError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def _topic_configs(server: Any, name: str) -> dict[str, str]:
    try:
        topic = server.topics.resolve(name)
        count = await server.topics.partitions(topic, fresh=True)
    except InvalidTopicNameError as exc:
        raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
    if count is None:
        raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} does not exist")
    retention_ms, retention_bytes = "-1", "-1"
    try:
        policies = await server.service.configuration_store.get_namespace_policies(topic.tenant,
                                                                                   topic.namespace_portion)
        minutes, mb = policies.value.retention_time_in_minutes, policies.value.retention_size_in_mb
        retention_ms = str(minutes * 60_000) if minutes >= 0 else "-1"
        retention_bytes = str(mb * 1024 * 1024) if mb >= 0 else "-1"
    except (NotFoundError, StoreError):
        pass
    return {"cleanup.policy": "delete", "retention.ms": retention_ms, "retention.bytes": retention_bytes,
            "max.message.bytes": str(server.config.max_message_size_bytes),
            "message.timestamp.type": "CreateTime", "pulsar.topic": str(topic),
            "pulsar.partitions": str(count)}


def _broker_configs(server: Any) -> dict[str, str]:
    config = server.config
    return {"num.partitions": str(config.num_partitions),
            "auto.create.topics.enable": str(config.allow_auto_create_topics).lower(),
            "socket.request.max.bytes": str(config.max_request_size_bytes),
            "message.max.bytes": str(server.config.max_message_size_bytes),
            "kafka.tenant": config.tenant, "kafka.namespace": config.namespace}


HANDLERS = {19: (0, 3, create_topics), 20: (0, 3, delete_topics), 37: (0, 1, create_partitions),
            32: (0, 2, describe_configs)}
