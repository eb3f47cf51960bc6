"""Delayed-delivery policies over REST, at Pulsar's paths and with its JSON (``DelayedDeliveryPolicies``:
``active``, ``tickTime`` ms, ``maxDeliveryDelayInMillis`` ms):

* ``POST|GET|DELETE /admin/v2/namespaces/{tenant}/{namespace}/delayedDelivery``: the namespace's
  ``delayed_delivery_policies`` (GET answers ``null`` when none is set: the broker's settings apply);
* ``POST|GET|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/delayedDelivery``: the topic's own
  (``TopicPolicies.delayedDeliveryEnabled`` / ``delayedDeliveryTickTimeMillis`` /
  ``delayedDeliveryMaxDelayInMillis``), overriding its namespace's setting by setting; GET ``?applied=true``
  answers what applies (topic, else namespace, else broker), without it 204 (no body) when the topic has none,
  as Pulsar. The topic need not exist yet.

``active`` is required (a misspelt field must not silently switch delayed delivery off); ``tickTime``
defaults to 1000 (pulsar-admin's default) and ``maxDeliveryDelayInMillis`` to 0 (no limit). A malformed
body (wrong type, negative value, unknown field) is a 400 naming the field and nothing is stored; an unknown
namespace is a 404. Brokers apply changes to loaded topics at once (through the policies watches); the
semantics are in ``broker/service/delayed_policy.py``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from config_store import DelayedDeliveryPolicies, TopicPolicies
from magnetar.topic_name import TopicName

from ..service.policies import delayed_delivery as delayed_policy
from ..service.config import ServiceConfig
from .body import expect_bool, expect_int, expect_object, query_bool, read_json, topic_of
from .context import AdminContext
from .errors import bad_request
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import own_topic_policies, policies_owner, policy_answer, update_topic_policies
from .namespace_args import set_namespace_policy

routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}/delayedDelivery"
T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/delayedDelivery"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]
_INT64_MAX = (1 << 63) - 1
_FIELDS = ("active", "tickTime", "maxDeliveryDelayInMillis")


def parse_delayed_delivery(body: Any) -> DelayedDeliveryPolicies:
    """DelayedDeliveryPolicies from a request body; 400 naming the field when it is malformed."""
    obj = expect_object(body, "the delayed delivery policies")
    unknown = sorted(set(obj) - set(_FIELDS))
    if unknown:
        raise bad_request(f"unknown field(s) in the delayed delivery policies: {', '.join(unknown)} "
                          f"(expected {', '.join(_FIELDS)})")
    if obj.get("active") is None:
        raise bad_request("the delayed delivery policies need active: true or false")
    tick = obj.get("tickTime")
    max_delay = obj.get("maxDeliveryDelayInMillis")
    return DelayedDeliveryPolicies(
        active=expect_bool(obj["active"], "active"),
        tick_time_ms=1000 if tick is None else expect_int(tick, "tickTime", minimum=0, maximum=_INT64_MAX),
        max_delay_ms=0 if max_delay is None else expect_int(max_delay, "maxDeliveryDelayInMillis", minimum=0,
                                                            maximum=_INT64_MAX))


# ---------------------------------------------------------------------------------------------- namespaces


@routes.get(NS)
async def get_namespace_delayed_delivery(request: web.Request) -> web.Response:
    policies = (await request.app[CONTEXT].policies(*_names(request))).delayed_delivery_policies
    return web.json_response(None if policies is None else policies.to_dict())


@routes.post(NS)
async def set_namespace_delayed_delivery(request: web.Request) -> web.Response:
    tenant, namespace = _names(request)
    policies = parse_delayed_delivery(await read_json(request))

    await set_namespace_policy(request.app[CONTEXT], tenant, namespace, "delayed_delivery_policies", policies)
    return web.Response(status=204)


@routes.delete(NS)
async def remove_namespace_delayed_delivery(request: web.Request) -> web.Response:
    """Removes the namespace's policies: the broker's settings apply again (204 whether or not set)."""
    tenant, namespace = _names(request)

    await set_namespace_policy(request.app[CONTEXT], tenant, namespace, "delayed_delivery_policies", None)
    return web.Response(status=204)


# ---------------------------------------------------------------------------------------------- topics


async def _set_topic(ctx: AdminContext, topic: TopicName, policies: DelayedDeliveryPolicies | None) -> None:
    def apply(p: TopicPolicies) -> TopicPolicies:
        p.delayed_delivery_enabled = None if policies is None else policies.active
        p.delayed_delivery_tick_time_ms = None if policies is None else policies.tick_time_ms
        p.delayed_delivery_max_delay_ms = None if policies is None else policies.max_delay_ms
        return p

    await update_topic_policies(ctx, policies_owner(topic), apply)


@routes.get(T)
async def get_topic_delayed_delivery(request: web.Request) -> web.Response:
    """The topic's own policies (204 without a body when none is set); with ``applied=true`` what applies."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    namespace_policies = await ctx.policies(topic.tenant, topic.namespace_portion)
    own = await own_topic_policies(ctx, policies_owner(topic))
    if query_bool(request, "applied"):
        config = getattr(ctx.service, "config", None) or ServiceConfig()  # no service: the defaults
        settings = delayed_policy.resolve(config, namespace_policies, own)
        return web.json_response(DelayedDeliveryPolicies(*settings).to_dict())
    if own is None or all(v is None for v in (own.delayed_delivery_enabled, own.delayed_delivery_tick_time_ms,
                                               own.delayed_delivery_max_delay_ms)):
        return policy_answer(None)
    return web.json_response({"active": own.delayed_delivery_enabled, "tickTime": own.delayed_delivery_tick_time_ms,
                              "maxDeliveryDelayInMillis": own.delayed_delivery_max_delay_ms})


@routes.post(T)
async def set_topic_delayed_delivery(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    policies = parse_delayed_delivery(await read_json(request))
    await ctx.policies(topic.tenant, topic.namespace_portion)
    await _set_topic(ctx, topic, policies)
    return web.Response(status=204)


@routes.delete(T)
async def remove_topic_delayed_delivery(request: web.Request) -> web.Response:
    """Removes the topic's own policies: its namespace's apply again (204 whether or not set)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    await _set_topic(ctx, topic, None)
    return web.Response(status=204)
