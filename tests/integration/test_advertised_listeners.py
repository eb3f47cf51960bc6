"""Advertised listeners on real broker processes: pulsar-client with ``listener_name`` produces and consumes
through each listener's own port, binary and HTTP lookups answer the owner's URL for the listener asked for
(also when another broker owns the topic, and on redirects), and an unknown listener fails the lookup with
an error naming it while the broker stays healthy."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import urllib.error
import urllib.request

import pulsar
import pytest

from magnetar.net import free_port
from magnetar.protocol import pb
from magnetar.protocol.client import Client
from magnetar.protocol.client.errors import ServiceNotReadyError
from tests.kit.brokers import BrokerHandle
from tests.kit.process import python_command
from tests.kit.server import HOST, dumps_toml

pytestmark = pytest.mark.timeout(240)

NS = "public/default"
Lookup = pb.CommandLookupTopicResponse


class ListenerBroker(BrokerHandle):
    """A broker advertising ``internal`` on its own port and ``external`` on a second port of 127.0.0.1."""

    def __init__(self, name: str, tmp_path, zk_connect: str) -> None:
        port, external_port = free_port(HOST), free_port(HOST)
        self.urls = {"internal": f"pulsar://{HOST}:{port}", "external": f"pulsar://{HOST}:{external_port}"}
        super().__init__(name, tmp_path / "brokers", zk_connect, port=port,
                         advertised_listeners=",".join(f"{n}:{u}" for n, u in self.urls.items()))


def start_listener_brokers(n: int, tmp_path, zk_connect: str) -> list[ListenerBroker]:
    brokers = [ListenerBroker(f"broker-{i}", tmp_path, zk_connect) for i in range(1, n + 1)]
    for broker in brokers:
        broker.start(wait=False)
    for broker in brokers:
        broker.wait_healthy(timeout_s=60)
    return brokers


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, object]:
    """GET without following redirects: (status, JSON body) or (307, Location)."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=15) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        if e.code == 307:
            return 307, e.headers["Location"]
        return e.code, json.loads(e.read() or b"null")


def put(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as response:
        assert response.status in (200, 204)


def lookup_url(broker: BrokerHandle, topic: str) -> str:
    return f"{broker.http_url}/lookup/v2/topic/persistent/{NS}/{topic}"


def topics_per_bundle(broker: BrokerHandle, namespace: str = NS) -> list[str]:
    """One topic name of each bundle of ``namespace``."""
    found: dict[str, str] = {}
    for i in range(1000):
        _, bundle = http_get(f"{broker.http_url}/lookup/v2/topic/persistent/{namespace}/t-{i}/bundle")
        found.setdefault(bundle, f"t-{i}")
        if len(found) == 4:
            return sorted(found.values())
    raise AssertionError(f"fewer than 4 bundles in {namespace}")


async def raw_lookup(url: str, topic: str, listener: str, *,
                     authoritative: bool = False) -> pb.CommandLookupTopicResponse:
    """One LOOKUP sent to ``url`` as pulsar-client sends it, answered as is (no redirect followed)."""
    async with Client(url, operation_timeout_s=15) as client:
        conn = await client.pool.get(url)
        request = pb.CommandLookupTopic(topic=f"persistent://{NS}/{topic}", authoritative=authoritative,
                                        advertised_listener_name=listener)
        return (await conn.request(request)).lookupTopicResponse


async def client_lookup(url: str, topic: str, listener: str) -> str:
    """The broker URL magnetar's own client is sent to (redirects followed) for ``listener``."""
    async with Client(url, listener_name=listener, operation_timeout_s=15) as client:
        return str((await client.lookup(f"persistent://{NS}/{topic}")).logical_url)


def produce_and_consume(client: pulsar.Client, topic: str, n: int = 5) -> None:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"{topic}-{i}".encode())
    got = []
    for _ in range(n):
        msg = consumer.receive(15_000)
        got.append(msg.data().decode())
        consumer.acknowledge(msg)
    assert sorted(got) == sorted(f"{topic}-{i}" for i in range(n))
    producer.close()
    consumer.close()


def pulsar_client(url: str, listener: str, **kwargs) -> pulsar.Client:
    return pulsar.Client(url, listener_name=listener, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
                         **{"operation_timeout_seconds": 30, **kwargs})


def test_each_listener_serves_and_is_answered_and_an_unknown_one_is_refused(tmp_path, zk_connect,
                                                                            bookie_factory) -> None:
    bookie_factory(2)
    (broker,) = start_listener_brokers(1, tmp_path, zk_connect)
    assert broker.endpoints()["pulsar"] == broker.urls["internal"]  # the internal listener is the default
    assert broker.endpoints()["listeners"] == {n: {"brokerServiceUrl": u} for n, u in broker.urls.items()}
    for listener in broker.urls:  # partitioned topics: every partition is looked up with the listener too
        put(f"{broker.http_url}/admin/v2/persistent/{NS}/parted-{listener}/partitions", b"2")

    for listener, url in broker.urls.items():
        # pulsar-client looks up through the main port and is sent to the listener's own port
        assert asyncio.run(client_lookup(broker.pulsar_url, f"plain-{listener}", listener)) == url
        client = pulsar_client(broker.pulsar_url, listener)
        try:
            produce_and_consume(client, f"plain-{listener}")
            produce_and_consume(client, f"parted-{listener}")
        finally:
            client.close()
        status, answer = http_get(lookup_url(broker, f"plain-{listener}") + f"?listenerName={listener}")
        assert status == 200 and answer["brokerUrl"] == answer["nativeUrl"] == url
        status, answer = http_get(lookup_url(broker, f"plain-{listener}"), {"X-Pulsar-ListenerName": listener})
        assert status == 200 and answer["brokerUrl"] == url
    # no listener name: the default (internal) URL, also when asked on the external port
    assert asyncio.run(client_lookup(broker.urls["external"], "plain-external", "")) == broker.urls["internal"]
    assert http_get(lookup_url(broker, "plain-external"))[1]["brokerUrl"] == broker.urls["internal"]

    # an unknown listener: the lookup fails naming it (Pulsar: ServiceNotReady), nothing else changes
    with pytest.raises(ServiceNotReadyError, match="broker broker-1 has no advertised listener 'nope'"):
        asyncio.run(client_lookup(broker.pulsar_url, "never", "nope"))
    status, answer = http_get(lookup_url(broker, "never") + "?listenerName=nope")
    assert status == 503 and "has no advertised listener 'nope'" in answer["reason"]
    # pulsar-client retries a ServiceNotReady lookup (logging the broker's message) until its operation
    # timeout, as against Pulsar
    client = pulsar_client(broker.pulsar_url, "nope", operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.Timeout):
            client.create_producer("never")
    finally:
        client.close()
    assert broker.healthy()
    status, topics = http_get(f"{broker.http_url}/admin/v2/persistent/{NS}")
    assert status == 200 and f"persistent://{NS}/never" not in topics
    client = pulsar_client(broker.pulsar_url, "external")
    try:
        produce_and_consume(client, "after-the-unknown-one")
    finally:
        client.close()


def test_any_broker_answers_with_the_owners_listener_url_and_redirects_keep_the_listener(tmp_path, zk_connect,
                                                                                        bookie_factory) -> None:
    bookie_factory(2)
    a, b = start_listener_brokers(2, tmp_path, zk_connect)
    by_http = {a.http_url: a, b.http_url: b}
    names = topics_per_bundle(a)
    redirects = 0
    owners: dict[str, ListenerBroker] = {}
    for name in names:
        # asked at broker-1 for the external listener: it answers itself, or sends the client on to the
        # broker it chose, with that broker's external URL
        answer = asyncio.run(raw_lookup(a.pulsar_url, name, "external"))
        if answer.response == Lookup.Redirect:
            redirects += 1
            assert answer.authoritative and answer.brokerServiceUrl == b.urls["external"]
            answer = asyncio.run(raw_lookup(b.urls["external"], name, "external", authoritative=True))
            owners[name] = b
        else:
            owners[name] = a
        assert answer.response == Lookup.Connect and answer.brokerServiceUrl == owners[name].urls["external"]
    assert redirects and set(owners.values()) == {a, b}  # both brokers own bundles; some were redirected
    for name, owner in owners.items():
        for asked in (a, b):
            for listener in ("internal", "external"):
                answer = asyncio.run(raw_lookup(asked.pulsar_url, name, listener))
                assert (answer.response, answer.brokerServiceUrl) == (Lookup.Connect, owner.urls[listener])
            status, answer = http_get(lookup_url(asked, name), {"X-Pulsar-ListenerName": "external"})
            assert status == 200 and answer["brokerUrl"] == owner.urls["external"]
            assert answer["httpUrl"] == owner.http_url
        with pytest.raises(ServiceNotReadyError, match=f"broker {owner.broker_id} has no advertised listener 'x'"):
            asyncio.run(client_lookup(a.pulsar_url, name, "x"))

    # HTTP: a redirect keeps the listener given in a header, as a listenerName parameter
    put(f"{a.http_url}/admin/v2/namespaces/public/other", b"{}")
    http_redirects = 0
    for name in topics_per_bundle(a, "public/other"):
        url = f"{a.http_url}/lookup/v2/topic/persistent/public/other/{name}"
        status, answer = http_get(url, {"X-Pulsar-ListenerName": "external"})
        owner = a
        if status == 307:
            http_redirects += 1
            assert answer.startswith(b.http_url) and "authoritative=true" in answer
            assert "listenerName=external" in answer
            status, answer = http_get(answer)  # no header: the parameter carries the listener
            owner = b
        assert status == 200 and answer["brokerUrl"] == owner.urls["external"]
        assert by_http[answer["httpUrl"]] is owner
    assert http_redirects

    # pulsar-client through broker-1's external port reaches every owner through its external port
    client = pulsar_client(a.urls["external"], "external")
    try:
        for name in names:
            produce_and_consume(client, name)
    finally:
        client.close()


def test_a_listener_port_that_is_taken_stops_the_start_with_the_reason(tmp_path, zk_connect) -> None:
    port, taken = free_port(HOST), free_port(HOST)
    with socket.socket() as holder:
        holder.bind((HOST, taken))
        holder.listen()
        config = tmp_path / "broker.toml"
        config.write_text(dumps_toml({
            "data_dir": str(tmp_path / "data"), "zookeeper": zk_connect, "port": port, "http_port": free_port(HOST),
            "advertised_listeners": f"internal:pulsar://{HOST}:{port},external:pulsar://{HOST}:{taken}"}))
        result = subprocess.run(python_command("broker", "--config", str(config)), capture_output=True, text=True,
                                timeout=120)
    assert result.returncode == 2
    assert f"cannot listen on {HOST}:{port}, {HOST}:{taken} (binary protocol)" in result.stderr, result.stderr[-2000:]
