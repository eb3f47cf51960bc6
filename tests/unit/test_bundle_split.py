"""Bundle splits and shedding on two brokers sharing one in-memory ZooKeeper: the owner takes both halves and
commits the boundaries by compare-and-set, a broker with stale boundaries cannot take the old range, refusals
change nothing, and the load manager's leader sheds a bundle off the broker that carries the load."""

from __future__ import annotations

import json

import pytest

from broker.bundle_split import BundleSplitError, split_bundle
from broker.bundles import NamespaceBundle, NamespaceBundles, parse_bundles_data
from broker.load_manager import LEADER_PATH, LoadManager, LoadManagerSettings
from broker.ownership_errors import ServiceUnitNotReadyError
from config_store.brokers import BrokerLoad, BundleStats
from tests.unit.test_admin_ownership import NS, owner_record, topic_in, world  # noqa: F401 (world: a fixture)


async def boundaries(config) -> list[int]:
    return parse_bundles_data((await config.get_namespace_policies(*NS)).value.bundles)


async def test_split_keeps_the_topics_here_and_moves_the_ownership_to_both_halves(world) -> None:
    a, b, config, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    await a.ownership.lookup(topic, authoritative=True)
    low, high = await split_bundle(a.ownership, config, bundle)
    assert (low.lower, low.upper, high.lower, high.upper) == (0, 0x20000000, 0x20000000, 0x40000000)
    assert await boundaries(config) == [0, 0x20000000, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    assert a.ownership.owned_bundles() == [low, high]
    assert await owner_record(store, bundle) is None
    assert (await owner_record(store, low))["brokerId"] == "a" and (await owner_record(store, high))["brokerId"] == "a"
    assert a.unloaded == []  # nothing was closed: the topics belong to halves a owns
    assert await a.ownership.is_owned_by_me(topic)
    assert (await a.ownership.namespace_bundles(*NS)).bundles[:2] == [low, high]
    assert len(json.loads((await store.get("/brokers/a")).value)["lastStats"]) == 2


async def test_split_with_unload_releases_both_halves_and_closes_their_topics(world) -> None:
    a, b, config, store = world
    topic, bundle = await topic_in(a.ownership, 1)
    await a.ownership.lookup(topic, authoritative=True)
    low, high = await split_bundle(a.ownership, config, bundle, unload=True)
    assert sorted(a.unloaded) == [low, high] and a.ownership.owned_bundles() == []
    assert await owner_record(store, low) is None and await owner_record(store, high) is None
    new_bundles = NamespaceBundles(*NS, await boundaries(config))
    mine = new_bundles.find(low.lower if (await a.ownership.bundle_of(topic)) == low else high.lower)
    answer = await b.ownership.lookup(topic, authoritative=True)  # b's cache follows the policies watch
    assert answer.is_self and mine in b.ownership.owned_bundles()


async def test_a_broker_with_stale_boundaries_cannot_take_the_old_range(world) -> None:
    a, b, config, store = world
    topic, bundle = await topic_in(a.ownership, 2)
    stale = await b.ownership.namespace_bundles(*NS)
    await a.ownership.lookup(topic, authoritative=True)
    await split_bundle(a.ownership, config, bundle, unload=True)
    b.ownership._bundles[NS] = stale  # as if b's policies watch had not fired yet
    with pytest.raises(ServiceUnitNotReadyError, match="split"):
        await b.ownership.lookup(topic, authoritative=True)
    assert await owner_record(store, bundle) is None
    assert (await b.ownership.lookup(topic, authoritative=True)).is_self  # with the fresh boundaries now


async def test_refused_splits_change_nothing(world) -> None:
    a, b, config, store = world
    topic, bundle = await topic_in(a.ownership, 3)
    await a.ownership.lookup(topic, authoritative=True)
    before = await boundaries(config)
    with pytest.raises(BundleSplitError, match="maximum"):
        await split_bundle(a.ownership, config, bundle, max_bundles=4)
    with pytest.raises(BundleSplitError, match="Unsupported"):
        await split_bundle(a.ownership, config, bundle, algorithm="middle")
    with pytest.raises(BundleSplitError, match="topic count"):
        await split_bundle(a.ownership, config, bundle, algorithm="topic_count_equally_divide", topics=[topic])
    other, other_bundle = await topic_in(a.ownership, 0)
    with pytest.raises(ServiceUnitNotReadyError, match="not served by this broker"):
        await split_bundle(a.ownership, config, other_bundle)
    assert await boundaries(config) == before and a.ownership.owned_bundles() == [bundle]
    assert await owner_record(store, bundle) is not None


async def test_a_split_losing_to_a_concurrent_policy_change_lets_the_halves_go(world) -> None:
    a, b, config, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    await a.ownership.lookup(topic, authoritative=True)

    async def failing_commit() -> list[int]:
        raise BundleSplitError("someone else split it")

    with pytest.raises(BundleSplitError):
        await a.ownership.split(bundle, 0x20000000, commit=failing_commit, unload=False)
    assert a.ownership.owned_bundles() == [bundle]
    assert await owner_record(store, NamespaceBundle(*NS, 0, 0x20000000)) is None
    assert await owner_record(store, NamespaceBundle(*NS, 0x20000000, 0x40000000)) is None


async def test_the_leader_sheds_a_bundle_off_the_broker_that_carries_the_load(world) -> None:
    a, b, config, store = world
    owned = []
    for index in (0, 1):
        topic, bundle = await topic_in(a.ownership, index)
        await a.ownership.lookup(topic, authoritative=True)
        owned.append(bundle)
    hot = (BundleStats(str(owned[0]), topics=1, msg_rate_in=500, msg_throughput_in=500_000),
           BundleStats(str(owned[1]), topics=1, msg_rate_in=100, msg_throughput_in=100_000))
    a.ownership.set_load_source(lambda: BrokerLoad(num_topics=2, msg_rate_in=600, msg_throughput_in=600_000,
                                                   bundle_stats=hot))
    settings = LoadManagerSettings(auto_split_enabled=False, shedding_enabled=False, history_fraction=0.0,
                                   min_unload_throughput_bytes_s=0.0)
    managers = [LoadManager(ownership=x.ownership, configuration=config, local_store=x.store, settings=settings)
                for x in (a, b)]
    try:
        assert await managers[0].shedding_round() == {"a": [str(owned[0])]}
        assert managers[0].is_leader and json.loads((await store.get(LEADER_PATH)).value)["brokerId"] == "a"
        assert a.ownership.owned_bundles() == [owned[1]] and a.unloaded == [owned[0]]
        assert await managers[1].shedding_round() == {}  # b does not lead
        assert await managers[0].shedding_round() == {}  # the remaining bundle is a's last
    finally:
        for m in managers:
            await m.close()
    assert await store.get(LEADER_PATH) is None
