"""config_store.permissions: grants and revokes of a namespace's ``auth_policies`` as pure edits, stored by
compare-and-set (concurrent edits all land, lost races are retried), round-tripping through the codec."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config_store import BadVersionError, ConfigurationStore, MemoryMetadataStore, Policies, TenantInfo
from config_store.errors import InvalidMetadataError
from config_store.permissions import (AUTH_ACTIONS, grant_namespace_permission, grant_subscription_permission,
                                      grant_topic_permission, normalize_actions, revoke_namespace_permission,
                                      revoke_subscription_permission, revoke_topic_permission, topic_permissions)

T = "persistent://t/ns/orders"


def test_actions_are_checked_deduplicated_and_ordered() -> None:
    assert normalize_actions(["consume", "produce", "consume"]) == ["produce", "consume"]
    assert normalize_actions([]) == []
    with pytest.raises(InvalidMetadataError, match="unknown action.*'write'"):
        normalize_actions(["produce", "write"])


def test_namespace_grants_replace_and_revokes_say_whether_anything_went() -> None:
    p = Policies()
    grant_namespace_permission(p, "app", ["consume", "produce"])
    grant_namespace_permission(p, "ops", ["consume"])
    assert p.auth_roles == {"app": ["produce", "consume"], "ops": ["consume"]}
    grant_namespace_permission(p, "app", ["consume"])  # replaces, as Pulsar's put
    assert p.auth_roles["app"] == ["consume"]
    assert revoke_namespace_permission(p, "app") and not revoke_namespace_permission(p, "app")
    assert p.auth_roles == {"ops": ["consume"]}


def test_topic_grants_are_keyed_by_full_name_and_revokes_reach_stored_partition_grants() -> None:
    p = Policies(auth_roles={"ns-reader": ["consume"]})
    grant_topic_permission(p, T, "app", ["produce"])
    grant_topic_permission(p, T, "ops", ["consume"])
    p.destination_auth[f"{T}-partition-2"] = {"app": ["consume"]}  # as Pulsar stores per partition
    p.destination_auth["persistent://t/ns/orders2"] = {"app": ["consume"]}
    assert topic_permissions(p, T) == {"app": ["produce"], "ns-reader": ["consume"], "ops": ["consume"]}
    assert topic_permissions(p, f"{T}-partition-2") == {"app": ["produce", "consume"], "ns-reader": ["consume"],
                                                        "ops": ["consume"]}
    assert topic_permissions(p, f"{T}-partition-9")["app"] == ["produce"]  # a new partition inherits
    assert topic_permissions(p, "non-persistent://t/ns/orders") == {"ns-reader": ["consume"]}

    assert revoke_topic_permission(p, T, "app")
    assert p.destination_auth == {T: {"ops": ["consume"]}, "persistent://t/ns/orders2": {"app": ["consume"]}}
    assert not revoke_topic_permission(p, T, "app")
    assert revoke_topic_permission(p, T, "ops") and T not in p.destination_auth  # emptied: dropped
    assert not revoke_topic_permission(p, f"{T}-partition-0", "ns-reader")  # namespace grants are not topic's


def test_subscription_lists_replace_and_shrink() -> None:
    p = Policies()
    grant_subscription_permission(p, "billing", ["b", "a", "b"])
    assert p.subscription_auth_roles == {"billing": ["a", "b"]}
    assert not revoke_subscription_permission(p, "billing", ["zz"])
    assert not revoke_subscription_permission(p, "other", ["a"])
    assert revoke_subscription_permission(p, "billing", ["a"]) and p.subscription_auth_roles == {"billing": ["b"]}
    assert revoke_subscription_permission(p, "billing", ["b"]) and p.subscription_auth_roles == {}


edits = st.lists(st.one_of(
    st.tuples(st.just("ns"), st.sampled_from(["a", "b"]), st.lists(st.sampled_from(AUTH_ACTIONS), max_size=3)),
    st.tuples(st.just("topic"), st.sampled_from([T, f"{T}-partition-1", "non-persistent://t/ns/x"]),
              st.sampled_from(["a", "b"]), st.lists(st.sampled_from(AUTH_ACTIONS), max_size=3)),
    st.tuples(st.just("sub"), st.sampled_from(["s1", "s2"]), st.lists(st.sampled_from(["a", "b", "c"]), min_size=1)),
    st.tuples(st.just("revoke-ns"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("revoke-topic"), st.sampled_from([T, "non-persistent://t/ns/x"]), st.sampled_from(["a", "b"])),
    st.tuples(st.just("revoke-sub"), st.sampled_from(["s1", "s2"]), st.lists(st.sampled_from(["a", "b", "c"]))),
), max_size=12)


@settings(max_examples=200, deadline=None)
@given(edits)
def test_any_sequence_of_edits_stores_and_reads_back_the_same(sequence) -> None:
    p = Policies(replication_clusters=["c"])
    for edit in sequence:
        kind, *args = edit
        {"ns": grant_namespace_permission, "topic": grant_topic_permission, "sub": grant_subscription_permission,
         "revoke-ns": revoke_namespace_permission, "revoke-topic": revoke_topic_permission,
         "revoke-sub": revoke_subscription_permission}[kind](p, *args)
    assert Policies.from_json(p.to_json()) == p
    stored = json.loads(p.to_json())["auth_policies"]
    assert set(stored) == {"namespace_auth", "destination_auth", "subscription_auth_roles"}
    assert all(grants for grants in stored["destination_auth"].values())  # no empty leftovers
    assert all(roles for roles in stored["subscription_auth_roles"].values())


@pytest.fixture
async def config():
    async with MemoryMetadataStore() as store:
        c = ConfigurationStore(store)
        await c.create_tenant("t", TenantInfo(["admin"], ["c"]))
        await c.create_namespace("t", "ns", Policies(replication_clusters=["c"]))
        yield c


def _apply(edit):
    def fn(p: Policies) -> Policies:
        edit(p)
        return p
    return fn


async def test_concurrent_grants_on_one_namespace_all_land(config) -> None:
    grants = [_apply(lambda p, i=i: grant_namespace_permission(p, f"role-{i}", ["produce"])) for i in range(6)]
    grants += [_apply(lambda p, i=i: grant_topic_permission(p, T, f"role-{i}", ["consume"])) for i in range(6)]
    grants += [_apply(lambda p: grant_subscription_permission(p, "billing", ["role-0"]))]
    await asyncio.gather(*(config.update_namespace_policies("t", "ns", fn) for fn in grants))
    stored = (await config.get_namespace_policies("t", "ns")).value
    assert stored.auth_roles == {f"role-{i}": ["produce"] for i in range(6)}
    assert stored.destination_auth == {T: {f"role-{i}": ["consume"] for i in range(6)}}
    assert stored.subscription_auth_roles == {"billing": ["role-0"]}
    assert stored.replication_clusters == ["c"]  # other policies untouched


async def test_lost_races_are_retried_and_too_many_fail_without_a_write(config) -> None:
    store = config.store
    store.fail_next(2, BadVersionError)
    await config.update_namespace_policies("t", "ns", _apply(lambda p: grant_namespace_permission(p, "app",
                                                                                                   ["consume"])))
    assert (await config.get_namespace_policies("t", "ns")).value.auth_roles == {"app": ["consume"]}
    before = await store.get("/admin/policies/t/ns")
    store.fail_next(config.update_attempts_max, BadVersionError)
    with pytest.raises(BadVersionError):
        await config.update_namespace_policies("t", "ns", _apply(lambda p: revoke_namespace_permission(p, "app")))
    assert await store.get("/admin/policies/t/ns") == before
