"""Topic logic without sockets: dispatchers, acknowledgements, producers and deduplication, on the
in-memory managed ledger, with fake connections that record every frame the broker writes."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.managed_ledger.errors import ManagedLedgerReadError
from broker.service import BrokerService, ServiceConfig
from broker.service.errors import ConsumerAssignError, ConsumerBusyError
from broker.ownership_api import SelfOwnership
from broker.service.session.connection import ConnectionState
from broker.service.session.consumer_endpoints import ConsumerEndpoints
from broker.service.session.requests import acked_ids, position_of, subscribe_request
from broker.service.session.commands import HANDLERS
from broker.service.topics.dispatch.key_ranges import key_hash
from magnetar.protocol import FrameDecoder, encode_entry, pb
from tests.kit.memory_ledger import MemoryManagedLedgerFactory
from tests.kit.wait import wait_for_async

BaseCommand = pb.BaseCommand
SubType = pb.CommandSubscribe.SubType
TOPIC = "persistent://public/default/unit"


class FakeConnection(ConsumerEndpoints):
    """Just what producers, consumers and handlers use of a Connection; decodes what is written. Its consumers'
    frames are encoded by the session's real ``ConsumerEndpoints``."""

    def __init__(self, service, name: str = "fake") -> None:
        self.service = service
        self.config = service.config
        self.remote_address = name
        self.client_version = "unit"
        self.protocol_version = 20
        self.state = ConnectionState.CONNECTED
        self.producers: dict = {}
        self.consumers: dict = {}
        self.pending_producers: dict = {}
        self.pending_consumers: dict = {}
        self.frames: list = []
        self._decoder = FrameDecoder()
        self.tasks: set = set()

    closed = property(lambda self: self.state is ConnectionState.CLOSED)

    def write(self, data: bytes) -> None:
        self.frames.extend(self._decoder.feed(data))

    def writelines(self, chunks) -> None:
        self.write(b"".join(bytes(c) for c in chunks))

    write_now = writelines

    def send_command(self, inner) -> None:
        from magnetar.protocol import encode_command, wrap
        self.write(encode_command(wrap(inner)))

    def write_blocked(self) -> bool:
        return False

    async def drain(self) -> None:
        pass

    def publish_started(self) -> None:
        pass

    def publish_finished(self) -> None:
        pass

    def forget_producer(self, pid, producer) -> None:
        self.producers.pop(pid, None)

    def forget_consumer(self, cid, consumer) -> None:
        self.consumers.pop(cid, None)

    def spawn(self, coro, name):
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        return task

    def of_type(self, type_: int) -> list:
        return [f for f in self.frames if f.command.type == type_]

    def messages(self, consumer_id=None) -> list:
        return [f for f in self.of_type(BaseCommand.MESSAGE)
                if consumer_id is None or f.command.message.consumer_id == consumer_id]


@pytest.fixture
async def service():
    svc = BrokerService(config=ServiceConfig(dispatcher_max_round_robin_batch=5),
                        ml_factory=MemoryManagedLedgerFactory(), configuration_store=None,
                        ownership=SelfOwnership("pulsar://x:1"), cluster_name="unit")
    yield svc
    for topic in list(svc._topics.values()):
        await topic.close()


def entry(i: int, key: str = "", marker: bool = False, batch: int = 0) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=int(time.time() * 1000))
    if key:
        md.partition_key = key
    if marker:
        md.marker_type = pb.REPLICATED_SUBSCRIPTION_SNAPSHOT
    if batch:
        md.num_messages_in_batch = batch
    return encode_entry(md, f"m{i}".encode())


async def subscribe(topic, conn, consumer_id, sub="s", sub_type=SubType.Shared, name=None, priority=0,
                    permits=0, initial=pb.CommandSubscribe.Earliest, meta=None):
    cmd = pb.CommandSubscribe(topic=topic.name, subscription=sub, subType=sub_type, consumer_id=consumer_id,
                              request_id=consumer_id, priority_level=priority, initialPosition=initial)
    if meta is not None:
        cmd.keySharedMeta.CopyFrom(meta)
    consumer = await topic.subscribe(subscribe_request(cmd, name or f"c{consumer_id}"), conn)
    conn.consumers[consumer_id] = consumer
    if permits:
        flow(consumer, permits)
    return consumer


def flow(consumer, permits):
    consumer.flow(permits)
    consumer.subscription.dispatcher.consumer_flow(consumer)


async def publish(topic, *entries_):
    for e in entries_:
        await topic.ml.add_entry(e)


async def test_failover_picks_priority_then_name_and_notifies(service):
    topic = await service.get_topic(TOPIC)
    conns = [FakeConnection(service, f"c{i}") for i in range(3)]
    zed = await subscribe(topic, conns[0], 1, sub_type=SubType.Failover, name="zed", priority=1)
    bob = await subscribe(topic, conns[1], 2, sub_type=SubType.Failover, name="bob", priority=1)
    amy = await subscribe(topic, conns[2], 3, sub_type=SubType.Failover, name="amy", priority=2)
    sub = topic.subscriptions["s"]
    assert sub.dispatcher.active is bob  # priority 1 beats 2; "bob" < "zed"
    last = lambda conn: conn.of_type(BaseCommand.ACTIVE_CONSUMER_CHANGE)[-1].command.active_consumer_change.is_active
    assert (last(conns[0]), last(conns[1]), last(conns[2])) == (False, True, False)
    for c in (zed, bob, amy):
        flow(c, 10)
    await publish(topic, entry(0), entry(1))
    await wait_for_async(lambda: len(conns[1].messages()) == 2, 5)
    sub.remove_consumer(bob)
    assert sub.dispatcher.active is zed and last(conns[0]) is True
    await wait_for_async(lambda: len(conns[0].messages()) == 2, 5, what="unacked entries redelivered to zed")
    with pytest.raises(ConsumerBusyError):
        await subscribe(topic, FakeConnection(service), 9, sub_type=SubType.Shared)


async def test_failover_partition_index_spreads_partitions(service):
    for index, expected in [(0, "a"), (1, "b"), (2, "a")]:
        topic = await service.get_topic(f"{TOPIC}-p-partition-{index}")
        conn = FakeConnection(service)
        await subscribe(topic, conn, 1, sub_type=SubType.Failover, name="b")
        await subscribe(topic, conn, 2, sub_type=SubType.Failover, name="a")
        assert topic.subscriptions["s"].dispatcher.active.name == expected


async def test_exclusive_refuses_second(service):
    topic = await service.get_topic(TOPIC)
    await subscribe(topic, FakeConnection(service), 1, sub_type=SubType.Exclusive)
    with pytest.raises(ConsumerBusyError):
        await subscribe(topic, FakeConnection(service), 2, sub_type=SubType.Exclusive)


async def test_shared_serves_lower_priority_level_only_when_higher_is_full(service):
    topic = await service.get_topic(TOPIC)
    hi, lo = FakeConnection(service, "hi"), FakeConnection(service, "lo")
    await subscribe(topic, hi, 1, priority=0)
    await subscribe(topic, lo, 2, priority=5)
    await publish(topic, *[entry(i) for i in range(6)])
    flow(topic.subscriptions["s"].dispatcher.consumers[1], 10)
    flow(topic.subscriptions["s"].dispatcher.consumers[0], 4)
    await wait_for_async(lambda: len(hi.messages()) + len(lo.messages()) == 6, 5)
    assert len(hi.messages()) == 4 and len(lo.messages()) == 2


async def test_shared_round_robin_and_unacked_limit(service):
    service.config.max_unacked_messages_per_consumer = 4
    topic = await service.get_topic(TOPIC)
    a, b = FakeConnection(service, "a"), FakeConnection(service, "b")
    ca = await subscribe(topic, a, 1, permits=100)
    cb = await subscribe(topic, b, 2, permits=100)
    await publish(topic, *[entry(i) for i in range(12)])
    await wait_for_async(lambda: len(a.messages()) + len(b.messages()) == 8, 5, what="both blocked at 4 unacked")
    assert ca.blocked and cb.blocked
    sub = topic.subscriptions["s"]
    ids = [f.command.message.message_id for f in a.messages()]
    sub.acknowledge(ca, acked_ids(ids))
    await wait_for_async(lambda: len(a.messages()) + len(b.messages()) == 12, 5, what="a unblocked by acks")


async def test_markers_are_never_delivered_and_get_acknowledged(service):
    topic = await service.get_topic(TOPIC)
    conn = FakeConnection(service)
    await subscribe(topic, conn, 1, sub_type=SubType.Exclusive, permits=10)
    await publish(topic, entry(0), entry(1, marker=True), entry(2))
    await wait_for_async(lambda: len(conn.messages()) == 2, 5)
    assert [f.metadata.sequence_id for f in conn.messages()] == [0, 2]
    sub = topic.subscriptions["s"]
    await wait_for_async(lambda: sub.cursor.is_deleted(topic.ml._positions[1]), 5, what="marker acknowledged")


async def test_key_shared_recently_joined_consumer_waits_for_older_acks(service):
    topic = await service.get_topic(TOPIC)
    first, second = FakeConnection(service, "first"), FakeConnection(service, "second")
    c1 = await subscribe(topic, first, 1, sub_type=SubType.Key_Shared, permits=100)
    await publish(topic, *[entry(i, key=f"k{i % 10}") for i in range(20)])
    await wait_for_async(lambda: len(first.messages()) == 20, 5)
    c2 = await subscribe(topic, second, 2, sub_type=SubType.Key_Shared, permits=100)
    assert c2.join_position is not None
    await publish(topic, *[entry(i, key=f"k{i % 10}") for i in range(20, 40)])
    dispatcher = topic.subscriptions["s"].dispatcher
    moved_keys = {f"k{i}" for i in range(10) if dispatcher.selector.select(key_hash(f"k{i}".encode())) is c2}
    assert moved_keys, "the second consumer owns some keys"
    await wait_for_async(lambda: len(first.messages()) == 20 + 20 - sum(
        2 for k in moved_keys), 5, what="keys staying with the first consumer flow on")
    assert second.messages() == []  # its keys wait: the first consumer has not acknowledged older entries
    ids = [f.command.message.message_id for f in first.messages()]
    topic.subscriptions["s"].acknowledge(c1, acked_ids(ids))
    await wait_for_async(lambda: len(second.messages()) == 2 * len(moved_keys), 5, what="restriction lifted")
    assert {f.metadata.partition_key for f in second.messages()} == moved_keys


async def test_key_shared_sticky_ranges_conflict(service):
    topic = await service.get_topic(TOPIC)
    meta = pb.KeySharedMeta(keySharedMode=pb.STICKY, hashRanges=[pb.IntRange(start=0, end=30000)])
    await subscribe(topic, FakeConnection(service), 1, sub_type=SubType.Key_Shared, meta=meta)
    with pytest.raises(ConsumerAssignError):
        await subscribe(topic, FakeConnection(service), 2, sub_type=SubType.Key_Shared, meta=meta)


async def test_redelivery_counts_only_on_redeliver_requests(service):
    topic = await service.get_topic(TOPIC)
    conn = FakeConnection(service)
    c = await subscribe(topic, conn, 1, permits=10)
    await publish(topic, entry(0))
    await wait_for_async(lambda: len(conn.messages()) == 1, 5)
    mid = conn.messages()[0].command.message.message_id
    for expected in (1, 2):
        topic.subscriptions["s"].redeliver(c, [position_of(mid)])
        await wait_for_async(lambda: len(conn.messages()) == expected + 1, 5)
        assert conn.messages()[-1].command.message.redelivery_count == expected


async def test_publish_failure_answers_send_error_and_unloads(service):
    topic = await service.get_topic(TOPIC)
    conn = FakeConnection(service)
    frame = pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=1)
    from magnetar.protocol import Frame, wrap
    await HANDLERS[BaseCommand.PRODUCER](conn, Frame(wrap(frame)))
    assert conn.of_type(BaseCommand.PRODUCER_SUCCESS)
    topic.ml.fail_next_adds(1)
    send = wrap(pb.CommandSend(producer_id=1, sequence_id=0))
    HANDLERS[BaseCommand.SEND](conn, Frame(send, pb.MessageMetadata(), b"x", True, None, entry(0)))
    err = conn.of_type(BaseCommand.SEND_ERROR)[0].command.send_error
    assert err.error == pb.PersistenceError
    await wait_for_async(lambda: TOPIC not in service.topics(), 5, what="topic unloaded after a failed write")


async def test_receipts_stay_in_order_when_a_duplicate_is_answered_at_once(service):
    topic = await service.get_topic(TOPIC)
    await topic.apply_policies(type("P", (), {"deduplication_enabled": True})())
    conn = FakeConnection(service)
    from magnetar.protocol import Frame, wrap
    await HANDLERS[BaseCommand.PRODUCER](conn, Frame(wrap(pb.CommandProducer(topic=TOPIC, producer_id=1,
                                                                               request_id=1, producer_name="p"))))
    for seq in (0, 1):
        HANDLERS[BaseCommand.SEND](conn, Frame(wrap(pb.CommandSend(producer_id=1, sequence_id=seq)),
                                               pb.MessageMetadata(), b"x", True, None, entry(seq)))
    await wait_for_async(lambda: len(conn.of_type(BaseCommand.SEND_RECEIPT)) == 2, 5)
    topic.ml.hold_adds()
    HANDLERS[BaseCommand.SEND](conn, Frame(wrap(pb.CommandSend(producer_id=1, sequence_id=2)),
                                           pb.MessageMetadata(), b"x", True, None, entry(2)))
    HANDLERS[BaseCommand.SEND](conn, Frame(wrap(pb.CommandSend(producer_id=1, sequence_id=1)),  # a duplicate
                                           pb.MessageMetadata(), b"x", True, None, entry(1)))
    HANDLERS[BaseCommand.SEND](conn, Frame(wrap(pb.CommandSend(producer_id=1, sequence_id=2)),  # in flight
                                           pb.MessageMetadata(), b"x", True, None, entry(2)))
    await asyncio.sleep(0)
    assert len(conn.of_type(BaseCommand.SEND_RECEIPT)) == 2  # the duplicate waits behind seq 2
    topic.ml.release_adds()
    await wait_for_async(lambda: len(conn.of_type(BaseCommand.SEND_RECEIPT)) == 5, 5)
    receipts = [f.command.send_receipt for f in conn.of_type(BaseCommand.SEND_RECEIPT)]
    assert [r.sequence_id for r in receipts] == [0, 1, 2, 1, 2]
    assert receipts[3].message_id == receipts[1].message_id and receipts[4].message_id == receipts[2].message_id
    assert topic.ml.number_of_entries == 3


async def test_key_shared_replay_is_not_blocked_by_entries_nobody_can_take(service):
    """Entries whose hash no STICKY range covers wait at the head of the replay set; redelivered entries
    behind them whose consumer has permits must still go out (a replay round used to read only the first
    entries of the set, found none it could send, and waited for an event that changed nothing)."""
    topic = await service.get_topic(TOPIC)
    conn = FakeConnection(service)
    meta = pb.KeySharedMeta(keySharedMode=pb.STICKY, hashRanges=[pb.IntRange(start=0, end=32767)])
    c = await subscribe(topic, conn, 1, sub_type=SubType.Key_Shared, meta=meta, permits=2)
    covered, uncovered = "k0", ["k3", "k5", "k7", "k9", "k17"]
    assert key_hash(covered.encode()) <= 32767 < min(key_hash(k.encode()) for k in uncovered)
    await publish(topic, *[entry(i, key=k) for i, k in enumerate(uncovered)])
    await publish(topic, *[entry(10 + i, key=covered) for i in range(2)])
    await wait_for_async(lambda: len(conn.messages()) == 2, 5, what="k0 delivered")
    sub = topic.subscriptions["s"]
    sub.redeliver(c, None)
    assert len(sub.dispatcher.replay) == len(uncovered) + 2
    flow(c, 2)
    await wait_for_async(lambda: len(conn.messages()) == 4, 5, what="k0 redelivered after a FLOW")
    assert [f.metadata.sequence_id for f in conn.messages()] == [10, 11, 10, 11]


@pytest.mark.parametrize("sub_type", [SubType.Shared, SubType.Key_Shared], ids=["Shared", "Key_Shared"])
async def test_replay_read_failure_keeps_the_positions_for_later(service, sub_type):
    """A replay read the bookies fail (retriable) must not lose the positions it took from the replay set."""
    topic = await service.get_topic(TOPIC)
    conn = FakeConnection(service)
    c = await subscribe(topic, conn, 1, sub_type=sub_type, permits=2)
    await publish(topic, entry(0, key="a"), entry(1, key="b"))
    await wait_for_async(lambda: len(conn.messages()) == 2, 5, what="first delivery")
    sub = topic.subscriptions["s"]
    read_entry = topic.ml.read_entry
    failures = []

    async def failing_once(position):
        if not failures:
            failures.append(position)
            error = ManagedLedgerReadError("injected: bookies unavailable")
            error.retriable = True
            raise error
        return await read_entry(position)

    topic.ml.read_entry = failing_once
    sub.redeliver(c, None)
    flow(c, 2)
    await wait_for_async(lambda: len(conn.messages()) == 4, 5, what="redelivery after the failed read")
    assert failures and [f.metadata.sequence_id for f in conn.messages()[2:]] == [0, 1]
