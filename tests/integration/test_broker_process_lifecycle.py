"""`magnetar broker` as a real process on a real ZooKeeper: start-up (endpoints, registration, bootstrap),
/health and /metrics, two brokers bootstrapping together, clean SIGTERM, refusal of a bad config."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest
from kazoo.client import KazooClient

from tests.kit.brokers import broker_on_own_zookeeper, start_brokers
from tests.kit.process import python_command

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def zk(zk_server, zk_connect):
    """A kazoo client rooted at this test's chroot."""
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


def node_json(zk: KazooClient, path: str) -> dict:
    data, _ = zk.get(path)
    return json.loads(data)


def test_two_brokers_start_together_register_and_bootstrap_once(tmp_path, zk_connect, zk) -> None:
    a, b = start_brokers(2, tmp_path, zk_connect)
    endpoints = a.endpoints()
    assert endpoints["pulsar"] == a.pulsar_url and endpoints["http"] == a.http_url
    assert endpoints["broker_id"] == "broker-1" and endpoints["cluster"] == "test"
    assert endpoints["metrics"] == f"{a.http_url}/metrics" and endpoints["pid"] == a.process.pid

    assert sorted(zk.get_children("/brokers")) == ["broker-1", "broker-2"]
    reg = node_json(zk, "/brokers/broker-2")
    assert reg["pulsarServiceUrl"] == b.pulsar_url and reg["webServiceUrl"] == b.http_url
    assert reg["cluster"] == "test" and reg["numBundles"] == 0 and reg["numTopics"] == 0
    assert zk.exists("/brokers/broker-1").ephemeralOwner != 0

    cluster = node_json(zk, "/admin/clusters/test")
    assert cluster["serviceUrl"] in (a.http_url, b.http_url)
    assert cluster["brokerServiceUrl"] in (a.pulsar_url, b.pulsar_url)
    assert node_json(zk, "/admin/tenants/public")["allowedClusters"] == ["test"]
    policies = node_json(zk, "/admin/policies/public/default")
    assert policies["replication_clusters"] == ["test"] and policies["bundles"]["numBundles"] == 4
    for broker in (a, b):  # nobody failed its bootstrap on the other's creations
        assert "Traceback" not in broker.process.log_tail(100_000)

    status, body = get(f"{a.http_url}/health")
    assert status == 200 and body.strip() == b"ok"
    status, body = get(f"{b.http_url}/metrics")
    text = body.decode()
    assert status == 200 and "magnetar_broker_owned_bundles" in text and "magnetar_broker_http_requests" in text
    assert json.loads(get(f"{a.http_url}/admin/v2/brokers/test")[1]) == sorted([a.http_address, b.http_address])


def test_sigterm_releases_bundles_and_deregisters_at_once(tmp_path, zk_connect, zk) -> None:
    a, b = start_brokers(2, tmp_path, zk_connect, zk_session_timeout_ms=10_000)
    for i in range(12):  # enough topics to touch every bundle: each ends up owned by someone
        get(f"{a.http_url}/lookup/v2/topic/persistent/public/default/t-{i}")
    owned = {bundle: node_json(zk, f"/namespace/public/default/{bundle}")["brokerId"]
             for bundle in zk.get_children("/namespace/public/default")}
    assert len(owned) == 4 and set(owned.values()) == {"broker-1", "broker-2"}
    assert a.terminate(grace_s=20) == 0
    # released by the clean shutdown, not by the (10 s) session expiry
    still = {bundle: node_json(zk, f"/namespace/public/default/{bundle}")["brokerId"]
             for bundle in zk.get_children("/namespace/public/default")}
    assert set(still.values()) <= {"broker-2"}
    assert zk.get_children("/brokers") == ["broker-2"]
    log = a.process.log_tail(100_000)
    assert "releasing" in log and "broker broker-1 stopped" in log
    for i in range(12):  # everything is now served by the survivor
        lookup = json.loads(get(f"{b.http_url}/lookup/v2/topic/persistent/public/default/t-{i}")[1])
        assert lookup["brokerUrl"] == b.pulsar_url


def test_a_bad_config_exits_with_the_reason(tmp_path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text('data_dir = "d"\nzookeeper = "127.0.0.1:1"\nmanaged_ledger_ack_quorum = 5\n')
    result = subprocess.run(python_command("broker", "--config", str(config)), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "ack_quorum <= write_quorum" in result.stderr and str(config) in result.stderr


def test_a_killed_broker_restarts_under_its_old_id(tmp_path, zk_connect, zk) -> None:
    (a,) = start_brokers(1, tmp_path, zk_connect)
    get(f"{a.http_url}/lookup/v2/topic/persistent/public/default/x")
    old = node_json(zk, "/brokers/broker-1")["instance"]
    a.restart(kill=True, timeout_s=60)  # its old session's nodes linger until they expire; it waits them out
    assert node_json(zk, "/brokers/broker-1")["instance"] != old
    lookup = json.loads(get(f"{a.http_url}/lookup/v2/topic/persistent/public/default/x")[1])
    assert lookup["brokerUrl"] == a.pulsar_url
    bundle = json.loads(get(f"{a.http_url}/lookup/v2/topic/persistent/public/default/x/bundle")[1])
    assert node_json(zk, f"/namespace/public/default/{bundle}")["instance"] != old


def test_sigterm_with_zookeeper_gone_exits_promptly(tmp_path) -> None:
    """With its ZooKeeper gone, a SIGTERMed broker serving a topic waited the whole shutdown grace (8 s) for
    deregistration, bundle releases and ledger closes that cannot happen; its nodes are ephemeral and the
    topic's ledger is recovered by its next owner, so the shutdown must not wait for them."""
    import pulsar

    with broker_on_own_zookeeper(tmp_path, zk_session_timeout_ms=30_000) as (zookeeper, broker):
        client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=10)
        try:
            client.create_producer("persistent://public/default/zk-gone").send(b"stored")
            zookeeper.process.kill()
            code, took = broker.timed_terminate(grace_s=20)
        finally:
            client.close()
    assert code == 0
    assert took < 6.0, f"a SIGTERMed broker with its ZooKeeper gone took {took:.1f} s to exit (grace: 8 s)"
