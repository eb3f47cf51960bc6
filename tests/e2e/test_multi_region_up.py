"""`magnetar up clusters/local.toml`: two regions and the global ZooKeeper as real processes. Each region's
brokers register it in the global store with every broker's URL, both regions see both clusters, the admin
CLI sets namespace- and topic-level replication clusters, each region's proxy serves pulsar+ssl:// and https://
with the deployment's CA and tokens (and refuses clients without credentials or permission), brokers enforce
the same credentials when reached directly, and `magnetar down` leaves nothing running."""

from __future__ import annotations

import json
import pathlib
import ssl
import stat
import urllib.error
import urllib.request
from typing import Any

import pulsar
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


def get_json(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def https_status(url: str, ca_file: str, token: str = "") -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=ssl.create_default_context(cafile=ca_file)) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def proxy_metric(proxy: dict, ca_file: str, prefix: str) -> float:
    context = ssl.create_default_context(cafile=ca_file)
    with urllib.request.urlopen(proxy["metrics"], timeout=10, context=context) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.rpartition(" ")[2]) for line in lines if line.startswith(prefix))


def client(url: str, ca_file: str, token: str | None, timeout_s: int) -> pulsar.Client:
    return pulsar.Client(url, tls_trust_certs_file_path=ca_file, tls_validate_hostname=True,
                         authentication=pulsar.AuthenticationToken(token) if token else None,
                         operation_timeout_seconds=timeout_s, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def admin(url: str, *args: str) -> str:
    result = magnetar("admin", *args, "--url", url, timeout_s=60)
    assert result.returncode == 0, f"admin {args}: {result.stdout}\n{result.stderr}"
    return result.stdout


def admin_json(url: str, *args: str) -> Any:
    return json.loads(admin(url, *args, "--json"))


def test_two_regions_register_each_other_and_go_down_cleanly(local, monkeypatch) -> None:
    ddir, doc = local
    security = doc["security"]
    tokens = {role: pathlib.Path(r["token_file"]).read_text().strip() for role, r in security["roles"].items()}
    # The operator's credentials for `magnetar admin --url <a broker>` (brokers enforce authentication too).
    monkeypatch.setenv("MAGNETAR_AUTH_TOKEN_FILE", security["roles"]["admin"]["token_file"])

    # -- topology.json: the global ZooKeeper and both regions, complete -------------------------------
    assert doc["global_zookeeper"]["kind"] == "zookeeper" and doc["global_zookeeper"]["connect"]
    assert sorted(doc["regions"]) == sorted(REGIONS)
    for region in REGIONS:
        entry = doc["regions"][region]
        assert entry["zookeeper"]["connect"] != doc["global_zookeeper"]["connect"]
        assert len(entry["bookies"]) == 3 and len(entry["brokers"]) == 2
        assert entry["proxy"]["kind"] == "proxy" and entry["proxy"]["pulsar_ssl"].startswith("pulsar+ssl://")
    assert all(p["kind"] in ("zookeeper", "bookie", "broker", "proxy", "prometheus") for p in processes_of(doc))
    assert doc["prometheus"]["url"].startswith("http://127.0.0.1:")

    # -- each region registered itself with all its brokers; each region sees both ----------------------
    east, west = (doc["regions"][r]["brokers"][0]["http"] for r in REGIONS)
    for url in (east, west):
        wait_for(lambda: sorted(get_json(f"{url}/admin/v2/clusters", tokens["admin"])) == sorted(REGIONS), 30,
                 what=f"both clusters listed by {url}")
    for region in REGIONS:
        brokers = doc["regions"][region]["brokers"]
        data = get_json(f"{west}/admin/v2/clusters/{region}", tokens["admin"])
        assert data["serviceUrl"] == "http://" + ",".join(b["http"].removeprefix("http://") for b in brokers)
        assert data["brokerServiceUrl"] == "pulsar://" + ",".join(
            b["pulsar"].removeprefix("pulsar://") for b in brokers)
        # What other regions' replicators connect to: the region's proxy, as every client from outside.
        assert data["brokerServiceUrlTls"] == doc["regions"][region]["proxy"]["pulsar_ssl"]
        assert data["serviceUrlTls"] == doc["regions"][region]["proxy"]["https"]

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

    # -- the proxies: TLS, the deployment's CA and tokens; no credentials or no permission, no data --------
    ca = security["ca_file"]
    for private in [security["token_secret_key_file"], security["server_key_file"],
                    *(r["token_file"] for r in security["roles"].values())]:
        assert stat.S_IMODE(pathlib.Path(private).stat().st_mode) == 0o600, private
    status = magnetar("status", "--data-dir", str(ddir.root), timeout_s=60)
    assert status.returncode == 0, status.stdout + status.stderr
    for region in REGIONS:
        proxy = doc["regions"][region]["proxy"]
        assert f"{region}-proxy" in status.stdout and proxy["pulsar_ssl"] in status.stdout
        clusters_url = proxy["https"] + "/admin/v2/clusters"
        assert https_status(clusters_url, ca)[0] == 401  # the admin API through the proxy needs credentials
        assert https_status(clusters_url, ca, tokens["demo-app"])[0] == 200  # authenticated, forwarded
        code, listed = https_status(clusters_url, ca, tokens["admin"])
        assert code == 200 and sorted(listed) == sorted(REGIONS)

        topic = f"persistent://acme/geo/proxied-{region}"
        unauthenticated = proxy_metric(proxy, ca, 'magnetar_proxy_auth_failures_total{reason="no_credentials"}')
        nobody = client(proxy["pulsar_ssl"], ca, None, timeout_s=3)
        with pytest.raises(pulsar.Timeout):  # refused at CONNECT; pulsar-client retries until its timeout
            nobody.create_producer(topic)
        nobody.close()
        assert proxy_metric(proxy, ca, 'magnetar_proxy_auth_failures_total{reason="no_credentials"}') > unauthenticated
        refused = proxy_metric(proxy, ca, "magnetar_proxy_authorization_failures_total")
        app = client(proxy["pulsar_ssl"], ca, tokens["demo-app"], timeout_s=10)  # valid, but no grant yet
        with pytest.raises(pulsar.AuthorizationError):
            app.create_producer(topic)
        app.close()
        assert proxy_metric(proxy, ca, "magnetar_proxy_authorization_failures_total") > refused
        assert f"proxied-{region}" not in admin(east, "topics", "list", "acme/geo")  # nothing created

    # Brokers reached directly enforce the same: no credentials, no data (and no admin API).
    broker = doc["regions"]["us-east"]["brokers"][0]
    with pytest.raises(urllib.error.HTTPError) as refused_http:
        urllib.request.urlopen(broker["http"] + "/admin/v2/clusters", timeout=10)
    assert refused_http.value.code == 401
    direct = pulsar.Client(broker["pulsar"], operation_timeout_seconds=3,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    with pytest.raises(pulsar.PulsarException):
        direct.create_producer("persistent://acme/geo/direct")
    direct.close()

    admin(east, "namespaces", "grant-permission", "acme/geo", "--role", "demo-app", "--actions", "produce,consume")
    east_proxy = doc["regions"]["us-east"]["proxy"]
    app = client(east_proxy["pulsar_ssl"], ca, tokens["demo-app"], timeout_s=10)
    try:
        producer = wait_for(lambda: app.create_producer("persistent://acme/geo/proxied"), 30,
                            what="the grant reaches the us-east proxy", interval_s=0.2)
        producer.send(b"through the proxy")
        reader = app.create_reader("persistent://acme/geo/proxied", pulsar.MessageId.earliest)
        assert reader.read_next(10_000).data() == b"through the proxy"
    finally:
        app.close()

    # -- down: every process and port of both regions and the global ZooKeeper is gone -----------------
    result = magnetar("down", "--data-dir", str(ddir.root), timeout_s=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_all_gone(ddir)
