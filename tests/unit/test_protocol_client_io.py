"""The protocol client's I/O against a scripted in-process broker double (:class:`FakeBroker`).

The double speaks just enough of the protocol (CONNECT, LOOKUP, PARTITIONED_METADATA, PRODUCER, SEND with
deduplication, SUBSCRIBE, FLOW, ACK, SEEK, CLOSE_*) and lets a test inject what a real broker does only
under failure: dropped connections, CLOSE_PRODUCER / CLOSE_CONSUMER, held or out-of-order receipts,
SEND_ERROR, silence instead of PONG, lookup redirects. The same behaviours against the real broker are in
``tests/integration/test_protocol_client_broker.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from dataclasses import dataclass, field

import pytest

from tests.kit.wait import wait_for_async

from magnetar.protocol import (
    FrameDecoder,
    MessageId,
    encode_command,
    encode_entry,
    encode_message_frame_from_entry,
    join_batch,
    pb,
    wrap,
)
from magnetar.protocol.client import (
    AlreadyClosedError,
    Auth,
    BatchBuilder,
    Client,
    ConnectError,
    Connection,
    ConnectionClosedError,
    HandlerState,
    InitialPosition,
    NotAllowedError,
    ProducerFencedError,
    SendTimeoutError,
    SubscriptionType,
    TooManyLookupRedirectsError,
    TopicNotFoundError,
    message_metadata,
)

T = pb.BaseCommand
TOPIC = "persistent://public/default/t"


# --------------------------------------------------------------------------------------------------------
# The broker double
# --------------------------------------------------------------------------------------------------------


@dataclass
class StoredEntry:
    metadata: pb.MessageMetadata
    entry: bytes  # from 0x0e01 on, as received
    num_messages: int


@dataclass
class FakeSub:
    name: str
    next_index: int
    acked: set[int] = field(default_factory=set)


@dataclass
class FakeConsumer:
    conn: "FakeConn"
    consumer_id: int
    topic: str
    sub: FakeSub
    permits: int = 0


class FakeConn:
    def __init__(self, broker: "FakeBroker", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.producers: dict[int, tuple[str, str]] = {}  # producer_id -> (topic, name)
        self.connect: pb.CommandConnect | None = None

    def send(self, cmd: pb.BaseCommand) -> None:
        if not self.writer.is_closing():
            self.writer.write(encode_command(cmd))

    def send_raw(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def abort(self) -> None:
        self.writer.transport.abort()

    async def run(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    return
                for frame in self.decoder.feed(data):
                    self.broker.commands.append(frame.command.type)
                    await self.broker.handle(self, frame)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.broker.conns.discard(self)
            for c in [c for c in self.broker.consumers if c.conn is self]:
                self.broker.consumers.remove(c)
            self.writer.close()


class FakeBroker:
    """See the module docstring. Every knob is a plain attribute a test sets."""

    def __init__(self) -> None:
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self.conns: set[FakeConn] = set()
        self.commands: list[int] = []
        self.connects: list[pb.CommandConnect] = []
        self.topics: dict[str, list[StoredEntry]] = {}
        self.subs: dict[tuple[str, str], FakeSub] = {}
        self.consumers: list[FakeConsumer] = []
        self.sends: list[tuple[int, int]] = []  # (producer_id, sequence_id) as received, resends included
        self.acks: list[pb.CommandAck] = []
        self.seeks: list[pb.CommandSeek] = []
        self.dedup: dict[str, int] = {}  # producer name -> highest persisted sequence id
        self.names = itertools.count(1)
        # knobs
        self.answer_pings = True
        self.hold_receipts = False
        self.held: list[tuple[FakeConn, pb.BaseCommand]] = []
        self.send_errors: dict[int, int] = {}  # sequence id -> ServerError code (once)
        self.producer_errors: list[int] = []  # ServerError codes for the next PRODUCER commands
        self.subscribe_errors: list[int] = []
        self.redirect_to: str | None = None
        self.lookup_error: int | None = None
        self.partitions: dict[str, int] = {}
        self.connect_error: int | None = None
        self.max_message_size = 5 * 1024 * 1024
        self.proxied_broker_url: str | None = None  # answer lookups as a proxy: proxy_through_service_url
        self.tasks: set[asyncio.Task] = set()
        self.scheme = "pulsar"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    async def start(self, *, ssl_context: ssl.SSLContext | None = None, port: int = 0) -> "FakeBroker":
        if ssl_context is not None:
            self.scheme = "pulsar+ssl"
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", port, ssl=ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for conn in list(self.conns):
            conn.abort()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = FakeConn(self, reader, writer)
        self.conns.add(conn)
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await conn.run()
        finally:
            self.tasks.discard(task)

    # -- faults --------------------------------------------------------------------------------------------

    def drop_connections(self) -> None:
        for conn in list(self.conns):
            conn.abort()

    def close_producers(self, assigned_url: str | None = None) -> None:
        for conn in list(self.conns):
            for producer_id in list(conn.producers):
                close = pb.CommandCloseProducer(producer_id=producer_id, request_id=0)
                if assigned_url:
                    close.assignedBrokerServiceUrl = assigned_url
                conn.send(wrap(close))
                del conn.producers[producer_id]

    def close_consumers(self) -> None:
        for c in list(self.consumers):
            c.conn.send(wrap(pb.CommandCloseConsumer(consumer_id=c.consumer_id, request_id=0)))
            self.consumers.remove(c)

    def release_receipts(self, order: list[int] | None = None) -> None:
        held, self.held = self.held, []
        if order is not None:
            held = [held[i] for i in order]
        for conn, cmd in held:
            conn.send(cmd)

    def ping_all(self) -> None:
        for conn in self.conns:
            conn.send(wrap(pb.CommandPing()))

    # -- commands ------------------------------------------------------------------------------------------

    async def handle(self, conn: FakeConn, frame) -> None:  # noqa: C901 - a command table
        cmd = frame.command
        t = cmd.type
        if t == T.CONNECT:
            conn.connect = cmd.connect
            self.connects.append(cmd.connect)
            if self.connect_error is not None:
                conn.send(wrap(pb.CommandError(request_id=0, error=self.connect_error, message="no")))
                return
            conn.send(wrap(pb.CommandConnected(server_version="fake", protocol_version=20,
                                               max_message_size=self.max_message_size)))
        elif t == T.PING:
            if self.answer_pings:
                conn.send(wrap(pb.CommandPong()))
        elif t == T.PONG:
            pass
        elif t == T.LOOKUP:
            rid = cmd.lookupTopic.request_id
            if self.lookup_error is not None:
                conn.send(wrap(pb.CommandLookupTopicResponse(request_id=rid, response=2, error=self.lookup_error,
                                                             message="lookup failed")))
            elif self.proxied_broker_url:
                conn.send(wrap(pb.CommandLookupTopicResponse(request_id=rid, response=1, proxy_through_service_url=True,
                                                             brokerServiceUrl=self.proxied_broker_url,
                                                             brokerServiceUrlTls=self.proxied_broker_url)))
            elif self.redirect_to and not cmd.lookupTopic.authoritative:
                conn.send(wrap(pb.CommandLookupTopicResponse(request_id=rid, response=0, authoritative=True,
                                                             brokerServiceUrl=self.redirect_to)))
            else:
                conn.send(wrap(pb.CommandLookupTopicResponse(request_id=rid, response=1, brokerServiceUrl=self.url,
                                                             brokerServiceUrlTls=self.url)))
        elif t == T.PARTITIONED_METADATA:
            body = cmd.partitionMetadata
            conn.send(wrap(pb.CommandPartitionedTopicMetadataResponse(
                request_id=body.request_id, partitions=self.partitions.get(body.topic, 0), response=0)))
        elif t == T.PRODUCER:
            body = cmd.producer
            if self.producer_errors:
                conn.send(wrap(pb.CommandError(request_id=body.request_id, error=self.producer_errors.pop(0),
                                               message="producer refused")))
                return
            name = body.producer_name if body.HasField("producer_name") else f"fake-{next(self.names)}"
            conn.producers[body.producer_id] = (body.topic, name)
            conn.send(wrap(pb.CommandProducerSuccess(request_id=body.request_id, producer_name=name,
                                                     last_sequence_id=self.dedup.get(name, -1))))
        elif t == T.SEND:
            self._send(conn, frame)
        elif t == T.CLOSE_PRODUCER:
            conn.producers.pop(cmd.close_producer.producer_id, None)
            conn.send(wrap(pb.CommandSuccess(request_id=cmd.close_producer.request_id)))
        elif t == T.SUBSCRIBE:
            body = cmd.subscribe
            if self.subscribe_errors:
                conn.send(wrap(pb.CommandError(request_id=body.request_id, error=self.subscribe_errors.pop(0),
                                               message="subscribe refused")))
                return
            entries = self.topics.setdefault(body.topic, [])
            sub = self.subs.get((body.topic, body.subscription))
            if sub is None:
                start = 0 if body.initialPosition == pb.CommandSubscribe.Earliest else len(entries)
                if body.HasField("start_message_id") and body.start_message_id.ledgerId == 1:
                    start = body.start_message_id.entryId  # inclusive: the client filters what it saw
                sub = FakeSub(body.subscription, start)
                if body.durable:
                    self.subs[(body.topic, body.subscription)] = sub
            else:
                sub.next_index = min([i for i in range(len(entries)) if i not in sub.acked], default=len(entries))
            self.consumers.append(FakeConsumer(conn, body.consumer_id, body.topic, sub))
            conn.send(wrap(pb.CommandSuccess(request_id=body.request_id)))
        elif t == T.FLOW:
            for c in self.consumers:
                if c.conn is conn and c.consumer_id == cmd.flow.consumer_id:
                    c.permits += cmd.flow.messagePermits
            self.dispatch()
        elif t == T.ACK:
            self.acks.append(cmd.ack)
            for c in self.consumers:
                if c.conn is conn and c.consumer_id == cmd.ack.consumer_id:
                    for mid in cmd.ack.message_id:
                        if cmd.ack.ack_type == pb.CommandAck.Cumulative:
                            c.sub.acked.update(range(mid.entryId + 1))
                        else:
                            c.sub.acked.add(mid.entryId)
        elif t == T.SEEK:
            self.seeks.append(cmd.seek)
            conn.send(wrap(pb.CommandSuccess(request_id=cmd.seek.request_id)))
        elif t == T.CLOSE_CONSUMER:
            self.consumers = [c for c in self.consumers
                              if not (c.conn is conn and c.consumer_id == cmd.close_consumer.consumer_id)]
            conn.send(wrap(pb.CommandSuccess(request_id=cmd.close_consumer.request_id)))
        elif t == T.GET_LAST_MESSAGE_ID:
            body = cmd.getLastMessageId
            topic = next(c.topic for c in self.consumers if c.conn is conn and c.consumer_id == body.consumer_id)
            last = len(self.topics.get(topic, [])) - 1
            conn.send(wrap(pb.CommandGetLastMessageIdResponse(
                request_id=body.request_id, last_message_id=pb.MessageIdData(ledgerId=1, entryId=last % (1 << 64)))))
        elif t == T.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            pass

    def _send(self, conn: FakeConn, frame) -> None:
        send = frame.command.send
        self.sends.append((send.producer_id, send.sequence_id))
        topic, name = conn.producers[send.producer_id]
        if send.sequence_id in self.send_errors:
            code = self.send_errors.pop(send.sequence_id)
            conn.send(wrap(pb.CommandSendError(producer_id=send.producer_id, sequence_id=send.sequence_id,
                                               error=code, message="injected")))
            return
        highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else send.sequence_id
        if not frame.checksum_ok:
            conn.send(wrap(pb.CommandSendError(producer_id=send.producer_id, sequence_id=send.sequence_id,
                                               error=pb.ChecksumError, message="checksum")))
            return
        if send.sequence_id <= self.dedup.get(name, -1):
            ledger, entry = -1, -1
        else:
            entries = self.topics.setdefault(topic, [])
            entries.append(StoredEntry(frame.metadata, frame.entry, send.num_messages))
            ledger, entry = 1, len(entries) - 1
            self.dedup[name] = highest
        receipt = wrap(pb.CommandSendReceipt(producer_id=send.producer_id, sequence_id=send.sequence_id,
                                             message_id=pb.MessageIdData(ledgerId=ledger % (1 << 64),
                                                                         entryId=entry % (1 << 64))))
        if self.hold_receipts:
            self.held.append((conn, receipt))
        else:
            conn.send(receipt)
        self.dispatch()

    def dispatch(self) -> None:
        for c in self.consumers:
            entries = self.topics.get(c.topic, [])
            while c.permits > 0 and c.sub.next_index < len(entries):
                index = c.sub.next_index
                c.sub.next_index += 1
                if index in c.sub.acked:
                    continue
                stored = entries[index]
                message = wrap(pb.CommandMessage(consumer_id=c.consumer_id,
                                                 message_id=pb.MessageIdData(ledgerId=1, entryId=index)))
                c.conn.send_raw(encode_message_frame_from_entry(message, stored.entry))
                c.permits -= stored.num_messages


@pytest.fixture
async def fake():
    broker = await FakeBroker().start()
    yield broker
    await broker.close()


async def eventually(predicate, timeout_s: float = 5.0, what: str = "condition") -> None:
    await wait_for_async(predicate, timeout_s, what=what)


def fast_client(url: str, **kwargs) -> Client:
    kwargs.setdefault("operation_timeout_s", 5.0)
    return Client(url, backoff_initial_s=0.02, backoff_max_s=0.2, **kwargs)


# --------------------------------------------------------------------------------------------------------
# Connection
# --------------------------------------------------------------------------------------------------------


async def test_handshake_announces_protocol_20_and_client_version(fake):
    conn = Connection(fake.url, auth=Auth.token("jwt"))
    await conn.start()
    assert await conn.start() is conn  # idempotent
    connect = next(iter(fake.conns)).connect
    assert connect.protocol_version == 20
    assert connect.client_version.startswith("magnetar-")
    assert connect.auth_method_name == "token" and connect.auth_data == b"jwt"
    assert connect.feature_flags.supports_auth_refresh
    assert conn.server_version == "fake" and conn.max_message_size_bytes == fake.max_message_size
    await conn.close()
    await conn.close()
    assert conn.state.value == "closed"


async def test_connect_refused_and_connect_error_are_typed(fake):
    port = fake.port
    fake.connect_error = pb.AuthenticationError
    conn = Connection(fake.url)
    with pytest.raises(Exception) as info:
        await conn.start()
    assert type(info.value).__name__ == "AuthenticationError" and not info.value.retriable
    await fake.close()
    with pytest.raises(ConnectError) as info:
        await Connection(f"pulsar://127.0.0.1:{port}", connect_timeout_s=2).start()
    assert info.value.retriable


def _self_signed(cert_path, key_path) -> None:
    """A one-day self-signed certificate for localhost / 127.0.0.1."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))


async def test_tls_connection_with_a_trusted_certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    _self_signed(cert, key)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    broker = await FakeBroker().start(ssl_context=server_ctx)
    try:
        assert broker.url.startswith("pulsar+ssl://")
        with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await Connection(broker.url, connect_timeout_s=5).start()  # the system CAs do not know it
        trusting = ssl.create_default_context(cafile=str(cert))
        async with fast_client(broker.url, ssl_context=trusting, auth=Auth.token(lambda: "fresh")) as client:
            producer = await client.create_producer(TOPIC)
            assert (await producer.send_and_wait(b"secret")) == MessageId(1, 0)
        assert [c.auth_data for c in broker.connects] == [b"fresh"]  # one connection, token from the callable
    finally:
        await broker.close()


async def test_lookup_through_a_proxy_names_the_broker_in_connect(fake):
    fake.proxied_broker_url = "pulsar://broker-7.internal:6650"
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        await producer.send_and_wait(b"via proxy")
        conn = producer.connection
        assert str(conn.logical_url) == "pulsar://broker-7.internal:6650" and conn.url.hosts[0][1] == fake.port
        assert sorted(c.connect.proxy_to_broker_url for c in fake.conns) == ["", "broker-7.internal:6650"]


async def test_requests_are_correlated_and_errors_mapped(fake):
    conn = await Connection(fake.url).start()
    answers = await asyncio.gather(*(conn.request(pb.CommandLookupTopic(topic=f"{TOPIC}-{i}")) for i in range(20)))
    assert len({a.lookupTopicResponse.request_id for a in answers}) == 20
    fake.producer_errors = [pb.ProducerFenced]
    with pytest.raises(ProducerFencedError):
        await conn.request(pb.CommandProducer(topic=TOPIC, producer_id=1))
    await conn.close()
    with pytest.raises(ConnectionClosedError):
        await conn.request(pb.CommandLookupTopic(topic=TOPIC))


async def test_broker_ping_is_answered_and_silent_broker_is_dropped(fake):
    conn = await Connection(fake.url, keep_alive_interval_s=0.2).start()
    before = len(fake.commands)
    fake.ping_all()
    await eventually(lambda: T.PONG in fake.commands[before:], what="PONG")
    fake.answer_pings = False
    reason = await asyncio.wait_for(conn.wait_closed(), 3)
    assert isinstance(reason, ConnectionClosedError) and "keep-alive" in str(reason)
    assert T.PING in fake.commands
    await conn.close()


async def test_garbage_from_the_broker_closes_the_connection_and_fails_requests(fake):
    conn = await Connection(fake.url).start()
    pending = asyncio.ensure_future(conn.request(pb.CommandLookupTopic(topic=TOPIC), timeout_s=5))
    await asyncio.sleep(0)
    for c in fake.conns:
        c.send_raw(b"\x00\x00\x00\x05\x00\x00\x00\x01\xff")
    with pytest.raises(ConnectionClosedError):
        await pending
    assert "protocol" in str(conn.close_reason)
    await conn.close()


# --------------------------------------------------------------------------------------------------------
# Lookup
# --------------------------------------------------------------------------------------------------------


async def test_lookup_follows_redirects_and_bounds_them(fake):
    owner = await FakeBroker().start()
    try:
        fake.redirect_to = owner.url
        async with fast_client(fake.url) as client:
            result = await client.lookup(TOPIC)
            assert str(result.logical_url) == owner.url and result.physical_url == result.logical_url
            producer = await client.create_producer(TOPIC)
            assert producer.connection.url.hosts[0][1] == owner.port
            await producer.send_and_wait(b"x")
            assert len(owner.topics[TOPIC]) == 1 and TOPIC not in fake.topics
        owner.redirect_to = fake.url  # two brokers bouncing the topic forever... but authoritative stops it
        fake.redirect_to = owner.url
        async with fast_client(fake.url) as client:
            assert str((await client.lookup(TOPIC)).logical_url) == owner.url
    finally:
        await owner.close()


async def test_lookup_redirect_loop_is_bounded(fake):
    fake.redirect_to = fake.url
    # The double answers Connect once a lookup is authoritative; make it keep redirecting.
    original = fake.handle

    async def always_redirect(conn, frame):
        if frame.command.type == T.LOOKUP:
            rid = frame.command.lookupTopic.request_id
            conn.send(wrap(pb.CommandLookupTopicResponse(request_id=rid, response=0, brokerServiceUrl=fake.url)))
        else:
            await original(conn, frame)

    fake.handle = always_redirect
    async with Client(fake.url, max_lookup_redirects=3) as client:
        with pytest.raises(TooManyLookupRedirectsError):
            await client.lookup(TOPIC)
    assert fake.commands.count(T.LOOKUP) == 4


async def test_lookup_failure_is_typed(fake):
    fake.lookup_error = pb.TopicNotFound
    async with fast_client(fake.url) as client:
        with pytest.raises(TopicNotFoundError):
            await client.create_producer(TOPIC)


async def test_partitioned_topics_are_refused_with_a_hint(fake):
    fake.partitions[TOPIC] = 3
    async with fast_client(fake.url) as client:
        assert await client.get_partitions(TOPIC) == 3
        assert await client.get_partitioned_topic_names(TOPIC) == [f"{TOPIC}-partition-{i}" for i in range(3)]
        with pytest.raises(NotAllowedError, match="partition"):
            await client.create_producer(TOPIC)
        producer = await client.create_producer(f"{TOPIC}-partition-2")
        mid = await producer.send_and_wait(b"p")
        assert mid.partition == 2


# --------------------------------------------------------------------------------------------------------
# Producer
# --------------------------------------------------------------------------------------------------------


async def test_send_builds_metadata_and_receipts_complete_in_order(fake):
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        assert producer.producer_name == "fake-1"
        futures = [await producer.send(f"m{i}".encode(), key=f"k{i}", properties={"i": str(i)}, event_time_ms=7)
                   for i in range(100)]
        ids = await asyncio.gather(*futures)
        assert ids == sorted(ids) and len(set(ids)) == 100
        stored = fake.topics[TOPIC]
        md = stored[5].metadata
        assert md.producer_name == "fake-1" and md.sequence_id == 5 and md.partition_key == "k5"
        assert md.event_time == 7 and md.publish_time > 0 and md.properties[0].value == "5"
        assert not md.HasField("num_messages_in_batch")


async def test_send_entry_keeps_metadata_as_given(fake):
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC, producer_name="pulsar.repl.us-east")
        builder = BatchBuilder(max_messages=10)
        for i in range(10):
            builder.add(f"b{i}".encode(), sequence_id=40 + i)
        batch = builder.build(producer_name="origin-producer", sequence_id=40, publish_time_ms=1234)
        batch.metadata.replicated_from = "us-east"
        mid = await (await producer.send_entry(batch.metadata, batch.payload, num_messages=10,
                                               sequence_id=40, highest_sequence_id=49))
        assert mid == MessageId(1, 0)
        stored = fake.topics[TOPIC][0]
        assert stored.metadata == batch.metadata  # origin producer name, sequence id, publish time kept
        assert stored.entry.endswith(batch.payload) and stored.num_messages == 10
        assert fake.dedup["pulsar.repl.us-east"] == 49  # the SEND carried the highest sequence id


async def test_send_raw_entry_sends_bytes_unchanged_and_checksum_errors_fail_one_send(fake):
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        good = encode_entry(message_metadata(producer_name=producer.producer_name, sequence_id=1), b"ok")
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF
        bad = await producer.send_raw_entry(bytes(corrupt), sequence_id=0)
        ok = await producer.send_raw_entry(good, sequence_id=1)
        with pytest.raises(Exception, match="ChecksumError"):
            await bad
        assert (await ok) == MessageId(1, 0)
        assert fake.topics[TOPIC][0].entry == good


async def test_pending_queue_is_bounded(fake):
    fake.hold_receipts = True
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC, max_pending_sends=5)
        futures = [await producer.send(b"x") for _ in range(5)]
        blocked = asyncio.ensure_future(producer.send(b"y"))
        await asyncio.sleep(0.1)
        assert not blocked.done() and producer.pending_sends == 5
        fake.hold_receipts = False
        fake.release_receipts()
        await asyncio.gather(*futures)
        assert (await (await blocked)) == MessageId(1, 5)


async def test_resend_after_connection_drop_keeps_sequence_ids_and_dedups(fake):
    fake.hold_receipts = True
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        futures = [await producer.send(f"m{i}".encode()) for i in range(20)]
        await eventually(lambda: len(fake.sends) == 20, what="20 sends")
        fake.hold_receipts = False
        fake.held.clear()  # persisted, but the receipts are lost with the connection
        fake.drop_connections()
        ids = await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert producer.reconnections == 1 and producer.state is HandlerState.READY
        assert [seq for _, seq in fake.sends] == list(range(20)) * 2  # the same sequence ids, re-sent
        assert len(fake.topics[TOPIC]) == 20  # deduplicated
        assert all(mid == MessageId(-1, -1) for mid in ids)  # duplicates are answered with -1:-1
        mid = await producer.send_and_wait(b"after")
        assert mid == MessageId(1, 20)


async def test_broker_close_producer_reconnects_to_assigned_broker(fake):
    other = await FakeBroker().start()
    try:
        async with fast_client(fake.url) as client:
            producer = await client.create_producer(TOPIC, producer_name="p")
            await producer.send_and_wait(b"one")
            fake.hold_receipts = True
            pending = await producer.send(b"two")
            await eventually(lambda: len(fake.sends) == 2, what="second send")
            fake.held.clear()
            fake.close_producers(assigned_url=other.url)
            await asyncio.wait_for(pending, 5)
            assert producer.connection.url.hosts[0][1] == other.port
            assert other.commands.count(T.LOOKUP) == 0  # assigned URL used without a lookup
            assert [seq for _, seq in other.sends] == [1]
    finally:
        await other.close()


async def test_out_of_order_receipt_triggers_reconnect_and_resend(fake):
    fake.hold_receipts = True
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        futures = [await producer.send(f"m{i}".encode()) for i in range(3)]
        await eventually(lambda: len(fake.held) == 3, what="3 held receipts")
        fake.hold_receipts = False
        fake.release_receipts(order=[1])  # the receipt of sequence 1 before 0
        await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert producer.reconnections == 1
        assert T.CLOSE_PRODUCER in fake.commands  # closed the old incarnation before re-creating it


async def test_retriable_send_error_reconnects_and_final_one_fails(fake):
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        fake.send_errors[0] = pb.PersistenceError
        assert (await producer.send_and_wait(b"a")) == MessageId(1, 0)
        assert producer.reconnections == 1
        fake.send_errors[1] = pb.ProducerFenced
        with pytest.raises(ProducerFencedError):
            await producer.send_and_wait(b"b")
        assert producer.state is HandlerState.FAILED
        with pytest.raises(AlreadyClosedError):
            await producer.send(b"c")


async def test_reconnection_retries_busy_and_fails_on_final_errors(fake):
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        fake.producer_errors = [pb.ProducerBusy, pb.ServiceNotReady]
        fake.drop_connections()
        await eventually(lambda: producer.state is HandlerState.READY and producer.reconnections == 1
                         and fake.commands.count(T.PRODUCER) == 4, what="reconnected after 2 refusals")
        fake.producer_errors = [pb.TopicTerminatedError]
        fake.hold_receipts = True
        pending = await producer.send(b"x")
        await eventually(lambda: len(fake.held) == 1, what="held")
        fake.held.clear()
        fake.drop_connections()
        with pytest.raises(Exception, match="TopicTerminated"):
            await asyncio.wait_for(pending, 5)
        assert producer.state is HandlerState.FAILED


async def test_send_timeout_fails_pending_sends(fake):
    fake.hold_receipts = True
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC, send_timeout_s=0.2)
        futures = [await producer.send(b"x") for _ in range(3)]
        for fut in futures:
            with pytest.raises(SendTimeoutError):
                await fut
        assert producer.pending_sends == 0
        fake.release_receipts()  # late receipts are ignored
        await asyncio.sleep(0.05)
        fake.hold_receipts = False
        assert (await producer.send_and_wait(b"y")) == MessageId(1, 3)


async def test_producer_close_flushes_and_is_idempotent(fake):
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        futures = [await producer.send(b"x") for _ in range(10)]
        await producer.close()
        await producer.close()
        assert all(f.done() and not f.exception() for f in futures)
        assert T.CLOSE_PRODUCER in fake.commands
        with pytest.raises(AlreadyClosedError):
            await producer.send(b"y")


async def test_create_producer_waits_for_a_broker_that_is_starting():
    from magnetar.net import free_port

    port = free_port()
    async with fast_client(f"pulsar://127.0.0.1:{port}") as client:
        creating = asyncio.ensure_future(client.create_producer(TOPIC))
        await asyncio.sleep(0.3)
        assert not creating.done()
        broker = await FakeBroker().start(port=port)
        try:
            producer = await asyncio.wait_for(creating, 5)
            assert (await producer.send_and_wait(b"late")) == MessageId(1, 0)
        finally:
            await broker.close()


async def test_initial_create_retries_retriable_then_raises_final(fake):
    async with fast_client(fake.url) as client:
        fake.producer_errors = [pb.ServiceNotReady, pb.ServiceNotReady]
        producer = await client.create_producer(TOPIC)
        assert producer.state is HandlerState.READY
        fake.producer_errors = [pb.ProducerBusy]
        with pytest.raises(Exception, match="ProducerBusy"):
            await client.create_producer(TOPIC, producer_name="taken")


# --------------------------------------------------------------------------------------------------------
# Consumer
# --------------------------------------------------------------------------------------------------------


async def test_consumer_receives_batches_split_and_returns_permits(fake):
    async with fast_client(fake.url) as client:
        consumer = await client.subscribe(TOPIC, "s", initial_position=InitialPosition.EARLIEST,
                                          receiver_queue_size=20)
        producer = await client.create_producer(TOPIC)
        builder = BatchBuilder(max_messages=10)
        for batch_no in range(5):
            first = producer.next_sequence_ids(10)
            for i in range(10):
                builder.add(f"{batch_no}-{i}".encode(), properties={"n": str(i)})
            batch = builder.build(producer_name=producer.producer_name, sequence_id=first)
            await producer.send_entry(batch.metadata, batch.payload, num_messages=10)
        got = [await consumer.receive(timeout_s=5) for _ in range(50)]
        assert [m.payload for m in got] == [f"{b}-{i}".encode() for b in range(5) for i in range(10)]
        assert got[13].message_id == MessageId(1, 1, -1, 3, 10)
        assert got[13].properties == {"n": "3"} and got[13].sequence_id == 13
        flows = [c for c in fake.commands if c == T.FLOW]
        assert len(flows) >= 4  # the first grant plus permits returned as the application consumed


async def test_acks_are_grouped_and_batches_acked_when_complete(fake):
    async with fast_client(fake.url) as client:
        consumer = await client.subscribe(TOPIC, "s", initial_position=InitialPosition.EARLIEST,
                                          ack_group_time_s=0.05)
        producer = await client.create_producer(TOPIC)
        builder = BatchBuilder()
        for i in range(3):
            builder.add(b"x")
        batch = builder.build(producer_name=producer.producer_name, sequence_id=producer.next_sequence_ids(3))
        await producer.send_entry(batch.metadata, batch.payload, num_messages=3)
        for i in range(4):
            await producer.send_and_wait(b"single")
        msgs = [await consumer.receive(timeout_s=5) for _ in range(7)]
        consumer.ack(msgs[0])
        consumer.ack(msgs[1])
        for m in msgs[3:]:
            consumer.ack(m)
        await eventually(lambda: fake.acks, what="grouped ack")
        await asyncio.sleep(0.1)
        acked = [(m.entryId) for a in fake.acks for m in a.message_id]
        assert acked == [1, 2, 3, 4]  # the batch (entry 0) is still 2/3 acknowledged
        consumer.ack(msgs[2])
        await eventually(lambda: [m.entryId for a in fake.acks for m in a.message_id][-1:] == [0], what="batch ack")


async def test_cumulative_ack_inside_a_batch_acks_previous_entry(fake):
    async with fast_client(fake.url) as client:
        consumer = await client.subscribe(TOPIC, "s", initial_position=InitialPosition.EARLIEST, ack_group_time_s=0)
        producer = await client.create_producer(TOPIC)
        await producer.send_and_wait(b"single")
        builder = BatchBuilder()
        for i in range(3):
            builder.add(b"x")
        batch = builder.build(producer_name=producer.producer_name, sequence_id=producer.next_sequence_ids(3))
        await (await producer.send_entry(batch.metadata, batch.payload, num_messages=3))
        msgs = [await consumer.receive(timeout_s=5) for _ in range(4)]
        consumer.ack_cumulative(msgs[2])  # batch index 1 of 3 in entry 1
        await eventually(lambda: fake.acks, what="cumulative ack")
        ack = fake.acks[-1]
        assert ack.ack_type == pb.CommandAck.Cumulative and ack.message_id[0].entryId == 0
        consumer.ack_cumulative(msgs[3])
        await eventually(lambda: fake.acks[-1].message_id[0].entryId == 1, what="whole batch")
        shared = await client.subscribe(TOPIC, "sh", subscription_type=SubscriptionType.SHARED)
        with pytest.raises(Exception, match="cumulative"):
            shared.ack_cumulative(msgs[0])


async def test_consumer_reconnects_after_broker_close_and_gets_redelivery(fake):
    async with fast_client(fake.url) as client:
        consumer = await client.subscribe(TOPIC, "s", initial_position=InitialPosition.EARLIEST, ack_group_time_s=0)
        producer = await client.create_producer(TOPIC)
        for i in range(5):
            await producer.send_and_wait(f"m{i}".encode())
        first = [await consumer.receive(timeout_s=5) for _ in range(2)]
        consumer.ack(first[0])
        await eventually(lambda: fake.acks, what="ack")
        fake.close_consumers()
        await eventually(lambda: consumer.reconnections == 1 and consumer.state is HandlerState.READY,
                         what="reconnected")
        rest = [await consumer.receive(timeout_s=5) for _ in range(4)]
        assert [m.payload for m in rest] == [b"m1", b"m2", b"m3", b"m4"]  # m1 was not acknowledged


async def test_reader_resumes_after_last_delivered_message(fake):
    async with fast_client(fake.url) as client:
        producer = await client.create_producer(TOPIC)
        for i in range(6):
            await producer.send_and_wait(f"m{i}".encode())
        reader = await client.create_reader(TOPIC, MessageId.EARLIEST, receiver_queue_size=100)
        got = [await reader.receive(timeout_s=5) for _ in range(3)]
        fake.drop_connections()
        await eventually(lambda: reader.reconnections >= 1 and reader.state is HandlerState.READY, what="reconnect")
        got += [await reader.receive(timeout_s=5) for _ in range(3)]
        assert [m.payload for m in got] == [f"m{i}".encode() for i in range(6)]
        with pytest.raises(TimeoutError):
            await reader.receive(timeout_s=0.2)


async def test_seek_redeliver_last_id_and_close(fake):
    async with fast_client(fake.url) as client:
        consumer = await client.subscribe(TOPIC, "s", initial_position=InitialPosition.EARLIEST)
        producer = await client.create_producer(TOPIC)
        for i in range(3):
            await producer.send_and_wait(b"x")
        assert await consumer.get_last_message_id() == MessageId(1, 2)
        await consumer.seek(MessageId(1, 1))
        await consumer.seek(1_700_000_000_000)
        assert fake.seeks[0].message_id.entryId == 1 and fake.seeks[1].message_publish_time == 1_700_000_000_000
        consumer.redeliver_unacknowledged()
        await eventually(lambda: T.REDELIVER_UNACKNOWLEDGED_MESSAGES in fake.commands, what="redeliver")
        receiver = asyncio.ensure_future(consumer.receive())
        await asyncio.sleep(0.05)
        consumer._queue.clear()
        await consumer.close()
        with pytest.raises(AlreadyClosedError):
            await receiver
        assert T.CLOSE_CONSUMER in fake.commands


async def test_corrupt_message_is_discarded_with_validation_error(fake):
    async with fast_client(fake.url) as client:
        consumer = await client.subscribe(TOPIC, "s", initial_position=InitialPosition.EARLIEST)
        conn = await client.pool.get(fake.url)
        producer_id = 99
        conn.send_command(wrap(pb.CommandProducer(topic=TOPIC, producer_id=producer_id, request_id=12345)))
        await eventually(lambda: fake.commands.count(T.PRODUCER) == 1, what="raw producer")
        entry = bytearray(encode_entry(message_metadata(producer_name="x", sequence_id=0), b"hello"))
        fake_conn = next(iter(fake.conns))
        fake.topics.setdefault(TOPIC, []).append(StoredEntry(pb.MessageMetadata(), bytes(entry[:-1]) + b"!", 1))
        fake.dispatch()
        await eventually(lambda: fake.acks, what="validation ack")
        assert fake.acks[0].validation_error == pb.CommandAck.ChecksumMismatch
        assert consumer.discarded_messages == 1 and consumer.queued == 0
        assert fake_conn in fake.conns  # the connection survives


async def test_client_close_closes_everything(fake):
    client = fast_client(fake.url)
    producer = await client.create_producer(TOPIC)
    consumer = await client.subscribe(TOPIC, "s")
    await client.close()
    await client.close()
    assert producer.state is HandlerState.CLOSED and consumer.state is HandlerState.CLOSED
    assert all(c.state.value == "closed" for c in client.pool._conns.values())
    with pytest.raises(AlreadyClosedError):
        await client.create_producer(TOPIC)


async def test_a_producer_of_raw_bytes_can_join_batches(fake):
    """join_batch output sent through send_entry splits back into the same items on the consumer."""
    async with fast_client(fake.url) as client:
        consumer = await client.subscribe(TOPIC, "s", initial_position=InitialPosition.EARLIEST)
        producer = await client.create_producer(TOPIC)
        items = [(pb.SingleMessageMetadata(partition_key=f"k{i}"), f"v{i}".encode()) for i in range(4)]
        md = message_metadata(producer_name=producer.producer_name, sequence_id=producer.next_sequence_ids(4))
        md.num_messages_in_batch = 4
        await producer.send_entry(md, join_batch(items), num_messages=4)
        got = [await consumer.receive(timeout_s=5) for _ in range(4)]
        assert [(m.key, m.payload) for m in got] == [(f"k{i}", f"v{i}".encode()) for i in range(4)]
