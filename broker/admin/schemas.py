"""Schemas over REST, at Pulsar's paths and with its JSON:

* ``GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema`` — the latest version
  (``{"version", "type", "timestamp", "data", "properties"}``); ``GET .../schema/{version}`` — that version;
  ``GET .../schemas`` — every live version (``{"getSchemaResponses": [...]}``);
* ``POST .../schema`` (``{"type", "schema", "properties"}``) — adds a version under the namespace's strategy
  (answers ``{"version": {"version": N}}``; an identical schema answers its existing version);
  ``DELETE .../schema[?force=true]`` — deletes it (a deletion marker; ``force``: every version);
* ``POST .../compatibility`` (same body) — ``{"compatibility": bool, "schemaCompatibilityStrategy": ...}``,
  storing nothing; ``POST .../version`` (same body) — ``{"version": N}`` of an identical live version;
* ``GET|PUT /admin/v2/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy`` (a JSON string),
  ``GET|POST .../isAllowAutoUpdateSchema`` and ``GET|POST .../schemaValidationEnforced`` (booleans).

``{topic}`` is the topic's local name (URL-encoded); partitions share their partitioned topic's schema and the
domain takes no part, as in Pulsar. The registry is global, so any broker answers (no redirect to the owner).
A malformed body is a 400 naming the field; an invalid definition a 422 and an incompatible one a 409 (as
Pulsar); an unknown namespace, schema or version a 404. Nothing is stored when a call fails. Unlike Pulsar,
``compatibility`` answers ``false`` (200) for an incompatible schema rather than an error, with the reason
in ``reason``.
"""

from __future__ import annotations

from typing import Any, Callable

from aiohttp import web

from broker.schema import IncompatibleSchemaError, SchemaData, SchemaDefaults, SchemaRegistry
from broker.schema.types import TYPE_PROTO_NUMBERS, UNSTORED_TYPES
from config_store import Policies, SchemaStore
from config_store.models import SCHEMA_COMPATIBILITY_STRATEGIES
from magnetar.topic_name import InvalidTopicNameError, TopicName, decode_local_name

from .body import expect_bool, expect_object, expect_str, path_int, query_bool, read_json
from .context import AdminContext
from .errors import bad_request, not_found
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import update_namespace


routes = web.RouteTableDef()

S = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', 'schemas', tenant, namespace, topic, ...]
DEFAULTS = SchemaDefaults()
_TYPE_NAMES = sorted(set(TYPE_PROTO_NUMBERS) | UNSTORED_TYPES)


# ---------------------------------------------------------------------------------------------- helpers




def _topic(request: web.Request) -> TopicName:
    tenant, namespace = _names(request)
    raw = request.rel_url.raw_path.split("/")
    try:
        local = decode_local_name(raw[_TOPIC_SEGMENT])
        return TopicName.parse(f"persistent://{tenant}/{namespace}/{local}")
    except (IndexError, UnicodeDecodeError, InvalidTopicNameError) as e:
        raise bad_request(f"malformed topic in {request.rel_url.raw_path!r}: {e}") from None


def _registry(ctx: AdminContext) -> SchemaRegistry:
    return SchemaRegistry(SchemaStore(ctx.configuration.store), defaults=DEFAULTS)


async def _context(request: web.Request) -> tuple[AdminContext, TopicName, Policies]:
    """The context, the topic and its namespace's policies (404 when the namespace does not exist)."""
    ctx = request.app[CONTEXT]
    topic = _topic(request)
    return ctx, topic, await ctx.policies(topic.tenant, topic.namespace_portion)


def parse_payload(body: Any) -> SchemaData:
    """A ``PostSchemaPayload`` (``type``, ``schema``, ``properties``) as SchemaData; 400 naming the field."""
    obj = expect_object(body, "the schema payload")
    kind = obj.get("type")
    if kind is None:
        raise bad_request(f"the schema payload needs a type: one of {', '.join(_TYPE_NAMES)}")
    if not isinstance(kind, str) or kind not in _TYPE_NAMES:
        raise bad_request(f"type must be one of {', '.join(_TYPE_NAMES)}, got {kind!r}")
    definition = expect_str(obj.get("schema", ""), "schema", nullable=True)
    properties = obj.get("properties") or {}
    if not isinstance(properties, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in properties.items()):
        raise bad_request("properties must be an object mapping strings to strings")
    return SchemaData(type=kind, data=definition.encode("utf-8"), properties=dict(properties))


def schema_json(version: int, schema: SchemaData) -> dict[str, Any]:
    """Pulsar's ``GetSchemaResponse``."""
    return {"version": version, "type": schema.type, "timestamp": schema.timestamp_ms,
            "data": schema.data.decode("utf-8", errors="replace"), "properties": dict(schema.properties)}


# ---------------------------------------------------------------------------------------------- topic schemas


@routes.get(S + "/schema")
async def get_latest_schema(request: web.Request) -> web.Response:
    ctx, topic, _ = await _context(request)
    version, schema = await _registry(ctx).get(topic)
    return web.json_response(schema_json(version, schema))


@routes.get(S + "/schema/{version}")
async def get_schema_version(request: web.Request) -> web.Response:
    version = path_int(request, "version")
    ctx, topic, _ = await _context(request)
    number, schema = await _registry(ctx).get(topic, version)
    return web.json_response(schema_json(number, schema))


@routes.get(S + "/schemas")
async def get_all_schemas(request: web.Request) -> web.Response:
    ctx, topic, _ = await _context(request)
    live = await _registry(ctx).live(topic)
    if not live:
        raise not_found(f"Topic {topic.tenant}/{topic.namespace_portion}/{topic.encoded_local_name} has no schema")
    return web.json_response({"getSchemaResponses": [schema_json(v, s) for v, s in live]})


@routes.post(S + "/schema")
async def post_schema(request: web.Request) -> web.Response:
    schema = parse_payload(await read_json(request))
    ctx, topic, policies = await _context(request)
    version = await _registry(ctx).put_if_absent(topic, schema, DEFAULTS.policy(policies).strategy)
    return web.json_response({"version": {"version": version}})


@routes.delete(S + "/schema")
async def delete_schema(request: web.Request) -> web.Response:
    force = query_bool(request, "force")
    ctx, topic, _ = await _context(request)
    version = await _registry(ctx).delete(topic, force=force)
    return web.json_response({"version": version})


@routes.post(S + "/compatibility")
async def test_compatibility(request: web.Request) -> web.Response:
    schema = parse_payload(await read_json(request))
    ctx, topic, policies = await _context(request)
    strategy = DEFAULTS.policy(policies).strategy
    answer: dict[str, Any] = {"compatibility": True, "schemaCompatibilityStrategy": strategy.value}
    try:
        await _registry(ctx).check_compatibility(topic, schema, strategy)
    except IncompatibleSchemaError as e:
        answer.update(compatibility=False, reason=str(e))
    return web.json_response(answer)


@routes.post(S + "/version")
async def get_version_by_schema(request: web.Request) -> web.Response:
    schema = parse_payload(await read_json(request))
    ctx, topic, _ = await _context(request)
    version = await _registry(ctx).find_version(topic, schema)
    if version is None:
        raise not_found(f"no live version of the schema of {topic} is identical to the one given")
    return web.json_response({"version": version})


# ---------------------------------------------------------------------------------------------- namespace policies


async def _update(ctx: AdminContext, tenant: str, namespace: str, fn: Callable[[Policies], None]) -> None:
    def apply(p: Policies) -> Policies:
        fn(p)
        return p

    await update_namespace(ctx, tenant, namespace, apply)


@routes.get(NS + "/schemaCompatibilityStrategy")
async def get_strategy(request: web.Request) -> web.Response:
    """The namespace's strategy as set (``UNDEFINED``: the broker's default, FULL, applies)."""
    ctx = request.app[CONTEXT]
    return web.json_response((await ctx.policies(*_names(request))).schema_compatibility_strategy)


@routes.put(NS + "/schemaCompatibilityStrategy")
async def set_strategy(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    value = await read_json(request)
    if not isinstance(value, str) or value not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise bad_request(f"the strategy must be one of {', '.join(SCHEMA_COMPATIBILITY_STRATEGIES)}, got {value!r}")

    def apply(p: Policies) -> None:
        p.schema_compatibility_strategy = value

    await _update(ctx, tenant, namespace, apply)
    return web.Response(status=204)


@routes.get(NS + "/isAllowAutoUpdateSchema")
async def get_auto_update(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return web.json_response(DEFAULTS.policy(await ctx.policies(*_names(request))).allow_auto_update)


@routes.post(NS + "/isAllowAutoUpdateSchema")
async def set_auto_update(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    value = expect_bool(await read_json(request), "the isAllowAutoUpdateSchema flag")

    def apply(p: Policies) -> None:
        p.is_allow_auto_update_schema = value

    await _update(ctx, tenant, namespace, apply)
    return web.Response(status=204)


@routes.get(NS + "/schemaValidationEnforced")
async def get_validation_enforced(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return web.json_response(DEFAULTS.policy(await ctx.policies(*_names(request))).validation_enforced)


@routes.post(NS + "/schemaValidationEnforced")
async def set_validation_enforced(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    value = expect_bool(await read_json(request), "the schemaValidationEnforced flag")

    def apply(p: Policies) -> None:
        p.schema_validation_enforced = value

    await _update(ctx, tenant, namespace, apply)
    return web.Response(status=204)

