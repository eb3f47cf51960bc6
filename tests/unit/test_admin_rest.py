"""The admin REST API and HTTP lookup of two brokers over one in-memory ZooKeeper, with a stand-in for the
binary-protocol service: Pulsar's paths and JSON names, 400/404/409/412 with nothing changed, redirects to
the owner, partition fan-out, /metrics and /health."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from broker.admin import AdminContext, make_app
from broker.admin.fanout import PartitionAnswer, judge
from broker.admin.keys import CONTEXT
from broker.lookup_http import routes as lookup_routes
from broker.managed_ledger.api import Position
from broker.ownership import BundleOwnership
from broker.service.topics.stats import ConsumerStats, PublisherStats, SubscriptionStats, TopicStats
from config_store import ConfigurationStore, MemoryMetadataStore, MemoryTree, RegionStore
from magnetar.topic_name import TopicName


class FakeSubscription:
    def __init__(self, topic: "FakeTopic", position: Any) -> None:
        self.topic = topic
        self.position = position
        self.consumers: list[str] = []  # consumer names

    async def mark_delete_up_to(self, position: Position) -> None:
        self.topic.calls.append(("mark_delete", position))


class FakeLedger:
    last_confirmed_position = Position(7, 9)


class FakeTopic:
    def __init__(self, name: str) -> None:
        self.name = name
        self.subscriptions: dict[str, FakeSubscription] = {}
        self.calls: list[tuple] = []
        self.ml = FakeLedger()

    def stats(self) -> TopicStats:
        return TopicStats(msg_rate_in=1.5, msg_in_counter=10, storage_size_bytes=100,
                          publishers=(PublisherStats(producer_id=1, producer_name=self.name, access_mode="Shared"),),
                          subscriptions={s: SubscriptionStats(type="Exclusive", msg_backlog=3, consumers=tuple(
                              ConsumerStats(consumer_name=c) for c in sub.consumers))
                                         for s, sub in self.subscriptions.items()})

    def internal_stats(self) -> dict:
        return {"entriesAddedCounter": 10, "ledgers": [], "cursors": {}}

    async def create_subscription(self, name: str, position: Any = "latest") -> None:
        self.subscriptions[name] = FakeSubscription(self, position)

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        del self.subscriptions[name]

    def seek_position(self, ledger_id: int, entry_id: int) -> Position:
        return Position(ledger_id, entry_id)

    async def reset_cursor(self, sub: str, *, position=None, timestamp_ms=None) -> None:
        self.calls.append(("reset", sub, position, timestamp_ms))

    async def skip(self, sub: str, n: int) -> int:
        self.calls.append(("skip", sub, n))
        return n

    async def expire(self, sub: str, seconds: float) -> int:
        self.calls.append(("expire", sub, seconds))
        return 0

    async def terminate(self) -> Position:
        self.calls.append(("terminate",))
        return Position(5, len(self.name))


class FakeStorage:
    """The managed ledgers of the region (shared by both brokers, as ZooKeeper is)."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    async def exists(self, path: str) -> bool:
        return path in self.paths

    async def list(self, prefix: str) -> list[str]:
        return sorted(p for p in self.paths if p.rsplit("/", 1)[0] == prefix)


class FakeService:
    def __init__(self, storage: FakeStorage) -> None:
        self.storage = storage
        self.loaded: dict[str, FakeTopic] = {}

    async def get_topic(self, name: str, create: bool = True) -> FakeTopic | None:
        if name not in self.loaded:
            path = TopicName.parse(name).path
            if not create and path not in self.storage.paths:
                return None
            self.storage.paths.add(path)
            self.loaded[name] = FakeTopic(name)
        return self.loaded[name]

    def topics(self) -> dict[str, FakeTopic]:
        return dict(self.loaded)

    async def unload_topic(self, name: str) -> bool:
        return self.loaded.pop(name, None) is not None

    async def delete_topic(self, name: str, force: bool = False) -> None:
        self.loaded.pop(name, None)
        self.storage.paths.discard(TopicName.parse(name).path)


class Node:
    def __init__(self, name: str, tree: MemoryTree, storage: FakeStorage) -> None:
        self.name = name
        self.store = MemoryMetadataStore(tree, name=name)
        self.service = FakeService(storage)
        self.storage = storage
        self.server: TestServer | None = None
        self.ownership: BundleOwnership | None = None

    async def start(self) -> "Node":
        await self.store.start()
        config = ConfigurationStore(self.store)
        registry = CollectorRegistry()
        self.ownership = BundleOwnership(local_store=self.store, configuration=config, broker_id=self.name,
                                         cluster="c", registry=registry)
        ctx = AdminContext(cluster="c", configuration=config, region=RegionStore(self.store),
                           brokers=self.ownership.registry, ownership=self.ownership, service=self.service,
                           ml_factory=self.storage, max_partitions_per_topic=16, metrics_registry=registry,
                           health=lambda: (True, "ok"))
        self.server = TestServer(make_app(ctx, extra_routes=[lookup_routes], client_max_size_bytes=4096))
        await self.server.start_server()
        await self.ownership.start(pulsar_url=f"pulsar://{self.name}:6650", http_url=self.url)
        return self

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def close(self) -> None:
        await self.ownership.close()
        await self.server.close()
        await self.store.close()


@pytest.fixture
async def nodes():
    tree, storage = MemoryTree(), FakeStorage()
    a = await Node("a", tree, storage).start()
    b = await Node("b", tree, storage).start()
    yield a, b
    await a.close()
    await b.close()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


async def call(http: aiohttp.ClientSession, method: str, url: str, body: Any = None, *, raw: bytes | None = None,
               follow: bool = True) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    async with http.request(method, url, data=data, allow_redirects=follow,
                            headers={"Content-Type": "application/json"}) as response:
        text = await response.text()
        if response.status in (301, 302, 307):
            return response.status, response.headers["Location"]
        try:
            return response.status, json.loads(text) if text else None
        except ValueError:
            return response.status, text


async def setup_namespace(http, base: str) -> None:
    assert (await call(http, "PUT", f"{base}/admin/v2/clusters/c", {"serviceUrl": base}))[0] == 204
    assert (await call(http, "PUT", f"{base}/admin/v2/tenants/t"))[0] == 204
    assert (await call(http, "PUT", f"{base}/admin/v2/namespaces/t/ns"))[0] == 204


async def test_clusters_crud_with_pulsar_names(nodes, http) -> None:
    a, _ = nodes
    base = a.url + "/admin/v2/clusters"
    assert await call(http, "GET", base) == (200, [])
    assert await call(http, "PUT", f"{base}/c", {"serviceUrl": "http://h:8080", "brokerServiceUrl": "pulsar://h:6650",
                                                 "proxyServiceUrl": None}) == (204, None)
    assert await call(http, "GET", f"{base}/c") == (200, {"serviceUrl": "http://h:8080", "serviceUrlTls": "",
                                                          "brokerServiceUrl": "pulsar://h:6650",
                                                          "brokerServiceUrlTls": ""})
    status, body = await call(http, "PUT", f"{base}/c", {"serviceUrl": "http://x:1"})
    assert status == 409 and "already exists" in body["reason"]
    for bad in ({"serviceUrl": 5}, ["http://x"], {"serviceUrl": "no-scheme"}, {"brokerServiceUrl": True}):
        status, body = await call(http, "PUT", f"{base}/other", bad)
        assert status == 400 and body["reason"], bad
    assert await call(http, "GET", base) == (200, ["c"])
    status, body = await call(http, "POST", f"{base}/c", {"serviceUrl": 1})
    assert status == 400 and "serviceUrl must be a string" in body["reason"]
    assert (await call(http, "GET", f"{base}/c"))[1]["serviceUrl"] == "http://h:8080"
    assert await call(http, "POST", f"{base}/c", {"serviceUrl": "http://h2:8080"}) == (204, None)
    assert (await call(http, "GET", f"{base}/c"))[1] == {"serviceUrl": "http://h2:8080", "serviceUrlTls": "",
                                                        "brokerServiceUrl": "pulsar://h:6650", "brokerServiceUrlTls": ""}
    assert (await call(http, "GET", f"{base}/nope"))[0] == 404
    assert (await call(http, "POST", f"{base}/nope", {}))[0] == 404
    assert (await call(http, "DELETE", f"{base}/c"))[0] == 412  # the broker's own cluster
    assert await call(http, "PUT", f"{base}/west", {"serviceUrl": "http://w:8080"}) == (204, None)
    assert await call(http, "DELETE", f"{base}/west") == (204, None)
    assert (await call(http, "DELETE", f"{base}/west"))[0] == 404
    assert (await call(http, "PUT", f"{base}/bad%2Fname", {}))[0] in (400, 404)


async def test_tenants_crud_and_refusals(nodes, http) -> None:
    a, _ = nodes
    base = a.url + "/admin/v2/tenants"
    await call(http, "PUT", f"{a.url}/admin/v2/clusters/c", {})
    assert await call(http, "PUT", f"{base}/acme") == (204, None)  # no body: allowed in this broker's cluster
    assert await call(http, "GET", f"{base}/acme") == (200, {"adminRoles": [], "allowedClusters": ["c"]})
    for bad, code in (({"adminRoles": "root"}, 400), ({"allowedClusters": [1]}, 400), ([], 400),
                      ({"allowedClusters": ["mars"]}, 412), ({"allowedClusters": []}, 412)):
        status, body = await call(http, "PUT", f"{base}/other", bad)
        assert status == code and body["reason"], bad
    assert await call(http, "GET", base) == (200, ["acme"])
    assert (await call(http, "PUT", f"{base}/acme", {}))[0] == 409
    assert (await call(http, "POST", f"{base}/acme", {"adminRoles": 7}))[0] == 400
    assert await call(http, "POST", f"{base}/acme", {"adminRoles": ["ops"]}) == (204, None)
    assert await call(http, "GET", f"{base}/acme") == (200, {"adminRoles": ["ops"], "allowedClusters": ["c"]})
    assert (await call(http, "POST", f"{base}/nope", {"adminRoles": []}))[0] == 404
    assert await call(http, "PUT", f"{a.url}/admin/v2/namespaces/acme/orders") == (204, None)
    status, body = await call(http, "DELETE", f"{base}/acme")
    assert status == 409 and "namespaces" in body["reason"]
    assert await call(http, "DELETE", f"{a.url}/admin/v2/namespaces/acme/orders") == (204, None)
    assert await call(http, "DELETE", f"{base}/acme") == (204, None)
    assert (await call(http, "DELETE", f"{base}/acme"))[0] == 404


async def test_namespace_policies_with_pulsar_names_and_bad_bodies_change_nothing(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns"
    assert await call(http, "GET", f"{a.url}/admin/v2/namespaces/t") == (200, ["t/ns"])
    status, policies = await call(http, "GET", ns)
    assert status == 200
    assert policies["bundles"] == {"boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000",
                                                  "0xffffffff"], "numBundles": 4}
    assert policies["replication_clusters"] == ["c"] and policies["deduplicationEnabled"] is None
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert policies["message_ttl_in_seconds"] is None and "version" not in policies

    assert await call(http, "POST", f"{ns}/deduplication", True) == (204, None)
    assert await call(http, "POST", f"{ns}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}) == (204, None)
    assert await call(http, "POST", f"{ns}/messageTTL", 3600) == (204, None)
    assert await call(http, "POST", f"{a.url}/admin/v2/clusters/west", {}) == (404, {"reason": "Cluster west does not exist"})
    assert await call(http, "PUT", f"{a.url}/admin/v2/clusters/west", {}) == (204, None)
    status, _ = await call(http, "POST", f"{ns}/replication", ["c", "west"])
    assert status == 403  # west is not allowed for tenant t
    await call(http, "POST", f"{a.url}/admin/v2/tenants/t", {"allowedClusters": ["c", "west"]})
    assert await call(http, "POST", f"{ns}/replication", ["c", "west"]) == (204, None)
    before = (await call(http, "GET", ns))[1]
    assert before["deduplicationEnabled"] is True and before["message_ttl_in_seconds"] == 3600
    assert before["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert before["replication_clusters"] == ["c", "west"]

    bad_calls = [
        ("deduplication", "true"), ("deduplication", 1), ("deduplication", None),
        ("retention", {"retentionTimeInMinutes": "60", "retentionSizeInMB": 1}),
        ("retention", {"retentionTimeInMinutes": 1}), ("retention", {"retentionTimeInMinutes": 1.5, "retentionSizeInMB": 1}),
        ("retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}), ("retention", [1, 2]),
        ("messageTTL", "60"), ("messageTTL", True), ("messageTTL", -1), ("messageTTL", 1.0),
        ("replication", "c"), ("replication", [1]), ("replication", ["c", "c"]),
    ]
    for path, body in bad_calls:
        status, answer = await call(http, "POST", f"{ns}/{path}", body)
        assert status == 400 and answer["reason"], (path, body, status, answer)
    for path, raw in (("messageTTL", b"{not json"), ("messageTTL", b"NaN"), ("deduplication", b"")):
        status, answer = await call(http, "POST", f"{ns}/{path}", raw=raw)
        assert status == 400 and answer["reason"], (path, raw)
    status, answer = await call(http, "POST", f"{ns}/replication", ["mars"])
    assert status == 412 and "mars" in answer["reason"]
    status, answer = await call(http, "POST", f"{ns}/messageTTL", raw=b"1" * 5000)
    assert status == 413
    assert (await call(http, "GET", ns))[1] == before  # nothing changed

    assert await call(http, "GET", f"{ns}/deduplication") == (200, True)
    assert await call(http, "GET", f"{ns}/messageTTL") == (200, 3600)
    assert await call(http, "GET", f"{ns}/replication") == (200, ["c", "west"])
    assert await call(http, "DELETE", f"{ns}/messageTTL") == (204, None)
    assert await call(http, "GET", f"{ns}/messageTTL") == (200, None)

    missing = f"{a.url}/admin/v2/namespaces/t/nope"
    for method, path, body in (("GET", "", None), ("POST", "/deduplication", True), ("GET", "/retention", None),
                               ("POST", "/messageTTL", 5), ("DELETE", "", None)):
        status, answer = await call(http, method, missing + path, body)
        assert status == 404 and "does not exist" in answer["reason"], (method, path)
    assert (await call(http, "PUT", f"{a.url}/admin/v2/namespaces/nobody/ns"))[0] == 404
    assert (await call(http, "PUT", ns))[0] == 409
    status, answer = await call(http, "PUT", f"{a.url}/admin/v2/namespaces/t/small", {"bundles": {"numBundles": 0}})
    assert status == 400
    assert await call(http, "PUT", f"{a.url}/admin/v2/namespaces/t/small", {"bundles": {"numBundles": 2}}) == (204, None)
    assert (await call(http, "GET", f"{a.url}/admin/v2/namespaces/t/small/bundles"))[1]["numBundles"] == 2


async def test_unknown_routes_and_methods_answer_json(nodes, http) -> None:
    a, _ = nodes
    status, body = await call(http, "GET", f"{a.url}/admin/v2/nothing/here")
    assert status == 404 and "no such API" in body["reason"]
    status, body = await call(http, "PATCH", f"{a.url}/admin/v2/clusters")
    assert status == 405 and body["reason"]


async def test_topics_subscriptions_and_owner_redirects(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    topic = "persistent://t/ns/orders"
    path = "/admin/v2/persistent/t/ns/orders"
    # ask at the broker that will not own it: the bundle goes to b by a 307, then the call runs there
    owner = b if (await a.ownership.lookup(topic)).redirect else a
    other = a if owner is b else b
    status, location = await call(http, "PUT", other.url + path, follow=False)
    assert status == 307 and location.startswith(owner.url + path)
    assert await call(http, "PUT", other.url + path) == (204, None)  # followed
    assert topic in owner.service.loaded and topic not in other.service.loaded
    assert (await call(http, "PUT", other.url + path))[0] == 409
    assert await call(http, "GET", f"{other.url}/admin/v2/persistent/t/ns") == (200, [topic])
    status, stats = await call(http, "GET", f"{other.url}{path}/stats")
    assert status == 200 and stats["msgInCounter"] == 10
    assert (await call(http, "GET", f"{other.url}{path}/internalStats"))[1]["entriesAddedCounter"] == 10
    assert await call(http, "GET", f"{other.url}{path}/partitions") == (200, {"partitions": 0})

    sub = f"{other.url}{path}/subscription/audit"
    assert await call(http, "PUT", sub, {"ledgerId": -1, "entryId": -1}) == (204, None)
    assert owner.service.loaded[topic].subscriptions["audit"].position == "earliest"
    assert (await call(http, "PUT", sub))[0] == 409
    assert await call(http, "GET", f"{other.url}{path}/subscriptions") == (200, ["audit"])
    assert await call(http, "POST", f"{sub}/resetcursor/1700000000000") == (204, None)
    assert await call(http, "POST", f"{sub}/resetcursor", {"ledgerId": 3, "entryId": 4}) == (204, None)
    assert await call(http, "POST", f"{sub}/skip/5") == (204, None)
    assert await call(http, "POST", f"{sub}/expireMessages/60") == (204, None)
    assert owner.service.loaded[topic].calls == [("reset", "audit", None, 1700000000000),
                                                 ("reset", "audit", Position(3, 4), None),
                                                 ("skip", "audit", 5), ("expire", "audit", 60)]
    for method, suffix, body in (("POST", "/resetcursor", {"ledgerId": "3", "entryId": 4}),
                                 ("POST", "/resetcursor", {"entryId": 4}), ("POST", "/skip/-1", None),
                                 ("POST", "/skip/abc", None), ("PUT", "", {"ledgerId": True, "entryId": 0})):
        status, answer = await call(http, method, sub.replace("/audit", "/other") + suffix
                                    if method == "PUT" else sub + suffix, body)
        assert status == 400 and answer["reason"], (method, suffix)
    status, answer = await call(http, "POST", f"{other.url}{path}/subscription/nope/skip/1")
    assert status == 404 and "nope" in answer["reason"]
    assert await call(http, "DELETE", sub) == (204, None)
    assert (await call(http, "DELETE", sub))[0] == 404

    assert await call(http, "PUT", f"{other.url}{path}/unload") == (204, None)
    assert topic not in owner.service.loaded
    status, answer = await call(http, "GET", f"{other.url}/admin/v2/persistent/t/ns/ghost/stats")
    assert status == 404 and "not found" in answer["reason"]
    assert await call(http, "DELETE", other.url + path) == (204, None)
    assert (await call(http, "DELETE", other.url + path))[0] == 404
    assert (await call(http, "GET", f"{a.url}/admin/v2/persistent/t/nope/x/stats"))[0] == 404


async def test_partitioned_topics_fan_out_to_every_owner(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    base = f"{a.url}/admin/v2/persistent/t/ns/events"
    for bad in ("4", 0, 17, True, 2.5):
        assert (await call(http, "PUT", f"{base}/partitions", bad))[0] == 400, bad
    assert await call(http, "PUT", f"{base}/partitions", 4) == (204, None)
    assert (await call(http, "PUT", f"{base}/partitions", 4))[0] == 409
    assert (await call(http, "PUT", base))[0] == 409  # the name is taken by the partitioned topic
    assert await call(http, "GET", f"{base}/partitions") == (200, {"partitions": 4})
    assert await call(http, "GET", f"{a.url}/admin/v2/persistent/t/ns/partitioned") == (200, ["persistent://t/ns/events"])
    for i in range(4):
        assert await call(http, "PUT", f"{base}-partition-{i}/subscription/s") == (204, None)
    assert a.service.loaded and b.service.loaded  # the partitions landed on both brokers
    status, stats = await call(http, "GET", f"{base}/partitioned-stats")
    assert status == 200 and stats["msgInCounter"] == 40 and stats["storageSize"] == 400
    assert stats["metadata"] == {"partitions": 4} and len(stats["partitions"]) == 4
    assert stats["subscriptions"]["s"]["msgBacklog"] == 12 and len(stats["publishers"]) == 4
    assert await call(http, "GET", f"{base}/subscriptions") == (200, ["s"])
    status, answer = await call(http, "POST", f"{base}/partitions", 2)
    assert status == 409 and "greater" in answer["reason"]
    assert await call(http, "POST", f"{base}/partitions", 6) == (204, None)
    assert await call(http, "GET", f"{base}/partitions") == (200, {"partitions": 6})
    assert await call(http, "DELETE", f"{base}/partitions") == (204, None)
    assert not a.service.loaded and not b.service.loaded and not a.storage.paths
    assert await call(http, "GET", f"{base}/partitions") == (200, {"partitions": 0})
    assert (await call(http, "GET", f"{base}/partitioned-stats"))[0] == 404
    status, answer = await call(http, "DELETE", f"{a.url}/admin/v2/namespaces/t/ns")
    assert status == 204, answer


async def test_namespace_with_topics_is_not_deleted(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    assert await call(http, "PUT", f"{a.url}/admin/v2/persistent/t/ns/x") == (204, None)
    status, answer = await call(http, "DELETE", f"{a.url}/admin/v2/namespaces/t/ns")
    assert status == 409 and "persistent://t/ns/x" in answer["reason"]
    assert (await call(http, "GET", f"{a.url}/admin/v2/namespaces/t/ns"))[0] == 200


async def test_http_lookup_answers_owner_urls_and_redirects_assignments(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    topic = "persistent://t/ns/lk"
    chosen = b if (await a.ownership.lookup(topic)).redirect else a
    other = a if chosen is b else b
    url = f"{other.url}/lookup/v2/topic/persistent/t/ns/lk"
    if chosen is b:  # a sends the client to b, which acquires
        status, location = await call(http, "GET", url, follow=False)
        assert status == 307 and location == f"{b.url}/lookup/v2/topic/persistent/t/ns/lk?authoritative=true"
    status, data = await call(http, "GET", url)
    assert status == 200 and data == {"brokerUrl": f"pulsar://{chosen.name}:6650", "brokerUrlTls": "",
                                      "httpUrl": chosen.url, "httpUrlTls": "",
                                      "nativeUrl": f"pulsar://{chosen.name}:6650"}
    assert await call(http, "GET", f"{a.url}/lookup/v2/topic/persistent/t/ns/lk") == (200, data)
    bundle = (await call(http, "GET", f"{a.url}/lookup/v2/topic/persistent/t/ns/lk/bundle"))[1]
    assert bundle == (await chosen.ownership.bundle_of(topic)).name
    owned = await call(http, "GET", f"{other.url}/admin/v2/brokers/c/{chosen.name}/ownedNamespaces")
    assert owned == (200, {f"t/ns/{bundle}": {"broker_assignment": "shared", "is_controlled": False,
                                              "is_active": True}})
    status, answer = await call(http, "GET", f"{a.url}/lookup/v2/topic/persistent/t/nope/lk")
    assert status == 404 and "does not exist" in answer["reason"]
    assert (await call(http, "GET", f"{a.url}/lookup/v2/topic/persistent/t/ns/bad%20name"))[0] == 200
    # unload the bundle at whichever broker is asked: it runs at the owner
    assert await call(http, "PUT", f"{other.url}/admin/v2/namespaces/t/ns/{bundle}/unload") == (204, None)
    assert chosen.ownership.owned_bundles() == []
    assert (await call(http, "PUT", f"{a.url}/admin/v2/namespaces/t/ns/0x0_0x1/unload"))[0] == 404


async def test_brokers_bookies_metrics_and_health(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    status, brokers = await call(http, "GET", f"{a.url}/admin/v2/brokers/c")
    assert status == 200 and brokers == sorted(n.url.split("://")[1] for n in (a, b))
    assert (await call(http, "GET", f"{a.url}/admin/v2/brokers/mars"))[0] == 404
    assert await call(http, "GET", f"{a.url}/admin/v2/bookies/all") == (200, {"bookies": []})
    await call(http, "GET", f"{a.url}/lookup/v2/topic/persistent/t/ns/m?authoritative=true")
    async with http.get(f"{a.url}/metrics") as response:
        text = await response.text()
    assert response.status == 200
    assert "magnetar_broker_owned_bundles 1.0" in text and 'magnetar_broker_lookups_total{answer="connect"}' in text
    assert "magnetar_broker_http_requests_total" in text
    async with http.get(f"{a.url}/health") as response:
        assert response.status == 200 and (await response.text()).strip() == "ok"
    async with http.get(f"{a.url}/admin/v2/brokers/health") as response:
        assert response.status == 200 and await response.text() == "ok"


def test_app_builds_without_a_running_loop() -> None:
    store = MemoryMetadataStore()
    config = ConfigurationStore(store)
    ownership = BundleOwnership(local_store=store, configuration=config, broker_id="x", cluster="c")
    app = make_app(AdminContext(cluster="c", configuration=config, region=RegionStore(store),
                                brokers=ownership.registry, ownership=ownership))
    assert isinstance(app, web.Application)


async def test_http_lookup_waits_out_a_bundle_being_unloaded(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    topic = "persistent://t/ns/moving"
    await a.ownership.lookup(topic, authoritative=True)
    bundle = await a.ownership.bundle_of(topic)
    registry = a.ownership.registry
    current = await registry.get_owner("t", "ns", bundle.name)
    await registry.set_disabled("t", "ns", bundle.name, current.value, expected_version=current.version)
    url = f"{b.url}/lookup/v2/topic/persistent/t/ns/moving"
    b.server.app[CONTEXT].lookup_wait_s = 0.2
    status, answer = await call(http, "GET", url)
    assert status == 503 and "being unloaded" in answer["reason"]  # pulsar-client would give up: keep it rare
    b.server.app[CONTEXT].lookup_wait_s = 5.0

    async def finish_unload() -> None:
        await asyncio.sleep(0.3)
        await a.ownership.unload(bundle)

    finishing = asyncio.create_task(finish_unload())
    status, answer = await call(http, "GET", url)  # waits for the release, then gets a fresh owner
    await finishing
    assert status == 200 and answer["brokerUrl"] in ("pulsar://a:6650", "pulsar://b:6650")


async def test_namespace_unload_reaches_every_owner(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    for i in range(16):
        await call(http, "GET", f"{a.url}/lookup/v2/topic/persistent/t/ns/u-{i}")
    assert a.ownership.owned_bundles() and b.ownership.owned_bundles()
    assert await call(http, "PUT", f"{b.url}/admin/v2/namespaces/t/ns/unload") == (204, None)
    assert a.ownership.owned_bundles() == [] and b.ownership.owned_bundles() == []


async def place_partitions(http, urls: tuple[str, ...], namespace: str, topic: str, partitions: int) -> None:
    """Gives the bundles of the topic's partitions to the brokers at ``urls`` in turn (an authoritative lookup
    acquires an unowned bundle), so that the partitions have more than one owner."""
    lookup = f"/lookup/v2/topic/persistent/{namespace}"
    bundles = [(await call(http, "GET", f"{urls[0]}{lookup}/{topic}-partition-{i}/bundle"))[1]
               for i in range(partitions)]
    distinct = sorted(set(bundles))
    assert len(distinct) > 1, bundles
    for i, bundle in enumerate(bundles):
        url = urls[distinct.index(bundle) % len(urls)]
        assert (await call(http, "GET", f"{url}{lookup}/{topic}-partition-{i}?authoritative=true"))[0] == 200


async def test_subscription_calls_on_a_partitioned_topic_reach_every_partition(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    base = f"{b.url}/admin/v2/persistent/t/ns/events"
    assert await call(http, "PUT", f"{base}/partitions", 4) == (204, None)
    names = [f"persistent://t/ns/events-partition-{i}" for i in range(4)]
    await place_partitions(http, (a.url, b.url), "t/ns", "events", 4)

    def partitions() -> list[FakeTopic]:
        loaded = {**a.service.loaded, **b.service.loaded}
        return [loaded[n] for n in names]

    def calls() -> list[list[tuple]]:
        return [list(t.calls) for t in partitions()]

    sub = f"{base}/subscription/audit"
    assert await call(http, "PUT", sub, {"ledgerId": -1, "entryId": -1}) == (204, None)
    assert [t.subscriptions["audit"].position for t in partitions()] == ["earliest"] * 4
    assert a.service.loaded and b.service.loaded  # partitions of both owners were reached
    status, answer = await call(http, "PUT", sub)
    assert status == 409 and "every partition" in answer["reason"]
    assert await call(http, "GET", f"{base}/subscriptions") == (200, ["audit"])

    # refused or bad calls change nothing
    before = calls()
    for method, suffix, body, status, words in (
            ("POST", "/skip/1", None, 405, "Skip messages on a partitioned topic is not allowed"),
            ("POST", "/resetcursor", {"ledgerId": 1, "entryId": 2}, 405, "Reset-cursor at position is not allowed"),
            ("POST", "/resetcursor", {"ledgerId": "1", "entryId": 2}, 400, "ledgerId"),
            ("POST", "/resetcursor/soon", None, 400, "timestamp"),
            ("POST", "/expireMessages/-1", None, 400, "seconds")):
        got, answer = await call(http, method, sub + suffix, body)
        assert got == status and words in answer["reason"], (suffix, got, answer)
    for suffix in ("/skip_all", "/expireMessages/5", "/resetcursor/1"):
        got, answer = await call(http, "POST", f"{base}/subscription/nope{suffix}")
        assert got == 404 and answer["reason"] == "Subscription nope not found for topic persistent://t/ns/events"
    partitions()[2].subscriptions["solo"] = FakeSubscription(partitions()[2], "latest")
    got, answer = await call(http, "POST", f"{base}/subscription/solo/skip_all")
    assert got == 404 and "events-partition-0, events-partition-1, events-partition-3" in answer["reason"]
    assert calls() == before

    assert await call(http, "POST", f"{sub}/resetcursor/1700000000000") == (204, None)
    assert await call(http, "POST", f"{sub}/skip_all") == (204, None)
    assert await call(http, "POST", f"{sub}/expireMessages/60") == (204, None)
    assert calls() == [c + [("reset", "audit", None, 1700000000000), ("mark_delete", Position(7, 9)),
                            ("expire", "audit", 60)] for c in before]

    partitions()[1].subscriptions["audit"].consumers.append("c")
    got, answer = await call(http, "DELETE", sub)
    assert got == 412 and answer["reason"] == "Subscription has active connected consumers"
    assert all("audit" in t.subscriptions for t in partitions())
    assert await call(http, "DELETE", f"{sub}?force=true") == (204, None)
    assert not any("audit" in t.subscriptions for t in partitions())
    assert await call(http, "GET", f"{base}/subscriptions") == (200, ["solo"])
    assert (await call(http, "DELETE", sub))[0] == 404

    assert (await call(http, "POST", f"{base}/terminate"))[0] == 405
    status, ids = await call(http, "POST", f"{base}/terminate/partitions")
    assert status == 200 and ids == {str(i): {"ledgerId": 5, "entryId": len(names[i]), "partitionIndex": -1}
                                     for i in range(4)}
    status, answer = await call(http, "POST", f"{b.url}/admin/v2/persistent/t/ns/plain/terminate/partitions")
    assert status == 405 and "non-partitioned" in answer["reason"]
    assert (await call(http, "DELETE", f"{b.url}/admin/v2/persistent/t/ns/ghost/subscription/audit"))[0] == 404


def test_fan_out_judgement_follows_pulsars_rules() -> None:
    def answers(*statuses: int) -> list[PartitionAnswer]:
        return [PartitionAnswer(TopicName.parse(f"t/ns/x-partition-{i}"), s, {"reason": f"r{i}"})
                for i, s in enumerate(statuses)]

    assert judge(answers(204, 204)) is None
    assert judge(answers(204, 404, 412)).status == 404  # the first error decides
    assert judge(answers(404, 204), missing_ok=True) is None  # a partition not created yet
    assert judge(answers(409, 204), tolerated=409) is None  # done where it could be
    assert judge(answers(409, 409), tolerated=409).status == 409  # refused everywhere
    assert judge(answers(409, 500), tolerated=409).status == 500
    failed = judge(answers(204, 503))
    assert failed.error().status == 502 and failed.error().reason == "persistent://t/ns/x-partition-1: r1"
