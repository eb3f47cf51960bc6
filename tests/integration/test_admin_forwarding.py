"""The admin API of two real brokers on real ZooKeeper and bookies: topic calls made at either broker run at
the owner (307 followed by `magnetar admin` and by aiohttp alike), partition fan-out, and bad input that
leaves the metadata exactly as it was."""

from __future__ import annotations

import json
import subprocess

import aiohttp
import pytest
from kazoo.client import KazooClient

from tests.kit.brokers import start_brokers
from tests.kit.process import python_command

pytestmark = pytest.mark.timeout(240)


def admin_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(python_command("admin", *args, "--url", url), capture_output=True, text=True, timeout=60)


def snapshot(zk: KazooClient, root: str = "/admin") -> dict[str, bytes]:
    """Every node under ``root`` with its data (and version) — to prove nothing changed."""
    found = {}
    stack = [root]
    while stack:
        path = stack.pop()
        data, stat = zk.get(path)
        found[path] = (data, stat.version)
        stack.extend(f"{path}/{child}" for child in zk.get_children(path))
    return found


async def test_topic_admin_runs_at_the_owner_whichever_broker_is_asked(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    a, b = start_brokers(2, tmp_path, zk_connect)
    names = [f"adm-{i}" for i in range(8)]
    for i, name in enumerate(names):  # half asked at each broker; `magnetar admin` follows the 307s
        result = admin_cli((a, b)[i % 2].http_url, "topics", "create", name)
        assert result.returncode == 0, result.stderr
    async with aiohttp.ClientSession() as http:
        owners = {}
        for name in names:
            async with http.get(f"{a.http_url}/lookup/v2/topic/persistent/public/default/{name}") as r:
                owners[name] = (await r.json())["httpUrl"]
        assert set(owners.values()) == {a.http_url, b.http_url}
        for name in names:
            other = a.http_url if owners[name] == b.http_url else b.http_url
            path = f"/admin/v2/persistent/public/default/{name}"
            async with http.put(f"{other}{path}/subscription/s", json={"ledgerId": -1, "entryId": -1},
                                allow_redirects=False) as r:
                assert r.status == 307 and r.headers["Location"].startswith(owners[name] + path)
            async with http.put(f"{other}{path}/subscription/s", json={"ledgerId": -1, "entryId": -1}) as r:
                assert r.status == 204, await r.text()
            async with http.get(f"{other}{path}/stats") as r:
                stats = await r.json()
                assert r.status == 200 and list(stats["subscriptions"]) == ["s"]
            async with http.post(f"{other}{path}/subscription/s/skip/1") as r:
                assert r.status == 204
            async with http.delete(f"{other}{path}/subscription/s") as r:
                assert r.status == 204
        async with http.put(f"{a.http_url}/admin/v2/persistent/public/default/multi/partitions", json=4) as r:
            assert r.status == 204
        for i in range(4):
            async with http.put(f"{b.http_url}/admin/v2/persistent/public/default/multi-partition-{i}") as r:
                assert r.status == 204
        async with http.get(f"{b.http_url}/admin/v2/persistent/public/default/multi/partitioned-stats") as r:
            stats = await r.json()
            assert r.status == 200 and len(stats["partitions"]) == 4 and stats["metadata"] == {"partitions": 4}
        async with http.get(f"{b.http_url}/admin/v2/persistent/public/default") as r:
            listed = await r.json()
        assert sorted(listed) == sorted([f"persistent://public/default/{n}" for n in names]
                                        + [f"persistent://public/default/multi-partition-{i}" for i in range(4)])
        async with http.delete(f"{a.http_url}/admin/v2/persistent/public/default/multi/partitions") as r:
            assert r.status == 204, await r.text()
        for name in names:
            result = admin_cli(b.http_url, "topics", "delete", name)
            assert result.returncode == 0, result.stderr
        async with http.get(f"{a.http_url}/admin/v2/persistent/public/default") as r:
            assert await r.json() == []


async def test_bad_input_changes_nothing_in_zookeeper(tmp_path, zk_connect) -> None:
    (a,) = start_brokers(1, tmp_path, zk_connect)
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        before = snapshot(zk)
        ns = f"{a.http_url}/admin/v2/namespaces/public/default"
        bad = [
            ("POST", f"{ns}/messageTTL", b'"60"', 400), ("POST", f"{ns}/messageTTL", b"true", 400),
            ("POST", f"{ns}/deduplication", b"1", 400), ("POST", f"{ns}/retention", b'{"retentionTimeInMinutes": 1}', 400),
            ("POST", f"{ns}/replication", b'["nowhere"]', 412), ("POST", f"{ns}/replication", b"{", 400),
            ("PUT", f"{a.http_url}/admin/v2/tenants/x", b'{"allowedClusters": "test"}', 400),
            ("PUT", f"{a.http_url}/admin/v2/tenants/public", b"{}", 409),
            ("PUT", f"{a.http_url}/admin/v2/namespaces/nobody/ns", b"", 404),
            ("PUT", f"{a.http_url}/admin/v2/clusters/x", b'{"serviceUrl": 1}', 400),
            ("PUT", f"{a.http_url}/admin/v2/persistent/public/default/p/partitions", b"0", 400),
            ("PUT", f"{a.http_url}/admin/v2/persistent/public/default/p/partitions", b"1e3", 400),
            ("DELETE", f"{a.http_url}/admin/v2/tenants/public", b"", 409),
            ("DELETE", f"{a.http_url}/admin/v2/namespaces/public/nope", b"", 404),
        ]
        async with aiohttp.ClientSession() as http:
            for method, url, body, status in bad:
                async with http.request(method, url, data=body, headers={"Content-Type": "application/json"}) as r:
                    answer = await r.json()
                    assert r.status == status and answer["reason"], (method, url, body, r.status, answer)
        assert snapshot(zk) == before
        assert json.loads(zk.get("/admin/policies/public/default")[0])["message_ttl_in_seconds"] is None
    finally:
        zk.stop()
        zk.close()
