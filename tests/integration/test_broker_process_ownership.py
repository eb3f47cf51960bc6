"""Bundle ownership across real broker processes: lookups spread bundles, Connect/Redirect over HTTP and the
binary protocol, pulsar-client on pulsar:// and http:// service URLs, and bundles moving when their owner is
SIGKILLed (after its session expires) or SIGTERMed (at once) with no acknowledged message lost."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar
import pytest

from tests.kit.brokers import BrokerHandle, start_brokers
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(240)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def http_get(url: str, *, follow: bool = True) -> tuple[int, object]:
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=15) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        if e.code == 307:
            return 307, e.headers["Location"]
        return e.code, json.loads(e.read() or b"null")


def topics_per_bundle(broker: BrokerHandle, n_per_bundle: int = 1) -> dict[str, list[str]]:
    """Topic names of public/default grouped by bundle (asking the broker where each one falls)."""
    found: dict[str, list[str]] = {}
    i = 0
    while len(found) < 4 or min(len(v) for v in found.values()) < n_per_bundle:
        name = f"t-{i}"
        _, bundle = http_get(f"{broker.http_url}/lookup/v2/topic/persistent/public/default/{name}/bundle")
        found.setdefault(bundle, []).append(name)
        i += 1
    return found


def owned(broker: BrokerHandle) -> list[str]:
    status, data = http_get(f"{broker.http_url}/admin/v2/brokers/{broker.cluster}/{broker.broker_id}/ownedNamespaces")
    assert status == 200, data
    return sorted(data)


def client_of(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def test_lookups_spread_bundles_and_redirect_assignments_over_http(tmp_path, zk_connect) -> None:
    a, b = start_brokers(2, tmp_path, zk_connect)
    per_bundle = topics_per_bundle(a)
    for bundle, names in sorted(per_bundle.items()):
        status, answer = http_get(f"{a.http_url}/lookup/v2/topic/persistent/public/default/{names[0]}", follow=False)
        if status == 307:  # a assigns the bundle to b: the client asks b, authoritatively
            assert answer == f"{b.http_url}/lookup/v2/topic/persistent/public/default/{names[0]}?authoritative=true"
            status, answer = http_get(answer)
            expected = b
        else:
            expected = a
        assert status == 200 and answer["brokerUrl"] == expected.pulsar_url and answer["httpUrl"] == expected.http_url
        assert answer["nativeUrl"] == expected.pulsar_url and answer["brokerUrlTls"] == ""
        # once owned, every broker answers with the owner directly
        for asked in (a, b):
            assert http_get(f"{asked.http_url}/lookup/v2/topic/persistent/public/default/{names[0]}")[1] == answer
    assert len(owned(a)) == len(owned(b)) == 2
    assert sorted(owned(a) + owned(b)) == sorted(f"public/default/{bundle}" for bundle in per_bundle)
    # a broker asked about another broker's bundles sends the admin there
    status, location = http_get(f"{a.http_url}/admin/v2/brokers/test/broker-2/ownedNamespaces", follow=False)
    assert status == 307 and location.startswith(b.http_url)


@pytest.mark.parametrize("scheme", ["pulsar", "http"])
def test_pulsar_client_reaches_every_owner_through_one_broker(tmp_path, zk_connect, bookie_factory, scheme) -> None:
    bookie_factory(2)
    a, b = start_brokers(2, tmp_path, zk_connect)
    names = [v[0] for v in topics_per_bundle(a).values()]
    client = client_of(a.pulsar_url if scheme == "pulsar" else a.http_url)
    try:
        for name in names:
            consumer = client.subscribe(name, "s", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(name)
            sent = [producer.send(f"{name}-{i}".encode()) for i in range(5)]
            got = []
            for _ in sent:
                msg = consumer.receive(10_000)
                got.append(msg.data().decode())
                consumer.acknowledge(msg)
            assert got == [f"{name}-{i}" for i in range(5)]
            producer.close()
            consumer.close()
    finally:
        client.close()
    served = {n: http_get(f"{a.http_url}/lookup/v2/topic/persistent/public/default/{n}")[1]["brokerUrl"] for n in names}
    assert set(served.values()) == {a.pulsar_url, b.pulsar_url}  # both brokers served some of them
    status, topics = http_get(f"{b.http_url}/admin/v2/persistent/public/default")
    assert status == 200 and sorted(topics) == sorted(f"persistent://public/default/{n}" for n in names)


def _owner_of(broker: BrokerHandle, name: str) -> str:
    return http_get(f"{broker.http_url}/lookup/v2/topic/persistent/public/default/{name}")[1]["brokerUrl"]


@pytest.mark.parametrize("fault", ["sigkill", "sigterm"])
def test_the_bundle_moves_when_its_owner_goes_and_nothing_acknowledged_is_lost(tmp_path, zk_connect, bookie_factory,
                                                                              fault) -> None:
    bookie_factory(2)
    a, b = start_brokers(2, tmp_path, zk_connect)
    # a topic that b serves
    name = next(n for n in (f"move-{i}" for i in range(100))
                if http_get(f"{b.http_url}/lookup/v2/topic/persistent/public/default/{n}?authoritative=true")[1]
                and _owner_of(a, n) == b.pulsar_url)
    client = client_of(a.pulsar_url)
    try:
        producer = client.create_producer(name, send_timeout_millis=30_000)
        acked = [f"before-{i}" for i in range(20)]
        for text in acked:
            producer.send(text.encode())
        if fault == "sigkill":
            b.kill()
            # the owner's session must expire before anyone else may take the bundle (zk_session_timeout_ms)
            wait_for(lambda: _owner_of(a, name) == a.pulsar_url, 30, what="the bundle re-assigned to broker-1")
        else:
            assert b.terminate(grace_s=20) == 0
            assert _owner_of(a, name) == a.pulsar_url  # released at once by the clean shutdown
        after = [f"after-{i}" for i in range(20)]
        for text in after:
            producer.send(text.encode())  # the client reconnects through a lookup at broker-1
        consumer = client.subscribe(name, "audit", initial_position=pulsar.InitialPosition.Earliest)
        got = []
        while len(got) < len(acked) + len(after):
            msg = consumer.receive(15_000)
            got.append(msg.data().decode())
            consumer.acknowledge(msg)
        assert got == acked + after
    finally:
        client.close()
