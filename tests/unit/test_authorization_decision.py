"""magnetar.auth.authorization: Pulsar's authorization rules, each checked by example and by property
(superusers, tenant admins, namespace and topic grants, partitions inheriting their partitioned topic's grants,
subscription role lists, lookups, wildcards, and the proxy's original principal)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config_store import models
from magnetar.auth.authorization import (AUTH_ACTIONS, CONSUME, PRODUCE, authorize_through_proxy, can_administer_tenant,
                                         can_consume, can_lookup, can_produce, is_superuser,
                                         is_valid_original_principal, topic_auth_for)

ROLES = ("app", "ops", "audit", "proxy", "admin", "root")
roles = st.sampled_from(ROLES)
actions = st.lists(st.sampled_from(AUTH_ACTIONS), max_size=4)
grants = st.dictionaries(roles, actions, max_size=4)
role_sets = st.frozensets(roles, max_size=3)
subscriptions = st.none() | st.sampled_from(("sub-a", "sub-b"))
sub_lists = st.dictionaries(st.sampled_from(("sub-a", "sub-b")), st.lists(roles, max_size=3), max_size=2)

NOBODY: dict = {}


def rules(role: str, *, superusers=(), admins=(), ns=None, topic=None, **kw) -> dict[str, bool]:
    common = dict(superusers=superusers, tenant_admin_roles=admins, namespace_auth=ns, topic_auth=topic)
    return {"produce": can_produce(role, **common, **kw),
            "consume": can_consume(role, **common, **kw),
            "lookup": can_lookup(role, **common, **kw)}


def test_action_names_are_pulsars_and_the_stores() -> None:
    assert AUTH_ACTIONS == ("produce", "consume", "functions", "sources", "sinks", "packages")
    assert AUTH_ACTIONS == models.AUTH_ACTIONS  # two rooms, one list


# ---------------------------------------------------------------------------------------------- superusers, admins


@settings(max_examples=200, deadline=None)
@given(roles, grants, grants, sub_lists, subscriptions)
def test_a_superuser_may_do_anything_whatever_the_grants(role, ns, topic, subs, sub) -> None:
    assert is_superuser(role, {role})
    assert can_administer_tenant(role, superusers={role}, tenant_admin_roles=())
    assert can_produce(role, superusers={role}, tenant_admin_roles=(), namespace_auth=ns, topic_auth=topic)
    assert can_consume(role, superusers={role}, tenant_admin_roles=(), namespace_auth=ns, topic_auth=topic,
                       subscription=sub, subscription_auth_roles=subs)
    assert can_lookup(role, superusers={role}, tenant_admin_roles=(), namespace_auth=ns, topic_auth=topic)


@settings(max_examples=200, deadline=None)
@given(roles, grants, grants, sub_lists, subscriptions)
def test_a_tenant_admin_administers_produces_and_consumes_but_is_no_superuser(role, ns, topic, subs, sub) -> None:
    assert can_administer_tenant(role, superusers=(), tenant_admin_roles=[role])
    assert not is_superuser(role, ())
    assert all(rules(role, admins=[role], ns=ns, topic=topic).values())
    assert can_consume(role, superusers=(), tenant_admin_roles=[role], namespace_auth=ns, topic_auth=topic,
                       subscription=sub, subscription_auth_roles=subs)  # subscription lists bind others only


def test_roles_that_are_neither_superuser_nor_admin_administer_nothing() -> None:
    assert not is_superuser("app", {"root"})
    assert not can_administer_tenant("app", superusers={"root"}, tenant_admin_roles=["ops"])
    assert can_administer_tenant("root", superusers={"root"}, tenant_admin_roles=["ops"])
    assert can_administer_tenant("ops", superusers={"root"}, tenant_admin_roles=["ops"])
    # Grants on data are no admin rights.
    assert not can_administer_tenant("app", superusers=(), tenant_admin_roles=())


def test_the_empty_role_is_nobody_even_when_listed() -> None:
    everything = {"": list(AUTH_ACTIONS)}
    assert not is_superuser("", {""})
    assert not can_administer_tenant("", superusers={""}, tenant_admin_roles=[""])
    assert not any(rules("", superusers={""}, admins=[""], ns=everything, topic=everything,
                         allow_wildcards=True).values())
    assert not any(rules("", ns={"*": [PRODUCE, CONSUME]}, allow_wildcards=True).values())


# ---------------------------------------------------------------------------------------------- grants


@settings(max_examples=300, deadline=None)
@given(roles, grants, grants)
def test_produce_and_consume_need_their_action_on_the_namespace_or_the_topic(role, ns, topic) -> None:
    got = rules(role, ns=ns, topic=topic)
    for action in (PRODUCE, CONSUME):
        assert got[action] == (action in ns.get(role, ()) or action in topic.get(role, ()))
    assert got["lookup"] == (got["produce"] or got["consume"])


@settings(max_examples=300, deadline=None)
@given(roles, grants, grants, roles, actions)
def test_grants_to_other_roles_change_nothing(role, ns, topic, other, extra) -> None:
    if other == role:
        return
    before = rules(role, ns=ns, topic=topic)
    assert rules(role, ns={**ns, other: extra}, topic={**topic, other: extra}) == before


@settings(max_examples=300, deadline=None)
@given(roles, grants, grants, actions)
def test_adding_a_grant_never_takes_a_right_away(role, ns, topic, extra) -> None:
    before = rules(role, ns=ns, topic=topic)
    wider = {**topic, role: list(topic.get(role, [])) + extra}
    after = rules(role, ns=ns, topic=wider)
    assert all(after[k] for k, allowed in before.items() if allowed)


def test_each_action_grants_only_itself() -> None:
    assert rules("app", ns={"app": [PRODUCE]}) == {"produce": True, "consume": False, "lookup": True}
    assert rules("app", topic={"app": [CONSUME]}) == {"produce": False, "consume": True, "lookup": True}
    assert rules("app", ns={"app": ["functions", "sources", "sinks", "packages"]}) == {
        "produce": False, "consume": False, "lookup": False}
    assert rules("app", ns=None, topic=None) == {"produce": False, "consume": False, "lookup": False}


# ---------------------------------------------------------------------------------------------- subscriptions


@settings(max_examples=300, deadline=None)
@given(roles, grants, grants, sub_lists, subscriptions)
def test_a_subscription_role_list_restricts_consumers_to_the_roles_it_names(role, ns, topic, subs, sub) -> None:
    got = can_consume(role, superusers=(), tenant_admin_roles=(), namespace_auth=ns, topic_auth=topic,
                      subscription=sub, subscription_auth_roles=subs)
    listed = subs.get(sub) if sub else None
    granted = CONSUME in ns.get(role, ()) or CONSUME in topic.get(role, ())
    assert got == (granted and (not listed or role in listed))


def test_subscription_lists_by_example() -> None:
    ns = {"app": [CONSUME], "audit": [CONSUME]}
    subs = {"billing": ["app"], "open": []}

    def consume(role: str, sub) -> bool:
        return can_consume(role, superusers=(), tenant_admin_roles=(), namespace_auth=ns, topic_auth=None,
                           subscription=sub, subscription_auth_roles=subs)

    assert consume("app", "billing") and not consume("audit", "billing")
    assert consume("audit", "open")  # an empty list restricts nothing, as in Pulsar
    assert consume("audit", "other") and consume("audit", None) and consume("audit", "")
    assert not consume("ops", "open")  # a list never grants consume by itself
    assert not can_consume("ops", superusers=(), tenant_admin_roles=(), namespace_auth={}, topic_auth={},
                           subscription="billing", subscription_auth_roles={"billing": ["ops"]})
    # A lookup names no subscription: the list does not matter.
    assert can_lookup("audit", superusers=(), tenant_admin_roles=(), namespace_auth=ns, topic_auth=None)


# ---------------------------------------------------------------------------------------------- topics, partitions


BASE = "persistent://t/ns/orders"


def test_a_partition_inherits_its_partitioned_topics_grants() -> None:
    destination = {BASE: {"app": [PRODUCE]}, f"{BASE}-partition-1": {"app": [CONSUME], "ops": [CONSUME]},
                   "persistent://t/ns/other": {"audit": [CONSUME]}}
    assert topic_auth_for(destination, f"{BASE}-partition-1") == {"app": {PRODUCE, CONSUME}, "ops": {CONSUME}}
    assert topic_auth_for(destination, f"{BASE}-partition-7") == {"app": {PRODUCE}}
    assert topic_auth_for(destination, BASE) == {"app": {PRODUCE}}  # the base does not get a partition's grants
    assert topic_auth_for(destination, "persistent://t/ns/other-partition-0") == {"audit": {CONSUME}}
    assert topic_auth_for(destination, "non-persistent://t/ns/orders-partition-0") == {}  # another domain
    assert topic_auth_for(destination, "persistent://t/ns/orders2") == {}
    assert topic_auth_for(destination, f"{BASE}-partition-01") == {}  # not a partition name
    assert topic_auth_for(destination, "not a topic://x") == {}
    assert topic_auth_for(None, BASE) == {} and topic_auth_for({}, BASE) == {}

    auth = topic_auth_for(destination, f"{BASE}-partition-3")
    assert can_produce("app", superusers=(), tenant_admin_roles=(), namespace_auth={}, topic_auth=auth)
    assert not can_consume("app", superusers=(), tenant_admin_roles=(), namespace_auth={}, topic_auth=auth)


@settings(max_examples=200, deadline=None)
@given(grants, grants, st.integers(0, 50))
def test_a_partitions_grants_are_the_union_of_its_own_and_its_bases(base, own, index) -> None:
    partition = f"{BASE}-partition-{index}"
    merged = topic_auth_for({BASE: base, partition: own}, partition)
    for role in ROLES:
        assert merged.get(role, set()) == set(base.get(role, ())) | set(own.get(role, ()))


# ---------------------------------------------------------------------------------------------- wildcards


def test_wildcards_match_only_when_switched_on() -> None:
    ns = {"app-*": [PRODUCE], "*-audit": [CONSUME]}
    assert rules("app-1", ns=ns) == {"produce": False, "consume": False, "lookup": False}
    on = dict(allow_wildcards=True)
    assert rules("app-1", ns=ns, **on) == {"produce": True, "consume": False, "lookup": True}
    assert rules("eu-audit", topic=ns, **on) == {"produce": False, "consume": True, "lookup": True}
    assert rules("ops", ns=ns, **on) == {"produce": False, "consume": False, "lookup": False}
    assert rules("anyone", ns={"*": [CONSUME]}, **on)["consume"]
    assert not rules("anyone", ns={"": [CONSUME]}, **on)["consume"]


# ---------------------------------------------------------------------------------------------- proxies


def test_original_principals_are_accepted_from_proxy_roles_and_superusers_only() -> None:
    proxies, supers = {"proxy"}, {"root"}

    def valid(role, original) -> bool:
        return is_valid_original_principal(role, original, proxy_roles=proxies, superusers=supers)

    assert valid("proxy", "app")
    assert not valid("proxy", None) and not valid("proxy", "")  # a proxy must say for whom
    assert not valid("proxy", "proxy")  # a proxy cannot vouch for a proxy
    assert valid("app", None) and valid("app", "")
    assert not valid("app", "ops")  # not a proxy: may not speak for another role
    assert valid("root", "app")  # Pulsar lets a superuser act for a principal


@settings(max_examples=300, deadline=None)
@given(roles, st.none() | roles, role_sets, role_sets)
def test_through_a_proxy_both_the_proxy_and_the_principal_must_be_allowed(role, original, allowed_roles,
                                                                          supers) -> None:
    proxies = {"proxy"}
    got = authorize_through_proxy(role, original, proxy_roles=proxies, superusers=supers,
                                  allowed=lambda r: r in allowed_roles)
    valid = is_valid_original_principal(role, original, proxy_roles=proxies, superusers=supers)
    if original:
        assert got == (valid and role in allowed_roles and original in allowed_roles)
    else:
        assert got == (valid and role in allowed_roles)


def test_proxy_decisions_by_example() -> None:
    ns = {"app": [PRODUCE], "proxy": [PRODUCE, CONSUME]}

    def produce_via(role, original, supers=()) -> bool:
        return authorize_through_proxy(
            role, original, proxy_roles={"proxy"}, superusers=supers,
            allowed=lambda r: can_produce(r, superusers=supers, tenant_admin_roles=(), namespace_auth=ns,
                                          topic_auth=None))

    assert produce_via("proxy", "app")
    assert not produce_via("proxy", "ops")  # the principal lacks produce
    assert not produce_via("app", "app")  # a non-proxy role may not pass a principal
    assert produce_via("root", "app", {"root"}) and not produce_via("root", "ops", {"root"})
    assert not produce_via("proxy", None)


@pytest.mark.parametrize("rule", [can_produce, can_lookup])
def test_missing_grant_maps_mean_no_grant(rule) -> None:
    assert not rule("app", superusers=(), tenant_admin_roles=(), namespace_auth=None, topic_auth=NOBODY)
