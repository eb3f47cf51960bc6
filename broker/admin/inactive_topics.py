"""Inactive-topic policies over REST, at Pulsar's paths and with its JSON (``InactiveTopicPolicies``:
``inactiveTopicDeleteMode``, ``maxInactiveDurationSeconds``, ``deleteWhileInactive``):

* ``POST|GET|DELETE /admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies``: the namespace's
  (GET answers ``null`` when none is set: the broker's ``delete_inactive_topics_*`` settings apply);
* ``POST|GET|DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}/inactiveTopicPolicies``: the topic's own
  (``TopicPolicies.inactiveTopicPolicies``; a partitioned topic's cover its partitions), replacing its
  namespace's as a whole; GET ``?applied=true`` answers what applies (topic, else namespace, else broker),
  without it 204 (no body) when the topic has none, as Pulsar.
  The topic must exist (404), or have policies of its own; non-persistent topics are refused (405): they
  unload themselves when idle and store nothing to delete.

Every field is required, as pulsar-admin always sends all three; a malformed body is a 400 naming the field
and nothing is stored; an unknown namespace is a 404. Brokers apply changes to loaded topics at the next check
(through the policies watches); the semantics are in ``broker/service/inactive_topics.py``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from config_store import InactiveTopicPolicies
from config_store.models import INACTIVE_TOPIC_DELETE_MODES

from ..service.policies import inactive_topics
from ..service.config import ServiceConfig
from .body import expect_bool, expect_int, expect_object, query_bool, read_json
from .errors import bad_request
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import persistent_topic_scope, policy_answer, set_namespace_policy, set_topic_policy

routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies"
T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/inactiveTopicPolicies"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]
_INT32_MAX = (1 << 31) - 1
_FIELDS = ("inactiveTopicDeleteMode", "maxInactiveDurationSeconds", "deleteWhileInactive")


def parse_inactive_topic_policies(body: Any) -> InactiveTopicPolicies:
    """InactiveTopicPolicies from a request body; 400 naming the field when it is malformed."""
    obj = expect_object(body, "the inactive topic policies")
    unknown = sorted(set(obj) - set(_FIELDS))
    if unknown:
        raise bad_request(f"unknown field(s) in the inactive topic policies: {', '.join(unknown)} "
                          f"(expected {', '.join(_FIELDS)})")
    missing = [f for f in _FIELDS if obj.get(f) is None]
    if missing:
        raise bad_request(f"the inactive topic policies need {', '.join(missing)}")
    mode = obj["inactiveTopicDeleteMode"]
    if mode not in INACTIVE_TOPIC_DELETE_MODES:
        raise bad_request(f"inactiveTopicDeleteMode must be one of {', '.join(INACTIVE_TOPIC_DELETE_MODES)}, "
                          f"got {mode!r}")
    return InactiveTopicPolicies(
        delete_mode=mode,
        max_inactive_duration_s=expect_int(obj["maxInactiveDurationSeconds"], "maxInactiveDurationSeconds",
                                           minimum=0, maximum=_INT32_MAX),
        delete_while_inactive=expect_bool(obj["deleteWhileInactive"], "deleteWhileInactive"))


@routes.get(NS)
async def get_inactive_topic_policies(request: web.Request) -> web.Response:
    policies = (await request.app[CONTEXT].policies(*_names(request))).inactive_topic_policies
    return web.json_response(None if policies is None else policies.to_dict())


@routes.post(NS)
async def set_inactive_topic_policies(request: web.Request) -> web.Response:
    tenant, namespace = _names(request)
    policies = parse_inactive_topic_policies(await read_json(request))

    await set_namespace_policy(request.app[CONTEXT], tenant, namespace, "inactive_topic_policies", policies)
    return web.Response(status=204)


@routes.delete(NS)
async def remove_inactive_topic_policies(request: web.Request) -> web.Response:
    """Removes the namespace's policies: the broker's settings apply again (204 whether or not set)."""
    tenant, namespace = _names(request)

    await set_namespace_policy(request.app[CONTEXT], tenant, namespace, "inactive_topic_policies", None)
    return web.Response(status=204)


# ---------------------------------------------------------------------------------------------- topics


_NON_PERSISTENT = "it unloads itself when idle and stores nothing, so inactive-topic policies do not apply to it"


def _topic_scope(request: web.Request):
    return persistent_topic_scope(request, _TOPIC_SEGMENT, _NON_PERSISTENT)


@routes.get(T)
async def get_topic_inactive_topic_policies(request: web.Request) -> web.Response:
    """The topic's own policies (204 without a body when none is set); with ``applied=true`` what applies."""
    ctx, _, namespace_policies, own = await _topic_scope(request)
    if query_bool(request, "applied"):
        config = getattr(ctx.service, "config", None) or ServiceConfig()  # no service: the defaults
        enabled, mode, max_inactive_s = inactive_topics.resolve(config, namespace_policies, own)
        return web.json_response(InactiveTopicPolicies(mode, int(max_inactive_s), enabled).to_dict())
    policies = None if own is None else own.inactive_topic_policies
    return policy_answer(None if policies is None else policies.to_dict())


@routes.post(T)
async def set_topic_inactive_topic_policies(request: web.Request) -> web.Response:
    policies = parse_inactive_topic_policies(await read_json(request))
    ctx, topic, _, _ = await _topic_scope(request)
    await set_topic_policy(ctx, topic, "inactive_topic_policies", policies)
    return web.Response(status=204)


@routes.delete(T)
async def remove_topic_inactive_topic_policies(request: web.Request) -> web.Response:
    """Removes the topic's own policies: its namespace's (else the broker's) apply again (204 whether or not
    set)."""
    ctx, topic, _, _ = await _topic_scope(request)
    await set_topic_policy(ctx, topic, "inactive_topic_policies", None)
    return web.Response(status=204)
