"""`magnetar up clusters/local.toml`: two regions and the global ZooKeeper as real processes. Each region's
brokers register it in the global store with every broker's URL, both regions see both clusters, the admin
CLI sets namespace- and topic-level replication clusters, and `magnetar down` leaves nothing running."""

from __future__ import annotations

import json
import pathlib
import urllib.request
from typing import Any

import pytest

from tests.e2e.test_supervisor import assert_all_gone, magnetar, processes_of, running
from tests.kit.wait import wait_for

LOCAL = pathlib.Path(__file__).resolve().parents[2] / "clusters" / "local.toml"
REGIONS = ("us-east", "eu-west")

pytestmark = pytest.mark.timeout(420)


@pytest.fixture
def local(tmp_path: pathlib.Path):
    """The running two-region deployment: (DataDir, its topology.json); killed whatever the test did."""
    with running(LOCAL, tmp_path, down_timeout_s=90) as deployment:
        yield deployment


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def admin(url: str, *args: str) -> str:
    result = magnetar("admin", *args, "--url", url, timeout_s=60)
    assert result.returncode == 0, f"admin {args}: {result.stdout}\n{result.stderr}"
    return result.stdout


def admin_json(url: str, *args: str) -> Any:
    return json.loads(admin(url, *args, "--json"))


def test_two_regions_register_each_other_and_go_down_cleanly(local) -> None:
    ddir, doc = local

    # -- topology.json: the global ZooKeeper and both regions, complete -------------------------------
    assert doc["global_zookeeper"]["kind"] == "zookeeper" and doc["global_zookeeper"]["connect"]
    assert sorted(doc["regions"]) == sorted(REGIONS)
    for region in REGIONS:
        entry = doc["regions"][region]
        assert entry["zookeeper"]["connect"] != doc["global_zookeeper"]["connect"]
        assert len(entry["bookies"]) == 3 and len(entry["brokers"]) == 2
        assert entry["proxy"]["kind"] == "proxy" and entry["proxy"]["pulsar_ssl"].startswith("pulsar+ssl://")
    assert all(p["kind"] in ("zookeeper", "bookie", "broker", "proxy") for p in processes_of(doc))

    # -- each region registered itself with all its brokers; each region sees both ----------------------
    east, west = (doc["regions"][r]["brokers"][0]["http"] for r in REGIONS)
    for url in (east, west):
        wait_for(lambda: sorted(get_json(f"{url}/admin/v2/clusters")) == sorted(REGIONS), 30,
                 what=f"both clusters listed by {url}")
    for region in REGIONS:
        brokers = doc["regions"][region]["brokers"]
        data = get_json(f"{west}/admin/v2/clusters/{region}")
        assert data["serviceUrl"] == "http://" + ",".join(b["http"].removeprefix("http://") for b in brokers)
        assert data["brokerServiceUrl"] == "pulsar://" + ",".join(
            b["pulsar"].removeprefix("pulsar://") for b in brokers)

    # -- the admin CLI: replicate a namespace, override one topic, manage a cluster entry ---------------
    admin(east, "tenants", "create", "acme", "--allowed-clusters", "us-east,eu-west")
    admin(east, "namespaces", "create", "acme/geo")
    assert admin_json(west, "namespaces", "get-clusters", "acme/geo") == ["us-east"]
    admin(east, "namespaces", "set-clusters", "acme/geo", "--clusters", "us-east,eu-west")
    assert admin_json(west, "namespaces", "get-clusters", "acme/geo") == ["us-east", "eu-west"]
    topic = "persistent://acme/geo/orders"
    assert admin_json(west, "topics", "get-replication-clusters", topic) is None
    admin(west, "topics", "set-replication-clusters", topic, "--clusters", "eu-west")
    assert admin_json(east, "topics", "get-replication-clusters", topic) == ["eu-west"]
    assert "eu-west" in admin(east, "topics", "get-replication-clusters", topic)  # the table
    admin(east, "topics", "remove-replication-clusters", topic)
    assert admin_json(west, "topics", "get-replication-clusters", topic, "--applied") == ["us-east", "eu-west"]
    refused = magnetar("admin", "namespaces", "set-clusters", "acme/geo", "--clusters", "us-east,mars",
                       "--url", east, timeout_s=60)
    assert refused.returncode == 1 and "mars" in refused.stderr
    assert admin_json(east, "namespaces", "get-clusters", "acme/geo") == ["us-east", "eu-west"]  # unchanged

    admin(east, "clusters", "create", "spare", "--service-url", "http://spare:8080")
    admin(west, "clusters", "update", "spare", "--broker-service-url", "pulsar://spare-1:6650,spare-2:6650")
    assert admin_json(east, "clusters", "get", "spare")["brokerServiceUrl"] == "pulsar://spare-1:6650,spare-2:6650"
    admin(west, "clusters", "delete", "spare")
    assert sorted(admin_json(east, "clusters", "list")) == sorted(REGIONS)

    # -- down: every process and port of both regions and the global ZooKeeper is gone -----------------
    result = magnetar("down", "--data-dir", str(ddir.root), timeout_s=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_all_gone(ddir)
