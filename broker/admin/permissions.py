"""Permissions over REST, at Pulsar's paths and with its JSON (the namespace's ``auth_policies``):

* ``GET /admin/v2/namespaces/{tenant}/{namespace}/permissions``: the namespace's grants, ``{role: [actions]}``;
* ``POST|DELETE .../permissions/{role}``: grant ``role`` the actions in the body (a JSON list such as
  ``["produce", "consume"]``, replacing what it had), or revoke all of them (204 even if it had none, as
  Pulsar);
* ``GET .../permissions/subscription``: ``{subscription: [roles]}``;
* ``POST .../permissions/subscription/{subscription}``: only the roles in the body (a JSON list) may consume
  on that subscription (replacing the list); ``DELETE`` the same path with a list removes those roles, and
  Pulsar's ``DELETE .../permissions/{subscription}/{role}`` one role (412 if it is not listed). Without a
  body, ``DELETE .../permissions/subscription/{x}`` is Pulsar's form for the subscription named
  ``subscription``;
* ``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions``: what applies on the topic, the union of
  the namespace's grants and the topic's (a partition's include its partitioned topic's);
  ``POST|DELETE .../{topic}/permissions/{role}``: grant or revoke on that topic (a partitioned topic's name
  covers its partitions; the topic need not exist yet, as in Pulsar). A revoke of a grant not set on the topic
  is a 412, as Pulsar answers.

Actions are Pulsar's ``AuthAction`` names (``produce``, ``consume``, ``functions``, ``sources``, ``sinks``,
``packages``). A body that is not a list, an unknown action, an empty role or subscription name: 400 naming the
problem, nothing stored. An unknown namespace: 404. Every change is a compare-and-set of the namespace's
policies in the global configuration store; brokers follow it through their policies watches (a loaded
topic's ``policies`` carry the new grants without a restart). Who may call these (tenant admins, superusers)
is decided when authorization is wired into the admin API, not here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from aiohttp import web

from config_store.models import Policies
from config_store.permissions import (AUTH_ACTIONS, grant_namespace_permission, grant_subscription_permission,
                                      grant_topic_permission, revoke_namespace_permission,
                                      revoke_subscription_permission, revoke_topic_permission, topic_permissions)
from magnetar.topic_name import TopicName

from .body import ABSENT, read_json, topic_of, type_name
from .errors import bad_request, precondition_failed
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import update_namespace

routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/permissions"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, 'permissions', role]
_NAME_LEN_MAX = 1024


# ---------------------------------------------------------------------------------------------- checks


def checked_name(value: Any, what: str) -> str:
    """A role or subscription name: a non-blank string without control characters; 400 otherwise."""
    if not isinstance(value, str):
        raise bad_request(f"{what} must be a string, got {type_name(value)}")
    if not value.strip():
        raise bad_request(f"{what} must not be empty")
    if len(value) > _NAME_LEN_MAX:
        raise bad_request(f"{what} is longer than {_NAME_LEN_MAX} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise bad_request(f"{what} {value!r} contains control characters")
    return value


def path_name(request: web.Request, key: str, what: str) -> str:
    """A name from the path, read from the raw path so that an encoded ``/`` or ``%`` survives."""
    route_parts = request.match_info.route.resource.canonical.split("/")
    raw_parts = request.rel_url.raw_path.split("/")
    index = route_parts.index("{" + key + "}")
    try:
        text = unquote(raw_parts[index], errors="strict")
    except (IndexError, UnicodeDecodeError):
        raise bad_request(f"malformed {what} in {request.rel_url.raw_path!r}") from None
    return checked_name(text, what)


def parse_actions(body: Any) -> list[str]:
    """The actions of a grant body: a JSON list of AuthAction names; 400 naming the problem."""
    if not isinstance(body, list):
        raise bad_request(f"the actions must be a JSON list of action names ({', '.join(AUTH_ACTIONS)}), "
                          f"got {type_name(body)}")
    for action in body:
        if not isinstance(action, str):
            raise bad_request(f"each action must be a string, got {type_name(action)}")
        if action not in AUTH_ACTIONS:
            raise bad_request(f"unknown action {action!r}: expected some of {', '.join(AUTH_ACTIONS)}")
    return [a for a in AUTH_ACTIONS if a in body]


def parse_roles(body: Any) -> list[str]:
    """The roles of a subscription permission body: a non-empty JSON list of role names; 400 otherwise (an
    empty list would lift the subscription's restriction: revoke for that)."""
    if not isinstance(body, list):
        raise bad_request(f"the roles must be a JSON list of role names, got {type_name(body)}")
    if not body:
        raise bad_request("the roles must name at least one role (to lift a subscription's restriction, revoke "
                          "its roles)")
    return sorted({checked_name(role, "a role") for role in body})


async def _update(request: web.Request, tenant: str, namespace: str, apply) -> web.Response:
    def fn(p: Policies) -> Policies:
        apply(p)
        return p

    await update_namespace(request.app[CONTEXT], tenant, namespace, fn)
    return web.Response(status=204)


# ---------------------------------------------------------------------------------------------- namespaces


@routes.get(NS)
async def get_namespace_permissions(request: web.Request) -> web.Response:
    policies = await request.app[CONTEXT].policies(*_names(request))
    return web.json_response({role: list(actions) for role, actions in sorted(policies.auth_roles.items())})


@routes.get(NS + "/subscription")
async def get_subscription_permissions(request: web.Request) -> web.Response:
    policies = await request.app[CONTEXT].policies(*_names(request))
    return web.json_response({sub: list(roles) for sub, roles in sorted(policies.subscription_auth_roles.items())})


@routes.post(NS + "/subscription/{subscription}")
async def grant_subscription_permissions(request: web.Request) -> web.Response:
    tenant, namespace = _names(request)
    subscription = path_name(request, "subscription", "the subscription name")
    roles = parse_roles(await read_json(request))
    return await _update(request, tenant, namespace,
                         lambda p: grant_subscription_permission(p, subscription, roles))


@routes.delete(NS + "/subscription/{subscription}")
async def revoke_subscription_permissions(request: web.Request) -> web.Response:
    """With a body (a list of roles): removes them from the subscription's list. Without one: Pulsar's
    ``DELETE .../permissions/{subscription}/{role}`` for the subscription named ``subscription``."""
    tenant, namespace = _names(request)
    body = await read_json(request, required=False)
    if body is ABSENT:
        subscription, roles = "subscription", [path_name(request, "subscription", "the role")]
    else:
        subscription, roles = path_name(request, "subscription", "the subscription name"), parse_roles(body)
    return await _revoke_subscription(request, tenant, namespace, subscription, roles)


@routes.delete(NS + "/{subscription}/{role}")
async def revoke_subscription_role(request: web.Request) -> web.Response:
    """Pulsar's revoke of one role's access to a subscription."""
    tenant, namespace = _names(request)
    subscription = path_name(request, "subscription", "the subscription name")
    role = path_name(request, "role", "the role")
    return await _revoke_subscription(request, tenant, namespace, subscription, [role])


async def _revoke_subscription(request: web.Request, tenant: str, namespace: str, subscription: str,
                               roles: list[str]) -> web.Response:
    def apply(p: Policies) -> None:
        if subscription not in p.subscription_auth_roles:
            raise precondition_failed(f"Subscription {subscription} of namespace {tenant}/{namespace} has no "
                                      "roles listed (any role with consume may use it)")
        if not revoke_subscription_permission(p, subscription, roles):
            raise precondition_failed(f"{', '.join(roles)} not listed for subscription {subscription} of "
                                      f"namespace {tenant}/{namespace}")

    return await _update(request, tenant, namespace, apply)


@routes.post(NS + "/{role}")
async def grant_namespace_permissions(request: web.Request) -> web.Response:
    tenant, namespace = _names(request)
    role = path_name(request, "role", "the role")
    actions = parse_actions(await read_json(request))
    return await _update(request, tenant, namespace, lambda p: grant_namespace_permission(p, role, actions))


@routes.delete(NS + "/{role}")
async def revoke_namespace_permissions(request: web.Request) -> web.Response:
    tenant, namespace = _names(request)
    role = path_name(request, "role", "the role")
    return await _update(request, tenant, namespace, lambda p: revoke_namespace_permission(p, role))


# ---------------------------------------------------------------------------------------------- topics


@routes.get(T)
async def get_topic_permissions(request: web.Request) -> web.Response:
    topic = topic_of(request, _TOPIC_SEGMENT)
    policies = await request.app[CONTEXT].policies(topic.tenant, topic.namespace_portion)
    return web.json_response(topic_permissions(policies, str(topic)))


@routes.post(T + "/{role}")
async def grant_topic_permissions(request: web.Request) -> web.Response:
    topic = topic_of(request, _TOPIC_SEGMENT)
    role = path_name(request, "role", "the role")
    actions = parse_actions(await read_json(request))
    return await _update(request, topic.tenant, topic.namespace_portion,
                         lambda p: grant_topic_permission(p, str(topic), role, actions))


@routes.delete(T + "/{role}")
async def revoke_topic_permissions(request: web.Request) -> web.Response:
    topic = topic_of(request, _TOPIC_SEGMENT)
    role = path_name(request, "role", "the role")

    def apply(p: Policies) -> None:
        if not revoke_topic_permission(p, str(topic), role):
            raise precondition_failed(_not_set(p, topic, role))

    return await _update(request, topic.tenant, topic.namespace_portion, apply)


def _not_set(p: Policies, topic: TopicName, role: str) -> str:
    reason = f"Permissions are not set at the topic level: {role} has no grant on {topic}"
    if topic.is_partition and role in p.destination_auth.get(str(topic.base), {}):
        reason += f" (its grant is on the partitioned topic {topic.base}: revoke it there)"
    elif role in p.auth_roles:
        reason += f" (its grant is on namespace {topic.namespace}: revoke it there)"
    return reason
