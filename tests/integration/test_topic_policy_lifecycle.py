"""Topic-level policies end with their topic, and unset ones answer 204, as in Pulsar, on real processes
(ZooKeeper, bookies, brokers) through REST, ``magnetar admin`` and pulsar-client:

* deleting a topic (``DELETE .../{topic}``) removes its node under ``/admin/topic-policies``; deleting a
  partitioned topic (``DELETE .../{topic}/partitions``, fanned out to the partitions' owners) removes the
  partitioned topic's and its partitions'; a topic created again under the name starts with none;
* a refused delete (412: clients connected, no ``force``) or one of a topic that does not exist (404) leaves
  them in place; a forced delete removes them (non-persistent topics too); a topic replicated to another
  region keeps them (they are shared, and the topic lives on there);
* a topic-level policy GET with nothing set answers 204 without a body (the validation flag answers ``false``,
  as Pulsar), ``?applied=true`` still answers a value; ``magnetar admin topics get-...`` prints "(not set)", or
  ``null`` with ``--json``, and exits 0.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Optional

import pulsar
import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from magnetar.admin_cli import admin_app
from tests.integration.test_admin_partitioned_subscriptions import rest
from tests.kit.brokers import BrokerHandle, start_brokers
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(240)

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
NS = "public/default"
POLICY_ROOT = f"/admin/topic-policies/{NS}"
PUBLISH = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
INACTIVE = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 3600,
            "deleteWhileInactive": False}
# Topic-level GETs that answer 204 when nothing is set (``?applied=true``: a value all the same).
UNSET_GETS = ("publishRate", "dispatchRate", "subscriptionDispatchRate", "inactiveTopicPolicies", "compactionThreshold",
              "delayedDelivery", "replication", "schemaCompatibilityStrategy")


@pytest.fixture
def zk(zk_connect):
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def local(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def stored(zk: KazooClient, local_name: str, domain: str = "persistent") -> Optional[dict]:
    """The topic's own policies as stored in the configuration store (None: no node)."""
    if zk.exists(f"{POLICY_ROOT}/{domain}/{local_name}") is None:
        return None
    return json.loads(zk.get(f"{POLICY_ROOT}/{domain}/{local_name}")[0])


def raw_get(url: str) -> tuple[int, bytes]:
    """(status, body bytes) of a GET: an empty body must be really empty, not ``null``."""
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read()


def admin(broker: BrokerHandle, *args: str) -> str:
    """``magnetar admin ARGS --url <broker>``; returns its output (the command must succeed)."""
    result = CliRunner().invoke(admin_app, [*args, "--url", broker.http_url])
    assert result.exit_code == 0, result.output
    return result.output


def set_policies(t: str, cluster: str) -> None:
    """Sets policies on ``t`` (a REST topic URL) stored in its node, each through its own route."""
    assert rest("POST", f"{t}/publishRate", PUBLISH) == (204, None)
    assert rest("POST", f"{t}/inactiveTopicPolicies", INACTIVE) == (204, None)
    assert rest("POST", f"{t}/compactionThreshold", 1_000_000) == (204, None)
    assert rest("PUT", f"{t}/schemaCompatibilityStrategy", "FORWARD") == (204, None)
    assert rest("POST", f"{t}/replication", [cluster]) == (204, None)


def assert_nothing_set(t: str) -> None:
    for policy in UNSET_GETS:
        assert raw_get(f"{t}/{policy}") == (204, b""), policy
        status, applied = rest("GET", f"{t}/{policy}?applied=true")
        assert status == 200 and applied is not None, (policy, status, applied)
    assert rest("GET", f"{t}/schemaValidationEnforced") == (200, False)  # Pulsar's answer: a boolean


def test_deleting_a_topic_removes_its_policies_unless_the_delete_fails(tmp_path, zk_connect, bookie_factory,
                                                                      zk) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect)
    name, ghost = local("orders"), local("ghost")
    topic = f"persistent://{NS}/{name}"
    t = f"{b.http_url}/admin/v2/persistent/{NS}/{name}"
    client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        assert rest("PUT", t) == (204, None)
        assert_nothing_set(t)
        set_policies(t, b.cluster)
        own = stored(zk, name)
        assert own["publishRate"] == PUBLISH and own["compactionThreshold"] == 1_000_000

        producer = client.create_producer(topic)
        status, answer = rest("DELETE", t)
        assert status == 412 and answer["reason"], answer  # a producer is connected: refused, nothing changed
        assert stored(zk, name) == own
        assert rest("GET", f"{t}/publishRate") == (200, PUBLISH)

        # A topic that does not exist cannot be deleted: the policies stored ahead of it stay.
        g = f"{b.http_url}/admin/v2/persistent/{NS}/{ghost}"
        assert rest("POST", f"{g}/compactionThreshold", 5) == (204, None)
        assert rest("DELETE", g)[0] == 404
        assert rest("GET", f"{g}/compactionThreshold") == (200, 5)

        producer.close()
        assert rest("DELETE", t) == (204, None)
        assert stored(zk, name) is None
        assert rest("GET", f"{t}/publishRate")[0] == 404  # neither the topic nor a policy of its own is left
        assert raw_get(f"{t}/compactionThreshold") == (204, b"")  # a route that needs no topic: nothing set

        # Created again, by REST then by a producer: it starts without topic-level policies.
        assert rest("PUT", t) == (204, None)
        assert_nothing_set(t)
        client.create_producer(topic).close()
        assert stored(zk, name) is None
    finally:
        client.close()

    # magnetar admin: a 204 prints "(not set)", or null with --json, and exits 0.
    for command in ("get-publish-rate", "get-dispatch-rate", "get-subscription-dispatch-rate",
                    "get-inactive-topic-policies", "get-schema-compatibility-strategy", "get-replication-clusters"):
        assert "(not set)" in admin(b, "topics", command, topic), command
        assert json.loads(admin(b, "topics", command, topic, "--json")) is None, command
        assert json.loads(admin(b, "topics", command, topic, "--applied", "--json")) is not None, command
    assert json.loads(admin(b, "topics", "get-schema-validation-enforce", topic, "--json")) is False
    admin(b, "topics", "set-publish-rate", topic, "-m", "7")
    assert json.loads(admin(b, "topics", "get-publish-rate", topic, "--json"))["publishThrottlingRateInMsg"] == 7


def test_deleting_a_partitioned_topic_removes_its_and_its_partitions_policies(tmp_path, zk_connect, bookie_factory,
                                                                             zk) -> None:
    bookie_factory(2)
    brokers = start_brokers(2, tmp_path, zk_connect)
    a = brokers[0]
    name = local("parts")
    topic = f"persistent://{NS}/{name}"
    base = f"{a.http_url}/admin/v2/persistent/{NS}/{name}"
    partition_1 = f"{base}-partition-1"
    client = pulsar.Client(a.pulsar_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        assert rest("PUT", f"{base}/partitions", 3) == (204, None)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(6):  # round robin: every partition is created at its owner
            producer.send(f"m{i}".encode())
        set_policies(base, a.cluster)
        assert rest("GET", f"{partition_1}/publishRate") == (200, PUBLISH)  # the partitioned topic's cover it
        assert rest("POST", f"{partition_1}/replication", [a.cluster]) == (204, None)  # stored under its name
        own = stored(zk, name)
        assert own is not None and stored(zk, f"{name}-partition-1") is not None

        status, answer = rest("DELETE", f"{base}/partitions")
        assert status == 412 and answer["reason"], answer  # a producer is connected to every partition
        assert stored(zk, name) == own and stored(zk, f"{name}-partition-1") is not None
        assert rest("GET", f"{base}/partitions") == (200, {"partitions": 3})

        producer.close()
        assert rest("DELETE", f"{base}/partitions") == (204, None)
        assert rest("GET", f"{base}/partitions") == (200, {"partitions": 0})
        left = zk.get_children(f"{POLICY_ROOT}/persistent") if zk.exists(f"{POLICY_ROOT}/persistent") else []
        assert not [n for n in left if n == name or n.startswith(f"{name}-partition-")], left

        assert rest("PUT", f"{base}/partitions", 3) == (204, None)
        assert_nothing_set(base)
        assert raw_get(f"{partition_1}/replication") == (204, b"")
        assert raw_get(f"{partition_1}/publishRate") == (204, b"")
    finally:
        client.close()


def test_a_forced_delete_of_a_non_persistent_topic_removes_its_policies(tmp_path, zk_connect, bookie_factory,
                                                                       zk) -> None:
    bookie_factory(1)
    (b,) = start_brokers(1, tmp_path, zk_connect)
    name = local("live")
    topic = f"non-persistent://{NS}/{name}"
    t = f"{b.http_url}/admin/v2/non-persistent/{NS}/{name}"
    client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(topic)  # loads the topic: it exists while loaded
        assert raw_get(f"{t}/publishRate") == (204, b"")
        assert rest("POST", f"{t}/publishRate", PUBLISH) == (204, None)
        assert stored(zk, name, "non-persistent")["publishRate"] == PUBLISH
        status, answer = rest("DELETE", t)
        assert status == 412 and answer["reason"], answer
        assert stored(zk, name, "non-persistent") is not None
        assert rest("DELETE", t + "?force=true") == (204, None)
        assert stored(zk, name, "non-persistent") is None
        producer.close()
    finally:
        client.close()


def test_a_topic_replicated_to_another_region_keeps_its_policies_when_deleted_here(tmp_path, zk_connect,
                                                                                  bookie_factory, zk) -> None:
    # The policies live in the store all regions share, and the topic lives on in the other region: deleting
    # this region's copy must not take them away from there.
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect)
    far = local("far")
    assert rest("PUT", f"{b.http_url}/admin/v2/clusters/{far}",
                {"serviceUrl": "http://127.0.0.1:9", "brokerServiceUrl": "pulsar://127.0.0.1:9"}) == (204, None)
    status, tenant = rest("GET", f"{b.http_url}/admin/v2/tenants/public")
    assert status == 200
    tenant["allowedClusters"] = sorted({*tenant["allowedClusters"], far})
    assert rest("POST", f"{b.http_url}/admin/v2/tenants/public", tenant) == (204, None)
    name = local("shared")
    t = f"{b.http_url}/admin/v2/persistent/{NS}/{name}"
    assert rest("PUT", t) == (204, None)
    assert rest("POST", f"{t}/publishRate", PUBLISH) == (204, None)
    assert rest("POST", f"{t}/replication", [b.cluster, far]) == (204, None)
    own = stored(zk, name)
    assert own["replicationClusters"] == [b.cluster, far]
    # The loaded topic learns of the override through a watch: delete once it replicates to the far region.
    wait_for(lambda: far in (rest("GET", f"{t}/stats")[1] or {}).get("replication", {}), 30,
             what="the topic replicating to the far region")
    assert rest("DELETE", t + "?force=true") == (204, None)
    assert stored(zk, name) == own
    assert rest("GET", f"{t}/publishRate") == (200, PUBLISH)
