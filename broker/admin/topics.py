"""``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/...``: topics, partitioned topics and
subscriptions.

Every operation on one topic runs at the topic's owner: a broker that does not serve the topic answers
307 to the owner (or to the broker it assigns the bundle to, with ``authoritative=true``), as Pulsar does;
``magnetar admin`` and pulsar-admin follow it. Calls that span partitions fan out over HTTP to each
partition's owner (through this broker's own URL, so the same redirects apply). Topic policies live in the
global configuration store, so any broker of any region answers them without a redirect.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

from aiohttp import web

from broker.managed_ledger.api import Position
from config_store import NodeExistsError, NotFoundError, TopicPolicies
from magnetar.topic_name import InvalidTopicNameError, TopicName, decode_local_name

from .body import ABSENT, expect_int, expect_object, path_int, query_bool, read_json, topic_of
from .context import AdminContext
from .errors import RestError, bad_request, conflict, not_found
from .keys import CONTEXT
from .replication import check_clusters, replication_clusters

routes = web.RouteTableDef()

T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]
_SUBSCRIPTION_SEGMENT = 8  # [..., topic, 'subscription', subscription, ...]
_LATEST = (1 << 63) - 1  # MessageId.latest is (Long.MAX_VALUE, Long.MAX_VALUE)


# ---------------------------------------------------------------------------------------------- helpers


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _normalize_listed(name: str, tenant: str, namespace: str, domain: str) -> str | None:
    """A full topic name from what the managed-ledger factory lists (a path or an encoded local name)."""
    try:
        if name.count("/") == 3:
            return str(TopicName.from_path(name))
        return str(TopicName.parse(f"{domain}://{tenant}/{namespace}/{decode_local_name(name)}"))
    except (InvalidTopicNameError, UnicodeDecodeError):
        return None


async def namespace_topics(ctx: AdminContext, tenant: str, namespace: str, domain: str = "persistent") -> list[str]:
    """The topics of a namespace in this region: persistent ones from the managed-ledger metadata (every
    broker's), plus whatever this broker has loaded."""
    found: set[str] = set()
    if domain == "persistent" and ctx.ml_factory is not None:
        for name in await ctx.ml_factory.list(f"{tenant}/{namespace}/{domain}"):
            full = _normalize_listed(name, tenant, namespace, domain)
            if full is not None:
                found.add(full)
    if ctx.service is not None:
        prefix = f"{domain}://{tenant}/{namespace}/"
        found.update(t for t in ctx.service.topics() if t.startswith(prefix))
    return sorted(found)


async def topic_exists(ctx: AdminContext, topic: TopicName) -> bool:
    if ctx.service is not None and str(topic) in ctx.service.topics():
        return True
    if topic.persistent and ctx.ml_factory is not None:
        return bool(await ctx.ml_factory.exists(topic.path))
    return False


async def _partitions(ctx: AdminContext, topic: TopicName) -> int:
    """The partition count of ``topic`` (0: not a partitioned topic)."""
    try:
        return (await ctx.configuration.get_partitioned_topic(topic.tenant, topic.namespace_portion,
                                                              topic.domain.value, topic.local_name)).value
    except NotFoundError:
        return 0


async def _served_topic(request: web.Request, *, create: bool = False) -> tuple[AdminContext, TopicName, Any]:
    """(context, name, Topic) for an operation on one existing topic, at its owner (else 307 / 404)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    service = ctx.require_service()
    await ctx.ensure_owner(request, topic)
    served = await service.get_topic(str(topic), create=create)
    if served is None:
        raise not_found(f"Topic {topic} not found")
    return ctx, topic, served


def _subscription_of(request: web.Request) -> str:
    raw = request.rel_url.raw_path.split("/")
    try:
        name = decode_local_name(raw[_SUBSCRIPTION_SEGMENT])
    except (IndexError, UnicodeDecodeError):
        raise bad_request(f"malformed subscription in {request.rel_url.raw_path!r}") from None
    if not name:
        raise bad_request("the subscription name is empty")
    return name


def _require_subscription(topic: TopicName, served: Any, subscription: str) -> None:
    if subscription not in served.subscriptions:
        raise not_found(f"Subscription {subscription} not found on topic {topic}")


def _message_id(body: Any) -> tuple[int, int]:
    """``(ledgerId, entryId)`` of a MessageId body; (-1, -1) means earliest and (MAX, MAX) latest, as
    pulsar-admin sends ``MessageId.earliest`` / ``MessageId.latest``."""
    obj = expect_object(body, "the message id")
    for key in ("ledgerId", "entryId"):
        if key not in obj:
            raise bad_request(f"the message id needs {key}")
    ledger_id = expect_int(obj["ledgerId"], "ledgerId", minimum=-1, maximum=_LATEST)
    entry_id = expect_int(obj["entryId"], "entryId", minimum=-1, maximum=_LATEST)
    for key in ("partitionIndex", "batchIndex"):
        if key in obj:
            expect_int(obj[key], key, minimum=-1)
    if ledger_id < 0 and entry_id >= 0:
        raise bad_request(f"ledgerId must be >= 0 (or -1 with entryId -1 for earliest), got {ledger_id}")
    return ledger_id, entry_id


def _initial_position(message_id: tuple[int, int]) -> str | Position:
    if message_id == (-1, -1):
        return "earliest"
    if message_id == (_LATEST, _LATEST):
        return "latest"
    return Position(*message_id)


async def _fanout(ctx: AdminContext, method: str, paths: list[str], *, missing_ok: bool = True) -> list[Any]:
    """Runs ``method`` on each path at its owner (through this broker's URL); JSON answers in order
    (None for a 404 when ``missing_ok``)."""
    limit = asyncio.Semaphore(ctx.fanout_concurrency)
    base = ctx.ownership.http_url

    async def one(path: str) -> Any:
        async with limit:
            async with ctx.client().request(method, base + path) as response:
                if response.status == 404 and missing_ok:
                    return None
                if response.status >= 400:
                    reason = await response.text()
                    raise RestError(response.status if response.status < 500 else 502, f"{method} {path}: {reason}")
                if response.status == 204:
                    return None
                return await response.json()

    return list(await asyncio.gather(*(one(p) for p in paths)))


# ---------------------------------------------------------------------------------------------- listing


@routes.get(T)
async def list_topics(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    info = request.match_info
    await ctx.policies(info["tenant"], info["namespace"])
    return web.json_response(await namespace_topics(ctx, info["tenant"], info["namespace"], info["domain"]))


@routes.get(T + "/partitioned")
async def list_partitioned_topics(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    info = request.match_info
    tenant, namespace, domain = info["tenant"], info["namespace"], info["domain"]
    await ctx.policies(tenant, namespace)
    names = await ctx.configuration.list_partitioned_topics(tenant, namespace, domain)
    return web.json_response([f"{domain}://{tenant}/{namespace}/{n}" for n in names])


# ---------------------------------------------------------------------------------------------- non-partitioned


@routes.put(T + "/{topic}")
async def create_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if await _partitions(ctx, topic):
        raise conflict(f"Topic {topic} already exists as a partitioned topic")
    service = ctx.require_service()
    await ctx.ensure_owner(request, topic)
    if await topic_exists(ctx, topic):
        raise conflict(f"Topic {topic} already exists")
    await service.get_topic(str(topic), create=True)
    return web.Response(status=204)


@routes.delete(T + "/{topic}")
async def delete_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    force = query_bool(request, "force")
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if await _partitions(ctx, topic):
        raise conflict(f"Topic {topic} is a partitioned topic: delete it with DELETE .../partitions")
    service = ctx.require_service()
    await ctx.ensure_owner(request, topic)
    if not await topic_exists(ctx, topic):
        raise not_found(f"Topic {topic} not found")
    await service.delete_topic(str(topic), force=force)
    return web.Response(status=204)


@routes.put(T + "/{topic}/unload")
async def unload_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    n = await _partitions(ctx, topic)
    if n:
        await _fanout(ctx, "PUT", [f"/admin/v2/{topic.partition(i).rest_path}/unload" for i in range(n)])
        return web.Response(status=204)
    service = ctx.require_service()
    await ctx.ensure_owner(request, topic)
    if not await service.unload_topic(str(topic)) and not await topic_exists(ctx, topic):
        raise not_found(f"Topic {topic} not found")
    return web.Response(status=204)


@routes.get(T + "/{topic}/stats")
async def topic_stats(request: web.Request) -> web.Response:
    _, _, served = await _served_topic(request)
    return web.json_response(await _maybe_await(served.stats()))


@routes.get(T + "/{topic}/internalStats")
async def topic_internal_stats(request: web.Request) -> web.Response:
    _, _, served = await _served_topic(request)
    return web.json_response(await _maybe_await(served.internal_stats()))


# ---------------------------------------------------------------------------------------------- partitioned


def _partition_count(body: Any, ctx: AdminContext) -> int:
    return expect_int(body, "the number of partitions", minimum=1, maximum=ctx.max_partitions_per_topic)


@routes.put(T + "/{topic}/partitions")
async def create_partitioned_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    count = _partition_count(await read_json(request), ctx)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if topic.is_partition:
        raise bad_request(f"{topic} names a partition; a partitioned topic's name must not end in -partition-N")
    if await topic_exists(ctx, topic):
        raise conflict(f"Topic {topic} already exists as a non-partitioned topic")
    try:
        await ctx.configuration.create_partitioned_topic(topic.tenant, topic.namespace_portion, topic.domain.value,
                                                         topic.local_name, count)
    except NodeExistsError:
        raise conflict(f"Partitioned topic {topic} already exists") from None
    return web.Response(status=204)


@routes.post(T + "/{topic}/partitions")
async def update_partitioned_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    count = _partition_count(await read_json(request), ctx)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    current = await _partitions(ctx, topic)
    if not current:
        raise not_found(f"Partitioned topic {topic} not found")
    if count <= current:
        raise conflict(f"Number of new partitions ({count}) must be greater than the existing number ({current})")

    def grow(old: int) -> int:
        if count <= old:
            raise RestError(409, f"Number of new partitions ({count}) must be greater than the existing "
                                 f"number ({old})")
        return count

    await ctx.configuration.update_partitioned_topic(topic.tenant, topic.namespace_portion, topic.domain.value,
                                                     topic.local_name, grow)
    return web.Response(status=204)


@routes.get(T + "/{topic}/partitions")
async def get_partitioned_metadata(request: web.Request) -> web.Response:
    """``{"partitions": N}``; 0 for a topic that is not partitioned (what pulsar-client asks first)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    return web.json_response({"partitions": await _partitions(ctx, topic)})


@routes.delete(T + "/{topic}/partitions")
async def delete_partitioned_topic(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    force = query_bool(request, "force")
    await ctx.policies(topic.tenant, topic.namespace_portion)
    n = await _partitions(ctx, topic)
    if not n:
        raise not_found(f"Partitioned topic {topic} not found")
    query = "?force=true" if force else ""
    await _fanout(ctx, "DELETE", [f"/admin/v2/{topic.partition(i).rest_path}{query}" for i in range(n)])
    await ctx.configuration.delete_partitioned_topic(topic.tenant, topic.namespace_portion, topic.domain.value,
                                                     topic.local_name)
    return web.Response(status=204)


@routes.get(T + "/{topic}/partitioned-stats")
async def partitioned_stats(request: web.Request) -> web.Response:
    """Stats summed over every partition (each read at its owner), plus ``partitions`` by name when
    ``perPartition`` (default true), as Pulsar's PartitionedTopicStats."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    per_partition = query_bool(request, "perPartition", True)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    n = await _partitions(ctx, topic)
    if not n:
        raise not_found(f"Partitioned topic {topic} not found")
    names = [topic.partition(i) for i in range(n)]
    answers = await _fanout(ctx, "GET", [f"/admin/v2/{p.rest_path}/stats" for p in names])
    total = aggregate_stats([a for a in answers if a is not None])
    total["metadata"] = {"partitions": n}
    if per_partition:
        total["partitions"] = {str(p): a for p, a in zip(names, answers) if a is not None}
    return web.json_response(total)


def aggregate_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums numbers, concatenates lists and merges subscriptions/replication by name (pure)."""
    total: dict[str, Any] = {}
    for stats in parts:
        _merge_into(total, stats)
    return total


def _merge_into(total: dict[str, Any], stats: dict[str, Any]) -> None:
    for key, value in stats.items():
        if isinstance(value, bool) or value is None or isinstance(value, str):
            total.setdefault(key, value)
        elif isinstance(value, (int, float)):
            total[key] = total.get(key, 0) + value
        elif isinstance(value, list):
            total.setdefault(key, [])
            total[key] = total[key] + value if isinstance(total[key], list) else value
        elif isinstance(value, dict):
            merged = total.setdefault(key, {})
            if key in ("subscriptions", "replication"):
                for name, sub in value.items():
                    if isinstance(sub, dict):
                        _merge_into(merged.setdefault(name, {}), sub)
            else:
                _merge_into(merged, value)


# ---------------------------------------------------------------------------------------------- subscriptions


@routes.get(T + "/{topic}/subscriptions")
async def list_subscriptions(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    n = await _partitions(ctx, topic)
    if n:
        answers = await _fanout(ctx, "GET", [f"/admin/v2/{topic.partition(i).rest_path}/subscriptions"
                                            for i in range(n)])
        return web.json_response(sorted({s for a in answers if a for s in a}))
    _, _, served = await _served_topic(request)
    return web.json_response(sorted(served.subscriptions))


@routes.put(T + "/{topic}/subscription/{subscription}")
async def create_subscription(request: web.Request) -> web.Response:
    """Creates a durable subscription at the body's message id (default latest), creating the topic if
    needed (Pulsar's default auto-creation)."""
    subscription = _subscription_of(request)
    body = await read_json(request, required=False)
    position = "latest" if body is ABSENT else _initial_position(_message_id(body))
    _, topic, served = await _served_topic(request, create=True)
    if subscription in served.subscriptions:
        raise conflict(f"Subscription {subscription} already exists for topic {topic}")
    await served.create_subscription(subscription, position)
    return web.Response(status=204)


@routes.delete(T + "/{topic}/subscription/{subscription}")
async def delete_subscription(request: web.Request) -> web.Response:
    subscription = _subscription_of(request)
    _, topic, served = await _served_topic(request)
    force = query_bool(request, "force")
    _require_subscription(topic, served, subscription)
    await served.delete_subscription(subscription, force=force)
    return web.Response(status=204)


@routes.post(T + "/{topic}/subscription/{subscription}/resetcursor/{timestamp}")
async def reset_cursor_to_time(request: web.Request) -> web.Response:
    subscription = _subscription_of(request)
    timestamp_ms = path_int(request, "timestamp")
    _, topic, served = await _served_topic(request)
    _require_subscription(topic, served, subscription)
    await served.reset_cursor(subscription, timestamp_ms=timestamp_ms)
    return web.Response(status=204)


@routes.post(T + "/{topic}/subscription/{subscription}/resetcursor")
async def reset_cursor_to_position(request: web.Request) -> web.Response:
    subscription = _subscription_of(request)
    ledger_id, entry_id = _message_id(await read_json(request))
    _, topic, served = await _served_topic(request)
    _require_subscription(topic, served, subscription)
    await served.reset_cursor(subscription, position=served.seek_position(ledger_id, entry_id))
    return web.Response(status=204)


@routes.post(T + "/{topic}/subscription/{subscription}/skip/{n}")
async def skip_messages(request: web.Request) -> web.Response:
    subscription = _subscription_of(request)
    n = path_int(request, "n")
    _, topic, served = await _served_topic(request)
    _require_subscription(topic, served, subscription)
    await served.skip(subscription, n)
    return web.Response(status=204)


@routes.post(T + "/{topic}/subscription/{subscription}/expireMessages/{seconds}")
async def expire_messages(request: web.Request) -> web.Response:
    subscription = _subscription_of(request)
    seconds = path_int(request, "seconds")
    _, topic, served = await _served_topic(request)
    _require_subscription(topic, served, subscription)
    await served.expire(subscription, seconds)
    return web.Response(status=204)



# ---------------------------------------------------------------------------------------------- termination


@routes.post(T + "/{topic}/terminate")
async def terminate_topic(request: web.Request) -> web.Response:
    """Pulsar's ``terminate``: no more messages on the topic, ever; answers the last message id
    (``MessageIdImpl`` JSON). Refused on a partitioned topic's base name (405, as Pulsar does) and on
    non-persistent topics."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if not topic.persistent:
        raise RestError(405, f"Topic {topic} is non-persistent: termination is not allowed")
    if await _partitions(ctx, topic):
        raise RestError(405, f"Termination of a partitioned topic is not allowed ({topic}); "
                             "terminate its partitions one by one")
    _, _, served = await _served_topic(request)
    position = await served.terminate()
    return web.json_response({"ledgerId": position.ledger_id, "entryId": position.entry_id, "partitionIndex": -1})


# ---------------------------------------------------------------------------------------------- topic policies


def _policies_key(topic: TopicName) -> tuple[str, str, str, str]:
    """``(tenant, namespace, domain, local name)``: where the topic's policies are stored, for the name as
    given (a partitioned topic's base name covers its partitions)."""
    return topic.tenant, topic.namespace_portion, topic.domain.value, topic.local_name


@routes.get(T + "/{topic}/replication")
async def get_replication_clusters(request: web.Request) -> web.Response:
    """The topic's own replication clusters; 204 without a body when it has none, as Pulsar answers (with
    ``applied=true``: the namespace's then). The topic need not exist yet."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    applied = query_bool(request, "applied")
    namespace_policies = await ctx.policies(topic.tenant, topic.namespace_portion)
    try:
        clusters = (await ctx.configuration.get_topic_policies(*_policies_key(topic))).value.replication_clusters
    except NotFoundError:
        clusters = None
    if clusters is None and applied:
        clusters = namespace_policies.replication_clusters
    return web.Response(status=204) if clusters is None else web.json_response(clusters)


@routes.post(T + "/{topic}/replication")
async def set_replication_clusters(request: web.Request) -> web.Response:
    """Overrides the namespace's replication clusters for this topic (a JSON list of cluster names)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    clusters = replication_clusters(await read_json(request))
    await ctx.policies(topic.tenant, topic.namespace_portion)
    await check_clusters(ctx, topic.tenant, clusters)

    def apply(p: TopicPolicies) -> TopicPolicies:
        p.replication_clusters = list(clusters)
        return p

    await _set_topic_policies(ctx, topic, apply)
    return web.Response(status=204)


@routes.delete(T + "/{topic}/replication")
async def remove_replication_clusters(request: web.Request) -> web.Response:
    """Removes the topic's override: the namespace's replication clusters apply again (204 if none was set)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)

    def clear(p: TopicPolicies) -> TopicPolicies:
        p.replication_clusters = None
        return p

    await _set_topic_policies(ctx, topic, clear)
    return web.Response(status=204)


async def _set_topic_policies(ctx: AdminContext, topic: TopicName,
                              fn: Callable[[TopicPolicies], TopicPolicies]) -> None:
    try:
        await ctx.configuration.set_topic_policies(*_policies_key(topic), fn)
    except NotFoundError:
        raise not_found(f"Namespace {topic.namespace} does not exist") from None
