"""TopicPolicies: the codec (Pulsar's ``replicationClusters``, None = not set) and the store's rules over the
in-memory store (create or compare-and-set, an empty value leaves no node, the namespace is required and
takes its topic policies with it)."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config_store import (ConfigurationStore, InvalidMetadataError, MemoryMetadataStore, NotFoundError, TenantInfo,
                          TopicPolicies, Versioned)
from tests.kit.wait import wait_for_async

PATH = "/admin/topic-policies/t/ns/persistent/orders"


@pytest.fixture
async def store():
    async with MemoryMetadataStore() as s:
        yield s


@pytest.fixture
async def config(store) -> ConfigurationStore:
    config = ConfigurationStore(store)
    await config.create_tenant("t", TenantInfo())
    await config.create_namespace("t", "ns")
    return config


@settings(max_examples=100, deadline=None)
@given(st.none() | st.lists(st.text(min_size=1, max_size=10), max_size=5))
def test_codec_round_trips_with_pulsars_field_name(clusters) -> None:
    value = TopicPolicies(replication_clusters=clusters)
    data = value.to_json()
    assert json.loads(data) == {"version": 1, "replicationClusters": clusters}
    assert TopicPolicies.from_json(data) == value
    assert value.is_empty() == (clusters is None)


@pytest.mark.parametrize("raw, expected", [
    (b'{"version": 1}', TopicPolicies()),
    (b'{"version": 1, "replicationClusters": null}', TopicPolicies()),
    (b'{"version": 1, "replicationClusters": [], "isGlobal": false}', TopicPolicies(replication_clusters=[])),
])
def test_absent_null_and_unknown_fields_decode(raw: bytes, expected: TopicPolicies) -> None:
    assert TopicPolicies.from_json(raw) == expected


@pytest.mark.parametrize("raw, message", [
    (b'{"replicationClusters": ["a"]}', "schema 'version'"),
    (b'{"version": 2, "replicationClusters": ["a"]}', "unsupported schema version 2"),
    (b'{"version": 1, "replicationClusters": "a"}', "'replicationClusters' must be list"),
    (b'{"version": 1, "replicationClusters": [1]}', "'replicationClusters' must be a list of strings"),
    (b'[1]', "expected a JSON object"),
])
def test_corrupt_values_are_errors(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidMetadataError, match=message):
        TopicPolicies.from_json(raw)


async def test_set_creates_then_compare_and_sets_and_empty_deletes(store, config: ConfigurationStore) -> None:
    args = ("t", "ns", "persistent", "orders")
    with pytest.raises(NotFoundError):
        await config.get_topic_policies(*args)
    assert await config.set_topic_policies(*args, TopicPolicies(["a"])) == Versioned(TopicPolicies(["a"]), 0)
    assert json.loads((await store.get(PATH)).value) == {"version": 1, "replicationClusters": ["a"]}
    updated = await config.set_topic_policies(*args, lambda p: TopicPolicies(p.replication_clusters + ["b"]))
    assert updated == Versioned(TopicPolicies(["a", "b"]), 1)
    assert await config.get_topic_policies(*args) == updated
    assert await config.list_topic_policies("t", "ns", "persistent") == ["orders"]
    assert await config.set_topic_policies(*args, TopicPolicies()) == Versioned(TopicPolicies(), -1)
    assert await store.get(PATH) is None
    assert await config.set_topic_policies(*args, TopicPolicies()) == Versioned(TopicPolicies(), -1)  # no-op
    await config.set_topic_policies(*args, TopicPolicies(["a"]))
    await config.delete_topic_policies(*args)
    with pytest.raises(NotFoundError):
        await config.delete_topic_policies(*args)


async def test_namespace_is_required_and_takes_its_topic_policies(store, config: ConfigurationStore) -> None:
    with pytest.raises(NotFoundError, match="namespace 't/nope' does not exist"):
        await config.set_topic_policies("t", "nope", "persistent", "x", TopicPolicies(["a"]))
    assert await store.get("/admin/topic-policies/t/nope/persistent/x") is None
    for name in ("bad/name", "", ".."):
        with pytest.raises(InvalidMetadataError):
            await config.set_topic_policies("t", "ns", "persistent", name, TopicPolicies(["a"]))
    with pytest.raises(InvalidMetadataError):
        await config.set_topic_policies("t", "ns", "sometimes", "x", TopicPolicies(["a"]))
    await config.set_topic_policies("t", "ns", "persistent", "orders", TopicPolicies(["a"]))
    await config.delete_namespace("t", "ns")
    assert await store.exists("/admin/topic-policies/t/ns") is None
    await config.delete_tenant("t")
    assert await store.exists("/admin/topic-policies/t") is None


async def test_concurrent_read_modify_writes_lose_nothing(config: ConfigurationStore) -> None:
    args = ("t", "ns", "persistent", "orders")

    def adding(name: str):
        return lambda p: TopicPolicies((p.replication_clusters or []) + [name])

    await asyncio.gather(*(config.set_topic_policies(*args, adding(f"c{i}")) for i in range(8)))
    got = (await config.get_topic_policies(*args)).value.replication_clusters
    assert sorted(got) == [f"c{i}" for i in range(8)]


async def test_cache_follows_changes_and_hands_out_copies(config: ConfigurationStore) -> None:
    args = ("t", "ns", "persistent", "orders")
    cache = config.topic_policies_cache()
    changes: list[tuple] = []
    cache.add_listener(lambda *change: changes.append(change))
    assert await cache.get(*args) is None
    await config.set_topic_policies(*args, TopicPolicies(["a"]))
    await wait_for_async(lambda: cache.get_cached(*args) == TopicPolicies(["a"]), 2, what="override seen")
    assert changes[-1] == (*args, TopicPolicies(["a"]))
    mine = await cache.get(*args)
    mine.replication_clusters.append("mutated")
    assert cache.get_cached(*args) == TopicPolicies(["a"])
    await config.delete_topic_policies(*args)
    await wait_for_async(lambda: cache.get_cached(*args) is None, 2, what="removal seen")
    assert changes[-1] == (*args, None)
    cache.close()
    cache.close()
    with pytest.raises(RuntimeError, match="closed"):
        await cache.get(*args)
