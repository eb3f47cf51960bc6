"""State that must survive a topic reload, on real storage (ZooKeeper + 3 bookie processes): batch-index
acknowledgements (stored with the cursor) and the exclusive producers' topic epoch (stored in the managed
ledger's properties). Without them a reload redelivers acknowledged batch members, and lets a fenced
exclusive producer back in."""

from __future__ import annotations

import json
import socket
import threading
import time

import pulsar
import pytest

from broker.managed_ledger import InitialPosition, ManagedLedgerFencedError, Position
from broker.service.topics.topic import TOPIC_EPOCH_PROPERTY
from config_store.managed_ledgers import ManagedCursorInfo, cursor_path
from magnetar.protocol import FrameDecoder, encode_command, pb, wrap
from tests.integration.test_managed_ledger import TOPIC, Broker, cfg, payload
from tests.kit.bookies import start_bookies
from tests.kit.broker_thread import (BrokerThread, broker, make_client, real_storage,  # noqa: F401
                                     storage, unique_topic)
from tests.kit.wait import wait_for

RECEIVE_MS = 10_000
FIRST_FIVE_ACKED = 0b1111100000  # members 5..9 of a batch of 10 still unacknowledged
BOOKIES_ONLY = pytest.mark.parametrize("storage", ["bookies"])  # the in-memory test double stores neither


def quiet_client(url: str) -> pulsar.Client:
    return make_client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


# ------------------------------------------------------------------------------------------ managed ledger


@pytest.fixture
def bookies(tmp_path, zk_connect):
    return start_bookies(3, tmp_path, zk_connect)


async def test_cursor_ack_sets_and_ledger_properties_round_trip(bookies, zk_connect) -> None:
    a = Broker(zk_connect, cfg())
    await a.__aenter__()
    try:
        ml = await a.factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        p = [await ml.add_entry(payload(i)) for i in range(6)]
        await cursor.delete_batch_indexes({p[1]: FIRST_FIVE_ACKED, p[3]: 1 << 70})
        await cursor.delete([p[0]])
        await ml.set_properties({"k": "v"})
        await cursor.flush()
        stored = json.loads((await a.store.get(cursor_path(TOPIC, "sub"))).value)
        assert stored["batchDeletedIndexes"] == [[*p[1], [FIRST_FIVE_ACKED]], [*p[3], [0, 64]]]
    finally:
        await a.abandon()  # a crash: what was flushed must come back

    async with Broker(zk_connect, cfg()) as b:
        ml = await b.factory.open(TOPIC)
        cursor = ml.cursors["sub"]
        assert ml.properties == {"k": "v"}
        assert cursor.mark_delete_position == p[0]
        assert cursor.batch_ack_sets() == {p[1]: FIRST_FIVE_ACKED, p[3]: 1 << 70}
        assert [e.position for e in await cursor.read_entries(10)] == p[1:]  # partly acked entries are due
        await cursor.delete_batch_indexes({p[3]: 0})  # its last members: the entry is deleted
        await cursor.mark_delete(p[1])  # passes the other one
        assert cursor.batch_ack_sets() == {} and cursor.mark_delete_position == p[1]
        await ml.close()

    async with Broker(zk_connect, cfg()) as c:
        ml = await c.factory.open(TOPIC)
        info = ManagedCursorInfo.from_json((await c.store.get(cursor_path(TOPIC, "sub"))).value)
        assert info.batch_deleted == [] and ml.cursors["sub"].batch_ack_sets() == {}
        assert ml.cursors["sub"].is_deleted(p[3]) and not ml.cursors["sub"].is_deleted(p[2])


async def test_properties_of_a_taken_over_ledger_cannot_be_set_by_the_old_owner(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg()) as a, Broker(zk_connect, cfg()) as b:
        ml_a = await a.factory.open(TOPIC)
        await ml_a.set_properties({TOPIC_EPOCH_PROPERTY: "1"})
        ml_b = await b.factory.open(TOPIC)
        assert ml_b.properties == {TOPIC_EPOCH_PROPERTY: "1"}
        await ml_b.set_properties({TOPIC_EPOCH_PROPERTY: "2"})
        with pytest.raises(ManagedLedgerFencedError):
            await ml_a.set_properties({TOPIC_EPOCH_PROPERTY: "3"})
        assert ml_b.properties == {TOPIC_EPOCH_PROPERTY: "2"} and ml_a.properties == {TOPIC_EPOCH_PROPERTY: "1"}


# ------------------------------------------------------------------------------------------ batch-index acks


def _batch_of_ten_with_five_acked(url: str, topic: str, *, persisted):
    """Publishes one batch of 10, acknowledges members 0..4 one by one (batch-index acks); returns once
    ``persisted()`` says the broker has them."""
    c = quiet_client(url)
    try:
        consumer = c.subscribe(topic, "s", batch_index_ack_enabled=True)
        producer = c.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                     batching_max_publish_delay_ms=60_000)
        for i in range(10):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        msgs = [consumer.receive(RECEIVE_MS) for _ in range(10)]
        ids = [m.message_id() for m in msgs]
        assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == 1, "expected one batch entry"
        assert [i.batch_index() for i in ids] == list(range(10))
        for m in msgs[:5]:
            consumer.acknowledge(m)
        position = Position(ids[0].ledger_id(), ids[0].entry_id())
        wait_for(lambda: persisted(position), 10, what="the batch-index acks reached the cursor")
        consumer.close()
        return position
    finally:
        c.close()


def _only_the_rest_arrives(url: str, topic: str) -> None:
    c = quiet_client(url)
    try:
        consumer = c.subscribe(topic, "s", batch_index_ack_enabled=True)
        got = [consumer.receive(RECEIVE_MS) for _ in range(5)]
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5, 10)]
        assert [m.message_id().batch_index() for m in got] == list(range(5, 10))
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)
        for m in got:
            consumer.acknowledge(m)
    finally:
        c.close()


@BOOKIES_ONLY
def test_batch_index_acks_survive_an_unload(broker):
    topic = unique_topic("batch-acks")

    def reached_cursor(position: Position) -> bool:
        sub = broker.service.topics()[topic].subscriptions["s"]
        return sub.cursor.batch_ack_set(position) == FIRST_FIVE_ACKED

    position = _batch_of_ten_with_five_acked(broker.url, topic, persisted=lambda p: broker.call(reached_cursor, p))
    assert broker.run(broker.service.unload_topic, topic) is True
    _only_the_rest_arrives(broker.url, topic)
    wait_for(lambda: broker.stats(topic)["subscriptions"]["s"]["msgBacklog"] == 0, 10,
             what="the batch entry deleted once its last members were acknowledged")
    assert broker.call(lambda: broker.service.topics()[topic].subscriptions["s"].cursor.is_deleted(position))


def test_batch_index_acks_survive_a_broker_crash(tmp_path, zk_connect):
    first = real_storage(tmp_path, zk_connect, start=True)
    bookies = first.pop("bookies")
    first.pop("held")
    a = BrokerThread(**first).start()
    topic = unique_topic("batch-acks-crash")
    try:
        def persisted(position: Position) -> bool:
            cursor = a.service.topics()[topic].subscriptions["s"].cursor
            return cursor.batch_ack_set(position) == FIRST_FIVE_ACKED and not cursor.dirty

        _batch_of_ten_with_five_acked(a.url, topic, persisted=lambda p: a.call(persisted, p))
        a.crash()  # nothing flushed on the way down: what the throttled persist wrote must be enough

        second = real_storage(tmp_path, zk_connect, start=False)
        second.pop("bookies"), second.pop("held")
        b = BrokerThread(**second).start()
        try:
            _only_the_rest_arrives(b.url, topic)
        finally:
            b.stop()
    finally:
        a.stop()
        for bk in bookies:
            bk.process.cleanup()


# ------------------------------------------------------------------------------------------ topic epoch


class RawProducerConnection:
    """PRODUCER commands with a chosen topic epoch (neither pulsar-client nor Magnetar's client sets it)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("pulsar://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.decoder = FrameDecoder()
        self.frames: list = []
        self.sock.sendall(encode_command(wrap(pb.CommandConnect(client_version="epoch-test", protocol_version=20))))
        self._next(lambda c: c.type == pb.BaseCommand.CONNECTED)

    def close(self) -> None:
        self.sock.close()

    def _next(self, wanted, timeout_s: float = 10.0) -> pb.BaseCommand:
        deadline = time.monotonic() + timeout_s
        while True:
            while self.frames:
                command = self.frames.pop(0).command
                if wanted(command):
                    return command
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.frames.extend(self.decoder.feed(data))

    def create_producer(self, topic: str, *, producer_id: int, topic_epoch: int) -> pb.BaseCommand:
        """Sends an Exclusive PRODUCER carrying ``topic_epoch``; returns PRODUCER_SUCCESS or ERROR."""
        self.sock.sendall(encode_command(wrap(pb.CommandProducer(
            topic=topic, producer_id=producer_id, request_id=producer_id, topic_epoch=topic_epoch,
            producer_access_mode=pb.ProducerAccessMode.Exclusive))))
        def answer(c: pb.BaseCommand) -> bool:
            if c.type == pb.BaseCommand.PRODUCER_SUCCESS:
                return c.producer_success.request_id == producer_id and c.producer_success.producer_ready
            return c.type == pb.BaseCommand.ERROR and c.error.request_id == producer_id

        return self._next(answer)


@BOOKIES_ONLY
@pytest.mark.parametrize("reload", ["unload", "restart"])
def test_fenced_exclusive_producer_stays_fenced_after_a_reload(broker, reload):
    topic = unique_topic("epoch")

    def stored_epoch():
        return broker.call(lambda: broker.service.topics()[topic].ml.properties.get(TOPIC_EPOCH_PROPERTY))

    c1, c2 = quiet_client(broker.url), quiet_client(broker.url)
    try:
        p1 = c1.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        p1.send(b"one")
        assert stored_epoch() == "1"
        p2 = c2.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
        p2.send(b"two")
        assert stored_epoch() == "2" and broker.stats(topic)["topicEpoch"] == 2
    finally:
        c2.close()
        try:
            c1.close()
        except pulsar.PulsarException:
            pass  # its producer was fenced
    if reload == "unload":
        assert broker.run(broker.service.unload_topic, topic) is True
    else:
        broker.restart_service()

    raw = RawProducerConnection(broker.url)
    try:
        stale = raw.create_producer(topic, producer_id=1, topic_epoch=1)
        assert stale.type == pb.BaseCommand.ERROR and stale.error.error == pb.ServerError.ProducerFenced, stale
        current = raw.create_producer(topic, producer_id=2, topic_epoch=2)
        assert current.type == pb.BaseCommand.PRODUCER_SUCCESS and current.producer_success.topic_epoch == 2
        assert broker.stats(topic)["topicEpoch"] == 2
    finally:
        raw.close()
    wait_for(lambda: not broker.stats(topic)["publishers"], 10, what="the raw producer gone with its connection")
    c3 = quiet_client(broker.url)
    try:
        c3.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive).send(b"three")
        assert stored_epoch() == "3"
    finally:
        c3.close()


@BOOKIES_ONLY
def test_wait_for_exclusive_producer_is_answered_once_its_epoch_is_stored(broker):
    topic = unique_topic("epoch-wait")
    c1, c2 = quiet_client(broker.url), quiet_client(broker.url)
    try:
        p1 = c1.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        created = {}
        t = threading.Thread(target=lambda: created.setdefault("p", c2.create_producer(
            topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)))
        t.start()
        wait_for(lambda: broker.stats(topic)["waitingPublishers"] == 1, 10, what="second producer queued")
        p1.close()
        t.join(15)
        p2 = created["p"]
        p2.send(b"mine now")
        assert broker.call(lambda: broker.service.topics()[topic].ml.properties) == {TOPIC_EPOCH_PROPERTY: "2"}
    finally:
        c2.close()
        c1.close()
