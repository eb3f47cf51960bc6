"""Rate limits over REST, at Pulsar's paths and with its JSON. Per namespace:

* ``POST|GET|DELETE /admin/v2/namespaces/{tenant}/{namespace}/publishRate`` (``PublishRate``:
  ``publishThrottlingRateInMsg``, ``publishThrottlingRateInByte``), stored in ``publishMaxMessageRate``;
* ``.../dispatchRate`` (``DispatchRate``: ``dispatchThrottlingRateInMsg``, ``dispatchThrottlingRateInByte``,
  ``relativeToPublishRate``, ``ratePeriodInSecond``), stored in ``topicDispatchRate``: the bound on the sum
  over a topic's subscriptions;
* ``.../subscriptionDispatchRate`` (the same JSON), stored in ``subscriptionDispatchRate``: the bound on
  each subscription.

As in Pulsar each namespace rate is kept per cluster and these calls read and write this broker's cluster's
entry. Per topic (Pulsar's topic policies, one rate each, not per cluster; a partitioned topic's cover its
partitions, and a partition's name reaches its partitioned topic's):

* ``POST|GET|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/publishRate``, ``.../dispatchRate``,
  ``.../subscriptionDispatchRate``: ``TopicPolicies.publishRate`` / ``dispatchRate`` /
  ``subscriptionDispatchRate``, overriding the namespace's; GET ``?applied=true`` answers the rate that
  applies (topic, else namespace, else the broker's default: ``broker/service/rate_policy.py``).

A namespace GET answers ``null`` when none is set; a topic GET answers 204 without a body, as Pulsar. A field
left out takes Pulsar's default (-1: no limit; period 1 s); a limit ``<= 0`` is no limit, and a rate without
any positive limit counts as unset (the next level applies, as Pulsar's ``normalize``). A malformed body is a
400 naming the field (unknown fields included, unlike Pulsar, which ignores them: a misspelt limit would
silently be none) and nothing is stored; an unknown namespace or topic is a 404. Brokers apply changes to
loaded topics at once (through the policies watches).
"""

from __future__ import annotations

from typing import Any, Callable

from aiohttp import web

from config_store import DispatchRate, Policies, PublishRate, TopicPolicies

from ..service.policies import rate_policy
from ..service.config import ServiceConfig
from .body import expect_bool, expect_int, expect_object, query_bool, read_json, topic_of
from .errors import bad_request
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import policies_owner, policy_answer, topic_policy_scope, update_topic_policies
from .namespace_args import update_namespace as _update


routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_PUBLISH_FIELDS = ("publishThrottlingRateInMsg", "publishThrottlingRateInByte")
_DISPATCH_FIELDS = ("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte", "relativeToPublishRate",
                    "ratePeriodInSecond")


# ---------------------------------------------------------------------------------------------- parsing


def _object_with(body: Any, what: str, fields: tuple[str, ...]) -> dict[str, Any]:
    obj = expect_object(body, what)
    unknown = sorted(set(obj) - set(fields))
    if unknown:
        raise bad_request(f"unknown field(s) in {what}: {', '.join(unknown)} (expected {', '.join(fields)})")
    return {k: v for k, v in obj.items() if v is not None}


def parse_publish_rate(body: Any) -> PublishRate:
    """A PublishRate from a request body; 400 naming the field when it is malformed."""
    obj = _object_with(body, "the publish rate", _PUBLISH_FIELDS)
    return PublishRate(
        msgs_per_s=expect_int(obj.get("publishThrottlingRateInMsg", -1), "publishThrottlingRateInMsg",
                              minimum=-1, maximum=_INT32_MAX),
        bytes_per_s=expect_int(obj.get("publishThrottlingRateInByte", -1), "publishThrottlingRateInByte",
                               minimum=-1, maximum=_INT64_MAX))


def parse_dispatch_rate(body: Any) -> DispatchRate:
    """A DispatchRate from a request body; 400 naming the field when it is malformed."""
    obj = _object_with(body, "the dispatch rate", _DISPATCH_FIELDS)
    return DispatchRate(
        msgs_per_period=expect_int(obj.get("dispatchThrottlingRateInMsg", -1), "dispatchThrottlingRateInMsg",
                                   minimum=-1, maximum=_INT32_MAX),
        bytes_per_period=expect_int(obj.get("dispatchThrottlingRateInByte", -1), "dispatchThrottlingRateInByte",
                                    minimum=-1, maximum=_INT64_MAX),
        relative_to_publish_rate=expect_bool(obj.get("relativeToPublishRate", False), "relativeToPublishRate"),
        period_s=expect_int(obj.get("ratePeriodInSecond", 1), "ratePeriodInSecond", minimum=1, maximum=_INT32_MAX))


# ---------------------------------------------------------------------------------------------- helpers


def _rate_routes(path: str, attribute: str, parse: Callable[[Any], Any]) -> None:
    """GET / POST / DELETE of one per-cluster rate map of the namespace's policies."""

    async def get_rate(request: web.Request) -> web.Response:
        ctx = request.app[CONTEXT]
        rate = getattr(await ctx.policies(*_names(request)), attribute).get(ctx.cluster)
        return web.json_response(None if rate is None else rate.to_dict())

    async def set_rate(request: web.Request) -> web.Response:
        ctx = request.app[CONTEXT]
        tenant, namespace = _names(request)
        rate = parse(await read_json(request))

        def apply(p: Policies) -> Policies:
            setattr(p, attribute, {**getattr(p, attribute), ctx.cluster: rate})
            return p

        await _update(ctx, tenant, namespace, apply)
        return web.Response(status=204)

    async def remove_rate(request: web.Request) -> web.Response:
        """Removes this cluster's rate (204 whether or not one was set)."""
        ctx = request.app[CONTEXT]
        tenant, namespace = _names(request)

        def apply(p: Policies) -> Policies:
            setattr(p, attribute, {c: r for c, r in getattr(p, attribute).items() if c != ctx.cluster})
            return p

        await _update(ctx, tenant, namespace, apply)
        return web.Response(status=204)

    routes.get(NS + path)(get_rate)
    routes.post(NS + path)(set_rate)
    routes.delete(NS + path)(remove_rate)


def _topic_rate_routes(path: str, attribute: str, kind: str, parse: Callable[[Any], Any]) -> None:
    """GET / POST / DELETE of one rate of a topic's own policies (``kind``: the rate in ``rate_policy``)."""

    async def get_rate(request: web.Request) -> web.Response:
        """The topic's own rate (204 without a body when none is set); with ``applied=true`` the one that
        applies."""
        ctx = request.app[CONTEXT]
        topic = topic_of(request, _TOPIC_SEGMENT)
        applied = query_bool(request, "applied")
        namespace_policies, own = await topic_policy_scope(ctx, topic)
        if applied:
            config = getattr(ctx.service, "config", None) or ServiceConfig()  # no service: the defaults
            return web.json_response(rate_policy.applied(kind, config, namespace_policies, own, ctx.cluster).to_dict())
        rate = getattr(own, attribute, None)
        return policy_answer(None if rate is None else rate.to_dict())

    async def store(request: web.Request, rate: Any) -> web.Response:
        ctx = request.app[CONTEXT]
        topic = topic_of(request, _TOPIC_SEGMENT)
        await topic_policy_scope(ctx, topic)

        def apply(p: TopicPolicies) -> TopicPolicies:
            setattr(p, attribute, rate)
            return p

        await update_topic_policies(ctx, policies_owner(topic), apply)
        return web.Response(status=204)

    async def set_rate(request: web.Request) -> web.Response:
        return await store(request, parse(await read_json(request)))

    async def remove_rate(request: web.Request) -> web.Response:
        """Removes the topic's rate: its namespace's (else the broker's) applies again (204 if none was set)."""
        return await store(request, None)

    routes.get(T + path)(get_rate)
    routes.post(T + path)(set_rate)
    routes.delete(T + path)(remove_rate)


_rate_routes("/publishRate", "publish_max_message_rate", parse_publish_rate)
_rate_routes("/dispatchRate", "topic_dispatch_rate", parse_dispatch_rate)
_rate_routes("/subscriptionDispatchRate", "subscription_dispatch_rate", parse_dispatch_rate)
_topic_rate_routes("/publishRate", "publish_rate", "publish", parse_publish_rate)
_topic_rate_routes("/dispatchRate", "dispatch_rate", "topic_dispatch", parse_dispatch_rate)
_topic_rate_routes("/subscriptionDispatchRate", "subscription_dispatch_rate", "subscription_dispatch",
                   parse_dispatch_rate)
