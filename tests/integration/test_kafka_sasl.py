"""SASL/PLAIN with a token as the password on a SASL_PLAINTEXT Kafka listener, against a broker with token
authentication and authorization on: the token's role is the principal (produce and consume need grants, as
for pulsar-client), a bad token is refused and closes the connection, and nothing but ApiVersions and the SASL
requests is served before authentication."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import urllib.request

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError

from magnetar.auth import tokens
from magnetar.net import free_port
from tests.kit.brokers import BrokerHandle
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def secure_broker(tmp_path, zk_connect, bookie_factory):
    bookie_factory(2)
    secret = tokens.create_secret_key()
    broker = BrokerHandle(
        "broker-1", tmp_path / "brokers", zk_connect,
        kafka_listeners=f"SASL_PLAINTEXT://127.0.0.1:{free_port('127.0.0.1')}",
        authentication_enabled=True, authentication_providers=["token"], authorization_enabled=True,
        superuser_roles=["admin", "broker"], token_secret_key="data:;base64," + base64.b64encode(secret).decode(),
        broker_client_auth_method="token",
        broker_client_auth_params="token:" + tokens.create_token("broker", key=secret, algorithm="HS256"))
    broker.start(timeout_s=60)
    return broker, secret


def token(secret: bytes, role: str) -> str:
    return tokens.create_token(role, key=secret, algorithm="HS256", expires_s=3600)


def sasl(password: str, user: str = "someone") -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": password}


def test_sasl_plain_with_a_token(secure_broker) -> None:
    broker, secret = secure_broker
    servers = broker.kafka_bootstrap
    admin_token, app_token = token(secret, "admin"), token(secret, "app")

    async def produce(password: str, value: bytes) -> int:
        producer = AIOKafkaProducer(bootstrap_servers=servers, **sasl(password))
        await producer.start()
        try:
            return (await producer.send_and_wait("secured", value)).offset
        finally:
            await producer.stop()

    async def consume(password: str) -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, **sasl(password))
        await consumer.start()
        try:
            tp = TopicPartition("secured", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            batches = await consumer.getmany(tp, timeout_ms=10_000)
            return [r.value for r in batches.get(tp, [])]
        finally:
            await consumer.stop()

    assert asyncio.run(produce("token:" + admin_token, b"by admin")) == 0  # a superuser
    with pytest.raises(KafkaError):
        asyncio.run(produce("token:not-a-token", b"refused"))
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(produce(app_token, b"not granted yet"))
    grant = urllib.request.Request(f"{broker.http_url}/admin/v2/persistent/public/default/secured/permissions/app",
                                   data=json.dumps(["produce", "consume"]).encode(), method="POST",
                                   headers={"Content-Type": "application/json",
                                            "Authorization": f"Bearer {admin_token}"})
    urllib.request.urlopen(grant, timeout=30).close()

    def granted() -> bool:
        try:
            return asyncio.run(produce(app_token, b"by app")) == 1
        except TopicAuthorizationFailedError:
            return False

    wait_for(granted, 30, what="the grant reaches the broker")
    assert asyncio.run(consume(app_token)) == [b"by admin", b"by app"]


def test_requests_before_authentication_close_the_connection(secure_broker) -> None:
    broker, _ = secure_broker
    host, port = broker.kafka_bootstrap.split(":")
    metadata = struct.pack(">hhih", 3, 1, 1, 1) + b"t" + struct.pack(">i", 0)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(metadata)) + metadata)
        assert sock.recv(1) == b""
    api_versions = struct.pack(">hhih", 18, 0, 2, 1) + b"t"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(api_versions)) + api_versions)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        assert struct.unpack(">ih", sock.recv(size, socket.MSG_WAITALL)[:6]) == (2, 0)
