"""Schemas over REST, at Pulsar's paths and with its JSON:

* ``GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema`` — the latest version
  (``{"version", "type", "timestamp", "data", "properties"}``); ``GET .../schema/{version}`` — that version;
  ``GET .../schemas`` — every live version (``{"getSchemaResponses": [...]}``);
* ``POST .../schema`` (``{"type", "schema", "properties"}``) — adds a version under the topic's strategy (its
  own, else its namespace's; answers ``{"version": {"version": N}}``; an identical schema answers its existing
  version);
  ``DELETE .../schema[?force=true]`` — deletes it (a deletion marker; ``force``: every version);
* ``POST .../compatibility`` (same body) — ``{"compatibility": bool, "schemaCompatibilityStrategy": ...}``,
  storing nothing; ``POST .../version`` (same body) — ``{"version": N}`` of an identical live version;
* ``GET|PUT /admin/v2/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy`` (a JSON string),
  ``GET|POST .../isAllowAutoUpdateSchema`` and ``GET|POST .../schemaValidationEnforced`` (booleans);
* ``GET|PUT|DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}/schemaCompatibilityStrategy`` (a JSON
  string) and ``GET|POST|DELETE .../schemaValidationEnforced`` (a boolean): the topic's own
  (``TopicPolicies``; a partitioned topic's cover its partitions), overriding its namespace's for PRODUCER,
  SUBSCRIBE and the uploads above (which use the persistent topic's, the schema being shared by both
  domains); ``?applied=true`` answers what applies. As Pulsar, without it the strategy GET answers 204 (no
  body) when none is set and the flag GET ``false``. The topic must exist (404) or have policies of its own;
  UNDEFINED means "the namespace's" (stored as nothing), as in Pulsar. Non-persistent topics are
  refused (405): they follow their namespace's.

``{topic}`` is the topic's local name (URL-encoded); partitions share their partitioned topic's schema and the
domain takes no part, as in Pulsar. The registry is global, so any broker answers (no redirect to the owner).
A malformed body is a 400 naming the field; an invalid definition a 422 and an incompatible one a 409 (as
Pulsar); an unknown namespace, topic (topic policies), schema or version a 404. Nothing is stored when a call
fails. Unlike Pulsar, ``compatibility`` answers ``false`` (200) for an incompatible schema rather than an
error, with the reason in ``reason``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.schema import IncompatibleSchemaError, SchemaData, SchemaDefaults, SchemaRegistry, Strategy
from broker.schema.types import TYPE_PROTO_NUMBERS, UNSTORED_TYPES
from config_store import Policies, SchemaStore
from config_store.models import SCHEMA_COMPATIBILITY_STRATEGIES
from magnetar.topic_name import InvalidTopicNameError, TopicName, decode_local_name

from .body import expect_bool, expect_object, expect_str, path_int, query_bool, read_json
from .context import AdminContext
from .errors import bad_request, not_found
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import (own_topic_policies, persistent_topic_scope, policies_owner, policy_answer,
                             set_namespace_policy, set_topic_policy)


routes = web.RouteTableDef()

S = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TP = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', 'schemas', tenant, namespace, topic, ...]; the same index in TP
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


async def _strategy(ctx: AdminContext, topic: TopicName, policies: Policies) -> Strategy:
    """The strategy uploads to ``topic`` are checked with: its own, else its namespace's, else the default."""
    return DEFAULTS.policy(policies, await own_topic_policies(ctx, policies_owner(topic))).strategy


def _parse_strategy(value: Any) -> str:
    """A strategy name from a request body (a JSON string); 400 otherwise."""
    if not isinstance(value, str) or value not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise bad_request(f"the strategy must be one of {', '.join(SCHEMA_COMPATIBILITY_STRATEGIES)}, got {value!r}")
    return value


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
    version = await _registry(ctx).put_if_absent(topic, schema, await _strategy(ctx, topic, policies))
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
    strategy = await _strategy(ctx, topic, policies)
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


@routes.get(NS + "/schemaCompatibilityStrategy")
async def get_strategy(request: web.Request) -> web.Response:
    """The namespace's strategy as set (``UNDEFINED``: the broker's default, FULL, applies)."""
    ctx = request.app[CONTEXT]
    return web.json_response((await ctx.policies(*_names(request))).schema_compatibility_strategy)


@routes.put(NS + "/schemaCompatibilityStrategy")
async def set_strategy(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    tenant, namespace = _names(request)
    value = _parse_strategy(await read_json(request))
    await set_namespace_policy(ctx, tenant, namespace, "schema_compatibility_strategy", value)
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
    await set_namespace_policy(ctx, tenant, namespace, "is_allow_auto_update_schema", value)
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
    await set_namespace_policy(ctx, tenant, namespace, "schema_validation_enforced", value)
    return web.Response(status=204)


# ---------------------------------------------------------------------------------------------- topic policies


_NON_PERSISTENT = ("topic-level schema policies are served for persistent topics only (a non-persistent topic "
                   "follows its namespace's)")


def _topic_scope(request: web.Request):
    return persistent_topic_scope(request, _TOPIC_SEGMENT, _NON_PERSISTENT)


@routes.get(TP + "/schemaCompatibilityStrategy")
async def get_topic_strategy(request: web.Request) -> web.Response:
    """The topic's own strategy (204 without a body when none is set, UNDEFINED counting as none, as Pulsar);
    with ``applied=true`` the one that applies."""
    _, _, namespace_policies, own = await _topic_scope(request)
    if query_bool(request, "applied"):
        return web.json_response(DEFAULTS.policy(namespace_policies, own).strategy.value)
    strategy = None if own is None else own.schema_compatibility_strategy
    return policy_answer(None if strategy == "UNDEFINED" else strategy)


@routes.put(TP + "/schemaCompatibilityStrategy")
async def set_topic_strategy(request: web.Request) -> web.Response:
    value = _parse_strategy(await read_json(request))
    ctx, topic, _, _ = await _topic_scope(request)
    await set_topic_policy(ctx, topic, "schema_compatibility_strategy", None if value == "UNDEFINED" else value)
    return web.Response(status=204)


@routes.delete(TP + "/schemaCompatibilityStrategy")
async def remove_topic_strategy(request: web.Request) -> web.Response:
    """Removes the topic's own strategy: its namespace's applies again (204 whether or not one was set)."""
    ctx, topic, _, _ = await _topic_scope(request)
    await set_topic_policy(ctx, topic, "schema_compatibility_strategy", None)
    return web.Response(status=204)


@routes.get(TP + "/schemaValidationEnforced")
async def get_topic_validation_enforced(request: web.Request) -> web.Response:
    """The topic's own flag, ``false`` when none is set (Pulsar's answer: a boolean, never 204); with
    ``applied=true`` the one that applies."""
    _, _, namespace_policies, own = await _topic_scope(request)
    if query_bool(request, "applied"):
        return web.json_response(DEFAULTS.policy(namespace_policies, own).validation_enforced)
    return web.json_response(bool(own is not None and own.schema_validation_enforced))


@routes.post(TP + "/schemaValidationEnforced")
async def set_topic_validation_enforced(request: web.Request) -> web.Response:
    value = expect_bool(await read_json(request), "the schemaValidationEnforced flag")
    ctx, topic, _, _ = await _topic_scope(request)
    await set_topic_policy(ctx, topic, "schema_validation_enforced", value)
    return web.Response(status=204)


@routes.delete(TP + "/schemaValidationEnforced")
async def remove_topic_validation_enforced(request: web.Request) -> web.Response:
    """Removes the topic's own flag: its namespace's applies again (204 whether or not one was set)."""
    ctx, topic, _, _ = await _topic_scope(request)
    await set_topic_policy(ctx, topic, "schema_validation_enforced", None)
    return web.Response(status=204)
