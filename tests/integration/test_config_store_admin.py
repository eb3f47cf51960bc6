"""ConfigurationStore and RegionStore on a real ZooKeeper: every entity at its exact raw path, concurrent
compare-and-set writers from separate sessions, and watch-driven caches fed by outside writes."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from kazoo.client import KazooClient

from config_store import (BadVersionError, BookieRegistration, ClusterData, ConfigurationStore,
                          KazooMetadataStore, LedgerMetadata, LedgerState, NodeExistsError, NotFoundError, Policies,
                          RegionStore, TenantInfo, Versioned)
from tests.kit.wait import wait_for_async


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
async def stores(zk_connect):
    """Two independent sessions on the same chroot."""
    async with KazooMetadataStore(zk_connect) as a, KazooMetadataStore(zk_connect) as b:
        yield a, b


def raw_json(raw, path: str) -> dict:
    client, at = raw
    data, _ = client.get(at(path))
    return json.loads(data)


async def test_global_entities_crud_at_exact_paths(stores, raw) -> None:
    config = ConfigurationStore(stores[0])
    client, at = raw
    await config.create_cluster("us-east", ClusterData("http://e:8080", "", "pulsar://e:6650"))
    await config.create_tenant("acme", TenantInfo(["ops"], ["us-east"]))
    await config.create_namespace("acme", "orders", Policies(replication_clusters=["us-east"], retention_size_in_mb=5))
    await config.create_partitioned_topic("acme", "orders", "persistent", "events", 3)

    assert raw_json(raw, "/admin/clusters/us-east") == {
        "version": 1, "serviceUrl": "http://e:8080", "serviceUrlTls": "", "brokerServiceUrl": "pulsar://e:6650",
        "brokerServiceUrlTls": ""}
    assert raw_json(raw, "/admin/tenants/acme") == {"version": 1, "adminRoles": ["ops"], "allowedClusters": ["us-east"]}
    policies = raw_json(raw, "/admin/policies/acme/orders")
    assert policies["replication_clusters"] == ["us-east"]
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 5}
    assert raw_json(raw, "/admin/partitioned-topics/acme/orders/persistent/events") == {"version": 1, "partitions": 3}

    # Updates are visible at the raw path with ZooKeeper's version.
    await config.update_cluster("us-east", lambda c: dataclasses.replace(c, service_url_tls="https://e"))
    assert raw_json(raw, "/admin/clusters/us-east")["serviceUrlTls"] == "https://e"
    assert client.exists(at("/admin/clusters/us-east")).version == 1
    await config.update_tenant("acme", lambda t: TenantInfo(t.admin_roles + ["dev"], t.allowed_clusters))
    await config.update_namespace_policies("acme", "orders",
                                           lambda p: dataclasses.replace(p, deduplication_enabled=True))
    assert raw_json(raw, "/admin/policies/acme/orders")["deduplicationEnabled"] is True
    await config.update_partitioned_topic("acme", "orders", "persistent", "events", 6)
    assert raw_json(raw, "/admin/partitioned-topics/acme/orders/persistent/events")["partitions"] == 6

    # Reads from another session.
    other = ConfigurationStore(stores[1])
    assert (await other.get_tenant("acme")) == Versioned(TenantInfo(["ops", "dev"], ["us-east"]), 1)
    assert (await other.get_partitioned_topic("acme", "orders", "persistent", "events")) == Versioned(6, 1)
    assert await other.list_clusters() == ["us-east"]
    with pytest.raises(NodeExistsError):
        await other.create_tenant("acme", TenantInfo())

    # Deletes remove the raw nodes.
    await config.delete_partitioned_topic("acme", "orders", "persistent", "events")
    assert client.exists(at("/admin/partitioned-topics/acme/orders/persistent/events")) is None
    await config.delete_namespace("acme", "orders")
    assert client.exists(at("/admin/policies/acme/orders")) is None
    await config.delete_tenant("acme")
    assert client.exists(at("/admin/tenants/acme")) is None
    await config.delete_cluster("us-east")
    assert client.exists(at("/admin/clusters/us-east")) is None
    with pytest.raises(NotFoundError):
        await other.get_cluster("us-east")


async def test_concurrent_updates_from_two_sessions_lose_nothing(stores) -> None:
    a, b = (ConfigurationStore(s) for s in stores)
    await a.create_tenant("t", TenantInfo())

    def add(role: str):
        return lambda old: TenantInfo(old.admin_roles + [role], old.allowed_clusters)

    await asyncio.gather(*(cfg.update_tenant("t", add(f"{name}{i}"))
                           for i in range(10) for name, cfg in (("a", a), ("b", b))))
    final = await b.get_tenant("t")
    assert sorted(final.value.admin_roles) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])
    assert final.version == 20


async def test_write_ledger_racers_one_wins_the_other_gets_bad_version(stores, raw) -> None:
    ra, rb = (RegionStore(s) for s in stores)
    lid = await ra.allocate_ledger_id()
    md = LedgerMetadata(ledger_id=lid, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                        ensembles=[(0, ["b1", "b2", "b3"])])
    await ra.create_ledger(md)
    assert raw_json(raw, f"/ledgers/{lid}")["ensembles"] == [{"firstEntryId": 0, "bookies": ["b1", "b2", "b3"]}]
    seen_a, seen_b = await ra.read_ledger(lid), await rb.read_ledger(lid)
    writer = seen_a.value.with_ensemble(100, ["b1", "b4", "b3"])  # the writer replaces a failed bookie
    recoverer = seen_b.value.in_recovery()  # a reader starts recovery at the same time
    results = await asyncio.gather(ra.write_ledger(writer, expected_version=seen_a.version),
                                   rb.write_ledger(recoverer, expected_version=seen_b.version),
                                   return_exceptions=True)
    winners = [r for r in results if isinstance(r, int)]
    losers = [r for r in results if isinstance(r, BadVersionError)]
    assert winners == [1] and len(losers) == 1
    stored = (await rb.read_ledger(lid)).value
    assert stored in (writer, recoverer)  # exactly the winner's value, not a blend, not the loser's
    # The loser re-reads and applies its change on top.
    if stored == writer:
        current = await rb.read_ledger(lid)
        await rb.write_ledger(current.value.in_recovery(), expected_version=current.version)
    else:
        current = await ra.read_ledger(lid)
        await ra.write_ledger(current.value.with_ensemble(100, ["b1", "b4", "b3"]), expected_version=current.version)
    final = await ra.read_ledger(lid)
    assert final.version == 2 and final.value.state is LedgerState.IN_RECOVERY
    assert final.value.ensembles[-1] == (100, ["b1", "b4", "b3"])
    assert await rb.list_ledgers() == [lid]
    await ra.delete_ledger(lid, expected_version=2)
    assert raw[0].exists(raw[1](f"/ledgers/{lid}")) is None


async def test_ledger_ids_from_two_sessions_are_unique(stores) -> None:
    ra, rb = (RegionStore(s) for s in stores)
    ids = await asyncio.gather(*(r.allocate_ledger_id() for _ in range(15) for r in (ra, rb)))
    assert len(set(ids)) == 30 and min(ids) >= 1
    assert await ra.store.children("/ledgers/idgen") == []


async def test_bookie_registrations_at_exact_paths(stores, raw) -> None:
    client, at = raw
    region = RegionStore(stores[0])
    reg = BookieRegistration("bookie-7", "127.0.0.1:3188", "127.0.0.1:8088", "0.1.0")
    await region.register_bookie(reg)
    stat = client.exists(at("/bookies/available/bookie-7"))
    assert stat.ephemeralOwner == stores[0]._client.client_id[0]
    assert raw_json(raw, "/bookies/available/bookie-7")["address"] == "127.0.0.1:3188"
    cache = await RegionStore(stores[1]).bookie_cache()
    assert cache.writable() == {"bookie-7": reg}
    await region.set_bookie_read_only("bookie-7", True)
    assert client.exists(at("/bookies/available/bookie-7")) is None
    assert client.exists(at("/bookies/readonly/bookie-7")).ephemeralOwner == stores[0]._client.client_id[0]
    await cache.wait_for(lambda c: c.read_only() == {"bookie-7": reg} and not c.writable(), timeout_s=10)
    await region.unregister_bookie("bookie-7")
    await cache.wait_for(lambda c: not c.read_only(), timeout_s=10)
    assert cache.address_of("bookie-7") == "127.0.0.1:3188"
    cache.close()


async def test_policies_watch_sees_outside_writes(stores, raw) -> None:
    client, at = raw
    config = ConfigurationStore(stores[0])
    await config.create_tenant("t", TenantInfo())
    await config.create_namespace("t", "ns")
    cache = config.policies_cache()
    assert (await cache.get("t", "ns")) == Policies()
    changed = Policies(message_ttl_in_seconds=30, replication_clusters=["a", "b"])
    client.set(at("/admin/policies/t/ns"), changed.to_json())
    await wait_for_async(lambda: cache.get_cached("t", "ns") == changed, 10, what="policies change seen")
    client.set(at("/admin/policies/t/ns"), b"{not json")  # corruption is logged, never served
    client.delete(at("/admin/policies/t/ns"))
    await wait_for_async(lambda: cache.get_cached("t", "ns") is None, 10, what="namespace deletion seen")
    cache.close()
