"""Schemas on the binary protocol: PRODUCER and SUBSCRIBE with a schema, GET_SCHEMA, GET_OR_CREATE_SCHEMA.

The rules live in :mod:`broker.schema` (the registry); this module turns protocol values into registry
calls and answers. The registry keeps schemas in the configuration store, so a broker without one (unit
tests of the service alone) gives the old minimal answers: version 0 for any producer schema, no schema on
GET_SCHEMA.

What a version looks like on the wire: 8 bytes, big-endian (``broker.schema.encode_version``). A producer
without a schema gets an empty ``schema_version`` in PRODUCER_SUCCESS (Pulsar's ``SchemaVersion.Empty``), and
pulsar-client then puts none in its messages' metadata.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Iterator, Optional

from broker.schema import (PROTO_TYPE_NAMES, TYPE_PROTO_NUMBERS, InvalidSchemaDataError, SchemaData, SchemaDefaults,
                           SchemaError, SchemaNotFoundError, SchemaPolicy, SchemaRegistry, decode_version,
                           encode_version, schema_id)
from config_store import SchemaStore
from magnetar.protocol import pb

from ..topics.dedup import is_replicator
from ..errors import BrokerServiceError, parse_topic
from .auth import authorize_lookup, authorize_produce

if TYPE_CHECKING:
    from magnetar.protocol import Frame
    from magnetar.topic_name import TopicName

    from .connection import Connection

log = logging.getLogger("broker.service.session.schema_commands")

ServerError = pb.ServerError
DEFAULTS = SchemaDefaults()
_MINIMAL_VERSION = bytes(8)  # what a broker without a registry answers for any schema


class SchemaRefusedError(BrokerServiceError):
    """A registry refusal (incompatible, invalid, not found...) as the service's error, with the registry
    error's protocol code and HTTP status: an expected answer, logged as such, not as a failure."""


@contextlib.contextmanager
def _as_service_errors() -> Iterator[None]:
    try:
        yield
    except SchemaError as exc:
        err = SchemaRefusedError(str(exc))
        err.server_error, err.http_status, err.retriable = exc.server_error, exc.http_status, exc.retriable
        log.info("schema refused: %s", exc)
        raise err from exc


def registry_of(service: Any) -> Optional[SchemaRegistry]:
    """The registry over the service's configuration store (stateless, so made per call), or None."""
    configuration = getattr(service, "configuration_store", None)
    if configuration is None:
        return None
    return SchemaRegistry(SchemaStore(configuration.store), defaults=DEFAULTS)


def schema_from_proto(schema: pb.Schema) -> Optional[SchemaData]:
    """The schema a client sent; None for type None (how clients say BYTES: no schema)."""
    name = PROTO_TYPE_NAMES.get(schema.type)
    if name is None:
        with _as_service_errors():
            raise InvalidSchemaDataError(f"unknown schema type number {schema.type}")
    if name == "NONE":
        return None
    return SchemaData(type=name, data=bytes(schema.schema_data),
                      properties={kv.key: kv.value for kv in schema.properties})


def schema_to_proto(name: str, schema: SchemaData) -> pb.Schema:
    out = pb.Schema(name=name, schema_data=schema.data, type=TYPE_PROTO_NUMBERS.get(schema.type, 0))
    for key, value in sorted(schema.properties.items()):
        out.properties.add(key=key, value=value)
    return out


def policy_of(topic: Any) -> SchemaPolicy:
    """The schema policy ``topic`` runs with now: its own policies over its namespace's over the defaults
    (changes reach loaded topics through the policies watches, so the next PRODUCER / SUBSCRIBE sees them)."""
    return DEFAULTS.policy(topic.policies, getattr(topic, "own_topic_policies", None))


def _is_idle(topic: Any) -> bool:
    """No user producer, no consumer and no stored message: a consumer may then set the topic's schema."""
    if any(not getattr(p, "is_replicator", False) for p in topic.producers.values()):
        return False
    if any(sub.consumers for sub in topic.subscriptions.values()):
        return False
    ml = getattr(topic, "ml", None)
    if ml is not None:
        return ml.number_of_entries == 0
    return getattr(topic, "entries_added", 0) == 0


# ---------------------------------------------------------------------------------------------- producers, consumers


async def producer_schema_version(conn: "Connection", topic: Any, cmd: pb.CommandProducer, producer_name: str) -> bytes:
    """The ``schema_version`` for PRODUCER_SUCCESS, after the registry's checks (SchemaRefusedError when
    refused).

    Replicator producers (``pulsar.repl.<cluster>``) are exempt: they carry messages already checked in their
    origin region, with the origin's schema versions (the registry is global, so those are ours too)."""
    schema = schema_from_proto(cmd.schema) if cmd.HasField("schema") else None
    registry = registry_of(conn.service)
    if registry is None:
        return _MINIMAL_VERSION if schema is not None else b""
    if is_replicator(producer_name) and schema is None:
        return b""
    with _as_service_errors():
        version = await registry.version_for_producer(topic.topic_name, schema, policy_of(topic))
    return encode_version(version) if version is not None else b""


async def check_subscribe_schema(conn: "Connection", topic: Any, cmd: pb.CommandSubscribe) -> None:
    """SUBSCRIBE with a schema: checked against the topic's (or stored as its first if the topic is idle).
    AUTO_CONSUME consumers take whatever the topic has and are not checked."""
    if not cmd.HasField("schema"):
        return
    schema = schema_from_proto(cmd.schema)
    registry = registry_of(conn.service)
    if schema is None or schema.type == "AUTO_CONSUME" or registry is None:
        return
    with _as_service_errors():
        await registry.check_for_consumer(topic.topic_name, schema, policy_of(topic),
                                          topic_idle=_is_idle(topic))


# ---------------------------------------------------------------------------------------------- commands


async def handle_get_schema(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.getSchema
    Response = pb.CommandGetSchemaResponse
    topic_name = parse_topic(cmd.topic)
    await authorize_lookup(conn, topic_name)
    registry = registry_of(conn.service)
    version: Optional[int] = None
    if cmd.HasField("schema_version") and cmd.schema_version:
        try:
            version = decode_version(cmd.schema_version)
        except ValueError as exc:
            conn.send_command(Response(request_id=cmd.request_id, error_code=ServerError.UnknownError,
                                       error_message=f"invalid schema version: {exc}"))
            return
    with _as_service_errors():
        try:
            if registry is None:
                raise SchemaNotFoundError("this broker keeps no schemas")
            number, schema = await registry.get(topic_name, version)
        except SchemaNotFoundError as exc:  # Pulsar's answer: TopicNotFound
            conn.send_command(Response(request_id=cmd.request_id, error_code=ServerError.TopicNotFound,
                                       error_message=f"Topic not found or no-schema: {exc}"))
            return
    conn.send_command(Response(request_id=cmd.request_id, schema=schema_to_proto(schema_id(topic_name), schema),
                               schema_version=encode_version(number)))


async def handle_get_or_create_schema(conn: "Connection", frame: "Frame") -> None:
    """The Java client's way to register a schema before publishing with it (AUTO_PRODUCE, multi-schema
    producers): the same rules as a PRODUCER bringing that schema, on a topic that must exist."""
    cmd = frame.command.getOrCreateSchema
    Response = pb.CommandGetOrCreateSchemaResponse
    topic_name: "TopicName" = parse_topic(cmd.topic)
    await authorize_produce(conn, topic_name)
    topic = await conn.service.get_topic(str(topic_name), create=False)
    if topic is None:
        conn.send_command(Response(request_id=cmd.request_id, error_code=ServerError.TopicNotFound,
                                   error_message=f"Topic not found {topic_name}"))
        return
    schema = schema_from_proto(cmd.schema)
    registry = registry_of(conn.service)
    if registry is None:
        conn.send_command(Response(request_id=cmd.request_id, schema_version=_MINIMAL_VERSION))
        return
    with _as_service_errors():
        version = await registry.version_for_producer(topic_name, schema, policy_of(topic))
    conn.send_command(Response(request_id=cmd.request_id,
                               schema_version=encode_version(version) if version is not None else b""))
