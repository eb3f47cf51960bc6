"""The Key_Shared dispatcher cannot stall, nor reorder a key: hypothesis drives the real dispatcher.

Random sequences of consumers joining (AUTO_SPLIT, or STICKY with quarter ranges, some left uncovered) and
leaving, FLOW permits, publishes of batched, single and delayed entries over a few keys, acknowledgements,
REDELIVER_UNACKNOWLEDGED (all, or some positions) and a simulated clock run against a
``KeySharedDispatcher`` on the in-memory managed ledger, with fake connections recording what is sent.

The test is the dispatcher's read loop: after every action it runs rounds (``_round``) as ``Dispatcher._run``
does until the loop would sleep (nothing read, no wake-up pending, nothing new to read), and it fires the
delayed-delivery timer when the simulated clock passes its time. Events that arrive while a read is in flight
(as with bookies) are actions queued to run inside the next read. So an interleaving found replays exactly.

Checked, against a model of the rules written here from the docstrings (not from the code):

* no stall: once the loop would sleep, no key has an undelivered entry (not acknowledged, not pending at a
  consumer, not held for a deliver time still ahead) whose oldest such entry could go: its owner has
  permits and room under its unacked limit, and the recently-joined rule does not hold it (a consumer that
  joined at read position J while entries were in flight waits for entries at or past the earliest such J
  until the mark-delete position reaches it; alone it waits for nothing);
* order: an entry sent in a round goes to its key's owner, is not one the recently-joined rule holds back,
  and has no older undelivered entry of its key;
* completeness: once consumers cover every key, have permits, the clock has passed every deliver time and
  consumers acknowledge what they get, every entry published is delivered and acknowledged.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Optional

from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from broker.managed_ledger.api import Position
from broker.ownership_api import SelfOwnership
from broker.service import BrokerService, ServiceConfig
from broker.service.topics.dispatch.base import Next
from broker.service.session.requests import subscribe_request
from broker.service.topics.dispatch.key_ranges import key_hash
from broker.service.topics.model import AckedId
from magnetar.protocol import encode_entry, pb
from tests.kit.memory_ledger import MemoryManagedLedgerFactory
from tests.unit.test_broker_dispatch import FakeConnection

SubType = pb.CommandSubscribe.SubType
TOPIC = "persistent://public/default/liveness"
KEYS = [f"key-{i}" for i in range(8)]
SLOTS = [(q * 16384, q * 16384 + 16383) for q in range(4)]  # STICKY ranges a consumer may take
MAX_ROUNDS = 2000
START_MS = 1_000_000
# Simulated milliseconds per step of delay or clock: far longer than a scenario runs, so the dispatcher's
# real timer never fires on its own (the test fires it, when the simulated clock passes its time).
TIME_UNIT_MS = 3_600_000


@dataclass(eq=False)
class Member:
    consumer: object
    conn: FakeConnection
    slot: Optional[int]  # STICKY: index into SLOTS
    join: Optional[Position] = None  # the model's recently-joined position
    seen_frames: int = 0


@dataclass
class World:
    sticky: bool
    service: BrokerService
    topic: object = None
    members: list[Member] = field(default_factory=list)
    published: dict[Position, int] = field(default_factory=dict)  # position -> key hash
    deliver_at: dict[Position, int] = field(default_factory=dict)  # delayed entries -> deliver time
    now_ms: int = START_MS
    next_id: int = 1
    during_read: list[tuple] = field(default_factory=list)  # actions to run while the next read is in flight

    @property
    def sub(self):
        return self.topic.subscriptions["s"]

    @property
    def dispatcher(self):
        return self.sub.dispatcher

    # ----------------------------------------------------------------------------------------- the model

    def owner(self, h: int) -> Optional[Member]:
        if self.sticky:
            return next((m for m in self.members if SLOTS[m.slot][0] <= h <= SLOTS[m.slot][1]), None)
        chosen = self.dispatcher.selector.select(h)
        found = [m for m in self.members if m.consumer is chosen]
        assert found or not self.members, "AUTO_SPLIT chose a consumer that is not attached"
        return found[0] if found else None

    def lift_restrictions(self) -> None:
        first_unacked = self.topic.ml.next_position(self.sub.cursor.mark_delete_position)
        for m in self.members:
            if m.join is not None and (first_unacked >= m.join or len(self.members) == 1):
                m.join = None

    def limit(self, m: Member) -> Optional[Position]:
        if m.join is None:
            return None
        return min(x.join for x in self.members if x.join is not None)

    def undelivered(self) -> list[Position]:
        """Not acknowledged, not pending at a consumer, not waiting for its deliver time (a delayed entry
        holds nothing back: it does not count until due), nor due but still held with the timer armed for a
        time already past (the timer is about to fire)."""
        pending = {p for m in self.members for p in m.consumer.pending_acks}
        d = self.dispatcher
        timer_due = d.delayed_timer_due_ms
        firing = timer_due is not None and timer_due <= self.now_ms
        return sorted(p for p in self.published if not self.sub.is_acked(p) and p not in pending
                      and self.deliver_at.get(p, 0) <= self.now_ms and not (firing and p in d.delayed))

    @staticmethod
    def can_take(m: Member) -> bool:
        c = m.consumer
        room = c.permits if not c.max_unacked_messages else min(c.permits,
                                                                  c.max_unacked_messages - c.unacked_messages)
        return c.permits > 0 and not c.blocked and room > 0

    def check_no_stall(self) -> None:
        self.lift_restrictions()
        d = self.dispatcher
        if any(m.join is not None for m in self.members):
            event("at rest with a recently joined consumer")
        if len(d.replay) > 1:
            event("at rest with replay entries" + (" (stuck)" if d.replay_stuck else ""))
        if any(m.consumer.blocked for m in self.members):
            event("at rest with a consumer blocked on unacked messages")
        if len(d.delayed):
            event("at rest with delayed entries held")
        firsts: dict[int, Position] = {}
        for p in self.undelivered():
            firsts.setdefault(self.published[p], p)
        for h, p in firsts.items():
            m = self.owner(h)
            if m is None or not self.can_take(m):
                continue
            limit = self.limit(m)
            assert limit is not None and p >= limit, (
                f"stall: {p} (hash {h}) is the oldest undelivered entry of its key, its consumer "
                f"{m.consumer.name} has {m.consumer.permits} permits, and nothing holds it; replay set "
                f"{d.replay.positions()}, stuck={d.replay_stuck}")

    def check_round(self) -> None:
        """What a round sent went to the key's owner, not held back from it by the recently-joined rule,
        and overtook no older undelivered entry of its key."""
        undelivered = set(self.undelivered())
        for m in self.members:
            frames = m.conn.messages()
            limit = self.limit(m)
            for f in frames[m.seen_frames:]:
                mid = f.command.message.message_id
                pos = Position(mid.ledgerId, mid.entryId)
                h = self.published[pos]
                assert self.owner(h) is m, f"{pos} (hash {h}) went to {m.consumer.name}, not its owner"
                assert limit is None or pos < limit, f"{pos} went to {m.consumer.name}, restricted before {limit}"
                older = [p for p in undelivered if p < pos and self.published[p] == h]
                assert not older, f"{pos} overtook {older} of the same key"
            m.seen_frames = len(frames)

    # ----------------------------------------------------------------------------------------- the loop

    async def settle(self) -> None:
        """Rounds as ``Dispatcher._run`` runs them, until it would sleep; checks each round and the end."""
        d = self.dispatcher
        if d is None:
            return
        for _ in range(MAX_ROUNDS):
            await self.sub.drain_acks()
            self.lift_restrictions()
            d._wakeup.clear()
            nxt = await d._round()
            self.check_round()
            if nxt is Next.PROGRESS or d._wakeup.is_set():
                continue
            if nxt is Next.WAIT_ENTRIES and await d.cursor.wait_for_entries(0):
                continue
            await self.sub.drain_acks()
            if d._wakeup.is_set():  # an acknowledgement moved the mark-delete position
                continue
            self.check_no_stall()
            return
        raise AssertionError(f"the dispatcher never came to rest in {MAX_ROUNDS} rounds")

    # ----------------------------------------------------------------------------------------- actions

    def apply(self, step: tuple) -> None:
        kind = step[0]
        if kind == "leave":
            self.leave(step[1])
        elif kind == "flow":
            self.flow(step[1], step[2])
        elif kind == "ack":
            self.ack(step[1], step[2])
        elif kind == "redeliver":
            self.redeliver(step[1], step[2])
        else:
            raise AssertionError(step)

    def interleave_reads(self) -> None:
        """Reads (new entries through the cursor, replays through the managed ledger) first run the actions
        queued in ``during_read``: events arriving while a read is in flight."""
        ml, cursor = self.topic.ml, self.sub.cursor
        read_entry, read_entries = ml.read_entry, cursor.read_entries

        def run_queued() -> None:
            queued, self.during_read = self.during_read, []
            for step in queued:
                self.apply(step)

        async def read_entry_interleaved(position):
            run_queued()
            return await read_entry(position)

        async def read_entries_interleaved(max_entries, **kwargs):
            run_queued()
            return await read_entries(max_entries, **kwargs)

        ml.read_entry = read_entry_interleaved
        cursor.read_entries = read_entries_interleaved

    async def join(self, slot_hint: int, permits: int) -> None:
        slot = None
        if self.sticky:
            free = [i for i in range(len(SLOTS)) if all(m.slot != i for m in self.members)]
            if not free:
                return
            slot = free[slot_hint % len(free)]
        cid = self.next_id
        self.next_id += 1
        conn = FakeConnection(self.service, f"conn-{cid}")
        cmd = pb.CommandSubscribe(topic=TOPIC, subscription="s", subType=SubType.Key_Shared, consumer_id=cid,
                                  request_id=cid, initialPosition=pb.CommandSubscribe.Earliest)
        if self.sticky:
            cmd.keySharedMeta.CopyFrom(pb.KeySharedMeta(keySharedMode=pb.STICKY, hashRanges=[
                pb.IntRange(start=SLOTS[slot][0], end=SLOTS[slot][1])]))
        join = None
        if self.members:
            cursor = self.sub.cursor
            if cursor.read_position > self.topic.ml.next_position(cursor.mark_delete_position):
                join = cursor.read_position
        first = "s" not in self.topic.subscriptions
        consumer = await self.topic.subscribe(subscribe_request(cmd, f"c{cid}"), conn)
        conn.consumers[cid] = consumer
        if first:
            self.interleave_reads()
            self.dispatcher.clock_ms = lambda: self.now_ms
        if self.dispatcher._task is None or not self.dispatcher._task.done():
            await stop_read_loop(self.dispatcher)
        self.members.append(Member(consumer, conn, slot, join))
        self.lift_restrictions()
        if permits:
            self.flow(len(self.members) - 1, permits)

    def leave(self, i: int) -> None:
        if self.members:
            m = self.members.pop(i % len(self.members))
            self.sub.remove_consumer(m.consumer)
            self.lift_restrictions()

    def flow(self, i: int, permits: int) -> None:
        if self.members:
            c = self.members[i % len(self.members)].consumer
            c.flow(permits)
            self.dispatcher.consumer_flow(c)

    def ack(self, i: int, mask: int) -> None:
        if not self.members:
            return
        m = self.members[i % len(self.members)]
        # What the client received and has not acknowledged yet: pending, or handed back by a REDELIVER
        # (a client may still acknowledge those, e.g. a late ack crossing its redelivery request).
        received = {Position(f.command.message.message_id.ledgerId, f.command.message.message_id.entryId)
                    for f in m.conn.messages()}
        chosen = [p for k, p in enumerate(sorted(p for p in received if not self.sub.is_acked(p)))
                  if mask >> (k % 16) & 1]
        if chosen:
            self.sub.acknowledge(m.consumer, [AckedId(p) for p in chosen])

    def redeliver(self, i: int, mask: Optional[int]) -> None:
        if not self.members:
            return
        m = self.members[i % len(self.members)]
        ids = None if mask is None else [p for k, p in enumerate(sorted(m.consumer.pending_acks)) if mask >> k & 1]
        if mask is None or ids:
            self.sub.redeliver(m.consumer, ids)

    async def publish(self, key: int, batch: int, delay_ms: int = 0) -> None:
        md = pb.MessageMetadata(producer_name="p", sequence_id=len(self.published), publish_time=self.now_ms,
                                partition_key=KEYS[key])
        if batch > 1:
            md.num_messages_in_batch = batch
        if delay_ms:
            md.deliver_at_time = self.now_ms + delay_ms
        pos = await self.topic.ml.add_entry(encode_entry(md, b"m"))
        self.published[pos] = key_hash(KEYS[key].encode())
        if delay_ms:
            self.deliver_at[pos] = self.now_ms + delay_ms

    def tick(self, ms: int, fire: bool = True) -> None:
        """The simulated clock moves; the delayed-delivery timer fires if its time came, as the loop would
        (``fire`` False: not yet, a round for another reason may come first)."""
        self.now_ms += ms
        d = self.dispatcher if "s" in self.topic.subscriptions else None
        if fire and d is not None and d.delayed_timer_due_ms is not None and d.delayed_timer_due_ms <= self.now_ms:
            d._timer.cancel()
            d._on_timer()

    async def drain_everything(self) -> None:
        """Covers every key, then grants permits and acknowledges until nothing is left."""
        if self.sticky:
            for _ in range(len(SLOTS)):
                await self.join(0, 0)
        elif not self.members:
            await self.join(0, 0)
        self.tick(max(0, max(self.deliver_at.values(), default=self.now_ms) - self.now_ms))
        for _ in range(50):
            if all(self.sub.is_acked(p) for p in self.published):
                return
            for i in range(len(self.members)):
                self.flow(i, 20)
            await self.settle()
            for i in range(len(self.members)):
                self.ack(i, (1 << 16) - 1)
            await self.settle()
        left = [p for p in self.published if not self.sub.is_acked(p)]
        raise AssertionError(f"never delivered and acknowledged: {left}; replay set "
                             f"{self.dispatcher.replay.positions()}")


async def stop_read_loop(dispatcher) -> None:
    """The test runs the rounds itself: cancel the read loop and keep ``start()`` from making another."""
    task = dispatcher._task
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    else:
        task = asyncio.get_running_loop().create_future()
        task.cancel()
    dispatcher._task = task


async def scenario(sticky: bool, steps, *, read_batch: int = 100, max_unacked: int = 50_000,
                   entries_per_ledger: int = 1_000_000) -> None:
    config = ServiceConfig(dispatcher_max_read_batch=read_batch, max_unacked_messages_per_consumer=max_unacked,
                           delayed_delivery_tick_time_ms=0)
    service = BrokerService(config=config, ml_factory=MemoryManagedLedgerFactory(entries_per_ledger=entries_per_ledger),
                            configuration_store=None, ownership=SelfOwnership("pulsar://x:1"), cluster_name="unit")
    world = World(sticky=sticky, service=service)
    try:
        world.topic = await service.get_topic(TOPIC)
        for step in steps:
            kind = step[0]
            if kind == "publish":
                await world.publish(*step[1:])
            elif kind == "join":
                await world.join(step[1], step[2])
            elif kind == "tick":
                world.tick(step[1], step[2])
            elif kind == "during next read":
                world.during_read.append(step[1])
                continue
            else:
                world.apply(step)
            if "s" in world.topic.subscriptions:
                await world.settle()
        if "s" in world.topic.subscriptions:
            for queued in world.during_read:
                world.apply(queued)
            world.during_read.clear()
            await world.settle()
            if world.published:
                await world.drain_everything()
    finally:
        for topic in list(service._topics.values()):
            await topic.close()


publishes = st.tuples(st.just("publish"), st.integers(0, len(KEYS) - 1), st.sampled_from([1, 1, 1, 2, 3]),
                      st.sampled_from([0, 0, 0, 0, 1, 3]).map(lambda n: n * TIME_UNIT_MS))
flows = st.tuples(st.just("flow"), st.integers(0, 7), st.integers(1, 6))
acks = st.tuples(st.just("ack"), st.integers(0, 7), st.integers(0, (1 << 16) - 1))
leaves = st.tuples(st.just("leave"), st.integers(0, 7))
redeliveries = st.tuples(st.just("redeliver"), st.integers(0, 7), st.none() | st.integers(1, 255))
joins = st.tuples(st.just("join"), st.integers(0, 3), st.integers(0, 6))
actions = st.tuples(st.lists(st.one_of(publishes, joins), min_size=1, max_size=6), st.lists(st.one_of(
    publishes, publishes, publishes, flows, flows, acks, acks, leaves, redeliveries, joins,
    st.tuples(st.just("tick"), st.sampled_from([1, 2]).map(lambda n: n * TIME_UNIT_MS), st.booleans()),
    st.tuples(st.just("during next read"), st.one_of(flows, acks, leaves, redeliveries)),
), max_size=60)).map(lambda parts: parts[0] + parts[1])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sticky=st.booleans(), steps=actions, read_batch=st.sampled_from([1, 3, 100]),
       max_unacked=st.sampled_from([4, 50_000]), entries_per_ledger=st.sampled_from([3, 1_000_000]))
# A replay round read the first positions of the set only: a recently joined consumer's entries at its head
# (read_batch 1) kept key-1's entry from its consumer, which had permits.
@example(sticky=False, steps=[("publish", 0, 1, 0)] * 3 + [("publish", 1, 1, 0), ("join", 0, 1), ("join", 0, 1)],
         read_batch=1, max_unacked=4, entries_per_ledger=3)
# A round that sent nothing set the replay set stuck although a REDELIVER during its read had just added
# an entry its consumer could take (the acknowledgement emptied the read; key-2's entry keeps mark-delete).
@example(sticky=False, steps=[("publish", 2, 1, 0), ("publish", 0, 1, 0), ("publish", 1, 1, 0), ("join", 0, 3),
                              ("redeliver", 0, 2), ("during next read", ("ack", 0, 2)),
                              ("during next read", ("redeliver", 0, 2)), ("flow", 0, 1)],
         read_batch=100, max_unacked=50_000, entries_per_ledger=1_000_000)
# A replayed entry was sent while an older entry of its key, redelivered during the read, waited.
@example(sticky=False, steps=[("publish", 0, 1, 0), ("publish", 0, 1, 0), ("join", 0, 2), ("redeliver", 0, 2),
                              ("during next read", ("redeliver", 0, 1)), ("flow", 0, 1)],
         read_batch=100, max_unacked=50_000, entries_per_ledger=1_000_000)
# An acknowledged position left in the replay set took the round's only place; nothing sent: stuck.
@example(sticky=False, steps=[("publish", 0, 1, 0), ("publish", 0, 1, 0), ("join", 0, 2), ("redeliver", 0, None),
                              ("ack", 0, 1)], read_batch=1, max_unacked=4, entries_per_ledger=3)
# The same with the acknowledgement arriving while the position was being read (STICKY, key-0 uncovered).
@example(sticky=True, steps=[("publish", 0, 1, 0), ("publish", 7, 1, 0), ("publish", 7, 1, 0), ("join", 2, 2),
                             ("redeliver", 0, None), ("during next read", ("ack", 0, 1)), ("flow", 0, 1)],
         read_batch=1, max_unacked=4, entries_per_ledger=3)
# A delayed entry came due in a round that was not the timer's (the timer, re-armed, no longer covered it)
# while the replay set was stuck: it joined the set and waited for an unrelated event.
@example(sticky=False, steps=[("join", 0, 0), ("join", 0, 0), ("publish", 0, 1, 0), ("publish", 2, 1, TIME_UNIT_MS),
                              ("join", 0, 0), ("leave", 0), ("flow", 1, 1), ("tick", TIME_UNIT_MS, False)],
         read_batch=1, max_unacked=4, entries_per_ledger=3)
def test_key_shared_dispatcher_never_stalls_and_keeps_key_order(sticky, steps, read_batch, max_unacked,
                                                                entries_per_ledger):
    asyncio.run(scenario(sticky, steps, read_batch=read_batch, max_unacked=max_unacked,
                         entries_per_ledger=entries_per_ledger))
