"""Geo-replication between two regions whose brokers enforce authentication, authorization and TLS: each
broker's replicator reaches the other region at its registered ``pulsar+ssl://`` URL (the certificate and host
name verified) with the broker's own token (``broker_client_*``), so replication keeps working with security on,
while an application needs its own grant in each region."""

from __future__ import annotations

import base64
import uuid

import pulsar
import pytest

from magnetar import net
from magnetar.auth import certs, tokens
from tests.kit.regions import start_regions
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

EAST, WEST = "us-east", "eu-west"


def test_replication_through_tls_with_the_brokers_own_tokens(tmp_path, zk_server, request) -> None:
    pki = tmp_path / "pki"
    certs.write_ca(pki)
    certs.write_server_certificate(pki, hostnames=["localhost"], ips=["127.0.0.1"])
    secret = tokens.create_secret_key()

    def token(role: str) -> str:
        return tokens.create_token(role, key=secret, algorithm="HS256", expires_s=3600)

    regions = start_regions(
        [EAST, WEST], tmp_path, zk_server, bookies=2, brokers=1, request=request, admin_token=token("admin"),
        authentication_enabled=True, authentication_providers=["token"], authorization_enabled=True,
        superuser_roles=["admin", "broker"], token_secret_key="data:;base64," + base64.b64encode(secret).decode(),
        tls_port=lambda name: net.free_port(), tls_cert_file=str(pki / "server.cert.pem"),
        tls_key_file=str(pki / "server.key.pem"), broker_client_auth_method="token",
        broker_client_auth_params="token:" + token("broker"), broker_client_tls_enabled=True,
        broker_client_trust_certs_file=str(pki / "ca.cert.pem"))
    namespace = regions.create_replicated_namespace("geo", f"secure-{uuid.uuid4().hex[:6]}", [EAST, WEST])
    regions.any().admin("POST", f"/admin/v2/namespaces/{namespace}/permissions/app", ["produce", "consume"])
    clusters = regions.any().admin("GET", f"/admin/v2/clusters/{WEST}")
    west_broker = regions[WEST].brokers[0]
    assert clusters["brokerServiceUrlTls"] == f"pulsar+ssl://127.0.0.1:{west_broker.settings['tls_port']}"

    topic = f"persistent://{namespace}/orders"
    app = pulsar.AuthenticationToken(token("app"))
    east = pulsar.Client(f"pulsar+ssl://localhost:{regions[EAST].brokers[0].settings['tls_port']}", authentication=app,
                         tls_trust_certs_file_path=str(pki / "ca.cert.pem"), tls_validate_hostname=True,
                         operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    west = pulsar.Client(regions[WEST].pulsar_url, authentication=app, operation_timeout_seconds=30,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = wait_for(lambda: west.subscribe(topic, "s"), 30, what="app's grant reaches eu-west")
        producer = wait_for(lambda: east.create_producer(topic), 30, what="app's grant reaches us-east")
        sent = [f"m-{i}".encode() for i in range(50)]
        for data in sent:
            producer.send(data)
        received = []
        for _ in sent:
            msg = consumer.receive(30_000)
            received.append(msg.data())
            consumer.acknowledge(msg)
        assert received == sent
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1_000)  # nothing twice
        stats = regions[EAST].replication_stats(topic, WEST)
        assert stats is not None and stats["connected"]
        with pytest.raises(pulsar.AuthorizationError):  # an application still needs its own grant
            pulsar.Client(regions[WEST].pulsar_url, authentication=pulsar.AuthenticationToken(token("nobody")),
                          operation_timeout_seconds=10,
                          logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)).create_producer(topic)
    finally:
        east.close()
        west.close()
