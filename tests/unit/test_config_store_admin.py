"""ConfigurationStore and RegionStore over the in-memory store: exact paths, create/update/delete rules,
compare-and-set retries under concurrent writers and injected faults, caches, ledger ids."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from config_store import (BadVersionError, BookieRegistration, ClusterData, ConfigurationStore,
                          InvalidMetadataError, LedgerMetadata, MemoryMetadataStore, MetadataUnavailableError,
                          NodeExistsError, NotEmptyError, NotFoundError, Policies, RegionStore, TenantInfo, Versioned)
from tests.kit.wait import wait_for_async


@pytest.fixture
async def store():
    async with MemoryMetadataStore() as s:
        yield s


@pytest.fixture
def config(store) -> ConfigurationStore:
    return ConfigurationStore(store)


@pytest.fixture
def region(store) -> RegionStore:
    return RegionStore(store)


async def raw_json(store: MemoryMetadataStore, path: str) -> dict:
    versioned = await store.get(path)
    assert versioned is not None, f"nothing at {path}"
    return json.loads(versioned.value)


# ---------------------------------------------------------------------------------------------- global store


async def test_entities_live_at_pulsars_paths(store, config: ConfigurationStore) -> None:
    await config.create_cluster("us-east", ClusterData(service_url="http://e:8080"))
    await config.create_tenant("acme", TenantInfo(["admin"], ["us-east"]))
    await config.create_namespace("acme", "orders", Policies(replication_clusters=["us-east"]))
    await config.create_partitioned_topic("acme", "orders", "persistent", "events", 4)
    assert (await raw_json(store, "/admin/clusters/us-east"))["serviceUrl"] == "http://e:8080"
    assert (await raw_json(store, "/admin/tenants/acme"))["adminRoles"] == ["admin"]
    assert (await raw_json(store, "/admin/policies/acme/orders"))["replication_clusters"] == ["us-east"]
    assert await raw_json(store, "/admin/partitioned-topics/acme/orders/persistent/events") == {
        "version": 1, "partitions": 4}
    assert await config.list_clusters() == ["us-east"]
    assert await config.list_tenants() == ["acme"]
    assert await config.list_namespaces("acme") == ["orders"]
    assert await config.list_partitioned_topics("acme", "orders", "persistent") == ["events"]
    assert await config.list_partitioned_topics("acme", "orders", "non-persistent") == []
    assert await config.get_partitioned_topic("acme", "orders", "persistent", "events") == Versioned(4, 0)


async def test_create_never_replaces_and_missing_is_not_found(config: ConfigurationStore) -> None:
    await config.create_cluster("c1", ClusterData())
    with pytest.raises(NodeExistsError, match="cluster 'c1' already exists"):
        await config.create_cluster("c1", ClusterData(service_url="http://other"))
    assert (await config.get_cluster("c1")).value == ClusterData()
    with pytest.raises(NotFoundError, match="cluster 'c2'"):
        await config.get_cluster("c2")
    with pytest.raises(NotFoundError):
        await config.update_cluster("c2", lambda c: c)
    with pytest.raises(NotFoundError):
        await config.delete_cluster("c2")
    await config.delete_cluster("c1")
    assert await config.list_clusters() == []


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "sp ace", "x" * 256, "ümlaut", None])
async def test_names_are_validated_before_any_io(store, config: ConfigurationStore, bad) -> None:
    writes = store.write_count
    with pytest.raises(InvalidMetadataError, match="invalid"):
        await config.create_tenant(bad, TenantInfo())
    with pytest.raises(InvalidMetadataError):
        await config.create_cluster(bad, ClusterData())
    assert store.write_count == writes


async def test_parents_must_exist_and_non_empty_parents_are_not_deleted(config: ConfigurationStore) -> None:
    with pytest.raises(NotFoundError, match="tenant 'ghost'"):
        await config.create_namespace("ghost", "ns")
    await config.create_tenant("t", TenantInfo())
    await config.create_namespace("t", "ns")
    with pytest.raises(NotFoundError, match="namespace 't/other'"):
        await config.create_partitioned_topic("t", "other", "persistent", "x", 2)
    with pytest.raises(InvalidMetadataError, match="domain"):
        await config.create_partitioned_topic("t", "ns", "transient", "x", 2)
    with pytest.raises(InvalidMetadataError, match="positive"):
        await config.create_partitioned_topic("t", "ns", "persistent", "x", 0)
    await config.create_partitioned_topic("t", "ns", "persistent", "x", 2)
    with pytest.raises(NotEmptyError, match="namespaces: ns"):
        await config.delete_tenant("t")
    with pytest.raises(NotEmptyError, match="persistent://t/ns/x"):
        await config.delete_namespace("t", "ns")
    await config.delete_partitioned_topic("t", "ns", "persistent", "x")
    await config.delete_namespace("t", "ns")
    await config.delete_tenant("t")
    assert await config.store.children("/admin/policies") == []
    assert await config.store.children("/admin/partitioned-topics") == []
    assert await config.list_tenants() == []


async def test_partitions_may_grow_never_shrink(config: ConfigurationStore) -> None:
    await config.create_tenant("t", TenantInfo())
    await config.create_namespace("t", "ns")
    await config.create_partitioned_topic("t", "ns", "persistent", "x", 2)
    assert await config.update_partitioned_topic("t", "ns", "persistent", "x", 5) == Versioned(5, 1)
    assert await config.update_partitioned_topic("t", "ns", "persistent", "x", lambda n: n + 1) == Versioned(6, 2)
    with pytest.raises(InvalidMetadataError, match="shrink"):
        await config.update_partitioned_topic("t", "ns", "persistent", "x", 3)


async def test_concurrent_updates_are_all_applied_none_overwritten(config: ConfigurationStore) -> None:
    await config.create_tenant("t", TenantInfo(admin_roles=[]))
    calls = 0

    def add(role: str):
        def fn(old: TenantInfo) -> TenantInfo:
            nonlocal calls
            calls += 1
            return TenantInfo(old.admin_roles + [role], old.allowed_clusters)
        return fn

    results = await asyncio.gather(*(config.update_tenant("t", add(f"r{i}")) for i in range(8)))
    final = await config.get_tenant("t")
    assert sorted(final.value.admin_roles) == sorted(f"r{i}" for i in range(8))
    assert final.version == 8
    assert sorted(r.version for r in results) == list(range(1, 9))
    assert calls > 8  # the writers really raced and the losers re-read


async def test_update_retries_lost_races_up_to_a_bound(store, config: ConfigurationStore) -> None:
    await config.create_cluster("c", ClusterData())
    store.fail_next(3, BadVersionError)  # three lost races, then success
    updated = await config.update_cluster("c", lambda c: ClusterData(service_url="http://new"))
    assert updated == Versioned(ClusterData(service_url="http://new"), 1)

    bounded = ConfigurationStore(store, update_attempts_max=3)
    store.fail_next(3, BadVersionError)
    with pytest.raises(BadVersionError, match="lost 3 races"):
        await bounded.update_cluster("c", lambda c: ClusterData(service_url="http://never"))
    assert (await config.get_cluster("c")).value.service_url == "http://new"

    store.fail_next(1, MetadataUnavailableError)  # outcome unknown: not retried blindly, reported
    with pytest.raises(MetadataUnavailableError):
        await config.update_cluster("c", lambda c: ClusterData(service_url="http://maybe"))


async def test_corrupt_stored_value_is_an_error_not_data(store, config: ConfigurationStore) -> None:
    await store.create("/admin/tenants/bad", b'{"version": 1, "adminRoles": "oops"}')
    with pytest.raises(InvalidMetadataError, match="/admin/tenants/bad"):
        await config.get_tenant("bad")
    with pytest.raises(InvalidMetadataError):
        await config.update_tenant("bad", lambda t: t)


async def test_watch_policies_and_cache(config: ConfigurationStore) -> None:
    await config.create_tenant("t", TenantInfo())
    seen: list[Policies | None] = []
    handle = await config.watch_policies("t", "ns", seen.append)
    assert seen == [None]  # delivered before watch_policies returned
    await config.create_namespace("t", "ns", Policies(message_ttl_in_seconds=10))
    await wait_for_async(lambda: seen[-1] is not None and seen[-1].message_ttl_in_seconds == 10, 2)
    handle.cancel()

    cache = config.policies_cache()
    changes = []
    cache.add_listener(lambda t, ns, p: changes.append((t, ns, p)))
    assert (await cache.get("t", "ns")).message_ttl_in_seconds == 10
    assert await cache.get("t", "absent") is None
    await config.update_namespace_policies("t", "ns", lambda p: dataclasses.replace(p, message_ttl_in_seconds=99))
    await wait_for_async(lambda: cache.get_cached("t", "ns").message_ttl_in_seconds == 99, 2)
    assert changes[-1][2].message_ttl_in_seconds == 99
    copy_ = await cache.get("t", "ns")
    copy_.replication_clusters.append("mutated")
    assert cache.get_cached("t", "ns").replication_clusters == []
    cache.close()


# ---------------------------------------------------------------------------------------------- region store


def _bookie(i: int, port: int = 3181) -> BookieRegistration:
    return BookieRegistration(f"bookie-{i}", f"127.0.0.1:{port + i}", f"127.0.0.1:{8000 + i}", "0.1.0")


async def test_bookie_registration_paths_and_moves(store, region: RegionStore) -> None:
    await region.register_bookie(_bookie(1))
    await region.register_bookie(_bookie(2), read_only=True)
    node = store.tree.node("/bookies/available/bookie-1")
    assert node is not None and node.owner == store._session_id()  # ephemeral, ours
    assert (await raw_json(store, "/bookies/available/bookie-1"))["address"] == "127.0.0.1:3182"
    assert await region.list_bookies() == {"bookie-1": _bookie(1)}
    assert await region.list_bookies(read_only=True) == {"bookie-2": _bookie(2)}
    with pytest.raises(NodeExistsError):
        await region.register_bookie(_bookie(1))
    await region.set_bookie_read_only("bookie-1", True)
    assert await region.list_bookies() == {}
    assert set(await region.list_bookies(read_only=True)) == {"bookie-1", "bookie-2"}
    await region.unregister_bookie("bookie-1")
    await region.unregister_bookie("bookie-1")  # no-op
    assert set(await region.list_bookies(read_only=True)) == {"bookie-2"}
    with pytest.raises(NotFoundError):
        await region.set_bookie_read_only("bookie-1", False)


async def test_bookie_cache_follows_another_session(store, region: RegionStore) -> None:
    await region.register_bookie(_bookie(1))
    async with MemoryMetadataStore(store.tree) as client_store:
        cache = await RegionStore(client_store).bookie_cache()
        assert cache.writable() == {"bookie-1": _bookie(1)}  # loaded before bookie_cache() returned
        notified = []
        cache.add_listener(lambda c: notified.append(sorted(c.writable())))
        await region.register_bookie(_bookie(2))
        await cache.wait_for(lambda c: "bookie-2" in c.writable(), timeout_s=2)
        await region.set_bookie_read_only("bookie-2", True)
        await cache.wait_for(lambda c: "bookie-2" in c.read_only() and "bookie-2" not in c.writable(), 2)
        await region.unregister_bookie("bookie-1")
        await cache.wait_for(lambda c: not c.writable(), 2)
        assert cache.address_of("bookie-1") == "127.0.0.1:3182"  # remembered after it left
        assert cache.address_of("bookie-9") is None
        assert notified
        with pytest.raises(TimeoutError, match="not met within"):
            await cache.wait_for(lambda c: "bookie-9" in c.writable(), timeout_s=0.05)
        store.expire_session()  # the registering process's session is lost: it comes back by itself
        await cache.wait_for(lambda c: "bookie-2" in c.read_only(), 2)
        cache.close()
        cache.close()


async def test_ledger_ids_are_unique_and_increasing(region: RegionStore) -> None:
    first = await region.allocate_ledger_id()
    assert first >= 1
    concurrent = await asyncio.gather(*(region.allocate_ledger_id() for _ in range(20)))
    assert len(set(concurrent)) == 20 and min(concurrent) > first
    after = await region.allocate_ledger_id()
    assert after > max(concurrent)
    assert await region.store.children("/ledgers/idgen") == []  # allocation nodes are cleaned up


async def test_ledger_metadata_crud_and_compare_and_set(store, region: RegionStore) -> None:
    lid = await region.allocate_ledger_id()
    md = LedgerMetadata(ledger_id=lid, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                        ensembles=[(0, ["b1", "b2", "b3"])])
    assert await region.create_ledger(md) == 0
    assert (await raw_json(store, f"/ledgers/{lid}"))["ledgerId"] == lid
    with pytest.raises(NodeExistsError, match=f"ledger {lid}"):
        await region.create_ledger(md)
    read = await region.read_ledger(lid)
    assert read == Versioned(md, 0)
    changed = md.with_ensemble(10, ["b1", "b4", "b3"])
    assert await region.write_ledger(changed, expected_version=0) == 1
    with pytest.raises(BadVersionError):  # a writer holding the old version loses, never overwrites
        await region.write_ledger(md.closed(5, 100), expected_version=0)
    assert (await region.read_ledger(lid)).value == changed
    with pytest.raises(InvalidMetadataError, match="compare-and-set"):
        await region.write_ledger(md, expected_version=-1)
    await store.create("/ledgers/not-a-ledger")
    await store.create("/ledgers/42", b"corrupt")
    assert await region.list_ledgers() == sorted([lid, 42])
    with pytest.raises(InvalidMetadataError, match="/ledgers/42"):
        await region.read_ledger(42)
    with pytest.raises(BadVersionError):
        await region.delete_ledger(lid, expected_version=0)
    await region.delete_ledger(lid, expected_version=1)
    await region.delete_ledger(lid)  # already gone: no-op
    with pytest.raises(NotFoundError, match=f"ledger {lid}"):
        await region.read_ledger(lid)
