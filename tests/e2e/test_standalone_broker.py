"""The standalone deployment as a user meets it: `magnetar up clusters/standalone.toml`, then `magnetar admin`
(tables and --json) and `magnetar produce` / `magnetar consume` through either broker, pulsar:// or http://."""

from __future__ import annotations

import json
import pathlib

import pytest

from clusters import STANDALONE
from clusters.runtime import DataDir
from tests.e2e.test_supervisor import magnetar, running

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def standalone(tmp_path: pathlib.Path):
    """A running standalone deployment: (DataDir, its topology.json)."""
    with running(STANDALONE, tmp_path, down_timeout_s=60) as deployment:
        yield deployment


def admin(ddir: DataDir, *args: str, ok: bool = True):
    result = magnetar("admin", *args, "--data-dir", str(ddir.root), timeout_s=60)
    if ok:
        assert result.returncode == 0, f"admin {args}: {result.stdout}\n{result.stderr}"
    return result


def admin_json(ddir: DataDir, *args: str):
    return json.loads(admin(ddir, *args, "--json").stdout)


def test_admin_then_produce_and_consume_across_both_brokers(standalone) -> None:
    ddir, doc = standalone
    brokers = doc["regions"]["standalone"]["brokers"]
    assert len(brokers) == 2
    one, two = brokers

    # -- admin: what the brokers bootstrapped, then a tenant and a namespace of our own -------------------
    assert admin_json(ddir, "clusters", "list") == ["standalone"]
    # the region registers every broker (a multi-host URL), so other regions reach whichever answers
    assert admin_json(ddir, "clusters", "get", "standalone")["brokerServiceUrl"] == \
        "pulsar://" + ",".join(b["pulsar"].removeprefix("pulsar://") for b in brokers)
    assert admin_json(ddir, "namespaces", "list", "public") == ["public/default"]
    assert sorted(admin_json(ddir, "brokers", "list")) == sorted(b["http"].removeprefix("http://") for b in brokers)
    assert "created tenant acme" in admin(ddir, "tenants", "create", "acme").stdout
    assert admin_json(ddir, "tenants", "get", "acme") == {"adminRoles": [], "allowedClusters": ["standalone"]}
    admin(ddir, "namespaces", "create", "acme/orders", "--bundles", "8")
    admin(ddir, "namespaces", "set-retention", "acme/orders", "--time-minutes", "60", "--size-mb", "100")
    admin(ddir, "namespaces", "set-message-ttl", "acme/orders", "3600")
    admin(ddir, "namespaces", "set-deduplication", "acme/orders", "--enable")
    policies = admin_json(ddir, "namespaces", "policies", "acme/orders")
    assert policies["bundles"]["numBundles"] == 8 and policies["deduplicationEnabled"] is True
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert policies["message_ttl_in_seconds"] == 3600
    table = admin(ddir, "namespaces", "policies", "acme/orders").stdout
    assert "deduplicationEnabled" in table and "message_ttl_in_seconds" in table
    admin(ddir, "topics", "create-partitioned", "persistent://acme/orders/events", "-p", "3")
    admin(ddir, "topics", "create", "acme/orders/plain")
    assert admin_json(ddir, "topics", "list", "acme/orders") == ["persistent://acme/orders/plain"]

    # -- produce through broker 1 (binary lookup), consume through broker 2 (HTTP lookup) ---------------
    for topic in ("acme/orders/plain", "persistent://acme/orders/events"):
        produced = magnetar("produce", one["pulsar"], topic, "-m", "hello", "-m", "world", "-n", "3")
        assert produced.returncode == 0, produced.stdout + produced.stderr
        assert "6 message(s) sent" in produced.stdout and produced.stdout.count("sent 'hello'") == 3
        consumed = magnetar("consume", two["http"], topic, "-s", "audit", "-n", "6", "--timeout", "60")
        assert consumed.returncode == 0, consumed.stdout + consumed.stderr
        assert "6 message(s) received" in consumed.stdout
        assert consumed.stdout.count("received 'hello'") == 3 and consumed.stdout.count("received 'world'") == 3

    stats = admin_json(ddir, "topics", "stats", "acme/orders/plain")
    assert stats["msgInCounter"] == 6 and "audit" in stats["subscriptions"]
    assert admin_json(ddir, "topics", "subscriptions", "acme/orders/plain") == ["audit"]
    assert "ledgers" in admin_json(ddir, "topics", "internal-stats", "acme/orders/plain")
    assert admin_json(ddir, "topics", "partitioned-stats", "acme/orders/events")["msgInCounter"] == 6
    assert "unloaded" in admin(ddir, "topics", "unload", "acme/orders/plain").stdout
    consumed = magnetar("consume", one["pulsar"], "acme/orders/plain", "-s", "audit", "-n", "1", "--timeout", "3")
    assert consumed.returncode == 1 and "0 message(s) received" in consumed.stdout  # everything was acknowledged

    # -- errors are the broker's reasons, with exit code 1 -------------------------------------------------
    missing = admin(ddir, "tenants", "get", "nobody", ok=False)
    assert missing.returncode == 1 and "404" in missing.stderr and "Tenant nobody does not exist" in missing.stderr
    busy = admin(ddir, "tenants", "delete", "acme", ok=False)
    assert busy.returncode == 1 and "409" in busy.stderr
    bad = magnetar("produce", one["pulsar"], "bad//topic", "-m", "x")
    assert bad.returncode != 0


def test_kafka_applications_use_the_brokers_kafka_addresses(standalone) -> None:
    """`magnetar up` gives each broker a Kafka listener; topology.json names it; aiokafka writes through one
    broker and reads through the other; pulsar-client reads the same records."""
    import asyncio

    import pulsar
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    _, doc = standalone
    one, two = doc["regions"]["standalone"]["brokers"]

    async def scenario() -> list:
        producer = AIOKafkaProducer(bootstrap_servers=one["kafka"], acks="all")
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait("standalone-kafka", f"r{i}".encode(), key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=two["kafka"], enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition("standalone-kafka", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            return [(await consumer.getone()).value for _ in range(5)]
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(scenario(), 120)) == [f"r{i}".encode() for i in range(5)]
    client = pulsar.Client(two["pulsar"])
    try:
        reader = client.create_reader("persistent://public/default/standalone-kafka", pulsar.MessageId.earliest)
        assert [reader.read_next(10_000).data() for _ in range(5)] == [f"r{i}".encode() for i in range(5)]
    finally:
        client.close()
