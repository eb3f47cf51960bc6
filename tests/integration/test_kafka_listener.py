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
