"""Inactive topic deletion with pulsar-client, as a Pulsar user meets it once a namespace or a topic turns it
on: a topic left alone past the max inactive duration disappears from the namespace's topic list; one with a
subscription stays (``delete_when_no_subscriptions``); with ``delete_when_subscriptions_caught_up`` a
subscription keeps it only while it has a backlog. The broker default (off, unlike Pulsar) deletes nothing.

The namespace-level variants run on the in-process BrokerThread (in-memory storage); the topic-level
policies run on real processes (ZooKeeper, bookies, a broker), set over REST and with ``magnetar admin``.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
import uuid
from typing import Any

import pulsar
import pytest

from broker.service import ServiceConfig
from config_store import InactiveTopicPolicies, Policies
from tests.kit.broker_thread import broker, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.brokers import start_brokers
from tests.kit.process import python_command
from tests.kit.wait import wait_for

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
FAST_CHECKS = {"config": ServiceConfig(stats_update_interval_s=1.0, delete_inactive_topics_frequency_s=0.1,
                                       delete_inactive_topics_max_inactive_duration_s=0.5)}


def in_process(test):
    """Runs ``test`` on a BrokerThread (in-memory storage) checking for inactive topics every 0.1 s."""
    return pytest.mark.parametrize("storage", ["memory"])(
        pytest.mark.parametrize("broker", [FAST_CHECKS], indirect=True)(test))


NAMESPACE = "public/default"


@pytest.fixture
def client(new_client):
    return new_client(logger=QUIET)


def turn_on(broker, mode: str = "delete_when_no_subscriptions") -> None:
    broker.set_policies(NAMESPACE, Policies(inactive_topic_policies=InactiveTopicPolicies(
        delete_mode=mode, max_inactive_duration_s=1, delete_while_inactive=True)))


def listed(broker) -> set[str]:
    return set(broker.run(broker.service.topics_of_namespace, "public", "default"))


def checks(broker) -> int:
    return broker.call(lambda: broker.service.inactive_topic_monitor.checks)


def wait_checks(broker, n: int) -> None:
    start = checks(broker)
    wait_for(lambda: checks(broker) >= start + n, 10, what=f"{n} more inactive-topic checks")


@in_process
def test_an_idle_topic_is_deleted_and_one_with_a_subscription_stays(broker, client):
    turn_on(broker)
    idle, subscribed = unique_topic("idle"), unique_topic("subscribed")
    client.subscribe(subscribed, "keep").close()
    for topic in (idle, subscribed):
        producer = client.create_producer(topic)
        producer.send(b"m")
        producer.close()
    assert {idle, subscribed} <= listed(broker)
    wait_for(lambda: idle not in listed(broker), 10, what="the idle topic deleted")
    wait_checks(broker, 3)
    assert subscribed in listed(broker) and broker.stats(subscribed)["subscriptions"]["keep"]["msgBacklog"] == 1
    # a deleted topic is created afresh, empty, by its next producer
    client.create_producer(idle).send(b"again")
    assert broker.stats(idle)["msgInCounter"] == 1


@in_process
def test_caught_up_mode_keeps_a_topic_only_while_a_subscription_has_a_backlog(broker, client):
    turn_on(broker, "delete_when_subscriptions_caught_up")
    topic = unique_topic("caught-up")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"m")
    producer.close()
    consumer.close()  # one unacknowledged message: a backlog
    wait_checks(broker, 15)  # 1.5 s, past the 1 s max inactive duration
    assert topic in listed(broker)
    consumer = client.subscribe(topic, "s")
    consumer.acknowledge(consumer.receive(5_000))
    consumer.close()
    wait_for(lambda: topic not in listed(broker), 10, what="the caught-up topic deleted")


@in_process
def test_nothing_is_deleted_by_default(broker, client):
    topic = unique_topic("kept")
    producer = client.create_producer(topic)
    producer.send(b"m")
    producer.close()
    wait_checks(broker, 10)  # 1 s, twice the broker's 0.5 s max inactive duration
    assert topic in listed(broker)


# ---------------------------------------------------------------------------------------------- topic level


NO_SUBS = "delete_when_no_subscriptions"


def rest(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    return status, json.loads(text) if text else None


def admin_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(python_command("admin", *args, "--url", url), capture_output=True, text=True, timeout=60)


def policy(delete: bool, seconds: int = 1) -> dict:
    return {"inactiveTopicDeleteMode": NO_SUBS, "maxInactiveDurationSeconds": seconds, "deleteWhileInactive": delete}


def produce_once(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"m")
    producer.close()


def test_topic_level_policies_override_the_namespaces_on_a_broker_process(tmp_path, zk_connect,
                                                                         bookie_factory) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect, delete_inactive_topics_frequency_ms=100)
    namespace = f"public/inactive-{uuid.uuid4().hex[:6]}"
    admin = f"{b.http_url}/admin/v2"
    assert rest("PUT", f"{admin}/namespaces/{namespace}")[0] == 204
    idle, other, kept, probe = (f"persistent://{namespace}/{name}" for name in ("idle", "other", "kept", "probe"))

    def listed() -> set[str]:
        status, names = rest("GET", f"{admin}/persistent/{namespace}")
        assert status == 200, names
        return set(names)

    def url(topic: str) -> str:
        return f"{admin}/persistent/{namespace}/{topic.rsplit('/', 1)[1]}/inactiveTopicPolicies"

    client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=15, logger=QUIET)
    try:
        status, answer = rest("POST", url(idle), policy(True))  # no such topic yet: refused, nothing stored
        assert status == 404 and "does not exist" in answer["reason"]
        for topic in (idle, other, kept):
            produce_once(client, topic)
        assert {idle, other, kept} <= listed()
        for bad in (policy(True, -1), {**policy(True), "deleteWhileInactive": "yes"},
                    {**policy(True), "inactiveTopicDeleteMode": "delete_sometimes"}, [policy(True)]):
            status, answer = rest("POST", url(idle), bad)
            assert status == 400 and answer["reason"], (bad, answer)
        assert rest("GET", url(idle)) == (204, None)

        # The topic's own policy deletes it while its namespace (and the broker) have none. A producer keeps it
        # in use while the policy is set and read back (each CLI call may take longer than the 1 s allowed idle).
        holder = client.create_producer(idle)
        set_ = admin_cli(b.http_url, "topics", "set-inactive-topic-policies", idle, "-e", "-t", "1s", "-m", NO_SUBS)
        assert set_.returncode == 0, set_.stderr
        shown = admin_cli(b.http_url, "topics", "get-inactive-topic-policies", idle, "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout) == policy(True), shown.stderr
        holder.close()
        wait_for(lambda: idle not in listed(), 30, what="the idle topic deleted by its own policy")
        # deleted like any topic, as Pulsar's GC does: its own policies go with it (then neither is left: 404)
        wait_for(lambda: rest("GET", url(idle))[0] == 404, 30, what="the idle topic's own policies removed")
        assert {other, kept} <= listed()  # idle as long, no policy: kept
        assert rest("GET", url(other) + "?applied=true") == (200, policy(False, 60))  # the broker's default

        # Vice versa: the namespace deletes idle topics, but a topic's own deleteWhileInactive=false keeps it.
        assert rest("POST", url(kept), policy(False)) == (204, None)
        assert rest("POST", f"{admin}/namespaces/{namespace}/inactiveTopicPolicies", policy(True)) == (204, None)
        produce_once(client, probe)  # deleted a second after this, many checks after kept could have been
        wait_for(lambda: not {other, probe} & listed(), 30, what="the namespace's policy deleting other topics")
        assert kept in listed()
        assert rest("GET", url(kept) + "?applied=true") == (200, policy(False))
        removed = admin_cli(b.http_url, "topics", "remove-inactive-topic-policies", kept)
        assert removed.returncode == 0, removed.stderr
        wait_for(lambda: kept not in listed(), 30, what="the kept topic deleted once its own policy is removed")
        assert rest("GET", url(kept))[0] == 404  # neither the topic nor a policy of its own is left
    finally:
        client.close()


def test_a_partitioned_topics_policy_deletes_its_idle_partitions(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect, delete_inactive_topics_frequency_ms=100)
    namespace = f"public/inactive-{uuid.uuid4().hex[:6]}"
    admin = f"{b.http_url}/admin/v2"
    base = f"{admin}/persistent/{namespace}/parts"
    topic = f"persistent://{namespace}/parts"
    assert rest("PUT", f"{admin}/namespaces/{namespace}")[0] == 204
    assert rest("PUT", f"{base}/partitions", 2) == (204, None)
    partitions = {f"{topic}-partition-{i}" for i in range(2)}

    def listed() -> set[str]:
        return set(rest("GET", f"{admin}/persistent/{namespace}")[1])

    client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=15, logger=QUIET)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(4):  # round robin: both partitions get messages
            producer.send(f"m{i}".encode())
        producer.close()
        assert partitions <= listed()
        assert rest("POST", f"{base}/inactiveTopicPolicies", policy(True)) == (204, None)
        assert rest("GET", f"{base}-partition-1/inactiveTopicPolicies") == (200, policy(True))
        wait_for(lambda: not partitions & listed(), 30, what="both partitions deleted")
        assert rest("GET", f"{base}/partitions") == (200, {"partitions": 2})  # the metadata stays, as in Pulsar
        assert rest("GET", f"{base}/inactiveTopicPolicies") == (200, policy(True))  # and so does the policy
    finally:
        client.close()
