"""The Shared dispatcher under interleavings: events landing while a read is in flight.

The in-memory managed ledger's reads normally complete without yielding, so no event can land while one is in
flight. Here every read first waits (``MemoryManagedLedger.read_delay``): either a gate the test opens, to
force one interleaving, or a seeded random number of loop turns, to let hypothesis search schedules of
subscribe, FLOW, publish, acknowledge, close, redeliver and skip. What must hold whatever the schedule:

* an entry is never sent while a consumer holds it unacknowledged (nor to the same consumer twice), and an
  acknowledged entry is never sent again: an entry goes out again only after it was handed back (its
  consumer closed, or asked for a redelivery);
* one consumer that never hands anything back receives the entries in order;
* once consumers have permits, every entry not acknowledged reaches one (nothing waits for an event that
  already happened).
"""

from __future__ import annotations

import asyncio
import random
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.managed_ledger.api import Position
from broker.ownership_api import SelfOwnership
from broker.service import BrokerService, ServiceConfig
from broker.service.session.requests import acked_ids, position_of
from magnetar.protocol import pb
from tests.kit.memory_ledger import MemoryManagedLedgerFactory
from tests.kit.wait import wait_for_async
from tests.unit.test_broker_dispatch import TOPIC, FakeConnection, entry, flow, subscribe

SubType = pb.CommandSubscribe.SubType


def new_service(**config) -> BrokerService:
    return BrokerService(config=ServiceConfig(**config), ml_factory=MemoryManagedLedgerFactory(),
                         configuration_store=None, ownership=SelfOwnership("pulsar://x:1"), cluster_name="unit")


@pytest.fixture
async def service():
    svc = new_service(dispatcher_max_round_robin_batch=5)
    yield svc
    for topic in list(svc._topics.values()):
        await topic.close()


class Gate:
    """A read delay the test controls: ``hold()`` makes the next read wait until ``release()``; other reads
    pass."""

    def __init__(self) -> None:
        self._released = asyncio.Event()
        self._armed = False
        self.waiting = 0

    def hold(self) -> None:
        self._armed = True
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    async def __call__(self) -> None:
        if not self._armed:
            return
        self._armed = False
        self.waiting += 1
        try:
            await self._released.wait()
        finally:
            self.waiting -= 1


def positions(conn: FakeConnection, consumer_id: Optional[int] = None) -> list[Position]:
    return [Position(f.command.message.message_id.ledgerId, f.command.message.message_id.entryId)
            for f in conn.messages(consumer_id)]


def ack(consumer, *acked: Position) -> None:
    ids = [pb.MessageIdData(ledgerId=p.ledger_id, entryId=p.entry_id) for p in acked]
    consumer.subscription.acknowledge(consumer, acked_ids(ids))


# ------------------------------------------------------------------------------------------ forced interleavings


@pytest.mark.parametrize("sub_type", [SubType.Shared, SubType.Exclusive])
async def test_skip_while_entries_are_unacknowledged_sends_nothing_twice(service, sub_type):
    """skip / expire / clear-backlog move mark-delete; what was sent past it stays with its consumer (as in
    Pulsar). They used to rewind the dispatcher, which read the unacknowledged entries again and sent them a
    second time."""
    topic = await service.get_topic(TOPIC)
    conn = FakeConnection(service)
    await topic.ml.add_entry(entry(0))  # the subscription starts after it ...
    consumer = await subscribe(topic, conn, 1, sub_type=sub_type, initial=pb.CommandSubscribe.Latest)
    for i in range(1, 6):  # ... and gets these five
        await topic.ml.add_entry(entry(i))
    flow(consumer, 100)
    await wait_for_async(lambda: len(conn.messages()) == 5, 5)
    assert await topic.skip("s", 2) == 2
    for i in range(6, 9):
        await topic.ml.add_entry(entry(i))
    await wait_for_async(lambda: len(conn.messages()) >= 8, 5, what="the new entries")
    assert [f.metadata.sequence_id for f in conn.messages()] == list(range(1, 9))
    assert await topic.expire("s", 0) == 6  # everything left, sent and unacknowledged: still sent once
    await topic.ml.add_entry(entry(9))
    await wait_for_async(lambda: len(conn.messages()) >= 9, 5)
    assert [f.metadata.sequence_id for f in conn.messages()] == list(range(1, 10))


async def test_skip_while_a_read_is_in_flight_sends_only_what_is_left(service):
    topic = await service.get_topic(TOPIC)
    gate = Gate()
    topic.ml.read_delay = gate
    conn = FakeConnection(service)
    consumer = await subscribe(topic, conn, 1)
    for i in range(4):
        await topic.ml.add_entry(entry(i))
    gate.hold()
    flow(consumer, 100)
    await wait_for_async(lambda: gate.waiting == 1, 5, what="the read of the four entries in flight")
    await topic.skip("s", 2)
    gate.release()
    await wait_for_async(lambda: len(conn.messages()) == 2, 5)
    await topic.ml.add_entry(entry(4))
    await wait_for_async(lambda: len(conn.messages()) == 3, 5)
    assert [f.metadata.sequence_id for f in conn.messages()] == [2, 3, 4]


async def test_replayed_entries_acknowledged_while_read_do_not_strand_the_rest(service):
    """A replay round whose entries were all acknowledged while it read them sent nothing, and took that as
    'stuck' (nobody can take them); it also overrode the wake of a FLOW that arrived meanwhile. The rest of
    the replay set then waited for the next event while the consumer sat on its permits."""
    topic = await service.get_topic(TOPIC)
    gate = Gate()
    topic.ml.read_delay = gate
    conn = FakeConnection(service)
    consumer = await subscribe(topic, conn, 1)
    for i in range(4):
        await topic.ml.add_entry(entry(i))
    flow(consumer, 4)
    await wait_for_async(lambda: len(conn.messages()) == 4, 5)
    kept, first, *rest = positions(conn)  # ``kept`` stays unacknowledged: mark-delete does not move below
    topic.subscriptions["s"].redeliver(consumer, [position_of(m.command.message.message_id) for m in conn.messages()[1:]])
    gate.hold()
    flow(consumer, 1)  # a replay round for one entry: ``first``
    await wait_for_async(lambda: gate.waiting == 1, 5, what="the replay read in flight")
    ack(consumer, first)  # the client acknowledges it meanwhile (it had received it before the redelivery)
    flow(consumer, 10)
    gate.release()
    await wait_for_async(lambda: positions(conn)[4:] == rest, 5, what="the rest of the replay set redelivered")
    assert [f.command.message.redelivery_count for f in conn.messages()[4:]] == [1, 1]
    assert list(consumer.pending_acks) == [kept, *rest]


# ------------------------------------------------------------------------------------------ searched interleavings

CONSUMERS = 3

OPS = st.one_of(
    st.tuples(st.just("subscribe"), st.integers(0, CONSUMERS - 1)),
    st.tuples(st.just("flow"), st.integers(0, CONSUMERS - 1), st.integers(1, 6)),
    st.tuples(st.just("publish"), st.integers(1, 4)),
    st.tuples(st.just("ack"), st.integers(0, CONSUMERS - 1), st.integers(0, 10)),
    st.tuples(st.just("late_ack"), st.integers(0, 50)),
    st.tuples(st.just("close"), st.integers(0, CONSUMERS - 1)),
    st.tuples(st.just("redeliver"), st.integers(0, CONSUMERS - 1)),
    st.tuples(st.just("skip"), st.integers(1, 2)),
    st.tuples(st.just("turns"), st.integers(1, 6)),
)


class Model:
    """What the consumers were sent, checked against the invariants of the module docstring."""

    def __init__(self, topic, service) -> None:
        self.topic = topic
        self.service = service
        self.conns: dict[int, FakeConnection] = {}
        self.consumers: dict[int, object] = {}  # slot -> live consumer
        self.next_id = 1
        self.holder: dict[Position, int] = {}  # sent and neither acknowledged nor handed back: consumer id
        self.handed_back: set[Position] = set()
        self.delivered: set[Position] = set()
        self.acked: set[Position] = set()
        self.seen: dict[int, int] = {}
        self.order_broken = False  # anything handed back or skipped: order is no longer promised
        self.errors: list = []

    def observe(self) -> None:
        for cid, conn in self.conns.items():
            sent = positions(conn, cid)
            for pos in sent[self.seen.get(cid, 0):]:
                if pos in self.acked:
                    self.errors.append(("acknowledged entry sent again", pos, cid))
                if pos in self.holder:
                    self.errors.append(("entry sent while unacknowledged", pos, cid, self.holder[pos]))
                self.holder[pos] = cid
                self.handed_back.discard(pos)
                self.delivered.add(pos)
            if not self.order_broken and len(self.conns) == 1 and sent != sorted(sent):
                self.errors.append(("out of order", sent))
            self.seen[cid] = len(sent)

    def hand_back(self, consumer) -> None:
        for pos in list(consumer.pending_acks):
            if self.holder.get(pos) == consumer.consumer_id:
                del self.holder[pos]
                self.handed_back.add(pos)
        self.order_broken = True

    def acknowledged(self, *acked: Position) -> None:
        for pos in acked:
            self.acked.add(pos)
            self.holder.pop(pos, None)

    async def subscribe(self, slot: int) -> None:
        cid, self.next_id = self.next_id, self.next_id + 1
        conn = self.conns[cid] = FakeConnection(self.service, f"c{cid}")
        self.consumers[slot] = await subscribe(self.topic, conn, cid)

    async def apply(self, op: tuple) -> None:
        kind = op[0]
        consumer = self.consumers.get(op[1]) if kind in ("flow", "ack", "close", "redeliver") else None
        if kind == "subscribe" and op[1] not in self.consumers:
            await self.subscribe(op[1])
        elif kind == "flow" and consumer is not None:
            flow(consumer, op[2])
        elif kind == "publish":
            for _ in range(op[1]):
                await self.topic.ml.add_entry(entry(0))
        elif kind == "ack" and consumer is not None and consumer.pending_acks:
            pending = sorted(consumer.pending_acks)
            pos = pending[op[2] % len(pending)]
            ack(consumer, pos)
            self.acknowledged(pos)
        elif kind == "late_ack" and self.delivered and self.consumers:
            # a client acknowledging something it received earlier, maybe handed back since
            pos = sorted(self.delivered)[op[1] % len(self.delivered)]
            ack(next(iter(self.consumers.values())), pos)
            self.acknowledged(pos)
        elif kind == "close" and consumer is not None:
            self.observe()
            self.hand_back(consumer)
            del self.consumers[op[1]]
            consumer.subscription.remove_consumer(consumer)
        elif kind == "redeliver" and consumer is not None:
            self.observe()
            self.hand_back(consumer)
            consumer.subscription.redeliver(consumer, None)
        elif kind == "skip" and "s" in self.topic.subscriptions:
            self.observe()
            sub = self.topic.subscriptions["s"]
            before = sub.cursor.mark_delete_position
            await self.topic.skip("s", op[1])
            self.observe()  # what went out during the skip went out before mark-delete moved
            self.acknowledged(*[p for p in self.topic.ml._positions
                                if before < p <= sub.cursor.mark_delete_position])
            self.order_broken = True
        elif kind == "turns":
            for _ in range(op[1]):
                await asyncio.sleep(0)
        self.observe()

    async def settle(self) -> None:
        """Every consumer (at least one) gets plenty of permits; everything not acknowledged must arrive."""
        if not self.consumers:
            await self.subscribe(CONSUMERS)
        for consumer in self.consumers.values():
            flow(consumer, 1000)
        owed = set(self.topic.ml._positions) - self.acked

        def done() -> bool:
            self.observe()
            return owed <= set(self.holder) or bool(self.errors)
        try:
            await wait_for_async(done, 5, what="every entry not acknowledged delivered")
        except AssertionError:
            self.errors.append(("never delivered", sorted(owed - set(self.holder))))


async def run_schedule(schedule: list[tuple], seed: int, published_before: int) -> list:
    rng = random.Random(seed)
    service = new_service(dispatcher_max_round_robin_batch=2, dispatcher_max_read_batch=3)
    try:
        topic = await service.get_topic(TOPIC)

        async def in_flight() -> None:
            for _ in range(rng.randint(0, 4)):
                await asyncio.sleep(0)
        topic.ml.read_delay = in_flight
        for i in range(published_before):
            await topic.ml.add_entry(entry(i))
        model = Model(topic, service)
        for op in schedule:
            await model.apply(op)
        await model.settle()
        return model.errors
    finally:
        for topic in list(service._topics.values()):
            await topic.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.lists(OPS, max_size=30), seed=st.integers(0, 2**32 - 1), published_before=st.integers(0, 6))
def test_shared_dispatch_invariants_hold_under_any_interleaving(schedule, seed, published_before):
    errors = asyncio.run(run_schedule(schedule, seed, published_before))
    assert not errors, errors
