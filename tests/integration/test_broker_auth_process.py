"""Broker processes with authentication, authorization and TLS on (real ZooKeeper, real ``magnetar broker``
processes; real bookies where messages are stored):

* the admin REST API answers 401 without or with bad credentials, 403 to a role without the right (tenants and
  clusters: superusers; a tenant's namespaces: its admins), 200 to the right role, by token over HTTP and by
  client certificate over HTTPS; ``magnetar admin`` passes a token (``--auth-token`` or the environment);
  refusals are counted in ``/metrics`` by reason;
* HTTP lookups need a lookup right and answer the owner's TLS URLs;
* the brokers register their TLS URLs (``/brokers/<id>``, the bootstrapped cluster entry), and a broker's own
  calls to other brokers (a fan-out over a partitioned topic's partitions) carry its ``broker_client_*`` token;
* pulsar-client over ``pulsar+ssl://`` with ``tls_validate_hostname=True`` produces and consumes on topics owned
  by either broker (lookups hand out the owner's ``pulsar+ssl://`` URL).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any, Optional

import pulsar
import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from magnetar import net
from magnetar.admin_cli import admin_app
from magnetar.auth import certs, tokens
from tests.kit.broker_thread import make_client
from tests.kit.brokers import BrokerHandle
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    certs.write_ca(directory)
    certs.write_server_certificate(directory, hostnames=["localhost"], ips=["127.0.0.1"])
    certs.write_client_certificate(directory, role="admin")
    certs.write_client_certificate(directory, role="app")
    other = tmp_path_factory.mktemp("other-ca")
    certs.write_ca(other)
    certs.write_client_certificate(other, role="admin")
    return directory, other


@pytest.fixture(scope="module")
def secret() -> bytes:
    return tokens.create_secret_key()


def token(secret: bytes, role: str) -> str:
    return tokens.create_token(role, key=secret, algorithm="HS256", expires_s=3600)


def start_secure_brokers(n: int, tmp_path, zk_connect: str, pki, secret: bytes) -> list[BrokerHandle]:
    directory, _ = pki
    settings: dict[str, Any] = {
        "authentication_enabled": True, "authentication_providers": ["tls", "token"], "authorization_enabled": True,
        "superuser_roles": ["admin", "broker"], "proxy_roles": ["proxy"],
        "token_secret_key": "data:;base64," + base64.b64encode(secret).decode(),
        "tls_cert_file": str(directory / "server.cert.pem"), "tls_key_file": str(directory / "server.key.pem"),
        "tls_trust_certs_file": str(directory / "ca.cert.pem"),
        "broker_client_auth_method": "token", "broker_client_auth_params": "token:" + token(secret, "broker"),
        "broker_client_trust_certs_file": str(directory / "ca.cert.pem"),
    }
    base = tmp_path / "brokers"
    brokers = [BrokerHandle(f"broker-{i}", base, zk_connect, tls_port=net.free_port(), web_tls_port=net.free_port(),
                            **settings) for i in range(1, n + 1)]
    for b in brokers:
        b.start(wait=False)
    for b in brokers:
        b.wait_healthy(timeout_s=60)
    return brokers


def https_url(broker: BrokerHandle) -> str:
    return f"https://localhost:{broker.settings['web_tls_port']}"


def call(method: str, url: str, *, bearer: Optional[str] = None, body: Any = None,
         context: Optional[ssl.SSLContext] = None) -> tuple[int, Any]:
    """(status, JSON answer) of one request, following 307s with the same credentials."""
    data = None if body is None else json.dumps(body).encode()
    for _ in range(5):
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        if bearer:
            request.add_header("Authorization", f"Bearer {bearer}")
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
            if status == 307:
                url = e.headers["Location"]
                continue
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text
    raise AssertionError(f"{method} {url}: too many redirects")


def client_context(pki, role_dir, role: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki[0] / "ca.cert.pem"))
    context.load_cert_chain(str(role_dir / f"{role}.cert.pem"), str(role_dir / f"{role}.key.pem"))
    return context


def metric(broker: BrokerHandle, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


def test_admin_rest_authenticates_and_authorizes_by_role(tmp_path, zk_connect, pki, secret) -> None:
    a, b = start_secure_brokers(2, tmp_path, zk_connect, pki, secret)
    admin, app = token(secret, "admin"), token(secret, "app")
    tenants = f"{a.http_url}/admin/v2/tenants"

    status, answer = call("GET", tenants)
    assert status == 401 and "authentication required" in answer["reason"]
    status, answer = call("GET", tenants, bearer=token(tokens.create_secret_key(), "admin"))
    assert status == 401 and "another key" in answer["reason"]
    status, answer = call("GET", tenants, bearer=app)
    assert status == 403 and "superuser" in answer["reason"]
    assert call("GET", tenants, bearer=admin) == (200, ["public"])
    assert metric(a, "magnetar_broker_auth_failures_total", reason="no_credentials") >= 1
    assert metric(a, "magnetar_broker_auth_failures_total", reason="bad_signature") >= 1
    assert metric(a, "magnetar_broker_authorization_denials_total", action="superuser") >= 1

    # superusers create tenants and clusters; a tenant's admin runs its namespaces, and nothing else
    assert call("PUT", f"{b.http_url}/admin/v2/tenants/acme", bearer=app,
                body={"adminRoles": ["acme-admin"], "allowedClusters": ["test"]})[0] == 403
    assert call("PUT", f"{b.http_url}/admin/v2/tenants/acme", bearer=admin,
                body={"adminRoles": ["acme-admin"], "allowedClusters": ["test"]})[0] == 204
    acme_admin = token(secret, "acme-admin")
    assert call("PUT", f"{a.http_url}/admin/v2/namespaces/acme/orders", bearer=acme_admin)[0] == 204
    assert call("POST", f"{a.http_url}/admin/v2/namespaces/acme/orders/permissions/app", bearer=acme_admin,
                body=["produce"])[0] == 204
    assert call("GET", f"{b.http_url}/admin/v2/namespaces/acme/orders/permissions", bearer=acme_admin) == \
        (200, {"app": ["produce"]})
    assert call("GET", f"{b.http_url}/admin/v2/namespaces/acme/orders/permissions", bearer=app)[0] == 403
    assert call("PUT", f"{a.http_url}/admin/v2/namespaces/public/other", bearer=acme_admin)[0] == 403
    assert call("PUT", f"{a.http_url}/admin/v2/clusters/elsewhere", bearer=acme_admin,
                body={"serviceUrl": "http://x:1"})[0] == 403
    assert call("GET", f"{a.http_url}/admin/v2/clusters", bearer=app) == (200, ["test"])  # listing: any role

    # /health and /metrics stay open (probes and scrapers)
    assert call("GET", f"{a.http_url}/health")[0] == 200

    # HTTPS: the client certificate is the credential; another CA's fails the handshake
    context = client_context(pki, pki[0], "admin")
    assert call("GET", f"{https_url(a)}/admin/v2/tenants", context=context)[1] == ["acme", "public"]
    assert call("GET", f"{https_url(a)}/admin/v2/tenants", context=client_context(pki, pki[0], "app"))[0] == 403
    with pytest.raises(OSError):  # urllib's URLError, or the TLS alert itself when read
        call("GET", f"{https_url(a)}/admin/v2/tenants", context=client_context(pki, pki[1], "admin"))

    # a broker's own calls to other brokers carry its broker_client token (the role "broker", a superuser)
    partitioned = f"{a.http_url}/admin/v2/persistent/acme/orders/fanned-{uuid.uuid4().hex[:6]}/partitions"
    assert call("PUT", partitioned, bearer=acme_admin, body=4)[0] == 204
    status, answer = call("DELETE", partitioned, bearer=acme_admin)
    assert status == 204, answer  # one DELETE per partition, at each partition's owner, through a's own URL


def test_http_lookups_need_a_lookup_right_and_answer_tls_urls(tmp_path, zk_connect, pki, secret) -> None:
    (a,) = start_secure_brokers(1, tmp_path, zk_connect, pki, secret)
    admin, app = token(secret, "admin"), token(secret, "app")
    assert call("POST", f"{a.http_url}/admin/v2/namespaces/public/default/permissions/app", bearer=admin,
                body=["consume"])[0] == 204
    lookup = f"{a.http_url}/lookup/v2/topic/persistent/public/default/looked-up"
    assert call("GET", lookup)[0] == 401
    assert call("GET", lookup, bearer=token(secret, "nobody"))[0] == 403
    status, answer = wait_for(lambda: (r := call("GET", lookup, bearer=app))[0] == 200 and r, 10,
                              what="the grant reaches the broker")
    tls_port, web_tls_port = a.settings["tls_port"], a.settings["web_tls_port"]
    assert answer["brokerUrlTls"] == f"pulsar+ssl://127.0.0.1:{tls_port}"
    assert answer["httpUrlTls"] == f"https://127.0.0.1:{web_tls_port}"
    assert call("GET", f"{a.http_url}/admin/v2/persistent/public/default/looked-up/partitions", bearer=app) == \
        (200, {"partitions": 0})

    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=30)
    try:
        registration = json.loads(zk.get(f"/brokers/{a.broker_id}")[0])
        cluster = json.loads(zk.get("/admin/clusters/test")[0])
    finally:
        zk.stop()
        zk.close()
    assert registration["pulsarServiceUrlTls"] == f"pulsar+ssl://127.0.0.1:{tls_port}"
    assert registration["webServiceUrlTls"] == f"https://127.0.0.1:{web_tls_port}"
    assert cluster["brokerServiceUrlTls"] == f"pulsar+ssl://127.0.0.1:{tls_port}"
    assert cluster["serviceUrlTls"] == f"https://127.0.0.1:{web_tls_port}"
    assert a.endpoints()["pulsar_tls"] == f"pulsar+ssl://127.0.0.1:{tls_port}"


def test_admin_cli_passes_a_token(tmp_path, zk_connect, pki, secret) -> None:
    (a,) = start_secure_brokers(1, tmp_path, zk_connect, pki, secret)
    runner = CliRunner()
    refused = runner.invoke(admin_app, ["tenants", "list", "--url", a.http_url, "--json"], env={})
    assert refused.exit_code == 1 and "401" in refused.output
    allowed = runner.invoke(admin_app, ["--auth-token", token(secret, "admin"), "tenants", "list", "--url",
                                        a.http_url, "--json"])
    assert allowed.exit_code == 0, allowed.output
    assert json.loads(allowed.output) == ["public"]
    by_env = runner.invoke(admin_app, ["namespaces", "grant-permission", "public/default", "--role", "app",
                                       "--actions", "produce", "--url", a.http_url],
                           env={"MAGNETAR_AUTH_TOKEN": token(secret, "admin")})
    assert by_env.exit_code == 0, by_env.output
    over_https = runner.invoke(admin_app, ["--tls-trust-certs-file", str(pki[0] / "ca.cert.pem"),
                                           "--tls-cert-file", str(pki[0] / "admin.cert.pem"),
                                           "--tls-key-file", str(pki[0] / "admin.key.pem"),
                                           "namespaces", "permissions", "public/default", "--json",
                                           "--url", https_url(a)], env={})
    assert over_https.exit_code == 0, over_https.output
    assert json.loads(over_https.output) == {"app": ["produce"]}


def test_pulsar_client_over_tls_reaches_topics_on_either_broker(tmp_path, zk_connect, bookie_factory, pki,
                                                                secret) -> None:
    bookie_factory(2)
    a, b = start_secure_brokers(2, tmp_path, zk_connect, pki, secret)
    assert call("POST", f"{a.http_url}/admin/v2/namespaces/public/default/permissions/app",
                bearer=token(secret, "admin"), body=["produce", "consume"])[0] == 204
    client = make_client(f"pulsar+ssl://localhost:{a.settings['tls_port']}",
                         authentication=pulsar.AuthenticationTLS(str(pki[0] / "app.cert.pem"),
                                                                 str(pki[0] / "app.key.pem")),
                         tls_trust_certs_file_path=str(pki[0] / "ca.cert.pem"), tls_validate_hostname=True,
                         operation_timeout_seconds=30)
    owners = set()
    try:
        for i in range(12):  # until topics of both brokers were reached (bundles go to the least loaded)
            if len(owners) == 2 and i >= 4:
                break
            topic = f"persistent://public/default/tls-{i}-{uuid.uuid4().hex[:6]}"
            producer = wait_for(lambda: client.create_producer(topic), 20, what="the grant reaches the brokers")
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            producer.send(f"hello {i}".encode())
            msg = consumer.receive(10_000)
            assert msg.data() == f"hello {i}".encode()
            consumer.acknowledge(msg)
            status, answer = call("GET", f"{a.http_url}/lookup/v2/topic/{topic.replace('://', '/')}",
                                  bearer=token(secret, "admin"))
            assert status == 200 and answer["brokerUrlTls"].startswith("pulsar+ssl://127.0.0.1:")
            owners.add(answer["brokerUrlTls"])
    finally:
        client.close()
    assert owners == {f"pulsar+ssl://127.0.0.1:{x.settings['tls_port']}" for x in (a, b)}
