"""``/admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription(s)...``: a topic's subscriptions.

On one topic (a non-partitioned topic or a single partition) each call runs at the topic's owner (307 from
elsewhere). On a partitioned topic's base name a call is made on every partition, each at its own owner
(``fanout.py``), as Pulsar's ``PersistentTopicsBase`` does:

* create: on every partition, with the same initial position; "already exists" fails the call only if the
  subscription exists on every partition (409);
* delete, reset to a publish time, skip all (clear backlog), expire: on every partition (for reset, a 412
  fails the call only if every partition answered it);
* list: the union over the partitions that exist;
* skip N and reset to a message id: refused with 405 and Pulsar's messages (a count or a position means
  nothing across partitions; name a partition instead).

Unlike Pulsar, a fan-out that needs the subscription first checks that every partition has it (and, for a
delete without ``force``, that none has consumers), so a 404 or 412 leaves every partition as it was;
Pulsar would already have applied the call to some of them. Bad input is refused before any partition is
touched.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.managed_ledger.api import Position
from broker.service.errors import ConsumerBusyError
from broker.service.topics.nonpersistent.topic import NonPersistentTopic
from magnetar.topic_name import TopicName, decode_local_name

from .body import ABSENT, expect_int, expect_object, path_int, query_bool, read_json, topic_of
from .context import AdminContext
from .errors import RestError, bad_request, conflict, not_found, precondition_failed
from .fanout import fan_out, judge, partition_calls, same_call_per_partition
from .keys import CONTEXT

routes = web.RouteTableDef()

T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}"
S = T + "/{topic}/subscription/{subscription}"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]
_SUBSCRIPTION_SEGMENT = 8  # [..., topic, 'subscription', subscription, ...]
_LATEST = (1 << 63) - 1  # MessageId.latest is (Long.MAX_VALUE, Long.MAX_VALUE)
_CONSUMERS_CONNECTED = "Subscription has active connected consumers"  # Pulsar's 412 reason


# ---------------------------------------------------------------------------------------------- helpers


async def _target(request: web.Request) -> tuple[AdminContext, TopicName, int]:
    """(context, topic, partition count) of the request; 404 for an unknown namespace."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    return ctx, topic, await ctx.partitions(topic)


def _subscription_of(request: web.Request) -> str:
    raw = request.rel_url.raw_path.split("/")
    try:
        name = decode_local_name(raw[_SUBSCRIPTION_SEGMENT])
    except (IndexError, UnicodeDecodeError):
        raise bad_request(f"malformed subscription in {request.rel_url.raw_path!r}") from None
    if not name:
        raise bad_request("the subscription name is empty")
    return name


def _not_found(topic: TopicName, subscription: str) -> RestError:
    return not_found(f"Subscription {subscription} not found for topic {topic}")  # Pulsar's words


def _require_subscription(topic: TopicName, served: Any, subscription: str) -> None:
    if subscription not in served.subscriptions:
        raise _not_found(topic, subscription)


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


async def _clear_backlog(served: Any, subscription: str) -> None:
    """Pulsar's skip-all: acknowledges everything published so far (mark-delete at the last entry);
    consumers stay connected, unlike a reset. A non-persistent topic keeps nothing: nothing to clear."""
    if isinstance(served, NonPersistentTopic):
        return
    await served.subscriptions[subscription].mark_delete_up_to(served.ml.last_confirmed_position)


async def _on_every_partition(request: web.Request, ctx: AdminContext, topic: TopicName, partitions: int,
                              subscription: str, *, tolerated: int | None = None,
                              consumers_allowed: bool = True) -> None:
    """Repeats this request on every partition, once every partition is known to have ``subscription``
    (404 otherwise) and, unless ``consumers_allowed``, to have no consumers on it (412): a refusal leaves
    every partition as it was."""
    checks = await fan_out(ctx, "GET", partition_calls(topic, partitions, "/stats"))
    failed = judge(checks, missing_ok=True)
    if failed is not None:
        raise failed.error()
    found = [(a.body or {}).get("subscriptions", {}).get(subscription) if a.ok else None for a in checks]
    missing = [a.partition.local_name for a, stats in zip(checks, found) if stats is None]
    if len(missing) == partitions:
        raise _not_found(topic, subscription)
    if missing:
        raise not_found(f"Subscription {subscription} not found for topic {topic} (missing on "
                        f"{', '.join(missing)}); nothing was changed")
    if not consumers_allowed and any(stats.get("consumers") for stats in found):
        raise precondition_failed(_CONSUMERS_CONNECTED)
    failed = judge(await fan_out(ctx, request.method, same_call_per_partition(request, topic, partitions,
                                                                               _TOPIC_SEGMENT)),
                   tolerated=tolerated)
    if failed is not None:
        raise failed.error()


# ---------------------------------------------------------------------------------------------- routes


@routes.get(T + "/{topic}/subscriptions")
async def list_subscriptions(request: web.Request) -> web.Response:
    """The topic's subscriptions; on a partitioned topic, the union over the partitions that exist."""
    ctx, topic, n = await _target(request)
    if n:
        answers = await fan_out(ctx, "GET", partition_calls(topic, n, "/subscriptions"))
        failed = judge(answers, missing_ok=True)
        if failed is not None:
            raise failed.error()
        return web.json_response(sorted({s for a in answers if a.ok and a.body for s in a.body}))
    served = await ctx.served_topic(request, topic)
    return web.json_response(sorted(served.subscriptions))


@routes.put(S)
async def create_subscription(request: web.Request) -> web.Response:
    """Creates a durable subscription at the body's message id (default latest), creating the topic (or the
    partitions) if needed, as Pulsar's default auto-creation does."""
    subscription = _subscription_of(request)
    body = await read_json(request, required=False)
    position = "latest" if body is ABSENT else _initial_position(_message_id(body))
    ctx, topic, n = await _target(request)
    if n:
        raw = None if body is ABSENT else await request.read()
        answers = await fan_out(ctx, "PUT", same_call_per_partition(request, topic, n, _TOPIC_SEGMENT), body=raw)
        failed = judge(answers, tolerated=409)
        if failed is not None and failed.status == 409:
            raise conflict(f"Subscription {subscription} already exists on every partition of {topic}")
        if failed is not None:
            raise failed.error()
        return web.Response(status=204)
    served = await ctx.served_topic(request, topic, create=True)
    if subscription in served.subscriptions:
        raise conflict(f"Subscription {subscription} already exists for topic {topic}")
    await served.create_subscription(subscription, position)
    return web.Response(status=204)


@routes.delete(S)
async def delete_subscription(request: web.Request) -> web.Response:
    """Deletes the subscription; refused (412) while it has consumers, unless ``force``."""
    subscription = _subscription_of(request)
    force = query_bool(request, "force")
    ctx, topic, n = await _target(request)
    if n:
        await _on_every_partition(request, ctx, topic, n, subscription, consumers_allowed=force)
        return web.Response(status=204)
    served = await ctx.served_topic(request, topic)
    _require_subscription(topic, served, subscription)
    try:
        await served.delete_subscription(subscription, force=force)
    except ConsumerBusyError:
        raise precondition_failed(_CONSUMERS_CONNECTED) from None
    return web.Response(status=204)


@routes.post(S + "/resetcursor/{timestamp}")
async def reset_cursor_to_time(request: web.Request) -> web.Response:
    """Moves the subscription to the first message published at or after ``timestamp`` (ms); on every
    partition of a partitioned topic."""
    subscription = _subscription_of(request)
    timestamp_ms = path_int(request, "timestamp")
    ctx, topic, n = await _target(request)
    if n:
        await _on_every_partition(request, ctx, topic, n, subscription, tolerated=412)
        return web.Response(status=204)
    served = await ctx.served_topic(request, topic)
    _require_subscription(topic, served, subscription)
    await served.reset_cursor(subscription, timestamp_ms=timestamp_ms)
    return web.Response(status=204)


@routes.post(S + "/resetcursor")
async def reset_cursor_to_position(request: web.Request) -> web.Response:
    """Moves the subscription to a message id: one topic's position, so refused on a partitioned topic."""
    subscription = _subscription_of(request)
    ledger_id, entry_id = _message_id(await read_json(request))
    ctx, topic, n = await _target(request)
    if n:
        raise RestError(405, "Reset-cursor at position is not allowed for partitioned-topic")
    served = await ctx.served_topic(request, topic)
    _require_subscription(topic, served, subscription)
    await served.reset_cursor(subscription, position=served.seek_position(ledger_id, entry_id))
    return web.Response(status=204)


@routes.post(S + "/skip/{n}")
async def skip_messages(request: web.Request) -> web.Response:
    """Acknowledges the next ``n`` messages: refused on a partitioned topic, as Pulsar does."""
    subscription = _subscription_of(request)
    count = path_int(request, "n")
    ctx, topic, n = await _target(request)
    if n:
        raise RestError(405, "Skip messages on a partitioned topic is not allowed")
    served = await ctx.served_topic(request, topic)
    _require_subscription(topic, served, subscription)
    await served.skip(subscription, count)
    return web.Response(status=204)


@routes.post(S + "/skip_all")
async def skip_all_messages(request: web.Request) -> web.Response:
    """Clears the backlog (pulsar-admin ``clear-backlog``); on every partition of a partitioned topic."""
    subscription = _subscription_of(request)
    return await _on_subscription(request, subscription, lambda served: _clear_backlog(served, subscription))


@routes.post(S + "/expireMessages/{seconds}")
async def expire_messages(request: web.Request) -> web.Response:
    """Acknowledges every message published more than ``seconds`` ago; on every partition of a
    partitioned topic."""
    subscription = _subscription_of(request)
    seconds = path_int(request, "seconds")
    return await _on_subscription(request, subscription, lambda served: served.expire(subscription, seconds))


async def _on_subscription(request: web.Request, subscription: str, action) -> web.Response:
    """Runs ``action(topic)`` on the served topic, which must have ``subscription``; on a partitioned topic's
    base name, the same request goes to every partition instead."""
    ctx, topic, n = await _target(request)
    if n:
        await _on_every_partition(request, ctx, topic, n, subscription)
    else:
        served = await ctx.served_topic(request, topic)
        _require_subscription(topic, served, subscription)
        await action(served)
    return web.Response(status=204)
