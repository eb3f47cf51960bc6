"""BundleOwnership of two brokers sharing one in-memory ZooKeeper: Connect/Redirect answers, assignment to the
least-loaded broker, one winner per bundle, unloading, session loss, shutdown, stale and disabled owners."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.bundles import NamespaceBundle, bundles_data, default_boundaries, rendezvous
from broker.ownership import BundleOwnership
from broker.ownership_errors import NamespaceNotFoundError, ServiceUnitNotReadyError
from config_store import ConfigurationStore, MemoryMetadataStore, MemoryTree, Policies, TenantInfo
from config_store.brokers import BrokerRegistry, BundleOwner
from magnetar.topic_name import TopicName
from tests.kit.wait import wait_for_async

NS = ("t", "ns")


class Broker:
    """One broker's ownership with the bundles it was asked to unload recorded."""

    def __init__(self, name: str, tree: MemoryTree) -> None:
        self.name = name
        self.store = MemoryMetadataStore(tree, name=name)
        self.unloaded: list[NamespaceBundle] = []
        self.ownership: BundleOwnership | None = None

    async def start(self, config: ConfigurationStore) -> "Broker":
        await self.store.start()
        self.ownership = BundleOwnership(local_store=self.store, configuration=config, broker_id=self.name,
                                         cluster="c", load_report_interval_ms=60_000)

        async def unloader(bundle: NamespaceBundle) -> None:
            self.unloaded.append(bundle)

        self.ownership.set_unloader(unloader)
        await self.ownership.start(pulsar_url=f"pulsar://{self.name}:6650", http_url=f"http://{self.name}:8080")
        return self

    async def close(self) -> None:
        await self.ownership.close()
        await self.store.close()


@pytest.fixture
async def world():
    tree = MemoryTree()
    admin_store = MemoryMetadataStore(tree, name="admin")
    await admin_store.start()
    config = ConfigurationStore(admin_store)
    await config.create_tenant("t", TenantInfo(allowed_clusters=["c"]))
    await config.create_namespace("t", "ns", Policies(bundles=bundles_data(default_boundaries(4))))
    a = await Broker("a", tree).start(config)
    b = await Broker("b", tree).start(config)
    yield a, b, config, admin_store
    for broker in (a, b):
        await broker.close()
    await admin_store.close()


async def topic_in(ownership: BundleOwnership, bundle_index: int) -> tuple[str, NamespaceBundle]:
    """A topic of the namespace's bundle number ``bundle_index``."""
    bundles = await ownership.namespace_bundles(*NS)
    for i in range(10_000):
        name = f"persistent://t/ns/topic-{i}"
        bundle = bundles.for_topic(TopicName.parse(name))
        if bundle == bundles.bundles[bundle_index]:
            return name, bundle
    raise AssertionError("no topic found")


async def owner_record(store: MemoryMetadataStore, bundle: NamespaceBundle) -> dict | None:
    versioned = await store.get(f"/namespace/t/ns/{bundle.name}")
    return None if versioned is None else json.loads(versioned.value)


async def test_owner_answers_connect_to_itself_and_others_connect_to_it(world) -> None:
    a, b, _, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    first = await a.ownership.lookup(topic, authoritative=True)
    assert first.is_self and not first.redirect and first.authoritative
    assert first.broker_service_url == "pulsar://a:6650" and first.http_url == "http://a:8080"
    assert await a.ownership.is_owned_by_me(topic) and not await b.ownership.is_owned_by_me(topic)
    record = await owner_record(store, bundle)
    assert record["nativeUrl"] == "pulsar://a:6650" and record["httpUrl"] == "http://a:8080"
    assert record["brokerId"] == "a" and record["disabled"] is False
    other = await b.ownership.lookup(topic)
    assert (other.is_self, other.redirect, other.authoritative) == (False, False, True)
    assert other.broker_service_url == "pulsar://a:6650" and other.http_url == "http://a:8080"
    assert a.ownership.owned_bundles() == [bundle] and b.ownership.owned_bundles() == []


async def test_unowned_bundle_is_assigned_to_the_least_loaded_broker_by_redirect(world) -> None:
    a, b, _, store = world
    topic0, _ = await topic_in(a.ownership, 0)
    await a.ownership.lookup(topic0, authoritative=True)  # a now carries one bundle, b none
    registration = json.loads((await store.get("/brokers/a")).value)
    assert registration["numBundles"] == 1 and registration["pulsarServiceUrl"] == "pulsar://a:6650"
    topic1, bundle1 = await topic_in(a.ownership, 1)
    answer = await a.ownership.lookup(topic1)
    assert answer.redirect and answer.authoritative and not answer.is_self
    assert answer.broker_service_url == "pulsar://b:6650" and answer.http_url == "http://b:8080"
    assert await owner_record(store, bundle1) is None  # a redirect assigns nothing by itself
    taken = await b.ownership.lookup(topic1, authoritative=True)
    assert taken.is_self and (await owner_record(store, bundle1))["brokerId"] == "b"


async def test_lookups_followed_like_a_client_spread_bundles_evenly(world) -> None:
    a, b, _, _ = world
    brokers = {"http://a:8080": a.ownership, "http://b:8080": b.ownership}
    for index in range(4):
        topic, _ = await topic_in(a.ownership, index)
        answer = await a.ownership.lookup(topic)
        if answer.redirect:
            answer = await brokers[answer.http_url].lookup(topic, authoritative=True)
        assert not answer.redirect
    assert len(a.ownership.owned_bundles()) == len(b.ownership.owned_bundles()) == 2


async def test_equal_brokers_break_ties_by_the_bundle_hash(world) -> None:
    a, b, _, _ = world
    topic, bundle = await topic_in(a.ownership, 2)
    expected = min(("a", "b"), key=lambda broker: rendezvous(bundle, broker))
    answer = await a.ownership.lookup(topic)
    assert answer.is_self == (expected == "a") and answer.redirect == (expected == "b")


async def test_concurrent_acquisitions_have_one_winner(world) -> None:
    a, b, _, store = world
    topic, bundle = await topic_in(a.ownership, 3)
    answers = await asyncio.gather(a.ownership.lookup(topic, authoritative=True),
                                   b.ownership.lookup(topic, authoritative=True))
    winners = [x for x in answers if x.is_self]
    assert len(winners) == 1
    owner = (await owner_record(store, bundle))["brokerId"]
    loser = answers[1] if owner == "a" else answers[0]
    assert not loser.is_self and not loser.redirect and loser.broker_service_url == f"pulsar://{owner}:6650"
    assert len(a.ownership.owned_bundles()) + len(b.ownership.owned_bundles()) == 1


async def test_unload_closes_topics_then_releases_the_bundle(world) -> None:
    a, b, _, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    await a.ownership.lookup(topic, authoritative=True)
    assert await a.ownership.unload(bundle) is True
    assert a.unloaded == [bundle]
    assert await owner_record(store, bundle) is None
    assert not await a.ownership.is_owned_by_me(topic) and a.ownership.owned_bundles() == []
    assert await a.ownership.unload(bundle) is False  # not ours any more
    assert (await b.ownership.lookup(topic, authoritative=True)).is_self
    assert json.loads((await store.get("/brokers/a")).value)["numBundles"] == 0


async def test_disabled_owner_record_means_retry(world) -> None:
    a, b, _, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    await b.ownership.lookup(topic, authoritative=True)
    registry = BrokerRegistry(store)
    current = await registry.get_owner("t", "ns", bundle.name)
    await registry.set_disabled("t", "ns", bundle.name, current.value, expected_version=current.version)
    with pytest.raises(ServiceUnitNotReadyError, match="being unloaded by b"):
        await a.ownership.lookup(topic)


async def test_session_loss_drops_ownership_at_once_and_unloads_its_topics(world) -> None:
    a, b, _, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    await a.ownership.lookup(topic, authoritative=True)
    a.store.expire_session()
    assert a.ownership.owned_bundles() == []  # before any other coroutine ran
    assert not await a.ownership.is_owned_by_me(topic)
    await wait_for_async(lambda: a.unloaded == [bundle], 5, what="topics of the lost bundle unloaded")
    assert await owner_record(store, bundle) is None
    await wait_for_async(lambda: store.get("/brokers/a"), 5, what="registration re-created")
    assert (await b.ownership.lookup(topic, authoritative=True)).is_self


async def test_close_deregisters_then_releases_every_bundle(world) -> None:
    a, b, _, store = world
    for index in (0, 1):
        await a.ownership.lookup((await topic_in(a.ownership, index))[0], authoritative=True)
    owned = a.ownership.owned_bundles()
    assert len(owned) == 2
    unowned_topic, _ = await topic_in(a.ownership, 2)
    seen_while_closing = []

    async def unloader(bundle: NamespaceBundle) -> None:
        a.unloaded.append(bundle)
        seen_while_closing.append((await store.get("/brokers/a"), await a.ownership.lookup(unowned_topic)))

    a.ownership.set_unloader(unloader)
    await a.ownership.close()
    assert sorted(a.unloaded) == owned
    assert [await owner_record(store, bundle) for bundle in owned] == [None, None]
    for registration, answer in seen_while_closing:
        assert registration is None  # deregistered before unloading
        assert answer.redirect and answer.broker_service_url == "pulsar://b:6650"  # nothing new comes here
    with pytest.raises(ServiceUnitNotReadyError, match="any more"):
        await a.ownership.lookup(unowned_topic)
    assert not await a.ownership.is_owned_by_me(unowned_topic)
    await a.ownership.close()  # idempotent


async def test_a_stale_record_of_our_previous_instance_is_replaced(world) -> None:
    a, _, _, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    leftover = MemoryMetadataStore(store.tree, name="old-a")
    await leftover.start()
    try:
        old = BundleOwner(broker_id="a", native_url="pulsar://a:1", http_url="http://a:2", instance="previous")
        assert await BrokerRegistry(leftover).try_acquire("t", "ns", bundle.name, old)
        answer = await a.ownership.lookup(topic, authoritative=True)
        assert answer.is_self and (await owner_record(store, bundle))["instance"] == a.ownership.instance
    finally:
        await leftover.close()


async def test_missing_namespace_and_default_bundles(world) -> None:
    a, _, config, _ = world
    with pytest.raises(NamespaceNotFoundError):
        await a.ownership.lookup("persistent://t/nope/x")
    assert not await a.ownership.is_owned_by_me("persistent://t/nope/x")
    await config.create_namespace("t", "bare", Policies())
    answer = await a.ownership.lookup("persistent://t/bare/x", authoritative=True)
    assert answer.is_self
    pinned = (await config.get_namespace_policies("t", "bare")).value.bundles
    assert pinned == bundles_data(default_boundaries(4))


async def test_deleting_a_namespace_unloads_its_bundles(world) -> None:
    a, _, config, store = world
    topic, bundle = await topic_in(a.ownership, 0)
    await a.ownership.lookup(topic, authoritative=True)
    await config.delete_namespace("t", "ns")
    await wait_for_async(lambda: a.unloaded == [bundle], 5, what="bundle of the deleted namespace unloaded")
    assert await owner_record(store, bundle) is None


async def test_no_live_broker_is_retriable(world) -> None:
    a, b, _, _ = world
    await b.ownership.close()
    topic, _ = await topic_in(a.ownership, 0)
    answers = []

    async def unloader(bundle: NamespaceBundle) -> None:  # runs while a is closing: nobody else is left
        try:
            await a.ownership.lookup(topic)
        except ServiceUnitNotReadyError as e:
            answers.append(str(e))

    await a.ownership.lookup((await topic_in(a.ownership, 1))[0], authoritative=True)
    a.ownership.set_unloader(unloader)
    await a.ownership.close()
    assert len(answers) == 1 and "no live broker" in answers[0]
