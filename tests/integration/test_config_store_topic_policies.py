"""Topic policies on a real ZooKeeper: the exact raw path and JSON, compare-and-set writers in two sessions,
and a watch-driven cache that sees another session's writes and deletions and never serves corruption."""

from __future__ import annotations

import asyncio
import json

import pytest
from kazoo.client import KazooClient

from config_store import ConfigurationStore, KazooMetadataStore, NotFoundError, TenantInfo, TopicPolicies, Versioned
from tests.kit.wait import wait_for_async

TOPIC = ("acme", "orders", "persistent", "events")
PATH = "/admin/topic-policies/acme/orders/persistent/events"


@pytest.fixture
def raw(zk_server, zk_connect):
    """A plain kazoo client at the unchrooted root, and a function mapping a store path to its raw path."""
    client = KazooClient(hosts=zk_server.connect)
    client.start(timeout=15)
    chroot = "/" + zk_connect.split("/", 1)[1]
    yield client, (lambda path: f"{chroot}{path}")
    client.stop()
    client.close()


@pytest.fixture
async def configs(zk_connect):
    """Two ConfigurationStores in independent sessions on the same chroot, with namespace acme/orders."""
    async with KazooMetadataStore(zk_connect) as a, KazooMetadataStore(zk_connect) as b:
        first = ConfigurationStore(a)
        await first.create_tenant("acme", TenantInfo())
        await first.create_namespace("acme", "orders")
        yield first, ConfigurationStore(b)


async def test_stored_at_pulsars_path_with_pulsars_field_name(configs, raw) -> None:
    config, other = configs
    client, at = raw
    assert await config.set_topic_policies(*TOPIC, TopicPolicies(["us-east", "eu-west"])) == Versioned(
        TopicPolicies(["us-east", "eu-west"]), 0)
    data, stat = client.get(at(PATH))
    assert json.loads(data) == {"version": 1, "replicationClusters": ["us-east", "eu-west"]} and stat.version == 0
    assert await other.get_topic_policies(*TOPIC) == Versioned(TopicPolicies(["us-east", "eu-west"]), 0)
    await other.set_topic_policies(*TOPIC, TopicPolicies(["us-east"]))
    assert client.get(at(PATH))[1].version == 1
    await config.set_topic_policies(*TOPIC, TopicPolicies())  # nothing set: no node
    assert client.exists(at(PATH)) is None
    with pytest.raises(NotFoundError):
        await other.get_topic_policies(*TOPIC)


async def test_concurrent_writers_in_two_sessions_lose_nothing(configs) -> None:
    config, other = configs

    def adding(name: str):
        return lambda p: TopicPolicies((p.replication_clusters or []) + [name])

    await asyncio.gather(*(store.set_topic_policies(*TOPIC, adding(f"{i}-{n}"))
                           for i, store in enumerate(configs) for n in range(5)))
    got = (await config.get_topic_policies(*TOPIC)).value.replication_clusters
    assert sorted(got) == sorted(f"{i}-{n}" for i in range(2) for n in range(5))


async def test_cache_sees_outside_writes_and_deletions(configs, raw) -> None:
    config, other = configs
    client, at = raw
    cache = config.topic_policies_cache()
    assert await cache.get(*TOPIC) is None
    await other.set_topic_policies(*TOPIC, TopicPolicies(["eu-west"]))
    await wait_for_async(lambda: cache.get_cached(*TOPIC) == TopicPolicies(["eu-west"]), 10, what="write seen")
    client.set(at(PATH), b'{"version": 1, "replicationClusters": "eu-west"}')  # corrupt: logged, not served
    client.set(at(PATH), TopicPolicies(["us-east"]).to_json())
    await wait_for_async(lambda: cache.get_cached(*TOPIC) == TopicPolicies(["us-east"]), 10, what="rewrite seen")
    await other.delete_topic_policies(*TOPIC)
    await wait_for_async(lambda: cache.get_cached(*TOPIC) is None, 10, what="deletion seen")
    await other.set_topic_policies(*TOPIC, TopicPolicies(["us-east"]))
    await other.delete_namespace("acme", "orders")  # takes its topic policies with it
    await wait_for_async(lambda: cache.get_cached(*TOPIC) is None, 10, what="namespace deletion seen")
    assert client.exists(at("/admin/topic-policies/acme/orders")) is None
    cache.close()
