"""The service at the frame level, with a raw socket: handshake, keep-alive, lookups, bad input.

Bad input must get a clear answer (or a closed connection when framing is lost) and never stop the broker:
every test ends with a pulsar-client round trip on the same broker.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from broker.service import ServiceConfig
from magnetar.protocol import FrameDecoder, encode_command, encode_payload_command, pb, wrap
from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)

BaseCommand = pb.BaseCommand


class RawConnection:
    """A bare protocol connection for tests."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("pulsar://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.decoder = FrameDecoder()
        self.frames: list = []

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, inner) -> None:
        self.send_raw(encode_command(wrap(inner)))

    def recv(self, timeout_s: float = 5.0):
        """The next frame, or None when the broker closed the connection."""
        deadline = time.monotonic() + timeout_s
        while not self.frames:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise AssertionError("no frame from the broker in time") from None
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)

    def recv_type(self, type_: int, timeout_s: float = 5.0):
        while True:
            frame = self.recv(timeout_s)
            assert frame is not None, f"connection closed while waiting for {BaseCommand.Type.Name(type_)}"
            if frame.command.type == type_:
                return frame

    def connect(self, protocol_version: int = 20):
        self.send(pb.CommandConnect(client_version="raw-test", protocol_version=protocol_version))
        return self.recv_type(BaseCommand.CONNECTED).command.connected

    def closed_by_broker(self, timeout_s: float = 5.0) -> bool:
        while True:
            frame = self.recv(timeout_s)
            if frame is None:
                return True


@pytest.fixture
def raw(broker):
    conns = []

    def factory(connect: bool = True):
        conn = RawConnection(broker.url)
        conns.append(conn)
        if connect:
            conn.connect()
        return conn

    yield factory
    for c in conns:
        c.close()


def still_serving(client) -> None:
    topic = unique_topic("alive")
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"alive")
    assert consumer.receive(5000).data() == b"alive"


def make_producer(conn: RawConnection, topic: str, producer_id: int = 1) -> str:
    conn.send(pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=100 + producer_id))
    return conn.recv_type(BaseCommand.PRODUCER_SUCCESS).command.producer_success.producer_name


def send_frame(producer_id: int, name: str, seq: int, payload: bytes, *, corrupt: bool = False) -> bytes:
    md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=int(time.time() * 1000))
    frame = bytearray(encode_payload_command(wrap(pb.CommandSend(producer_id=producer_id, sequence_id=seq)), md,
                                             payload))
    if corrupt:
        frame[-1] ^= 0xFF
    return bytes(frame)


def test_handshake_ping_and_protocol_version(broker, raw, client):
    conn = raw(connect=False)
    connected = conn.connect(protocol_version=25)
    assert connected.protocol_version == 20
    assert connected.max_message_size == 5 * 1024 * 1024
    conn.send(pb.CommandPing())
    assert conn.recv().command.type == BaseCommand.PONG
    still_serving(client)


def test_lookup_and_partitioned_metadata(broker, raw, client):
    broker.run(broker.config_store.create_partitioned_topic, "public", "default", "persistent", "parted", 3)
    conn = raw()
    conn.send(pb.CommandLookupTopic(topic="persistent://public/default/x", request_id=1))
    lookup = conn.recv_type(BaseCommand.LOOKUP_RESPONSE).command.lookupTopicResponse
    assert lookup.response == pb.CommandLookupTopicResponse.Connect and lookup.brokerServiceUrl == broker.url
    assert lookup.request_id == 1 and lookup.authoritative
    for topic, expected in [("persistent://public/default/parted", 3), ("persistent://public/default/plain", 0),
                            ("persistent://public/default/parted-partition-1", 0)]:
        conn.send(pb.CommandPartitionedTopicMetadata(topic=topic, request_id=2))
        r = conn.recv_type(BaseCommand.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
        assert r.HasField("response") and r.response == pb.CommandPartitionedTopicMetadataResponse.Success
        assert r.partitions == expected
    conn.send(pb.CommandPartitionedTopicMetadata(topic="persistent://bad/name/with/too/many", request_id=3))
    r = conn.recv_type(BaseCommand.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
    assert r.response == pb.CommandPartitionedTopicMetadataResponse.Failed and r.error == pb.InvalidTopicName
    still_serving(client)


def test_bad_checksum_is_refused_and_nothing_is_stored(broker, raw, client):
    topic = unique_topic()
    conn = raw()
    name = make_producer(conn, topic)
    conn.send_raw(send_frame(1, name, 0, b"corrupted payload", corrupt=True))
    err = conn.recv_type(BaseCommand.SEND_ERROR).command.send_error
    assert err.error == pb.ChecksumError and err.sequence_id == 0
    conn.send_raw(send_frame(1, name, 1, b"good payload"))
    receipt = conn.recv_type(BaseCommand.SEND_RECEIPT).command.send_receipt
    assert receipt.sequence_id == 1
    assert broker.stats(topic)["msgInCounter"] == 1
    still_serving(client)


@pytest.mark.parametrize("broker", [{"config": ServiceConfig(max_message_size_bytes=1024)}], indirect=True)
def test_oversized_messages_are_refused(broker, raw, client):
    topic = unique_topic()
    conn = raw()
    name = make_producer(conn, topic)
    conn.send_raw(send_frame(1, name, 0, b"x" * 2048))
    err = conn.recv_type(BaseCommand.SEND_ERROR).command.send_error
    assert err.error == pb.NotAllowedError and "exceeds" in err.message
    big = raw()
    make_producer(big, topic, producer_id=2)
    big.send_raw(send_frame(2, "n", 0, b"x" * 64 * 1024))  # beyond the frame limit: framing is lost
    assert big.closed_by_broker()
    still_serving(client)


@pytest.mark.parametrize("garbage", [
    struct.pack(">I", 0xFFFFFFF0) + b"\x00" * 16,           # absurd frame size
    struct.pack(">II", 8, 4) + b"\xff\xff\xff\xff",         # undecodable protobuf
    struct.pack(">II", 6, 2) + b"\x08\x06",                 # SEND without its body
])
def test_malformed_frames_close_the_connection_only(broker, raw, client, garbage):
    conn = raw()
    conn.send_raw(garbage)
    assert conn.closed_by_broker()
    still_serving(client)


def test_commands_before_connect_close_the_connection(broker, raw, client):
    conn = raw(connect=False)
    conn.send(pb.CommandLookupTopic(topic="t", request_id=1))
    assert conn.closed_by_broker()
    still_serving(client)


def test_unsupported_commands_get_an_error(broker, raw, client):
    conn = raw()
    conn.send(pb.CommandNewTxn(request_id=7))
    r = conn.recv_type(BaseCommand.NEW_TXN_RESPONSE).command.newTxnResponse
    assert r.request_id == 7 and r.error == pb.NotAllowedError
    conn.send(pb.CommandWatchTopicList(request_id=8, watcher_id=1, namespace="public/default", topics_pattern=".*"))
    e = conn.recv_type(BaseCommand.ERROR).command.error
    assert e.request_id == 8 and "not supported" in e.message
    conn.send(pb.CommandConnect(client_version="again"))  # a second CONNECT is ignored (logged)
    conn.send(pb.CommandPing())
    assert conn.recv_type(BaseCommand.PONG).command.type == BaseCommand.PONG
    still_serving(client)


def test_errors_carry_codes(broker, raw, client):
    conn = raw()
    conn.send(pb.CommandProducer(topic="persistent://nope/missing/t", producer_id=1, request_id=11))
    e = conn.recv_type(BaseCommand.ERROR).command.error
    assert e.request_id == 11 and e.error == pb.TopicNotFound and "nope/missing" in e.message
    conn.send(pb.CommandProducer(topic="non-persistent://nope/missing/t", producer_id=2, request_id=12))
    e = conn.recv_type(BaseCommand.ERROR).command.error  # non-persistent topics too need their namespace
    assert e.request_id == 12 and e.error == pb.TopicNotFound
    conn.send(pb.CommandProducer(topic="non-persistent://public/default/t", producer_id=3, request_id=16))
    assert conn.recv_type(BaseCommand.PRODUCER_SUCCESS).command.producer_success.request_id == 16
    conn.send(pb.CommandSeek(consumer_id=99, request_id=13, message_publish_time=0))
    e = conn.recv_type(BaseCommand.ERROR).command.error
    assert e.error == pb.ConsumerNotFound
    topic = unique_topic()
    conn.send(pb.CommandSubscribe(topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=1,
                                  request_id=14))
    assert conn.recv_type(BaseCommand.SUCCESS).command.success.request_id == 14
    conn.send(pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Cumulative, request_id=15,
                            message_id=[pb.MessageIdData(ledgerId=1, entryId=0)]))
    r = conn.recv_type(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert r.request_id == 15 and r.error == pb.NotAllowedError and "cumulative" in r.message
    still_serving(client)


def test_the_broker_pings_a_quiet_client(raw_keepalive_broker):
    conn = RawConnection(raw_keepalive_broker.url)
    try:
        conn.connect()
        assert conn.recv_type(BaseCommand.PING, 5).command.type == BaseCommand.PING
        conn.send(pb.CommandPong())
        assert conn.recv_type(BaseCommand.PING, 5)  # still connected: pinged again
        assert conn.closed_by_broker(5)  # no answer to this ping: closed
    finally:
        conn.close()


@pytest.fixture
def raw_keepalive_broker():
    from tests.kit.broker_thread import BrokerThread

    b = BrokerThread(config=ServiceConfig(keep_alive_interval_s=0.3)).start()
    yield b
    b.stop()


def test_ack_response_consumer_stats_and_topics_of_namespace(broker, raw, client):
    topic = unique_topic("listed")
    conn = raw()
    name = make_producer(conn, topic)
    conn.send_raw(send_frame(1, name, 0, b"payload"))
    receipt = conn.recv_type(BaseCommand.SEND_RECEIPT).command.send_receipt
    conn.send(pb.CommandSubscribe(topic=topic, subscription="s", subType=pb.CommandSubscribe.Exclusive,
                                  consumer_id=1, request_id=2, initialPosition=pb.CommandSubscribe.Earliest))
    conn.recv_type(BaseCommand.SUCCESS)
    conn.send(pb.CommandFlow(consumer_id=1, messagePermits=10))
    message = conn.recv_type(BaseCommand.MESSAGE)
    assert message.command.message.message_id == receipt.message_id and message.payload == b"payload"
    conn.send(pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, request_id=3,
                            message_id=[message.command.message.message_id]))
    r = conn.recv_type(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert r.request_id == 3 and not r.HasField("error")
    conn.send(pb.CommandConsumerStats(request_id=4, consumer_id=1))
    s = conn.recv_type(BaseCommand.CONSUMER_STATS_RESPONSE).command.consumerStatsResponse
    assert s.request_id == 4 and s.type == "Exclusive" and s.msgBacklog == 0 and s.availablePermits == 9
    conn.send(pb.CommandGetTopicsOfNamespace(request_id=5, namespace="public/default",
                                             topics_pattern="persistent://public/default/listed-.*"))
    t = conn.recv_type(BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE).command.getTopicsOfNamespaceResponse
    assert list(t.topics) == [topic] and t.filtered
    conn.send(pb.CommandGetLastMessageId(consumer_id=1, request_id=6))
    last = conn.recv_type(BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE).command.getLastMessageIdResponse
    assert (last.last_message_id.ledgerId, last.last_message_id.entryId) == \
        (receipt.message_id.ledgerId, receipt.message_id.entryId)
    still_serving(client)


def test_closing_the_service_tells_clients_first(broker, raw):
    topic = unique_topic()
    conn = raw()
    make_producer(conn, topic)
    conn.send(pb.CommandSubscribe(topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=7,
                                  request_id=2))
    conn.recv_type(BaseCommand.SUCCESS)
    broker.run(broker.service.close)
    types = []
    while (frame := conn.recv()) is not None:
        types.append(frame.command.type)
    assert BaseCommand.CLOSE_PRODUCER in types and BaseCommand.CLOSE_CONSUMER in types


def test_replicated_subscription_flag_is_kept_in_cursor_properties(broker, client):
    topic = unique_topic()
    client.subscribe(topic, "geo", replicate_subscription_state_enabled=True)
    stats = broker.stats(topic)["subscriptions"]["geo"]
    assert stats["isReplicated"]
    props = broker.call(lambda: broker.service.topics()[topic].subscriptions["geo"].cursor.properties)
    assert props.get("pulsar.replicated.subscription") == 1
