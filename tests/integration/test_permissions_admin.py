"""Permissions on real processes (ZooKeeper, brokers) through the admin REST API and ``magnetar admin``:

* grants and revokes made on one broker are stored in the global configuration store, in Pulsar's
  ``auth_policies`` JSON at ``/admin/policies/{tenant}/{namespace}``, and read back on the other broker;
* bad bodies and names are refused (400 naming the problem; the CLI exits 2 before sending) and leave the
  stored node as it was (same bytes, same ZooKeeper version); unknown namespaces answer 404;
* a broker that has a topic loaded sees new grants in the topic's policies through its watches, without a
  restart (what the authorization checks will read).
"""

from __future__ import annotations

import json
import uuid

import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from magnetar.admin_cli import admin_app
from tests.integration.test_admin_partitioned_subscriptions import rest
from tests.kit.broker_thread import BrokerThread, make_client
from tests.kit.brokers import BrokerHandle, start_brokers
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(240)

POLICIES = "/admin/policies/public/default"


@pytest.fixture
def zk(zk_connect):
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def admin(broker: BrokerHandle, *args: str, code: int = 0) -> str:
    """``magnetar admin ARGS --url <broker>``; asserts its exit code and returns its output."""
    result = CliRunner().invoke(admin_app, [*args, "--url", broker.http_url])
    assert result.exit_code == code, result.output
    return result.output


def stored(zk: KazooClient, path: str = POLICIES) -> tuple[bytes, int]:
    data, stat = zk.get(path)
    return data, stat.version


def auth(zk: KazooClient, path: str = POLICIES) -> dict:
    return json.loads(stored(zk, path)[0])["auth_policies"]


def test_grants_and_revokes_through_rest_and_cli_on_two_brokers(tmp_path, zk_connect, zk) -> None:
    a, b = start_brokers(2, tmp_path, zk_connect)
    topic = f"persistent://public/default/orders-{uuid.uuid4().hex[:6]}"
    ns_url = "/admin/v2/namespaces/public/default/permissions"
    topic_url = f"/admin/v2/{topic.replace('://', '/')}/permissions"

    # Namespace grants: the CLI on one broker, REST on the other, the same stored JSON.
    assert "granted produce, consume on public/default to app" in admin(
        a, "namespaces", "grant-permission", "public/default", "--role", "app", "--actions", "consume,produce")
    assert rest("POST", f"{b.http_url}{ns_url}/audit", ["consume"]) == (204, None)
    assert rest("GET", a.http_url + ns_url) == (200, {"app": ["produce", "consume"], "audit": ["consume"]})
    assert json.loads(admin(b, "namespaces", "permissions", "public/default", "--json")) == {
        "app": ["produce", "consume"], "audit": ["consume"]}
    assert "produce, consume" in admin(b, "namespaces", "permissions", "public/default")
    assert auth(zk)["namespace_auth"] == {"app": ["produce", "consume"], "audit": ["consume"]}

    # Topic grants: stored under the full name, shown with the namespace's.
    admin(b, "topics", "grant-permission", topic, "--role", "writer", "--actions", "produce")
    assert auth(zk)["destination_auth"] == {topic: {"writer": ["produce"]}}
    assert json.loads(admin(a, "topics", "permissions", topic, "--json")) == {
        "app": ["produce", "consume"], "audit": ["consume"], "writer": ["produce"]}
    assert json.loads(admin(a, "topics", "permissions", f"{topic}-partition-2", "--json"))["writer"] == ["produce"]

    # Subscription lists.
    admin(a, "namespaces", "grant-subscription-permission", "public/default", "--subscription", "billing",
          "--roles", "app,audit")
    assert auth(zk)["subscription_auth_roles"] == {"billing": ["app", "audit"]}
    admin(b, "namespaces", "revoke-subscription-permission", "public/default", "--subscription", "billing",
          "--role", "audit")
    assert json.loads(admin(a, "namespaces", "subscription-permissions", "public/default", "--json")) == {
        "billing": ["app"]}

    # Refusals change nothing: bad bodies (400), bad CLI input (exit 2, nothing sent), revokes of nothing (412),
    # an unknown namespace (404).
    before = stored(zk)
    for url, body, complaint in ((f"{a.http_url}{ns_url}/app", {"produce": True}, "JSON list of action names"),
                                 (f"{a.http_url}{ns_url}/app", ["produce", "own"], "unknown action 'own'"),
                                 (f"{b.http_url}{topic_url}/app", "produce", "JSON list of action names"),
                                 (f"{b.http_url}{ns_url}/%20", ["produce"], "must not be empty"),
                                 (f"{a.http_url}{ns_url}/subscription/billing", [], "at least one role")):
        status, answer = rest("POST", url, body)
        assert status == 400 and complaint in answer["reason"], (url, answer)
    assert "unknown action(s) write" in admin(a, "namespaces", "grant-permission", "public/default", "--role",
                                              "app", "--actions", "produce,write", code=2)
    admin(a, "topics", "grant-permission", topic, "--role", " ", "--actions", "produce", code=2)
    out = admin(a, "topics", "revoke-permission", topic, "--role", "app", code=1)
    assert "412" in out and "namespace public/default" in out
    assert "404" in admin(a, "namespaces", "grant-permission", "public/nope", "--role", "app", "--actions",
                          "produce", code=1)
    assert stored(zk) == before

    # Revokes.
    admin(a, "topics", "revoke-permission", topic, "--role", "writer")
    admin(b, "namespaces", "revoke-permission", "public/default", "--role", "audit")
    assert auth(zk) == {"namespace_auth": {"app": ["produce", "consume"]}, "destination_auth": {},
                        "subscription_auth_roles": {"billing": ["app"]}}
    assert "Traceback" not in a.process.log_tail(100_000) + b.process.log_tail(100_000)


def test_a_loaded_topic_sees_new_grants_without_a_restart(tmp_path, zk_connect, zk) -> None:
    """A broker serving a topic (in-process, so the test can read its policies) follows grants another broker
    stores: the topic's ``policies`` carry them within a watch round trip, and lose them on revoke."""
    (rest_broker,) = start_brokers(1, tmp_path, zk_connect)

    async def config_store():
        from config_store import ConfigurationStore, KazooMetadataStore
        store = held["store"] = KazooMetadataStore(zk_connect, session_timeout_ms=10_000)
        await store.start()
        return ConfigurationStore(store)

    async def close():
        await held.pop("store").close()

    held: dict = {}
    topic = f"persistent://perm/live/events-{uuid.uuid4().hex[:6]}"
    with BrokerThread(namespaces=("perm/live",), config_store_builder=config_store, closers=(close,)) as serving:
        client = make_client(serving.url)
        try:
            producer = client.create_producer(topic)
            producer.send(b"loaded")

            def grants() -> tuple:
                p = serving.topic(topic).policies
                return p.auth_roles, p.destination_auth, p.subscription_auth_roles

            assert grants() == ({}, {}, {})
            admin(rest_broker, "namespaces", "grant-permission", "perm/live", "--role", "app", "--actions", "consume")
            admin(rest_broker, "topics", "grant-permission", topic, "--role", "writer", "--actions", "produce")
            admin(rest_broker, "namespaces", "grant-subscription-permission", "perm/live", "--subscription", "s",
                  "--roles", "app")
            expected = ({"app": ["consume"]}, {topic: {"writer": ["produce"]}}, {"s": ["app"]})
            wait_for(lambda: grants() == expected, 30, what="the loaded topic's policies to carry the grants")
            assert auth(zk, "/admin/policies/perm/live")["destination_auth"] == expected[1]

            admin(rest_broker, "topics", "revoke-permission", topic, "--role", "writer")
            wait_for(lambda: grants()[1] == {}, 30, what="the revoke to reach the loaded topic")
            assert grants()[0] == {"app": ["consume"]}
            producer.send(b"still served")  # nothing is enforced yet: the grants are only data here
        finally:
            client.close()
