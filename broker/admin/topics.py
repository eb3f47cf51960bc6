"""``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/...``: topics and partitioned topics (the
subscription calls are in ``subscriptions.py``, served from this module's route table).

Every operation on one topic runs at the topic's owner: a broker that does not serve the topic answers
307 to the owner (or to the broker it assigns the bundle to, with ``authoritative=true``), as Pulsar does;
``magnetar admin`` and pulsar-admin follow it. Calls on a partitioned topic's base name fan out over HTTP to
each partition's owner (``fanout.py``: through this broker's own URL, so the same redirects apply). Topic
policies live in the global configuration store, so any broker of any region answers them without a redirect.
"""

from __future__ import annotations

import inspect
from typing import Any

from aiohttp import web

from config_store import NodeExistsError, TopicPolicies
from magnetar.topic_name import InvalidTopicNameError, TopicName, decode_local_name

from . import compaction, subscriptions
from .body import expect_int, query_bool, read_json, topic_of
from .context import AdminContext
from .errors import RestError, bad_request, conflict, not_found
from .fanout import PartitionAnswer, fan_out, judge, partition_calls
from .keys import CONTEXT
from .namespace_args import (own_topic_policies, policy_answer, remove_topic_policies, topic_exists,
                             update_topic_policies)
from .partition_growth import copy_subscriptions
from .replication import check_clusters, replication_clusters

routes = web.RouteTableDef()

T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]


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


async def _served_topic(request: web.Request, *, create: bool = False) -> tuple[AdminContext, TopicName, Any]:
    """(context, name, Topic) for an operation on one existing topic, at its owner (else 307 / 404)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    return ctx, topic, await ctx.served_topic(request, topic, create=create)


def _raise_failed(answers: list[PartitionAnswer], *, missing_ok: bool = False) -> None:
    failed = judge(answers, missing_ok=missing_ok)
    if failed is not None:
        raise failed.error()


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
    if await ctx.partitions(topic):
        raise conflict(f"Topic {topic} already exists as a partitioned topic")
    service = ctx.require_service()
    await ctx.ensure_owner(request, topic)
    if await topic_exists(ctx, topic):
        raise conflict(f"Topic {topic} already exists")
    await service.get_topic(str(topic), create=True)
    return web.Response(status=204)


@routes.delete(T + "/{topic}")
async def delete_topic(request: web.Request) -> web.Response:
    """Deletes a non-partitioned topic at its owner; the service removes its own policies with its data
    (``BrokerService.delete_topic``), so a refused delete (412 with clients connected, 404) leaves them."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    force = query_bool(request, "force")
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if await ctx.partitions(topic):
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
    n = await ctx.partitions(topic)
    if n:
        _raise_failed(await fan_out(ctx, "PUT", partition_calls(topic, n, "/unload")), missing_ok=True)
        return web.Response(status=204)
    service = ctx.require_service()
    await ctx.ensure_owner(request, topic)
    if not await service.unload_topic(str(topic)) and not await topic_exists(ctx, topic):
        raise not_found(f"Topic {topic} not found")
    return web.Response(status=204)


@routes.get(T + "/{topic}/stats")
async def topic_stats(request: web.Request) -> web.Response:
    _, _, served = await _served_topic(request)
    return web.json_response(served.stats().to_json())


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
    """Grows the partition count, then creates the durable subscriptions of the existing partitions on the
    new ones (``partition_growth.py``), as Pulsar does."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    count = _partition_count(await read_json(request), ctx)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    current = await ctx.partitions(topic)
    if not current:
        raise not_found(f"Partitioned topic {topic} not found")
    if count <= current:
        raise conflict(f"Number of new partitions ({count}) must be greater than the existing number ({current})")

    grown_from = current  # the count the compare-and-set replaced (another update may have come between)

    def grow(old: int) -> int:
        nonlocal grown_from
        if count <= old:
            raise RestError(409, f"Number of new partitions ({count}) must be greater than the existing "
                                 f"number ({old})")
        grown_from = old
        return count

    await ctx.configuration.update_partitioned_topic(topic.tenant, topic.namespace_portion, topic.domain.value,
                                                     topic.local_name, grow)
    await copy_subscriptions(ctx, topic, grown_from, count)
    return web.Response(status=204)


@routes.get(T + "/{topic}/partitions")
async def get_partitioned_metadata(request: web.Request) -> web.Response:
    """``{"partitions": N}``; 0 for a topic that is not partitioned (what pulsar-client asks first)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    return web.json_response({"partitions": await ctx.partitions(topic)})


@routes.delete(T + "/{topic}/partitions")
async def delete_partitioned_topic(request: web.Request) -> web.Response:
    """Deletes every partition at its owner, then the partitioned topic's own policies and its metadata; a
    partition that fails (412 with clients connected and no ``force``) fails the call and the policies and
    metadata stay."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    force = query_bool(request, "force")
    await ctx.policies(topic.tenant, topic.namespace_portion)
    n = await ctx.partitions(topic)
    if not n:
        raise not_found(f"Partitioned topic {topic} not found")
    query = "?force=true" if force else ""
    _raise_failed(await fan_out(ctx, "DELETE", partition_calls(topic, n, query)), missing_ok=True)
    # Every partition is gone (each owner removed its partition's own policies); the partitioned topic's go
    # before its metadata, as in Pulsar, so a retry after a failure here still finds the topic and finishes.
    await remove_topic_policies(ctx, topic, partitions=n)
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
    n = await ctx.partitions(topic)
    if not n:
        raise not_found(f"Partitioned topic {topic} not found")
    answers = await fan_out(ctx, "GET", partition_calls(topic, n, "/stats"))
    _raise_failed(answers, missing_ok=True)
    found = [a for a in answers if a.ok]
    total = aggregate_stats([a.body for a in found])
    total["metadata"] = {"partitions": n}
    if per_partition:
        total["partitions"] = {str(a.partition): a.body for a in found}
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


# ---------------------------------------------------------------------------------------------- termination


@routes.post(T + "/{topic}/terminate")
async def terminate_topic(request: web.Request) -> web.Response:
    """Pulsar's ``terminate``: no more messages on the topic, ever; answers the last message id
    (``MessageIdImpl`` JSON). Refused on a partitioned topic's base name (405, as Pulsar does: see
    ``terminate/partitions``) and on non-persistent topics. A partition of a partitioned topic that was never
    used is created to be terminated (Pulsar creates every partition with the partitioned topic)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if not topic.persistent:
        raise RestError(405, f"Topic {topic} is non-persistent: termination is not allowed")
    if await ctx.partitions(topic):
        raise RestError(405, f"Termination of a partitioned topic is not allowed ({topic}); "
                             "use POST .../terminate/partitions")
    create = topic.is_partition and topic.partition_index < await ctx.partitions(topic.base)
    served = await ctx.served_topic(request, topic, create=create)
    position = await served.terminate()
    return web.json_response({"ledgerId": position.ledger_id, "entryId": position.entry_id, "partitionIndex": -1})


@routes.post(T + "/{topic}/terminate/partitions")
async def terminate_partitioned_topic(request: web.Request) -> web.Response:
    """Terminates every partition, each at its owner; answers ``{"<index>": MessageId}`` as Pulsar's
    ``Map<Integer, MessageId>``. 405 for a topic that is not partitioned (Pulsar's message). Termination
    cannot be undone: if a partition fails, the others stay terminated and the call answers the error
    (repeating it is safe, terminating twice answers the same id)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if not topic.persistent:
        raise RestError(405, f"Topic {topic} is non-persistent: termination is not allowed")
    n = await ctx.partitions(topic)
    if not n:
        raise RestError(405, "Termination of a non-partitioned topic is not allowed using partitioned-terminate, "
                             "please use terminate commands")
    answers = await fan_out(ctx, "POST", partition_calls(topic, n, "/terminate"))
    _raise_failed(answers)
    return web.json_response({str(a.partition.partition_index): a.body for a in answers})


# ---------------------------------------------------------------------------------------------- topic policies


@routes.get(T + "/{topic}/replication")
async def get_replication_clusters(request: web.Request) -> web.Response:
    """The topic's own replication clusters; 204 without a body when it has none, as Pulsar answers (with
    ``applied=true``: the namespace's then). The topic need not exist yet."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    applied = query_bool(request, "applied")
    namespace_policies = await ctx.policies(topic.tenant, topic.namespace_portion)
    own = await own_topic_policies(ctx, topic)
    clusters = None if own is None else own.replication_clusters
    if clusters is None and applied:
        clusters = namespace_policies.replication_clusters
    return policy_answer(clusters)


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

    await update_topic_policies(ctx, topic, apply)
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

    await update_topic_policies(ctx, topic, clear)
    return web.Response(status=204)


# Subscription calls live in their own module; they are served from this table, so the application's list of
# route modules need not change.
for _route in (*subscriptions.routes, *compaction.routes):
    routes.route(_route.method, _route.path, **_route.kwargs)(_route.handler)
