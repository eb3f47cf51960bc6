"""Authentication and authorization on the broker's binary protocol, with the real pulsar-client.

The broker service runs in-process (``tests/kit/broker_thread.py``, in-memory storage and configuration store)
with a TLS port (certificates from ``magnetar.auth.certs``), the ``tls`` and ``token`` providers (tokens from
``magnetar.auth.tokens``, audience ``us-east``), authorization on, superusers ``admin`` and the proxy role ``proxy``;
role ``app`` may produce and consume on ``public/default``. What is shown:

* allowed: mTLS (``AuthenticationTLS``) and tokens (static and callable) over ``pulsar+ssl://`` with
  ``tls_validate_hostname=True``, and a token over ``pulsar://``;
* refused at CONNECT and counted by reason: no credentials, a forged, an expired and a wrong-audience token
  (pulsar-client 3.13 closes a connection answered ERROR before CONNECTED and retries until its operation
  timeout, so the application sees ``pulsar.Timeout``, as against Apache Pulsar); in the TLS handshake: a
  certificate from another CA; random bytes on the TLS port never stop the broker;
* refused with ``pulsar.AuthorizationError`` and nothing created: a role without ``produce`` or ``consume``, a
  subscription whose role list leaves the role out; a grant and its revoke apply without a restart;
* ``original_principal``: refused from a role that is not a proxy role (magnetar's asyncio client sends it); a
  proxy acting for a client is authorized for both;
* a token expiring on a live connection: refreshed through AUTH_CHALLENGE (callable token: the connection stays)
  or the connection is closed (the client answers with the expired token).
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import socket
import ssl
import subprocess
import sys
import time
import uuid

import pulsar
import pytest

from broker.service import ServiceConfig
from config_store import Policies
from config_store import permissions as grants
from magnetar import net
from magnetar.auth import certs, tokens
from magnetar.protocol.client import Auth, Connection
from magnetar.protocol.client.errors import AuthenticationError as ClientAuthenticationError
from magnetar.protocol.client.errors import AuthorizationError as ClientAuthorizationError
from magnetar.protocol.client.errors import ConnectionClosedError
from tests.kit.broker_thread import BrokerThread, make_client
from tests.kit.wait import wait_for, wait_for_async

pytestmark = pytest.mark.timeout(180)

AUDIENCE = "us-east"
NAMESPACE = "public/default"


# ------------------------------------------------------------------------------------------ material


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    certs.write_ca(directory)
    certs.write_server_certificate(directory, hostnames=["localhost"], ips=["127.0.0.1"])
    for role in ("app", "admin", "nobody"):
        certs.write_client_certificate(directory, role=role)
    other = tmp_path_factory.mktemp("other-ca")
    certs.write_ca(other, common_name="Another CA")
    certs.write_client_certificate(other, role="app")
    return directory, other


@pytest.fixture(scope="module")
def secret() -> bytes:
    return tokens.create_secret_key()


def token_for(secret: bytes, role: str, *, expires_s: float = 600, audience: str = AUDIENCE) -> str:
    return tokens.create_token(role, key=secret, algorithm="HS256", expires_s=expires_s, audience=audience)


@pytest.fixture
def broker(pki, secret):
    directory, _ = pki
    policies = Policies(auth_roles={"app": ["produce", "consume"]})
    config = ServiceConfig(
        stats_update_interval_s=1.0, tls_port=net.free_port(), tls_cert_file=str(directory / "server.cert.pem"),
        tls_key_file=str(directory / "server.key.pem"), tls_trust_certs_file=str(directory / "ca.cert.pem"),
        tls_handshake_timeout_s=2.0, authentication_enabled=True, authentication_providers=("tls", "token"),
        authorization_enabled=True, superuser_roles=("admin", "proxy"), proxy_roles=("proxy",),
        token_secret_key="data:;base64," + base64.b64encode(secret).decode(), token_audience=AUDIENCE,
        authentication_refresh_check_s=0.5)
    with BrokerThread(config=config, policies={NAMESPACE: policies}) as b:
        yield b


def failures(broker: BrokerThread, reason: str) -> float:
    return broker.call(broker.service.security.failures, reason)


def tls_client(broker: BrokerThread, pki, authentication=None, **kwargs) -> pulsar.Client:
    directory, _ = pki
    kwargs.setdefault("operation_timeout_seconds", 10)
    return make_client(f"pulsar+ssl://localhost:{broker.service.tls_port}", authentication=authentication,
                       tls_trust_certs_file_path=str(directory / "ca.cert.pem"), tls_validate_hostname=True, **kwargs)


def topic_name(prefix: str = "auth") -> str:
    return f"persistent://{NAMESPACE}/{prefix}-{uuid.uuid4().hex[:8]}"


def round_trip(client: pulsar.Client, n: int = 5) -> list[bytes]:
    topic = topic_name()
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"m-{i}".encode())
    received = []
    for _ in range(n):
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        received.append(msg.data())
    return received


def loaded(broker: BrokerThread, topic: str) -> bool:
    return broker.call(lambda: topic in broker.service.topics())


def stored(broker: BrokerThread, topic: str) -> bool:
    from magnetar.topic_name import TopicName

    return broker.run(broker.ml_factory.exists, TopicName.parse(topic).path)


# ------------------------------------------------------------------------------------------ allowed


def test_mtls_and_token_clients_over_tls_and_plain_produce_and_consume(broker, pki, secret) -> None:
    directory, _ = pki
    expected = [f"m-{i}".encode() for i in range(5)]
    clients = [
        tls_client(broker, pki, pulsar.AuthenticationTLS(str(directory / "app.cert.pem"),
                                                         str(directory / "app.key.pem"))),
        tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "app"))),
        tls_client(broker, pki, pulsar.AuthenticationToken(lambda: token_for(secret, "app"))),
        make_client(broker.url, authentication=pulsar.AuthenticationToken(token_for(secret, "app"))),
    ]
    try:
        for client in clients:
            assert round_trip(client) == expected
    finally:
        for client in clients:
            client.close()
    assert failures(broker, "no_credentials") == 0


def test_magnetar_produce_and_consume_over_tls_with_a_token(broker, pki, secret) -> None:
    directory, _ = pki
    topic = topic_name("cli")
    url = f"pulsar+ssl://localhost:{broker.service.tls_port}"
    env = {**os.environ, "MAGNETAR_AUTH_TOKEN": token_for(secret, "app")}  # the token kept off the command line
    trust = ["--tls-trust-certs-file", str(directory / "ca.cert.pem"), "--timeout", "15"]

    def cli(*args: str, environ=env) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "magnetar", *args], capture_output=True, text=True, env=environ,
                              timeout=120)

    sent = cli("produce", url, topic, "-m", "over-tls", "-n", "2", *trust)
    assert sent.returncode == 0 and "2 message(s) sent" in sent.stdout, sent.stderr
    got = cli("consume", url, topic, "-s", "cli", "-n", "2", *trust)
    assert got.returncode == 0 and got.stdout.count("received 'over-tls'") == 2, got.stderr
    no_token = {k: v for k, v in os.environ.items() if k != "MAGNETAR_AUTH_TOKEN"}
    refused = cli("produce", url, topic, "-m", "anonymous", "--tls-trust-certs-file", str(directory / "ca.cert.pem"),
                  "--timeout", "2", environ=no_token)
    assert refused.returncode == 1 and "cannot create a producer" in refused.stderr
    assert failures(broker, "no_credentials") >= 1


def test_lookups_answer_the_tls_url(broker, pki, secret) -> None:
    async def lookup() -> pulsar.Client:
        conn = Connection(broker.url, auth=Auth.token(token_for(secret, "app")))
        await conn.start()
        try:
            from magnetar.protocol import pb

            answer = await conn.request(pb.CommandLookupTopic(topic=topic_name(), authoritative=False))
            return answer.lookupTopicResponse
        finally:
            await conn.close()

    response = asyncio.run(lookup())
    assert response.brokerServiceUrlTls == f"pulsar+ssl://127.0.0.1:{broker.service.tls_port}"


# ------------------------------------------------------------------------------------------ refused credentials


@pytest.mark.parametrize("case, reason", [
    ("none", "no_credentials"), ("forged", "bad_signature"), ("expired", "expired"),
    ("wrong_audience", "wrong_audience"),
])
def test_refused_credentials_are_counted_and_store_nothing(broker, pki, secret, case, reason) -> None:
    authentication = {
        "none": None,
        "forged": pulsar.AuthenticationToken(token_for(tokens.create_secret_key(), "app")),
        "expired": pulsar.AuthenticationToken(token_for(secret, "app", expires_s=-60)),
        "wrong_audience": pulsar.AuthenticationToken(token_for(secret, "app", audience="eu-west")),
    }[case]
    topic = topic_name()
    client = tls_client(broker, pki, authentication, operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.Timeout):  # what pulsar-client makes of a refused CONNECT (module docstring)
            client.create_producer(topic)
    finally:
        client.close()
    assert failures(broker, reason) >= 1
    assert not loaded(broker, topic) and not stored(broker, topic)


def test_a_certificate_from_another_ca_fails_the_handshake(broker, pki) -> None:
    _, other = pki
    client = tls_client(broker, pki, pulsar.AuthenticationTLS(str(other / "app.cert.pem"), str(other / "app.key.pem")),
                        operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic_name())
    finally:
        client.close()
    wait_for(lambda: failures(broker, "untrusted_cert") >= 1, 10, what="the refused handshake counted")


def test_random_bytes_on_the_tls_port_never_stop_the_broker(broker, pki, secret) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    port = broker.service.tls_port
    before = failures(broker, "malformed")
    for i in range(20):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            if i % 4 == 3:  # a TLS ClientHello cut short, then silence until the handshake deadline
                sock.sendall(bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]) + rng.randbytes(rng.randrange(0, 40)))
            else:
                sock.sendall(rng.randbytes(rng.randrange(1, 2048)))
            sock.settimeout(5)
            try:
                while sock.recv(4096):
                    pass
            except (ConnectionError, socket.timeout):
                pass
    context = ssl.create_default_context(cafile=str(pki[0] / "ca.cert.pem"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:  # TLS, then garbage inside it
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(rng.randbytes(512))
    assert failures(broker, "malformed") > before, f"seed {seed}"
    client = tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "app")))
    try:
        assert round_trip(client, 2) == [b"m-0", b"m-1"], f"seed {seed}"
    finally:
        client.close()


# ------------------------------------------------------------------------------------------ authorization


def test_a_role_without_produce_or_consume_gets_authorization_errors_and_nothing_is_created(broker, pki,
                                                                                         secret) -> None:
    directory, _ = pki
    topic = topic_name()
    for authentication in (pulsar.AuthenticationToken(token_for(secret, "nobody")),
                           pulsar.AuthenticationTLS(str(directory / "nobody.cert.pem"),
                                                    str(directory / "nobody.key.pem"))):
        client = tls_client(broker, pki, authentication)
        try:
            with pytest.raises(pulsar.AuthorizationError):
                client.create_producer(topic)
            with pytest.raises(pulsar.AuthorizationError):
                client.subscribe(topic, "s")
        finally:
            client.close()
    assert not loaded(broker, topic) and not stored(broker, topic)
    assert broker.call(broker.service.security.denials, "lookup") >= 2


def test_produce_only_and_subscription_role_lists(broker, pki, secret) -> None:
    topic = topic_name()

    def edit(p: Policies) -> Policies:
        grants.grant_topic_permission(p, topic, "writer", ["produce"])
        grants.grant_topic_permission(p, topic, "billing", ["consume"])
        grants.grant_subscription_permission(p, "audit", ["billing"])
        return p

    broker.run(broker.config_store.update_namespace_policies, "public", "default", edit)
    writer = tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "writer")))
    app = tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "app")))
    billing = tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "billing")))
    try:
        producer = wait_for(lambda: writer.create_producer(topic), 10, what="the topic grant applies")
        producer.send(b"one")
        with pytest.raises(pulsar.AuthorizationError):
            writer.subscribe(topic, "mine")
        with pytest.raises(pulsar.AuthorizationError):
            app.subscribe(topic, "audit")  # app may consume, but "audit" is billing's only
        consumer = billing.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(5000).data() == b"one"
        assert app.subscribe(topic, "other") is not None
    finally:
        for c in (writer, app, billing):
            c.close()
    subscriptions = set(broker.stats(topic)["subscriptions"])
    assert subscriptions == {"audit", "other"}  # the refused "mine" was never created


def test_a_replicator_name_is_trusted_by_role_not_by_name(broker, pki, secret) -> None:
    topic = topic_name("repl-name")
    app = tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "app")))  # may produce, not a superuser
    admin = tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "admin")))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            app.create_producer(topic, producer_name="pulsar.repl.elsewhere")
        assert not loaded(broker, topic) or not broker.stats(topic)["publishers"]
        app.create_producer(topic, producer_name="ordinary").send(b"fine")  # the same role, another name
        admin.create_producer(topic, producer_name="pulsar.repl.elsewhere").close()  # a superuser may
    finally:
        app.close()
        admin.close()


def test_a_grant_and_its_revoke_apply_without_restart(broker, pki, secret) -> None:
    client = tls_client(broker, pki, pulsar.AuthenticationToken(token_for(secret, "late")))
    topic = topic_name()
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)

        def grant(p: Policies) -> Policies:
            grants.grant_namespace_permission(p, "late", ["produce"])
            return p

        def revoke(p: Policies) -> Policies:
            grants.revoke_namespace_permission(p, "late")
            return p

        broker.run(broker.config_store.update_namespace_policies, "public", "default", grant)
        producer = wait_for(lambda: client.create_producer(topic), 10, what="the grant applies")
        producer.send(b"granted")
        broker.run(broker.config_store.update_namespace_policies, "public", "default", revoke)

        def refused() -> bool:
            try:
                client.create_producer(topic).close()
            except pulsar.AuthorizationError:
                return True
            return False

        wait_for(refused, 10, what="the revoke applies")
    finally:
        client.close()


# ------------------------------------------------------------------------------------------ original principals


async def test_only_proxy_roles_may_name_an_original_principal(broker, secret) -> None:
    from magnetar.protocol import pb

    lookup = pb.CommandLookupTopic(topic=topic_name(), authoritative=False)
    impostor = Connection(broker.url, auth=Auth.token(token_for(secret, "app")), original_principal="admin")
    with pytest.raises(ClientAuthorizationError, match="only proxy_roles"):
        await impostor.start()
    await impostor.close()

    for principal, allowed in (("app", True), ("nobody", False)):
        proxied = Connection(broker.url, auth=Auth.token(token_for(secret, "proxy")), original_principal=principal)
        await proxied.start()
        try:
            answer = await proxied.request(lookup)
            response = answer.lookupTopicResponse
            assert (response.response != pb.CommandLookupTopicResponse.Failed) is allowed, response
            if not allowed:
                assert response.error == pb.AuthorizationError
                assert "through proxy role 'proxy'" in response.message
        finally:
            await proxied.close()

    bare_proxy = Connection(broker.url, auth=Auth.token(token_for(secret, "proxy")))
    with pytest.raises(ClientAuthorizationError, match="must name the client"):
        await bare_proxy.start()
    await bare_proxy.close()
    assert broker.call(broker.service.security.denials, "original_principal") >= 2


@pytest.fixture
def strict_broker(pki, secret):
    """A broker that authenticates the credentials a proxy forwards (``authenticate_original_auth_data``)."""
    directory, _ = pki
    config = ServiceConfig(
        authentication_enabled=True, authentication_providers=("tls", "token"), authorization_enabled=True,
        superuser_roles=("admin", "proxy"), proxy_roles=("proxy",), authenticate_original_auth_data=True,
        token_secret_key="data:;base64," + base64.b64encode(secret).decode(), token_audience=AUDIENCE)
    with BrokerThread(config=config, policies={NAMESPACE: Policies(auth_roles={"app": ["produce", "consume"]})}) as b:
        yield b


async def test_forwarded_client_credentials_must_prove_the_original_principal(strict_broker, secret) -> None:
    from magnetar.protocol import pb

    broker = strict_broker
    lookup = pb.CommandLookupTopic(topic=topic_name(), authoritative=False)
    proxy = Auth.token(token_for(secret, "proxy"))
    honest = Connection(broker.url, auth=proxy, original_principal="app",
                        original_auth=Auth.token(token_for(secret, "app")))
    await honest.start()
    try:
        answer = (await honest.request(lookup)).lookupTopicResponse
        assert answer.response != pb.CommandLookupTopicResponse.Failed, answer
    finally:
        await honest.close()

    # A proxy (or a stolen proxy credential) naming one role while forwarding another's token, a forged token,
    # an expired one: refused at CONNECT, counted.
    before = failures(broker, "original_principal_mismatch")
    mismatched = Connection(broker.url, auth=proxy, original_principal="admin",
                            original_auth=Auth.token(token_for(secret, "app")))
    with pytest.raises(ClientAuthenticationError, match="not the original principal 'admin'"):
        await mismatched.start()
    await mismatched.close()
    assert failures(broker, "original_principal_mismatch") == before + 1
    for bad in (token_for(b"another key" * 4, "app"), token_for(secret, "app", expires_s=-60)):
        forged = Connection(broker.url, auth=proxy, original_principal="app", original_auth=Auth.token(bad))
        with pytest.raises(ClientAuthenticationError, match="forwarded credentials of 'app'"):
            await forged.start()
        await forged.close()

    # Nothing forwarded: the proxy's word is kept, as in Pulsar (its own lookups name the role only).
    word_only = Connection(broker.url, auth=proxy, original_principal="app")
    await word_only.start()
    await word_only.close()


# ------------------------------------------------------------------------------------------ expiring credentials


def test_a_callable_token_is_refreshed_on_a_live_connection(broker, pki, secret) -> None:
    issued = []

    def supply() -> str:
        token = token_for(secret, "app", expires_s=3)
        issued.append(time.time())
        return token

    client = tls_client(broker, pki, pulsar.AuthenticationToken(supply))
    topic = topic_name()
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        created = broker.call(broker.service.connection_counts)["created"]
        sent = 0

        def publish_until_refreshed_twice() -> bool:
            """One message per poll, so traffic flows while the broker challenges and the client refreshes."""
            nonlocal sent
            producer.send(f"m-{sent}".encode())
            sent += 1
            return len(issued) >= 3  # CONNECT and two AUTH_RESPONSEs: past two expiries of the first token

        wait_for(publish_until_refreshed_twice, 20, interval_s=0.1, what="two token refreshes on the live connection")
        for i in range(sent):
            msg = consumer.receive(5000)
            assert msg.data() == f"m-{i}".encode()
            consumer.acknowledge(msg)
        assert len(issued) >= 3  # CONNECT and at least two AUTH_RESPONSEs
        assert broker.call(broker.service.connection_counts)["created"] == created  # never reconnected
        assert failures(broker, "expired") == 0
    finally:
        client.close()


async def test_a_connection_whose_token_expires_without_refresh_is_closed(broker, secret) -> None:
    stale = token_for(secret, "app", expires_s=2)
    conn = Connection(broker.url, auth=Auth.token(stale))  # answers every challenge with the same token
    await conn.start()
    try:
        await wait_for_async(lambda: not conn.is_ready, 15, what="the broker closes the connection")
    finally:
        await conn.close()
    assert isinstance(conn.close_reason, ConnectionClosedError), conn.close_reason
    assert failures(broker, "expired") >= 1  # the AUTH_RESPONSE with the expired token was refused
