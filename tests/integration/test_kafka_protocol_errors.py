"""Bad Kafka input on a real broker: malformed frames, unknown API keys and versions, oversized requests get an
error answer or a closed connection; nothing is created, and the broker keeps serving (aiokafka still works)."""

from __future__ import annotations

import asyncio
import socket
import struct
import urllib.request

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import ApiVersionResponse_v0
from aiokafka.protocol.metadata import MetadataRequest_v5

from tests.kit.brokers import start_brokers

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def broker(tmp_path, zk_connect, bookie_factory):
    bookie_factory(2)
    (one,) = start_brokers(1, tmp_path, zk_connect, kafka=True, kafka_max_request_size_bytes=1 << 20)
    return one


def connect(broker) -> socket.socket:
    host, port = broker.kafka_bootstrap.split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"t") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def closed_by_broker(sock: socket.socket) -> bool:
    """True when the broker closes the connection (EOF) without answering."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def read_answer(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


def partitioned_topics(broker) -> str:
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/persistent/public/default/partitioned", timeout=30) as r:
        return r.read().decode()


BAD_FRAMES = {
    "unknown api key": frame(header(999, 0)),
    "unknown version of Metadata": frame(header(3, 77) + b"\x00\x00\x00\x00"),
    "truncated Metadata body": frame(header(3, 5) + struct.pack(">i", 3) + b"\x00\x05orde"),
    "negative size": struct.pack(">i", -5) + b"xxxxx",
    "oversized request": struct.pack(">i", 50 << 20) + b"\x00" * 64,
    "header cut short": frame(b"\x00\x03"),
    "client id overrunning the frame": frame(struct.pack(">hhih", 3, 5, 1, 500)),
    "garbage": frame(b"\xde\xad\xbe\xef" * 8),
}


def test_bad_frames_close_the_connection_and_change_nothing(broker) -> None:
    before = partitioned_topics(broker)
    for case, data in sorted(BAD_FRAMES.items()):
        with connect(broker) as sock:
            sock.sendall(data)
            assert closed_by_broker(sock), case
        assert partitioned_topics(broker) == before, case
        # the broker goes on: a good request on a new connection is answered
        with connect(broker) as sock:
            sock.sendall(frame(header(18, 0, correlation_id=5)))
            answer = read_answer(sock)
            assert struct.unpack(">i", answer[:4])[0] == 5, case
            assert ApiVersionResponse_v0.decode(answer[4:]).error_code == 0, case


def test_api_versions_at_an_unknown_version_is_answered_with_unsupported_version(broker) -> None:
    with connect(broker) as sock:
        sock.sendall(frame(header(18, 42, correlation_id=9)))
        answer = read_answer(sock)
    assert struct.unpack(">i", answer[:4])[0] == 9
    decoded = ApiVersionResponse_v0.decode(answer[4:])
    assert decoded.error_code == 35  # UNSUPPORTED_VERSION
    assert (18, 0, 3) in decoded.api_versions and any(k == 3 for k, _, _ in decoded.api_versions)


def test_answers_before_a_bad_frame_still_arrive_in_order(broker) -> None:
    good = [MetadataRequest_v5([], False), MetadataRequest_v5([], False)]
    data = b"".join(frame(r.build_request_header(i, "t").encode() + r.encode()) for i, r in enumerate(good))
    with connect(broker) as sock:
        sock.sendall(data + BAD_FRAMES["unknown api key"])
        ids = [struct.unpack(">i", read_answer(sock)[:4])[0] for _ in good]
        assert ids == [0, 1]
        assert closed_by_broker(sock)


def test_aiokafka_works_after_bad_input(broker) -> None:
    for case in BAD_FRAMES.values():
        with connect(broker) as sock:
            sock.sendall(case)
            closed_by_broker(sock)

    async def topics() -> set:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    assert "orde" not in asyncio.run(topics())
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=30) as response:
        metrics = response.read().decode()
    refused = next(float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith("magnetar_broker_kafka_refused_requests_total "))
    assert refused >= len(BAD_FRAMES)
    assert 'magnetar_broker_kafka_requests_total{api="Metadata"}' in metrics
