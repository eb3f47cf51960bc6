"""Topic-list watches on the in-memory metadata store: the managed-ledger list and partitioned-topic watches of
``config_store``, and ``broker/service/session/topic_list_watch.py`` on top of them (one shared namespace watch, watcher
updates, lifecycle). The real ZooKeeper, brokers and clients are in tests/integration/test_topic_list_watch.py."""

from __future__ import annotations

import pytest

from broker.service.errors import ServiceNotReadyError, UnsupportedError
from broker.service.session.topic_list import TopicsPatternError, topics_hash
from broker.service.session.topic_list_watch import TopicListWatchService
from config_store import ConfigurationStore, MemoryMetadataStore, Policies, TenantInfo
from config_store.managed_ledgers import ManagedLedgerInfo, ManagedLedgerStore
from magnetar.protocol import pb
from tests.kit.wait import wait_for_async

NS = "persistent://public/default"


class StoreListing:
    """A managed-ledger factory's listing side over a metadata store, as ``ManagedLedgerFactory`` does it."""

    watches_list = True

    def __init__(self, store: ManagedLedgerStore) -> None:
        self._store = store

    def watch_list(self, prefix, callback):
        return self._store.watch_list(prefix, callback)


class FakeConnection:
    """What a watcher writes to (a test double of ``broker.service.session.connection.Connection``)."""

    def __init__(self, name: str = "client") -> None:
        self.remote_address = name
        self.closed = False
        self.sent: list = []

    def send_command(self, inner) -> None:
        self.sent.append(inner)


@pytest.fixture
async def stores():
    async with MemoryMetadataStore() as store:
        config = ConfigurationStore(store)
        await config.create_tenant("public", TenantInfo(allowed_clusters=["test"]))
        await config.create_namespace("public", "default", Policies())
        yield ManagedLedgerStore(store), config, store


async def test_the_managed_ledger_list_watch_sees_creations_and_deletions_not_empty_nodes(stores) -> None:
    mls, _config, store = stores
    seen: list[list[str]] = []
    handle = mls.watch_list("public/default/persistent", seen.append)
    await wait_for_async(lambda: seen == [[]], 5, what="the first (empty) delivery")
    await mls.create("public/default/persistent/a", ManagedLedgerInfo())
    await wait_for_async(lambda: seen[-1] == ["public/default/persistent/a"], 5, what="a listed")
    await store.create("/managed-ledgers/public/default/persistent/empty", b"")  # an intermediate node
    await mls.create("public/default/persistent/b", ManagedLedgerInfo())
    await wait_for_async(lambda: seen[-1] == ["public/default/persistent/a", "public/default/persistent/b"], 5,
                         what="b listed, the empty node not")
    await mls.delete("public/default/persistent/a")
    await wait_for_async(lambda: seen[-1] == ["public/default/persistent/b"], 5, what="a gone")
    assert await mls.list("public/default/persistent") == seen[-1]  # the same answer as a listing
    handle.cancel()
    count = len(seen)
    await mls.create("public/default/persistent/c", ManagedLedgerInfo())
    assert await mls.list("public/default/persistent") == ["public/default/persistent/b",
                                                           "public/default/persistent/c"]
    assert len(seen) == count


async def test_the_partitioned_topics_watch_follows_creations_growth_and_deletions(stores) -> None:
    _mls, config, store = stores
    seen: list[dict[str, int]] = []
    watch = config.watch_partitioned_topics("public", "default", "persistent", seen.append)
    await wait_for_async(lambda: seen == [{}], 5, what="the first (empty) delivery")
    await config.create_partitioned_topic("public", "default", "persistent", "p", 2)
    await wait_for_async(lambda: seen[-1] == {"p": 2}, 5, what="p with its count")
    await config.update_partitioned_topic("public", "default", "persistent", "p", 4)
    await wait_for_async(lambda: seen[-1] == {"p": 4}, 5, what="p grown")
    await store.create("/admin/partitioned-topics/public/default/persistent/bad", b"{not json")
    await wait_for_async(lambda: seen[-1] == {"p": 4, "bad": 0}, 5, what="a corrupt value counted as none")
    await config.delete_partitioned_topic("public", "default", "persistent", "p")
    await wait_for_async(lambda: seen[-1] == {"bad": 0}, 5, what="p gone")
    assert all("p" not in s or s["p"] in (2, 4) for s in seen)  # never a topic without its count
    watch.cancel()


async def test_watchers_share_one_namespace_watch_and_get_their_own_updates(stores) -> None:
    mls, config, _store = stores
    await mls.create("public/default/persistent/orders-a", ManagedLedgerInfo())
    await config.create_partitioned_topic("public", "default", "persistent", "orders-p", 2)
    service = TopicListWatchService(ml_factory=StoreListing(mls), configuration_store=config)
    assert service.available
    conn, other = FakeConnection("one"), FakeConnection("two")
    orders = await service.watch(conn, watcher_id=1, namespace="public/default", pattern=f"{NS}/orders-.*")
    assert orders.matching == {f"{NS}/orders-a", f"{NS}/orders-p-partition-0", f"{NS}/orders-p-partition-1"}
    audit = await service.watch(other, watcher_id=1, namespace="public/default", pattern=f"{NS}/audit")
    assert audit.matching == set()
    assert service.watched_namespaces() == ["public/default"] and service.watcher_count() == 2
    assert await service.watch(conn, watcher_id=1, namespace="public/default", pattern=f"{NS}/x") is orders

    await mls.create("public/default/persistent/orders-b", ManagedLedgerInfo())
    await mls.create("public/default/persistent/unrelated", ManagedLedgerInfo())
    await wait_for_async(lambda: conn.sent, 5, what="an update for watcher 1")
    await mls.delete("public/default/persistent/orders-a")
    await wait_for_async(lambda: len(conn.sent) == 2, 5, what="a second update")
    first, second = conn.sent
    assert isinstance(first, pb.CommandWatchTopicUpdate) and first.watcher_id == 1
    assert list(first.new_topics) == [f"{NS}/orders-b"] and not first.deleted_topics
    assert list(second.deleted_topics) == [f"{NS}/orders-a"] and not second.new_topics
    assert second.topics_hash == topics_hash(orders.matching) == orders.topics_hash
    assert other.sent == []  # nothing matched the other watcher's pattern

    service.close_watcher(conn, 1)
    assert service.watched_namespaces() == ["public/default"]  # still used by the other connection
    await mls.create("public/default/persistent/orders-c", ManagedLedgerInfo())
    await mls.create("public/default/persistent/audit", ManagedLedgerInfo())
    await wait_for_async(lambda: other.sent, 5, what="the other watcher's update")
    assert len(conn.sent) == 2  # closed: told nothing more
    service.connection_closed(other)
    assert service.watched_namespaces() == [] and service.watcher_count() == 0


async def test_refusals_leave_nothing_behind(stores) -> None:
    mls, config, _store = stores
    service = TopicListWatchService(ml_factory=StoreListing(mls), configuration_store=config)
    conn = FakeConnection()
    with pytest.raises(TopicsPatternError):
        await service.watch(conn, watcher_id=1, namespace="public/default", pattern=f"{NS}/(a+)+")
    with pytest.raises(Exception, match="invalid namespace"):
        await service.watch(conn, watcher_id=1, namespace="public", pattern=".*")
    assert service.watched_namespaces() == [] and service.watcher_count() == 0
    conn.closed = True  # closed while its watcher was being created
    with pytest.raises(ServiceNotReadyError, match="closed before it was created"):
        await service.watch(conn, watcher_id=2, namespace="public/default", pattern=".*")
    assert service.watched_namespaces() == []
    disabled = TopicListWatchService(ml_factory=StoreListing(mls), configuration_store=config, enabled=False)
    assert not disabled.available
    with pytest.raises(UnsupportedError):
        await disabled.watch(FakeConnection(), watcher_id=1, namespace="public/default", pattern=".*")

    class NoWatching:
        watches_list = False

    assert not TopicListWatchService(ml_factory=NoWatching(), configuration_store=None).available
