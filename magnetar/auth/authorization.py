"""Whether a role may do something: Pulsar's authorization rules (``PulsarAuthorizationProvider`` and
``AuthorizationService``) as pure functions over the grants a caller has read.

Theory of operation. A *role* is what authentication established (a certificate's CN, a token's subject).
Grants live in the namespace's policies in the configuration store (``config_store.models.Policies``):
``namespace_auth`` (role -> actions on every topic of the namespace), ``destination_auth`` (topic -> role ->
actions) and ``subscription_auth_roles`` (subscription -> roles). The caller reads them, and the tenant's
``adminRoles``, and asks:

* a *superuser* (``superuser_roles``) may do anything;
* a *tenant admin* may administer the tenant and its namespaces, and also produce and consume on them (Pulsar
  checks tenant admin access before the grants for topic operations);
* ``produce`` needs the action on the namespace or on the topic; a partition has its partitioned topic's
  grants too (:func:`topic_auth_for` merges them), so growing a topic needs no new grants;
* ``consume`` likewise, and when ``subscription_auth_roles`` lists roles for the subscription the role must be
  one of them (an empty list restricts nothing, as in Pulsar); superusers and tenant admins skip that check;
* a lookup (and partitioned metadata, a namespace's topic list) needs ``produce`` or ``consume``;
* the empty role is nobody: never allowed, even if listed;
* optionally (Pulsar's ``authorizationAllowWildcardsMatching``, off by default) a granted role ``app-*``
  matches every role starting ``app-``, ``*-ops`` every role ending ``-ops`` (and ``*`` every role).

Through a proxy (:func:`authorize_through_proxy`): the connection's role must be a proxy role (``proxy_roles``)
carrying an ``original_principal`` that is not itself a proxy role (a superuser may also pass one, as Pulsar
lets it), and then both the connection's role and the original principal must be allowed.

Nothing here does I/O or imports another room: brokers and the proxy read the grants and call these.
"""

from __future__ import annotations

from typing import Callable, Collection, Mapping, Optional

from magnetar.topic_name import InvalidTopicNameError, TopicName

__all__ = ["AUTH_ACTIONS", "PRODUCE", "CONSUME", "Grants", "is_superuser", "can_administer_tenant",
           "can_produce", "can_consume", "can_lookup", "topic_auth_for", "is_valid_original_principal",
           "authorize_through_proxy"]

PRODUCE = "produce"
CONSUME = "consume"
AUTH_ACTIONS = (PRODUCE, CONSUME, "functions", "sources", "sinks", "packages")
"""Pulsar's ``AuthAction`` names (``config_store.models.AUTH_ACTIONS`` holds the same list)."""

Grants = Mapping[str, Collection[str]]
"""role -> actions granted to it (on a namespace, or on one topic)."""

_NOTHING: Grants = {}


def is_superuser(role: str, superusers: Collection[str]) -> bool:
    """True when ``role`` is one of ``superusers`` (the empty role never is)."""
    return bool(role) and role in superusers


def can_administer_tenant(role: str, *, superusers: Collection[str], tenant_admin_roles: Collection[str]) -> bool:
    """A superuser or one of the tenant's ``adminRoles``: may manage the tenant's namespaces, their policies
    and permissions, and their topics."""
    return is_superuser(role, superusers) or (bool(role) and role in tenant_admin_roles)


def can_produce(role: str, *, superusers: Collection[str], tenant_admin_roles: Collection[str],
                namespace_auth: Optional[Grants], topic_auth: Optional[Grants],
                allow_wildcards: bool = False) -> bool:
    """May ``role`` publish on the topic? ``topic_auth`` is the topic's grants (see :func:`topic_auth_for`)."""
    if can_administer_tenant(role, superusers=superusers, tenant_admin_roles=tenant_admin_roles):
        return True
    return _granted(role, PRODUCE, namespace_auth, topic_auth, allow_wildcards)


def can_consume(role: str, *, superusers: Collection[str], tenant_admin_roles: Collection[str],
                namespace_auth: Optional[Grants], topic_auth: Optional[Grants],
                subscription: Optional[str] = None,
                subscription_auth_roles: Optional[Mapping[str, Collection[str]]] = None,
                allow_wildcards: bool = False) -> bool:
    """May ``role`` consume from the topic (on ``subscription``, when given)?"""
    if can_administer_tenant(role, superusers=superusers, tenant_admin_roles=tenant_admin_roles):
        return True
    if not role:
        return False
    if subscription and subscription_auth_roles:
        listed = subscription_auth_roles.get(subscription)
        if listed and role not in listed:
            return False
    return _granted(role, CONSUME, namespace_auth, topic_auth, allow_wildcards)


def can_lookup(role: str, *, superusers: Collection[str], tenant_admin_roles: Collection[str],
               namespace_auth: Optional[Grants], topic_auth: Optional[Grants],
               allow_wildcards: bool = False) -> bool:
    """May ``role`` look the topic up (also: its partitioned metadata, its namespace's topic list)? Needs
    ``produce`` or ``consume``; subscription lists do not matter here (no subscription is named)."""
    if can_administer_tenant(role, superusers=superusers, tenant_admin_roles=tenant_admin_roles):
        return True
    return (_granted(role, PRODUCE, namespace_auth, topic_auth, allow_wildcards)
            or _granted(role, CONSUME, namespace_auth, topic_auth, allow_wildcards))


def topic_auth_for(destination_auth: Optional[Mapping[str, Grants]], topic: str) -> dict[str, set[str]]:
    """The grants on ``topic`` (a full name, ``persistent://t/ns/x``) from a namespace's ``destination_auth``:
    its own and, for a partition (``x-partition-3``), its partitioned topic's, merged by role."""
    if not destination_auth:
        return {}
    merged: dict[str, set[str]] = {}
    for name in (topic, _partitioned_name(topic)):
        if name is None:
            continue
        for role, actions in (destination_auth.get(name) or _NOTHING).items():
            merged.setdefault(role, set()).update(actions)
    return merged


def is_valid_original_principal(role: str, original_principal: Optional[str], *, proxy_roles: Collection[str],
                                superusers: Collection[str] = ()) -> bool:
    """Whether a connection authenticated as ``role`` may present ``original_principal`` (CONNECT's, or the
    admin API's ``X-Original-Principal``).

    A proxy role must carry one, and it must not be a proxy role itself (a proxy cannot vouch for a proxy);
    another role may carry none, or, if a superuser, any (Pulsar lets a superuser act for a principal).
    """
    if role and role in proxy_roles:
        return bool(original_principal) and original_principal not in proxy_roles
    if not original_principal:
        return True
    return is_superuser(role, superusers)


def authorize_through_proxy(role: str, original_principal: Optional[str], *, proxy_roles: Collection[str],
                            superusers: Collection[str], allowed: Callable[[str], bool]) -> bool:
    """The decision for a connection that may come through a proxy: ``allowed(r)`` is the rule for one role
    (e.g. ``lambda r: can_produce(r, ...)``). Without an original principal, ``allowed(role)``; with one, the
    pair must be valid (:func:`is_valid_original_principal`) and both ``role`` and the principal allowed."""
    if not is_valid_original_principal(role, original_principal, proxy_roles=proxy_roles, superusers=superusers):
        return False
    if original_principal:
        return allowed(role) and allowed(original_principal)
    return allowed(role)


# ---------------------------------------------------------------------------------------------- internals


def _granted(role: str, action: str, namespace_auth: Optional[Grants], topic_auth: Optional[Grants],
             allow_wildcards: bool) -> bool:
    if not role:
        return False
    for grants in (namespace_auth or _NOTHING, topic_auth or _NOTHING):
        actions = grants.get(role)
        if actions is not None and action in actions:
            return True
        if allow_wildcards and _wildcard_granted(role, action, grants):
            return True
    return False


def _wildcard_granted(role: str, action: str, grants: Grants) -> bool:
    """Pulsar's wildcard matching: a granted ``prefix*`` or ``*suffix`` covers the roles it matches."""
    for granted, actions in grants.items():
        if action not in actions or not granted:
            continue  # a lone "*" matches every role, as in Pulsar
        if granted.endswith("*") and role.startswith(granted[:-1]):
            return True
        if granted.startswith("*") and role.endswith(granted[1:]):
            return True
    return False


def _partitioned_name(topic: str) -> Optional[str]:
    """``persistent://t/ns/x`` for ``persistent://t/ns/x-partition-3``; None when ``topic`` is no partition
    (or no valid name: it then has only the grants stored under it)."""
    try:
        name = TopicName.parse(topic)
    except InvalidTopicNameError:
        return None
    return str(name.base) if name.is_partition else None
