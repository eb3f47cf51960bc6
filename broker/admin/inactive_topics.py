"""Inactive-topic policies over REST, at Pulsar's path and with its JSON (``InactiveTopicPolicies``:
``inactiveTopicDeleteMode``, ``maxInactiveDurationSeconds``, ``deleteWhileInactive``):
``POST|GET|DELETE /admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies``.

GET answers ``null`` when none is set (the broker's ``delete_inactive_topics_*`` settings apply). Every field
is required, as pulsar-admin always sends all three; a malformed body is a 400 naming the field and nothing
is stored; an unknown namespace is a 404. The semantics are in ``broker/service/inactive_topics.py``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from config_store import InactiveTopicPolicies, Policies
from config_store.models import INACTIVE_TOPIC_DELETE_MODES

from .body import expect_bool, expect_int, expect_object, read_json
from .errors import bad_request
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import update_namespace as _update

routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies"
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

    def apply(p: Policies) -> Policies:
        p.inactive_topic_policies = policies
        return p

    await _update(request.app[CONTEXT], tenant, namespace, apply)
    return web.Response(status=204)


@routes.delete(NS)
async def remove_inactive_topic_policies(request: web.Request) -> web.Response:
    """Removes the namespace's policies: the broker's settings apply again (204 whether or not set)."""
    tenant, namespace = _names(request)

    def apply(p: Policies) -> Policies:
        p.inactive_topic_policies = None
        return p

    await _update(request.app[CONTEXT], tenant, namespace, apply)
    return web.Response(status=204)
