"""The Kafka listener on real brokers (ZooKeeper, bookies), aiokafka as the client: metadata names the owner
of each partition as its leader, across two brokers; the registration carries each broker's Kafka address."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from aiokafka import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

from broker.kafka.cluster import node_id_of
from tests.kit.brokers import start_brokers

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def kafka_brokers(tmp_path, zk_connect, bookie_factory):
    bookie_factory(2)
    return start_brokers(2, tmp_path, zk_connect, kafka=True)


def owner_of(broker, topic: str) -> str:
    url = f"{broker.http_url}/lookup/v2/topic/persistent/public/default/{topic}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())["httpUrl"]


def test_metadata_leaders_are_the_owners_on_two_brokers(kafka_brokers) -> None:
    first, second = kafka_brokers

    async def scenario() -> tuple:
        client = AIOKafkaClient(bootstrap_servers=first.kafka_bootstrap)
        await client.bootstrap()
        try:
            node = client.get_random_node()
            response = await client.send(node, MetadataRequest(["orders", "persistent://public/default/plain"]))
            return response, client.cluster.brokers()
        finally:
            await client.close()

    response, brokers = asyncio.run(scenario())
    assert {(b.host, b.port) for b in brokers} == {tuple(b.kafka_bootstrap.split(":")) for b in (first, second)} or \
        {(b.host, str(b.port)) for b in brokers} == {tuple(b.kafka_bootstrap.split(":")) for b in (first, second)}
    topics = {t[1]: t for t in response.topics}
    assert set(topics) == {"orders", "persistent://public/default/plain"}
    error, _, _, partitions = topics["orders"][:4]
    assert error == 0 and [p[1] for p in partitions] == [0]  # auto-created with one partition
    by_http = {b.http_url: node_id_of(b.broker_id) for b in (first, second)}
    leader = partitions[0][2]
    assert leader == by_http[owner_of(first, "orders-partition-0")]


def test_admin_client_creates_describes_grows_and_deletes_topics(kafka_brokers) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    first, second = kafka_brokers

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=second.kafka_bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics([NewTopic("invoices", 3, 1), NewTopic("refunds", 1, 1)])
            assert all(error == 0 for _, error, *_ in created.topic_errors), created
            again = await admin.create_topics([NewTopic("invoices", 3, 1)])
            assert again.topic_errors[0][1] == 36  # TOPIC_ALREADY_EXISTS
            bad = await admin.create_topics([NewTopic("bad", 2, 1, topic_configs={"retention.ms": "1"})])
            assert bad.topic_errors[0][1] == 40  # INVALID_CONFIG, nothing created
            assert {"invoices", "refunds"} <= set(await admin.list_topics())
            assert "bad" not in await admin.list_topics()
            described = await admin.describe_topics(["invoices"])
            assert len(described[0]["partitions"]) == 3
            configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "invoices")])
            entries = {e[0]: e[1] for e in configs[0].resources[0][4]}
            assert entries["pulsar.topic"] == "persistent://public/default/invoices"
            await admin.create_partitions({"invoices": NewPartitions(5)})
            described = await admin.describe_topics(["invoices"])
            assert len(described[0]["partitions"]) == 5
            deleted = await admin.delete_topics(["refunds", "missing"])
            codes = dict(deleted.topic_error_codes)
            assert codes == {"refunds": 0, "missing": 3}
            assert "refunds" not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(scenario())
    with urllib.request.urlopen(f"{first.http_url}/admin/v2/persistent/public/default/invoices/partitions",
                                timeout=30) as response:
        assert json.loads(response.read())["partitions"] == 5

