"""Authentication and authorization at the proxy, with real processes and the real pulsar-client over
``pulsar+ssl://``: tokens and client certificates give roles; bad credentials are refused with a clear error,
counted by reason, and store nothing; the broker is told who the client is (``original_principal``), under the
proxy's own credentials; lookups are authorized against the namespace permissions, effective without a restart;
expiring tokens are refreshed on a live connection, or the connection is closed."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import ssl
import time

import aiohttp
import pulsar
import pytest
from kazoo.client import KazooClient

from config_store.brokers import BrokerRegistration
from magnetar.auth import tokens
from magnetar.net import free_port
from magnetar.protocol import FrameDecoder, encode_command, pb, wrap
from magnetar.protocol.client import Auth, Connection, ServerError
from tests.kit.brokers import start_brokers
from tests.kit.certs import TestCa
from tests.kit.proxies import start_proxy
from tests.kit.regions import http_json
from tests.kit.wait import wait_for, wait_for_async

pytestmark = pytest.mark.timeout(300)

AUDIENCE = "magnetar-test"


class Keys:
    """A token signing key, as the proxy's settings name it, and tokens signed with it."""

    def __init__(self) -> None:
        self.secret = tokens.create_secret_key()
        self.setting = "data:;base64," + base64.b64encode(self.secret).decode()

    def token(self, role: str, *, expires_s: float | None = None, audience: str | None = AUDIENCE) -> str:
        return tokens.create_token(role, key=self.secret, algorithm="HS256", expires_s=expires_s, audience=audience)


def secured_proxy(tmp_path, zk_connect, ca: TestCa, keys: Keys, **overrides):
    settings = {"authentication_enabled": True, "authentication_providers": ["tls", "token"],
                "token_secret_key": keys.setting, "token_audience": AUDIENCE, **overrides}
    return start_proxy(tmp_path, zk_connect, ca, **settings)


def client_for(proxy, ca: TestCa, authentication=None, **kwargs) -> pulsar.Client:
    return pulsar.Client(proxy.pulsar_ssl_url, authentication=authentication, tls_trust_certs_file_path=str(ca.ca_file),
                         tls_validate_hostname=True, operation_timeout_seconds=kwargs.pop("timeout_s", 15), **kwargs)


def tls_auth(files) -> pulsar.AuthenticationTLS:
    return pulsar.AuthenticationTLS(str(files.cert), str(files.key))


def produce_one(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"hello")
    producer.close()


def topics_of(broker, namespace: str = "public/default") -> list[str]:
    return http_json("GET", f"{broker.http_url}/admin/v2/persistent/{namespace}")


def test_tokens_and_certificates_give_roles_and_bad_credentials_are_refused(tmp_path, zk_connect,
                                                                           bookie_factory) -> None:
    bookie_factory(2)
    (broker,) = start_brokers(1, tmp_path, zk_connect)
    ca, keys = TestCa(tmp_path / "ca"), Keys()
    proxy = secured_proxy(tmp_path, zk_connect, ca, keys)
    good = [pulsar.AuthenticationToken(keys.token("alice")),
            pulsar.AuthenticationToken(lambda: keys.token("alice", expires_s=3600)),
            tls_auth(ca.client("bob"))]
    for i, authentication in enumerate(good):
        client = client_for(proxy, ca, authentication)
        try:
            produce_one(client, f"persistent://public/default/good-{i}")
        finally:
            client.close()
    other = TestCa(tmp_path / "other", name="Someone Else's CA")
    refused = {
        "no_credentials": None,
        "bad_signature": pulsar.AuthenticationToken(Keys().token("alice")),
        "expired": pulsar.AuthenticationToken(keys.token("alice", expires_s=-60)),
        "wrong_audience": pulsar.AuthenticationToken(keys.token("alice", audience="somewhere-else")),
        "malformed": pulsar.AuthenticationToken("not-a-jwt"),
        "untrusted_cert": tls_auth(other.client("mallory")),
    }

    def refusal(reason: str) -> BaseException:
        client = client_for(proxy, ca, refused[reason], timeout_s=5)
        try:
            with pytest.raises(pulsar.PulsarException) as raised:
                produce_one(client, f"persistent://public/default/refused-{reason}")
            return raised.value
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(len(refused)) as pool:
        outcomes = dict(zip(refused, pool.map(refusal, refused)))
    for reason, err in outcomes.items():
        assert isinstance(err, pulsar.Timeout), (reason, err)  # it retried until its timeout, as with Pulsar's proxy
        assert proxy.metric(f'magnetar_proxy_auth_failures_total{{reason="{reason}"}}') >= 1, reason
    assert proxy.process.alive
    listed = topics_of(broker)
    assert not [t for t in listed if "refused-" in t], listed  # nothing reached the broker
    assert sorted(t for t in listed if "good-" in t) == [f"persistent://public/default/good-{i}" for i in range(3)]


async def test_the_broker_hears_the_proxys_credentials_and_the_clients_role(tmp_path, zk_connect) -> None:
    """A broker registered in the region (here one that records what it is sent) gets, from the proxy, a CONNECT
    with the proxy's own token, the client's role as original_principal and, forwarded, its credentials."""
    ca, keys = TestCa(tmp_path / "ca"), Keys()
    proxy_token = keys.token("the-proxy")
    heard: list[pb.CommandConnect] = []

    async def fake_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                if frame.command.type == pb.BaseCommand.CONNECT:
                    heard.append(frame.command.connect)
                    writer.write(encode_command(wrap(pb.CommandConnected(server_version="recorder",
                                                                          protocol_version=20))))
        writer.close()

    server = await asyncio.start_server(fake_broker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    zk = KazooClient(hosts=zk_connect)
    await asyncio.to_thread(zk.start, 15)
    try:
        registration = BrokerRegistration(broker_id="recorder", pulsar_service_url=f"pulsar://127.0.0.1:{port}",
                                          web_service_url="http://127.0.0.1:1", cluster="test")
        await asyncio.to_thread(zk.create, "/brokers/recorder", registration.to_json(), ephemeral=True,
                                makepath=True)
        proxy = secured_proxy(tmp_path, zk_connect, ca, keys, broker_client_auth_method="token",
                              broker_client_auth_params=f"token:{proxy_token}", forward_authorization_credentials=True)
        alice = keys.token("alice")
        conn = Connection(proxy.pulsar_url, logical_url=f"pulsar://127.0.0.1:{port}", auth=Auth.token(alice))
        await conn.start()
        assert conn.server_version == "recorder"  # spliced to the broker
        await conn.close()
        (connect,) = heard
        assert (connect.auth_method_name, connect.auth_data) == ("token", proxy_token.encode())
        assert connect.original_principal == "alice"
        assert (connect.original_auth_method, connect.original_auth_data) == ("token", alice)
        assert not connect.HasField("proxy_to_broker_url")
        with pytest.raises(ServerError) as refused:  # the recorder's other ports are no target
            await Connection(proxy.pulsar_url, logical_url=f"pulsar://127.0.0.1:{port + 1}",
                             auth=Auth.token(alice)).start()
        assert refused.value.code == pb.ServiceNotReady
        with pytest.raises(ServerError) as refused:  # nor is anyone unauthenticated forwarded anywhere
            await Connection(proxy.pulsar_url, logical_url=f"pulsar://127.0.0.1:{port}").start()
        assert refused.value.code == pb.AuthenticationError and "authentication required" in str(refused.value)
        with pytest.raises(ServerError) as refused:  # the refusal says what is wrong
            await Connection(proxy.pulsar_url, logical_url=f"pulsar://127.0.0.1:{port}",
                             auth=Auth.token(keys.token("alice", expires_s=-5))).start()
        assert refused.value.code == pb.AuthenticationError and "expired" in str(refused.value)
        assert len(heard) == 1
    finally:
        server.close()
        await asyncio.to_thread(zk.stop)
        zk.close()


def test_lookups_are_authorized_by_namespace_and_topic_permissions(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    (broker,) = start_brokers(1, tmp_path, zk_connect)
    ca, keys = TestCa(tmp_path / "ca"), Keys()
    proxy = secured_proxy(tmp_path, zk_connect, ca, keys, authorization_enabled=True, superuser_roles=["root"])
    admin = broker.http_url + "/admin/v2"
    http_json("PUT", f"{admin}/tenants/acme", {"adminRoles": ["acme-admin"], "allowedClusters": ["test"]})
    http_json("PUT", f"{admin}/namespaces/acme/app")
    http_json("POST", f"{admin}/namespaces/acme/app/permissions/writer", ["produce"])
    http_json("POST", f"{admin}/persistent/acme/app/orders/permissions/reader", ["consume"])
    topic = "persistent://acme/app/orders"

    def as_role(role: str) -> pulsar.Client:
        return client_for(proxy, ca, pulsar.AuthenticationToken(keys.token(role)), timeout_s=10)

    for role in ("writer", "acme-admin", "root"):
        client = as_role(role)
        try:
            produce_one(client, topic)
        finally:
            client.close()
    reader = as_role("reader")
    try:
        reader.subscribe(topic, "s").close()
        with pytest.raises(pulsar.AuthorizationError):  # its grant is on one topic only
            reader.subscribe("persistent://acme/app/other", "s")
    finally:
        reader.close()
    nobody = as_role("nobody")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            produce_one(nobody, topic)
        assert proxy.metric('magnetar_proxy_authorization_failures_total{operation="partitions_metadata"}') >= 1
        http_json("POST", f"{admin}/namespaces/acme/app/permissions/nobody", ["produce"])
        wait_for(lambda: produce_one(nobody, topic) is None, 20, interval_s=0.2, what="the grant applied")
    finally:
        nobody.close()


def test_expiring_tokens_are_refreshed_on_a_live_connection_or_the_connection_is_closed(
        tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    start_brokers(1, tmp_path, zk_connect)
    ca, keys = TestCa(tmp_path / "ca"), Keys()
    proxy = secured_proxy(tmp_path, zk_connect, ca, keys, authentication_refresh_check_ms=300)
    refreshing = client_for(proxy, ca, pulsar.AuthenticationToken(lambda: keys.token("alice", expires_s=2)))
    static = client_for(proxy, ca, pulsar.AuthenticationToken(keys.token("alice", expires_s=2)))
    try:
        topic = "persistent://public/default/refreshed"
        producer = refreshing.create_producer(topic, send_timeout_millis=10_000)
        doomed = static.create_producer(topic + "-static", send_timeout_millis=2_000)
        doomed.send(b"before expiry")
        connections_before = proxy.metric("pulsar_proxy_new_connections_total")
        deadline = time.monotonic() + 6  # three token lifetimes, sending all along
        sent = 0
        while time.monotonic() < deadline:
            producer.send(f"m{sent}".encode())
            sent += 1
        assert proxy.metric("magnetar_proxy_auth_refreshes_total") >= 1  # the lookup connection, challenged
        # the forwarded connection was closed at each expiry and reopened with a fresh token, unnoticed
        assert proxy.metric("pulsar_proxy_new_connections_total") > connections_before
        with pytest.raises(pulsar.PulsarException):  # the static token cannot come back
            doomed.send(b"after expiry")
        # Every message is there, in order. A send in flight when its connection was closed is sent again on the
        # next one, so without deduplication it may be stored twice (at least once, as when any link drops).
        consumer = refreshing.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        got: dict[bytes, None] = {}
        while len(got) < sent:
            got.setdefault(consumer.receive(timeout_millis=10_000).data())
        assert list(got) == [f"m{i}".encode() for i in range(sent)]
    finally:
        refreshing.close()
        static.close()


async def test_the_admin_api_through_the_proxy_needs_credentials(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    start_brokers(1, tmp_path, zk_connect)
    ca, keys = TestCa(tmp_path / "ca"), Keys()
    proxy = secured_proxy(tmp_path, zk_connect, ca, keys, web_tls_port=free_port())
    tenants = f"{proxy.http_url}/admin/v2/tenants"
    async with aiohttp.ClientSession() as http:
        async with http.get(tenants) as r:
            assert r.status == 401 and "authentication required" in (await r.json())["reason"]
        async with http.get(tenants, headers={"Authorization": f"Bearer {Keys().token('alice')}"}) as r:
            assert r.status == 401
        async with http.get(tenants, headers={"Authorization": f"Bearer {keys.token('alice')}",
                                              "X-Original-Principal": "root"}) as r:
            assert r.status == 200 and "public" in await r.json()
        ssl_ctx = ssl.create_default_context(cafile=str(ca.ca_file))
        bob = ca.client("bob")
        ssl_ctx.load_cert_chain(bob.cert, bob.key)
        https = f"https://localhost:{proxy.settings['web_tls_port']}/admin/v2/tenants"
        async with http.get(https, ssl=ssl_ctx) as r:  # a client certificate is credentials too
            assert r.status == 200
        async with http.get(f"{proxy.http_url}/metrics") as r:  # the proxy's own metrics stay open
            assert r.status == 200
    assert proxy.metric('magnetar_proxy_auth_failures_total{reason="no_credentials"}') == 1
    assert proxy.metric('magnetar_proxy_auth_failures_total{reason="bad_signature"}') == 1
    await wait_for_async(lambda: proxy.process.alive, 1, what="the proxy alive")
