"""Edits of a namespace's permissions (Pulsar's ``auth_policies``), as pure functions on :class:`Policies`.

Each edit mutates the Policies it is given, so it can run inside
:meth:`ConfigurationStore.update_namespace_policies` (a compare-and-set retried on a lost race: the edit may
run more than once, on fresh copies, and must depend on nothing but its arguments). Revokes return whether
anything was there to revoke, so a caller can refuse a revoke of nothing.

Stored shapes follow Pulsar: ``auth_roles`` (``namespace_auth``) role -> actions, ``destination_auth``
full topic name -> role -> actions, ``subscription_auth_roles`` subscription -> roles. Actions are kept
deduplicated in :data:`AUTH_ACTIONS` order and roles sorted, so the same grant always stores the same bytes.
A topic's grants are stored under the name as given: a partitioned topic's cover its partitions (the
authorization decision looks there), so growing a topic needs no new grants.
"""

from __future__ import annotations

from typing import Iterable

from magnetar.topic_name import InvalidTopicNameError, TopicName

from .errors import InvalidMetadataError
from .models import AUTH_ACTIONS, Policies

__all__ = ["AUTH_ACTIONS", "normalize_actions", "grant_namespace_permission", "revoke_namespace_permission",
           "grant_topic_permission", "revoke_topic_permission", "topic_permissions",
           "grant_subscription_permission", "revoke_subscription_permission"]


def normalize_actions(actions: Iterable[str]) -> list[str]:
    """``actions`` deduplicated in AUTH_ACTIONS order; InvalidMetadataError naming an unknown one."""
    given = list(actions)
    unknown = [a for a in given if a not in AUTH_ACTIONS]
    if unknown:
        raise InvalidMetadataError(f"unknown action(s) {', '.join(map(repr, unknown))}: expected some of "
                                   f"{', '.join(AUTH_ACTIONS)}")
    return [a for a in AUTH_ACTIONS if a in given]


def grant_namespace_permission(p: Policies, role: str, actions: Iterable[str]) -> None:
    """Sets ``role``'s actions on every topic of the namespace (replacing what it had, as Pulsar does)."""
    p.auth_roles[role] = normalize_actions(actions)


def revoke_namespace_permission(p: Policies, role: str) -> bool:
    """Removes ``role``'s namespace-level grant; False if it had none."""
    return p.auth_roles.pop(role, None) is not None


def grant_topic_permission(p: Policies, topic: str, role: str, actions: Iterable[str]) -> None:
    """Sets ``role``'s actions on ``topic`` (a full name; a partitioned topic's name covers its partitions)."""
    p.destination_auth.setdefault(topic, {})[role] = normalize_actions(actions)


def revoke_topic_permission(p: Policies, topic: str, role: str) -> bool:
    """Removes ``role``'s grant on ``topic`` and, when ``topic`` is a partitioned topic's name, on any of its
    partitions (as Pulsar revokes, which stores grants per partition too); a topic left with no grant is
    dropped. False if none of them had a grant for ``role``."""
    names = [topic] + [name for name in p.destination_auth if _is_partition_of(name, topic)]
    removed = False
    for name in names:
        grants = p.destination_auth.get(name)
        if grants is not None and grants.pop(role, None) is not None:
            removed = True
            if not grants:
                del p.destination_auth[name]
    return removed


def topic_permissions(p: Policies, topic: str) -> dict[str, list[str]]:
    """What applies on ``topic``, by role: the union of its namespace's grants, its own and, for a partition,
    its partitioned topic's (Pulsar answers the union of namespace and topic grants)."""
    sources = [p.auth_roles, p.destination_auth.get(topic, {})]
    base = _base_of(topic)
    if base is not None:
        sources.append(p.destination_auth.get(base, {}))
    union: dict[str, set[str]] = {}
    for grants in sources:
        for role, actions in grants.items():
            union.setdefault(role, set()).update(actions)
    return {role: [a for a in AUTH_ACTIONS if a in actions] for role, actions in sorted(union.items())}


def grant_subscription_permission(p: Policies, subscription: str, roles: Iterable[str]) -> None:
    """Sets the roles allowed to consume on ``subscription`` (replacing the list, as Pulsar does)."""
    p.subscription_auth_roles[subscription] = sorted(set(roles))


def revoke_subscription_permission(p: Policies, subscription: str, roles: Iterable[str]) -> bool:
    """Removes ``roles`` from ``subscription``'s list; an emptied list is dropped (no list: any role with
    ``consume`` may use the subscription). False if the subscription has no list or none of the roles."""
    listed = p.subscription_auth_roles.get(subscription)
    if listed is None:
        return False
    gone = set(roles)
    kept = [r for r in listed if r not in gone]
    if len(kept) == len(listed):
        return False
    if kept:
        p.subscription_auth_roles[subscription] = kept
    else:
        del p.subscription_auth_roles[subscription]
    return True


def _parse(name: str) -> TopicName | None:
    try:
        return TopicName.parse(name)
    except InvalidTopicNameError:
        return None  # a key a foreign writer stored; it is nobody's partition


def _base_of(topic: str) -> str | None:
    parsed = _parse(topic)
    return str(parsed.base) if parsed is not None and parsed.is_partition else None


def _is_partition_of(name: str, topic: str) -> bool:
    return name != topic and _base_of(name) == topic
