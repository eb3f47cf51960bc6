"""Load balancing across real broker processes with pulsar-client traffic: a bundle split on demand (through
the CLI, at the other broker: 307 to the owner) while producers and consumers run, the automatic split of a
bundle over its topic threshold, and the leader shedding a bundle off the broker that carries all the load
onto a new broker; clients follow every move and no acknowledged message is lost."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.request

import pulsar
import pytest

from broker.bundles import parse_bundle_range, topic_hash
from tests.kit.brokers import BrokerHandle, start_brokers
from tests.kit.process import python_command
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(120)


def http(method: str, url: str, body: object = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def bundle_of(broker: BrokerHandle, ns: str, name: str) -> str:
    return http("GET", f"{broker.http_url}/lookup/v2/topic/persistent/{ns}/{name}/bundle")[1]


def owned(broker: BrokerHandle) -> list[str]:
    path = f"/admin/v2/brokers/{broker.cluster}/{broker.broker_id}/ownedNamespaces"
    return sorted(http("GET", broker.http_url + path)[1])


def client_of(url: str, operation_timeout_s: int = 30) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=operation_timeout_s,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def retried(fn, attempts: int = 4):
    """``fn()``, again after a pulsar.Timeout. pulsar-client 3.x does not retry a SUBSCRIBE answered
    ServiceNotReady while the topic was being unloaded (an automatic split racing the test's set-up)."""
    for attempt in range(attempts):
        try:
            return fn()
        except pulsar.Timeout:
            if attempt == attempts - 1:
                raise


class Traffic:
    """One producer thread (synchronous sends: each returns once acknowledged) and one consumer thread per
    topic, until ``stop()``; then ``drain()`` waits until every acknowledged message was received."""

    def __init__(self, client: pulsar.Client, topics: list[str], *, attempts: int = 1) -> None:
        self.sent: dict[str, list[str]] = {t: [] for t in topics}
        self.received: dict[str, set[str]] = {t: set() for t in topics}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._produced = threading.Event()  # every producer thread has returned
        self._consumers = {t: retried(lambda t=t: client.subscribe(
            t, "lb", initial_position=pulsar.InitialPosition.Earliest), attempts) for t in topics}
        self._producers = {t: retried(lambda t=t: client.create_producer(
            t, batching_enabled=False, send_timeout_millis=30_000), attempts) for t in topics}
        self._producing = [threading.Thread(target=self._produce, args=(t,), daemon=True) for t in topics]
        self._consuming = [threading.Thread(target=self._consume, args=(t,), daemon=True) for t in topics]
        for thread in self._producing + self._consuming:
            thread.start()

    def _produce(self, topic: str) -> None:
        i = 0
        while not self._stop.is_set():
            payload = f"{topic}-{i}"
            try:
                self._producers[topic].send(payload.encode())
            except Exception as e:  # noqa: BLE001 (reported by the test)
                self.errors.append(e)
                return
            self.sent[topic].append(payload)
            i += 1

    def _consume(self, topic: str) -> None:
        consumer = self._consumers[topic]
        while not (self._produced.is_set() and self.received[topic] >= set(self.sent[topic])):
            try:
                msg = consumer.receive(200)
            except pulsar.Timeout:
                continue
            self.received[topic].add(msg.data().decode())
            consumer.acknowledge(msg)

    def count(self) -> int:
        return sum(len(v) for v in self.sent.values())

    def stop_and_drain(self, timeout_s: float = 30) -> None:
        self._stop.set()
        for thread in self._producing:
            thread.join(timeout_s)
        self._produced.set()
        for thread in self._consuming:
            thread.join(timeout_s)
        assert not self.errors, self.errors
        for topic, sent in self.sent.items():
            missing = set(sent) - self.received[topic]
            assert not missing, f"{topic}: {len(missing)} acknowledged message(s) never received"
            assert sent, f"{topic}: nothing was sent"


def test_split_on_demand_while_clients_run(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    a, b = start_brokers(2, tmp_path, zk_connect)
    ns = "public/default"
    bundle = bundle_of(a, ns, "split-0")
    lower, upper = parse_bundle_range(bundle)
    middle = lower + (upper - lower) // 2
    names = [f"split-{i}" for i in range(200) if bundle_of(a, ns, f"split-{i}") == bundle]
    low = next(n for n in names if topic_hash(f"persistent://{ns}/{n}") < middle)
    high = next(n for n in names if topic_hash(f"persistent://{ns}/{n}") >= middle)
    client = client_of(a.pulsar_url)
    try:
        traffic = Traffic(client, [f"persistent://{ns}/{low}", f"persistent://{ns}/{high}"])
        wait_for(lambda: traffic.count() >= 20, 20, what="traffic before the split")
        owner = a if f"{ns}/{bundle}" in owned(a) else b
        other = b if owner is a else a
        result = subprocess.run(python_command("admin", "namespaces", "split-bundle", ns, "--bundle", bundle,
                                               "--unload", "--url", other.http_url),
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        status, data = http("GET", f"{a.http_url}/admin/v2/namespaces/{ns}/bundles")
        assert status == 200 and data["numBundles"] == 5 and f"0x{middle:08x}" in data["boundaries"]
        halves = {f"0x{lower:08x}_0x{middle:08x}", f"0x{middle:08x}_0x{upper:08x}"}
        assert {bundle_of(b, ns, low), bundle_of(b, ns, high)} == halves  # every broker sees the new bundles
        at_split = traffic.count()
        wait_for(lambda: traffic.count() >= at_split + 40, 30, what="traffic after the split")
        traffic.stop_and_drain()
        assert all(f"{ns}/{h}" in owned(a) + owned(b) for h in halves)  # the clients' lookups placed both halves
        assert f"{ns}/{bundle}" not in owned(a) + owned(b)
        status, answer = http("PUT", f"{a.http_url}/admin/v2/namespaces/{ns}/{bundle}/split")
        assert status == 404  # the old bundle is gone
    finally:
        client.close()


def test_a_bundle_over_its_topic_threshold_is_split_automatically(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    a, b = start_brokers(2, tmp_path, zk_connect, load_balancer_namespace_bundle_max_topics=2,
                         load_balancer_bundle_split_interval_ms=300, load_balancer_namespace_maximum_bundles=4)
    status, _ = http("PUT", f"{a.http_url}/admin/v2/namespaces/public/auto", {"bundles": {"numBundles": 1}})
    assert status == 204
    client = client_of(a.pulsar_url, operation_timeout_s=5)
    try:
        topics = [f"persistent://public/auto/t-{i}" for i in range(6)]
        traffic = Traffic(client, topics, attempts=4)
        bundles = wait_for(lambda: (lambda d: d if d["numBundles"] >= 2 else None)(
            http("GET", f"{a.http_url}/admin/v2/namespaces/public/auto/bundles")[1]), 20, what="an automatic split")
        assert bundles["boundaries"][0] == "0x00000000" and bundles["boundaries"][-1] == "0xffffffff"
        at_split = traffic.count()
        wait_for(lambda: traffic.count() >= at_split + 60, 30, what="traffic after the split")
        traffic.stop_and_drain()
        final = http("GET", f"{a.http_url}/admin/v2/namespaces/public/auto/bundles")[1]
        assert 2 <= final["numBundles"] <= 4  # never past load_balancer_namespace_maximum_bundles
    finally:
        client.close()


def test_the_leader_sheds_load_onto_a_new_broker_and_clients_follow(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    settings = dict(load_balancer_shedding_interval_ms=500, load_balancer_history_resource_percentage=0.0,
                    load_balancer_bundle_unload_min_throughput_threshold_mbytes=0.0,
                    load_balancer_shedding_grace_period_ms=120_000, load_balancer_auto_bundle_split_enabled=False)
    (a,) = start_brokers(1, tmp_path, zk_connect, **settings)
    ns = "public/default"
    by_bundle: dict[str, str] = {}
    for i in range(100):
        by_bundle.setdefault(bundle_of(a, ns, f"hot-{i}"), f"hot-{i}")
        if len(by_bundle) == 2:
            break
    client = client_of(a.pulsar_url)
    try:
        traffic = Traffic(client, [f"persistent://{ns}/{n}" for n in by_bundle.values()])
        wait_for(lambda: traffic.count() >= 50, 20, what="traffic on the first broker")
        hot = {f"{ns}/{bundle}" for bundle in by_bundle}
        assert hot <= set(owned(a))
        report = wait_for(lambda: (lambda r: r if r["msgRateIn"] > 0 else None)(
            http("GET", f"{a.http_url}/admin/v2/broker-stats/load-report")[1]), 10, what="rates in the load report")
        assert set(report["lastStats"]) >= hot and report["msgThroughputIn"] > 0
        assert all(report["lastStats"][h]["producerCount"] == 1 for h in hot)
        (b,) = start_brokers(1, tmp_path, zk_connect, first_index=2, **settings)
        moved = wait_for(lambda: hot & set(owned(b)), 30, what="a hot bundle shed onto the new broker")
        assert len(moved) == 1 and hot - moved <= set(owned(a))
        at_move = traffic.count()
        wait_for(lambda: traffic.count() >= at_move + 50, 30, what="traffic after the move")
        traffic.stop_and_drain()
        stats = http("GET", f"{b.http_url}/admin/v2/broker-stats/topics")[1]
        assert [t for bundles in stats.values() for d in bundles.values() for x in d.values() for t in x] == \
            [f"persistent://{ns}/{by_bundle[next(iter(moved)).rsplit('/', 1)[1]]}"]
    finally:
        client.close()
