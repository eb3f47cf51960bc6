"""Permissions over the admin REST API of two brokers on one in-memory store: Pulsar's paths and JSON, grants
made on one broker read on the other, bad bodies and names refused with a 400 naming the problem and nothing
stored, unknown namespaces 404, revokes of nothing 412."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

NS = "/admin/v2/namespaces/t/ns/permissions"
TOPIC = "/admin/v2/persistent/t/ns/orders/permissions"
STORED = "/admin/policies/t/ns"


async def stored_auth(node) -> dict:
    versioned = await node.store.get(STORED)
    return json.loads(versioned.value)["auth_policies"]


async def test_namespace_grants_with_pulsars_paths_seen_by_every_broker(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    assert await call(http, "GET", b.url + NS) == (200, {})
    assert await call(http, "POST", f"{a.url}{NS}/app", ["consume", "produce", "consume"]) == (204, None)
    assert await call(http, "POST", f"{b.url}{NS}/ops", ["consume"]) == (204, None)
    assert await call(http, "GET", b.url + NS) == (200, {"app": ["produce", "consume"], "ops": ["consume"]})
    assert (await stored_auth(a))["namespace_auth"] == {"app": ["produce", "consume"], "ops": ["consume"]}
    # The namespace's policies show them in Pulsar's auth_policies.
    status, policies = await call(http, "GET", a.url + "/admin/v2/namespaces/t/ns")
    assert status == 200 and policies["auth_policies"] == {
        "namespace_auth": {"app": ["produce", "consume"], "ops": ["consume"]}, "destination_auth": {},
        "subscription_auth_roles": {}}

    assert await call(http, "POST", f"{a.url}{NS}/app", ["consume"]) == (204, None)  # replaces
    assert await call(http, "DELETE", f"{b.url}{NS}/ops") == (204, None)
    assert await call(http, "DELETE", f"{b.url}{NS}/never-granted") == (204, None)  # as Pulsar: nothing to do
    assert await call(http, "GET", a.url + NS) == (200, {"app": ["consume"]})
    # Roles with characters that need encoding survive the trip.
    assert await call(http, "POST", f"{a.url}{NS}/CN%3Dbilling%20app%2Feu", ["produce"]) == (204, None)
    assert (await call(http, "GET", a.url + NS))[1]["CN=billing app/eu"] == ["produce"]


@pytest.mark.parametrize("body,complaint", [
    ({"produce": True}, "JSON list of action names"),
    ("produce", "JSON list of action names"),
    (None, "needs a JSON body"),
    (["produce", "write"], "unknown action 'write'"),
    (["produce", 1], "must be a string"),
    (["Produce"], "unknown action 'Produce'"),
])
async def test_bad_grant_bodies_are_refused_and_store_nothing(nodes, http, body, complaint) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    before = await a.store.get(STORED)
    for url in (f"{a.url}{NS}/app", f"{a.url}{TOPIC}/app"):
        status, answer = await call(http, "POST", url, body)
        assert status == 400 and complaint in answer["reason"], (url, answer)
    assert await a.store.get(STORED) == before


async def test_bad_names_and_unknown_namespaces(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    before = await a.store.get(STORED)
    for url in (f"{a.url}{NS}/%20%20", f"{a.url}{TOPIC}/%20", f"{a.url}{NS}/subscription/%20",
                f"{a.url}{NS}/bad%0Arole"):
        status, answer = await call(http, "POST", url, ["produce"] if "subscription" not in url else ["app"])
        assert status == 400 and ("empty" in answer["reason"] or "control" in answer["reason"]), (url, answer)
    status, answer = await call(http, "POST", f"{a.url}{NS}/subscription/billing", ["app", ""])
    assert status == 400 and "a role must not be empty" in answer["reason"]
    status, answer = await call(http, "POST", f"{a.url}{NS}/subscription/billing", [])
    assert status == 400 and "at least one role" in answer["reason"]
    status, answer = await call(http, "POST", f"{a.url}{NS}/subscription/billing", {"roles": ["app"]})
    assert status == 400 and "JSON list of role names" in answer["reason"]
    status, answer = await call(http, "POST", f"{a.url}{NS}/app", raw=b"[produce]")
    assert status == 400 and "not valid JSON" in answer["reason"]
    assert await a.store.get(STORED) == before

    for method, url, body in (("GET", "/admin/v2/namespaces/t/nope/permissions", None),
                              ("POST", "/admin/v2/namespaces/t/nope/permissions/app", ["produce"]),
                              ("DELETE", "/admin/v2/namespaces/t/nope/permissions/app", None),
                              ("GET", "/admin/v2/namespaces/t/nope/permissions/subscription", None),
                              ("POST", "/admin/v2/namespaces/t/nope/permissions/subscription/s", ["app"]),
                              ("DELETE", "/admin/v2/namespaces/t/nope/permissions/s/app", None),
                              ("GET", "/admin/v2/persistent/t/nope/x/permissions", None),
                              ("POST", "/admin/v2/persistent/t/nope/x/permissions/app", ["produce"]),
                              ("DELETE", "/admin/v2/non-persistent/t/nope/x/permissions/app", None),
                              ("POST", "/admin/v2/namespaces/nobody/ns/permissions/app", ["produce"])):
        status, answer = await call(http, method, a.url + url, body)
        assert status == 404 and "does not exist" in answer["reason"], (method, url, answer)
    status, answer = await call(http, "POST", a.url + "/admin/v2/namespaces/t/b%24d/permissions/app", ["produce"])
    assert status == 400 and "invalid namespace name" in answer["reason"]


async def test_topic_grants_union_with_the_namespaces_and_cover_partitions(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    assert await call(http, "POST", f"{a.url}{NS}/reader", ["consume"]) == (204, None)
    assert await call(http, "POST", f"{a.url}{TOPIC}/app", ["produce"]) == (204, None)  # no such topic yet: fine
    assert await call(http, "POST", f"{b.url}{TOPIC}/reader", ["produce"]) == (204, None)
    np = "/admin/v2/non-persistent/t/ns/orders/permissions"
    assert await call(http, "POST", f"{a.url}{np}/volatile", ["consume"]) == (204, None)

    assert await call(http, "GET", b.url + TOPIC) == (200, {"app": ["produce"], "reader": ["produce", "consume"]})
    partition = "/admin/v2/persistent/t/ns/orders-partition-3/permissions"
    assert await call(http, "GET", b.url + partition) == (200, {"app": ["produce"],
                                                                "reader": ["produce", "consume"]})
    assert await call(http, "GET", b.url + np) == (200, {"reader": ["consume"], "volatile": ["consume"]})
    assert (await stored_auth(a))["destination_auth"] == {
        "persistent://t/ns/orders": {"app": ["produce"], "reader": ["produce"]},
        "non-persistent://t/ns/orders": {"volatile": ["consume"]}}

    # A revoke of what the topic does not hold is refused (412, as Pulsar) and says where the grant is.
    before = await a.store.get(STORED)
    status, answer = await call(http, "DELETE", f"{a.url}{partition}/app")
    assert status == 412 and "partitioned topic persistent://t/ns/orders" in answer["reason"]
    status, answer = await call(http, "DELETE", f"{a.url}/admin/v2/persistent/t/ns/other/permissions/reader")
    assert status == 412 and "namespace t/ns" in answer["reason"]
    assert await a.store.get(STORED) == before

    assert await call(http, "DELETE", f"{b.url}{TOPIC}/app") == (204, None)
    assert await call(http, "GET", a.url + TOPIC) == (200, {"reader": ["produce", "consume"]})
    assert await call(http, "DELETE", f"{b.url}{TOPIC}/reader") == (204, None)
    assert "persistent://t/ns/orders" not in (await stored_auth(a))["destination_auth"]


async def test_subscription_permissions_at_pulsars_paths(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    sub = f"{NS}/subscription"
    assert await call(http, "GET", a.url + sub) == (200, {})
    assert await call(http, "POST", f"{a.url}{sub}/billing", ["b", "a", "c"]) == (204, None)
    assert await call(http, "POST", f"{a.url}{sub}/audit", ["ops"]) == (204, None)
    assert await call(http, "GET", b.url + sub) == (200, {"audit": ["ops"], "billing": ["a", "b", "c"]})

    assert await call(http, "DELETE", f"{b.url}{NS}/billing/a") == (204, None)  # Pulsar's revoke of one role
    assert await call(http, "DELETE", f"{b.url}{sub}/billing", ["b"]) == (204, None)  # a list
    assert await call(http, "GET", a.url + sub) == (200, {"audit": ["ops"], "billing": ["c"]})
    before = await a.store.get(STORED)
    status, answer = await call(http, "DELETE", f"{a.url}{NS}/billing/zed")
    assert status == 412 and "zed not listed for subscription billing" in answer["reason"]
    status, answer = await call(http, "DELETE", f"{a.url}{NS}/nothing/zed")
    assert status == 412 and "no roles listed" in answer["reason"]
    assert await a.store.get(STORED) == before
    assert await call(http, "DELETE", f"{a.url}{sub}/billing", ["c"]) == (204, None)
    assert await call(http, "GET", a.url + sub) == (200, {"audit": ["ops"]})

    # Pulsar's form for a subscription literally named "subscription" (no body) still works.
    assert await call(http, "POST", f"{a.url}{sub}/subscription", ["x", "y"]) == (204, None)
    assert await call(http, "DELETE", f"{a.url}{sub}/x") == (204, None)
    assert (await call(http, "GET", a.url + sub))[1]["subscription"] == ["y"]
