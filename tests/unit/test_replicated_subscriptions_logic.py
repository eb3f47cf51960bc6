"""Replicated subscriptions without servers: controllers of two or three clusters wired to each other through
fake topics (lists of stored entries) and fake replicators, a fake clock instead of sleeping; the snapshot
cache; and the broker's subscription wiring on the in-memory managed ledger."""

from __future__ import annotations

import asyncio
import time
from typing import Optional, Sequence

import pytest

from broker.managed_ledger.api import Position
from broker.ownership_api import SelfOwnership
from broker.service import BrokerService, ServiceConfig
from broker.service.session.requests import acked_ids
from magnetar.protocol import encode_entry, parse_entry, pb
from replicator import markers
from replicator.markers import decode_marker, encode_marker_entry
from replicator.snapshots import ReplicatedSubscriptionsController
from replicator.subscription_snapshots import SnapshotCache
from tests.kit.memory_ledger import MemoryManagedLedgerFactory
from tests.kit.wait import wait_for_async

REQUEST = pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST
RESPONSE = pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
SNAPSHOT = pb.REPLICATED_SUBSCRIPTION_SNAPSHOT
UPDATE = pb.REPLICATED_SUBSCRIPTION_UPDATE


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class FakeTopic:
    """One cluster's topic: stored entries in order; entry ids consecutive within a ledger."""

    def __init__(self) -> None:
        self.ledger_id = 1
        self.next_entry_id = 0
        self.entries: list[tuple[Position, bytes]] = []

    def append(self, entry: bytes) -> Position:
        pos = Position(self.ledger_id, self.next_entry_id)
        self.next_entry_id += 1
        self.entries.append((pos, entry))
        return pos

    def roll(self) -> None:
        self.ledger_id += 1
        self.next_entry_id = 0

    def last_position(self) -> Position:
        return self.entries[-1][0] if self.entries else Position(self.ledger_id, -1)

    def markers(self, marker_type: int) -> list[tuple[Position, pb.MessageMetadata, object]]:
        out = []
        for pos, data in self.entries:
            parsed = parse_entry(data)
            if parsed.metadata.marker_type == marker_type:
                out.append((pos, parsed.metadata, decode_marker(parsed.metadata, parsed.payload)))
        return out


class Cluster:
    """A cluster's topic and its controller; records what ``apply_update`` was asked."""

    def __init__(self, name: str, world: "World") -> None:
        self.name = name
        self.world = world
        self.topic = FakeTopic()
        self.replicated_subscriptions = True
        self.fail_writes = False
        self.applied: list[tuple[str, Position]] = []
        self.published = 0
        self.controller = ReplicatedSubscriptionsController(
            topic_name="persistent://t/n/topic", local_cluster=name, write_marker=self.write_marker,
            remote_clusters=lambda: [c for c in world.clusters if c != name], apply_update=self.apply_update,
            has_replicated_subscriptions=lambda: self.replicated_subscriptions,
            last_position=self.topic.last_position, snapshot_interval_s=1.0, snapshot_timeout_s=30.0,
            clock=world.clock)

    async def write_marker(self, marker_type: int, message, replicate_to: Sequence[str]) -> Position:
        if self.fail_writes:
            raise OSError("ledger unavailable")
        return self.topic.append(encode_marker_entry(marker_type, message, replicate_to=replicate_to))

    async def apply_update(self, subscription: str, position: Position) -> None:
        self.applied.append((subscription, position))

    def publish(self, n: int = 1) -> Position:
        pos = Position(0, 0)
        for _ in range(n):
            md = pb.MessageMetadata(producer_name=f"app-{self.name}", sequence_id=self.published, publish_time=1)
            self.published += 1
            pos = self.topic.append(encode_entry(md, b"data"))
        return pos

    def data(self, up_to: Optional[Position] = None) -> dict[tuple[str, int], Position]:
        """(producer, sequence id) -> position of every data entry stored here (up to ``up_to``)."""
        out = {}
        for pos, entry in self.topic.entries:
            md = parse_entry(entry).metadata
            if not md.HasField("marker_type") and (up_to is None or pos <= up_to):
                out[(md.producer_name, md.sequence_id)] = pos
        return out


class World:
    """Clusters and one fake replicator per ordered pair: copies entries that originate at the source, in
    order, honouring ``replicate_to``, and hands copied markers to the target's controller once stored."""

    def __init__(self, *names: str) -> None:
        self.clock = FakeClock()
        self.clusters: dict[str, Cluster] = {}
        for name in names:
            self.clusters[name] = Cluster(name, self)
        self.read_index = {(a, b): 0 for a in names for b in names if a != b}

    def __getitem__(self, name: str) -> Cluster:
        return self.clusters[name]

    async def replicate(self, source: str, target: str, *, limit: Optional[int] = None) -> int:
        """Carries what ``source`` has for ``target`` (at most ``limit`` entries: a slow link); returns the
        number of entries copied."""
        entries = self.clusters[source].topic.entries
        copied = 0
        while self.read_index[(source, target)] < len(entries) and (limit is None or copied < limit):
            _, data = entries[self.read_index[(source, target)]]
            self.read_index[(source, target)] += 1
            parsed = parse_entry(data)
            md = parsed.metadata
            if md.replicated_from or (md.replicate_to and target not in md.replicate_to):
                continue
            md.replicated_from = source
            dest = self.clusters[target]
            pos = dest.topic.append(encode_entry(md, parsed.payload))
            copied += 1
            if md.HasField("marker_type"):
                await dest.controller.on_marker(pos, md, parsed.payload)
        return copied

    async def settle(self) -> None:
        """Replicates everything, both ways, until nothing moves."""
        while True:
            moved = 0
            for source, target in list(self.read_index):
                moved += await self.replicate(source, target)
            if not moved:
                return


def _snapshot_of(cluster: Cluster) -> tuple[Position, pb.ReplicatedSubscriptionsSnapshot]:
    (pos, md, snap), = cluster.topic.markers(SNAPSHOT)
    assert list(md.replicate_to) == [cluster.name]
    return pos, snap


def _positions_of(cluster: Cluster, marker_type: int) -> list[Position]:
    return [pos for pos, _, _ in cluster.topic.markers(marker_type)]


def _snapshot_holds(world: World, local: str, at: Position, remotes: dict[str, Position]) -> bool:
    """The snapshot's promise: every message a remote cluster stored up to its position is stored here before
    ``at`` (so acknowledging up to ``at`` here may acknowledge up to that position there)."""
    here = world[local].data(up_to=at)
    return all(key in here for name, pos in remotes.items() for key in world[name].data(up_to=pos))


# ------------------------------------------------------------------------------------------ snapshots


async def test_snapshot_with_one_remote_completes_in_one_round():
    world = World("a", "b")
    a, b = world["a"], world["b"]
    a.publish(3)
    b.replicated_subscriptions = False  # b only answers
    await a.controller.tick()
    (request_pos, request_md, request), = a.topic.markers(REQUEST)
    assert request.source_cluster == "a" and not request_md.replicate_to
    await world.replicate("a", "b")  # the data and the request reach b
    (at_b,) = _positions_of(b, REQUEST)
    (_, response_md, response), = b.topic.markers(RESPONSE)
    assert list(response_md.replicate_to) == ["a"]
    assert response.snapshot_id == request.snapshot_id
    assert markers.marker_id_to_position(response.cluster.message_id) == at_b
    await world.replicate("b", "a")
    (response_at_a,) = _positions_of(a, RESPONSE)
    _, snap = _snapshot_of(a)
    assert snap.snapshot_id == request.snapshot_id
    assert markers.marker_id_to_position(snap.local_message_id) == response_at_a
    assert markers.cluster_positions(snap.clusters) == {"b": at_b}
    await world.settle()
    assert b.topic.markers(SNAPSHOT) == []  # the snapshot never leaves its cluster
    assert a.controller.stats() == {**a.controller.stats(), "snapshots_started": 1, "snapshots_completed": 1,
                                    "snapshots_pending": 0}
    assert b.controller.stats()["responses_sent"] == 1


async def test_snapshot_with_two_remotes_takes_two_rounds_and_keeps_the_second_rounds_positions():
    """A message from c that reached b before b's first response, but a only after c's first response, is
    what the second round is for: a one-round snapshot would let b acknowledge it before a has it."""
    world = World("a", "b", "c")
    a, b, c = world["a"], world["b"], world["c"]
    a.publish()
    await a.controller.tick()
    await world.replicate("a", "c")  # c answers round 1 ...
    c.publish()  # ... then publishes m
    await world.replicate("c", "b")  # m reaches b
    await world.replicate("a", "b")  # b answers round 1, after m
    await world.replicate("b", "a")
    await world.replicate("c", "a", limit=1)  # c's response reaches a, m does not yet
    first, second = a.topic.markers(REQUEST)  # every remote answered round 1: round 2
    assert first[2].snapshot_id == second[2].snapshot_id and a.topic.markers(SNAPSHOT) == []
    round_one = {"b": _positions_of(b, REQUEST)[0], "c": _positions_of(c, REQUEST)[0]}
    assert not _snapshot_holds(world, "a", a.topic.last_position(), round_one)
    await world.replicate("a", "b")
    await world.replicate("a", "c")
    await world.replicate("c", "a")
    await world.replicate("b", "a")
    _, snap = _snapshot_of(a)
    remotes = markers.cluster_positions(snap.clusters)
    assert remotes == {"b": _positions_of(b, REQUEST)[1], "c": _positions_of(c, REQUEST)[1]}
    local = markers.marker_id_to_position(snap.local_message_id)
    assert local == _positions_of(a, RESPONSE)[-1]
    assert _snapshot_holds(world, "a", local, remotes)
    assert len(b.data(up_to=remotes["b"])) == 2  # a's message and c's m


async def test_pending_snapshot_times_out_and_a_new_one_starts():
    world = World("a", "b")
    a = world["a"]
    a.publish()
    await a.controller.tick()
    world.clock.now_s += 10
    await a.controller.tick()
    assert len(a.topic.markers(REQUEST)) == 1  # still pending: no second snapshot
    assert a.controller.stats()["snapshots_pending"] == 1
    world.clock.now_s += 20
    await a.controller.tick()  # b never answered: dropped; the data it was to cover is still uncovered
    assert a.controller.stats()["snapshots_timed_out"] == 1
    requests = a.topic.markers(REQUEST)
    assert len(requests) == 2 and requests[0][2].snapshot_id != requests[1][2].snapshot_id
    await world.replicate("a", "b")
    await world.replicate("b", "a")  # b answers both; only the pending snapshot completes
    _, snap = _snapshot_of(a)
    assert snap.snapshot_id == requests[1][2].snapshot_id
    assert a.controller.stats()["snapshots_completed"] == 1


async def test_nothing_happens_without_replicated_subscriptions_or_remotes():
    world = World("a", "b")
    a = world["a"]
    a.publish()
    a.replicated_subscriptions = False
    await a.controller.tick()
    assert a.topic.markers(REQUEST) == []
    lonely = World("a")["a"]
    lonely.publish()
    await lonely.controller.tick()
    assert lonely.topic.markers(REQUEST) == []


async def test_no_snapshot_without_new_data_even_when_markers_flow_both_ways():
    world = World("a", "b")
    a, b = world["a"], world["b"]
    a.publish()
    b.publish()
    for _ in range(2):
        await a.controller.tick()
        await b.controller.tick()
        await world.settle()
    started = a.controller.stats()["snapshots_started"], b.controller.stats()["snapshots_started"]
    for _ in range(5):  # idle: each one's markers are not news to the other
        world.clock.now_s += 1
        await a.controller.tick()
        await b.controller.tick()
        await world.settle()
    assert (a.controller.stats()["snapshots_started"], b.controller.stats()["snapshots_started"]) == started
    a.publish()
    await a.controller.tick()
    assert a.controller.stats()["snapshots_started"] == started[0] + 1


async def test_data_after_a_remote_marker_is_still_news():
    world = World("a", "b")
    a, b = world["a"], world["b"]
    a.publish()
    await a.controller.tick()
    await world.settle()
    assert a.controller.stats()["snapshots_completed"] == 1
    a.publish()  # data, then a marker from b on top of it
    b.publish()
    await b.controller.tick()
    await world.replicate("b", "a")
    await a.controller.tick()
    assert a.controller.stats()["snapshots_started"] == 2


async def test_a_new_ledger_is_taken_as_news():
    world = World("a", "b")
    a = world["a"]
    a.publish()
    await a.controller.tick()
    await world.settle()
    a.topic.roll()
    a.controller.subscription_advanced("s", {"b": Position(1, 0)})
    await a.controller.flush()  # an UPDATE marker alone, in a new ledger: the controller cannot tell
    await a.controller.tick()
    assert a.controller.stats()["snapshots_started"] == 2


async def test_write_errors_are_logged_not_raised(caplog):
    world = World("a", "b")
    a = world["a"]
    a.publish()
    a.fail_writes = True
    await a.controller.tick()
    a.controller.subscription_advanced("s", {"b": Position(1, 1)})
    await a.controller.flush()
    assert a.controller.stats()["marker_write_errors"] == 2
    assert a.controller.stats()["snapshots_pending"] == 0
    assert "writing a REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST marker failed" in caplog.text
    a.fail_writes = False
    await a.controller.tick()  # the data is still uncovered: a new snapshot starts at once
    assert len(a.topic.markers(REQUEST)) == 1


# ------------------------------------------------------------------------------------------ updates


async def test_update_carries_the_snapshot_positions_and_moves_each_remote():
    world = World("a", "b", "c")
    a, b, c = world["a"], world["b"], world["c"]
    a.publish(2)
    await a.controller.tick()
    await world.settle()
    snapshot_pos, snap = _snapshot_of(a)
    # a's subscription: its dispatcher met the snapshot marker, then acknowledged past it.
    cache = a.controller.new_snapshot_cache()
    (_, data), = [(p, d) for p, d in a.topic.entries if p == snapshot_pos]
    parsed = parse_entry(data)
    cache.add_marker(parsed.metadata, parsed.payload)
    clusters = cache.advance(snapshot_pos)
    assert clusters == markers.cluster_positions(snap.clusters)
    a.controller.subscription_advanced("orders", clusters)
    await a.controller.flush()
    (_, update_md, update), = a.topic.markers(UPDATE)
    assert not update_md.replicate_to and update.subscription_name == "orders"
    assert markers.cluster_positions(update.clusters) == clusters
    await world.settle()
    assert b.applied == [("orders", clusters["b"])]
    assert c.applied == [("orders", clusters["c"])]
    assert a.applied == []  # its own update is not applied back
    assert b.controller.stats()["updates_applied"] == 1


async def test_updates_of_one_subscription_are_coalesced():
    world = World("a", "b")
    a = world["a"]
    a.controller.subscription_advanced("s", {"b": Position(1, 1)})
    a.controller.subscription_advanced("s", {"b": Position(1, 5)})
    a.controller.subscription_advanced("t", {"b": Position(1, 2)})
    await a.controller.flush()
    written = [(u.subscription_name, markers.cluster_positions(u.clusters)) for _, _, u in a.topic.markers(UPDATE)]
    assert sorted(written) == [("s", {"b": Position(1, 5)}), ("t", {"b": Position(1, 2)})]


async def test_markers_from_its_own_cluster_and_junk_are_ignored(caplog):
    world = World("a", "b")
    b = world["b"]
    request = markers.snapshot_request("x", "b")
    entry = encode_marker_entry(REQUEST, request)
    md = parse_entry(entry).metadata
    await b.controller.on_marker(Position(1, 0), md, request.SerializeToString())  # no replicated_from: local
    md.replicated_from = "a"
    await b.controller.on_marker(Position(1, 1), md, request.SerializeToString())  # names b as its source
    md.marker_type = pb.TXN_COMMIT
    await b.controller.on_marker(Position(1, 2), md, b"")
    md.marker_type = UPDATE
    await b.controller.on_marker(Position(1, 3), md, b"\xff\xff")
    assert b.topic.entries == [] and b.applied == []
    assert "ignoring a marker from a" in caplog.text


async def test_start_and_close_are_idempotent_and_close_stops_the_task():
    world = World("a", "b")
    a = world["a"]
    a.publish()
    a.controller.snapshot_interval_s = 3600
    async with a.controller:
        a.controller.start()
        await wait_for_async(lambda: a.topic.markers(REQUEST), 5, what="the first periodic tick")
    await a.controller.close()
    assert a.controller._task is None
    a.controller.start()  # closed stays closed
    assert a.controller._task is None
    await a.controller.tick()
    a.controller.subscription_advanced("s", {"b": Position(1, 1)})
    assert a.controller.stats()["snapshots_started"] == 1


# ------------------------------------------------------------------------------------------ the cache


def test_cache_keeps_newer_snapshots_only_and_is_bounded():
    cache = SnapshotCache(max_snapshots=3)
    for i in range(1, 6):
        cache.add(Position(1, i * 10), {"b": Position(2, i)})
    assert len(cache) == 3  # the oldest two went
    cache.add(Position(1, 45), {"b": Position(2, 99)})  # at or before the newest held: ignored
    cache.add(Position(1, 50), {"b": Position(2, 99)})
    assert len(cache) == 3
    assert cache.advance(Position(1, 29)) is None
    assert cache.advance(Position(1, 41)) == {"b": Position(2, 4)}  # newest passed; 30 dropped with it
    assert len(cache) == 1
    assert cache.advance(Position(1, 49)) is None
    assert cache.advance(Position(2, 0)) == {"b": Position(2, 5)}
    assert cache.advance(Position(3, 0)) is None and len(cache) == 0


def test_cache_copies_what_it_keeps_and_refuses_a_bad_size():
    clusters = {"b": Position(1, 1)}
    cache = SnapshotCache()
    cache.add(Position(1, 1), clusters)
    clusters["b"] = Position(9, 9)
    assert cache.advance(Position(1, 1)) == {"b": Position(1, 1)}
    with pytest.raises(ValueError):
        SnapshotCache(0)


def test_cache_add_marker_refuses_other_markers():
    from magnetar.protocol import ProtocolError

    cache = SnapshotCache()
    update = markers.update("s", {})
    parsed = parse_entry(encode_marker_entry(UPDATE, update))
    with pytest.raises(ProtocolError, match="not a snapshot"):
        cache.add_marker(parsed.metadata, parsed.payload)


# ------------------------------------------------------------------------------------------ broker wiring

TOPIC = "persistent://public/default/replicated"


class FakeReplication:
    """Stands in for the lead's ``TopicReplication``: only hands the controller to the topic."""

    def __init__(self, controller: Optional[ReplicatedSubscriptionsController]) -> None:
        self.replicated_subscriptions = controller

    def tick(self) -> None:
        pass

    def stats(self) -> dict:
        return {}

    async def close(self) -> None:
        if self.replicated_subscriptions is not None:
            await self.replicated_subscriptions.close()


@pytest.fixture
async def service():
    svc = BrokerService(config=ServiceConfig(), ml_factory=MemoryManagedLedgerFactory(), configuration_store=None,
                        ownership=SelfOwnership("pulsar://x:1"), cluster_name="a")
    yield svc
    for topic in list(svc._topics.values()):
        await topic.close()


async def _topic_with_controller(service):
    topic = await service.get_topic(TOPIC)

    async def write_marker(marker_type, message, replicate_to):
        return await topic.ml.add_entry(encode_marker_entry(marker_type, message, replicate_to=replicate_to))

    controller = ReplicatedSubscriptionsController(
        topic_name=TOPIC, local_cluster="a", write_marker=write_marker, remote_clusters=lambda: ["b"],
        apply_update=lambda *_: asyncio.sleep(0), has_replicated_subscriptions=lambda: True,
        last_position=lambda: topic.ml.last_confirmed_position)
    topic.replication = FakeReplication(controller)
    return topic, controller


def _data(i: int) -> bytes:
    return encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=int(time.time() * 1000)),
                        f"m{i}".encode())


async def _subscribe(service, topic, *, replicated: bool):
    from tests.unit.test_broker_dispatch import FakeConnection

    conn = FakeConnection(service)
    cmd = pb.CommandSubscribe(topic=topic.name, subscription="s", subType=pb.CommandSubscribe.Exclusive,
                              consumer_id=1, request_id=1, initialPosition=pb.CommandSubscribe.Earliest,
                              replicate_subscription_state=replicated)
    from broker.service.session.requests import subscribe_request
    consumer = await topic.subscribe(subscribe_request(cmd, "c1"), conn)
    conn.consumers[1] = consumer
    consumer.flow(100)
    consumer.subscription.dispatcher.consumer_flow(consumer)
    return conn, consumer


async def _stored_markers(topic, marker_type: int) -> list:
    cursor = topic.ml.new_non_durable_cursor(Position(-1, -1), name="inspect")
    found = []
    for entry in await cursor.read_entries(1000):
        parsed = parse_entry(entry.data)
        if parsed.metadata.marker_type == marker_type:
            found.append(decode_marker(parsed.metadata, parsed.payload))
    return found


async def _ack_all(sub, consumer, conn, n: int) -> None:
    await wait_for_async(lambda: len(conn.messages()) == n, 5, what=f"{n} messages delivered")
    last = conn.messages()[-1].command.message.message_id
    sub.acknowledge(consumer, acked_ids([last]), cumulative=True)
    await sub.drain_acks()


async def test_a_replicated_subscription_acknowledging_past_a_snapshot_writes_an_update(service):
    topic, controller = await _topic_with_controller(service)
    conn, consumer = await _subscribe(service, topic, replicated=True)
    sub = consumer.subscription
    assert sub.replicated
    await topic.ml.add_entry(_data(0))
    response_at = await topic.ml.add_entry(encode_marker_entry(RESPONSE, markers.snapshot_response("x", "b",
                                                                                                   Position(7, 3))))
    snapshot = markers.snapshot("x", response_at, {"b": Position(7, 3)})
    await topic.ml.add_entry(encode_marker_entry(SNAPSHOT, snapshot, replicate_to=["a"]))
    await topic.ml.add_entry(_data(1))
    await _ack_all(sub, consumer, conn, 2)
    await wait_for_async(lambda: controller.stats()["updates_written"] == 1, 5, what="the UPDATE marker")
    (update,) = await _stored_markers(topic, UPDATE)
    assert update.subscription_name == "s"
    assert markers.cluster_positions(update.clusters) == {"b": Position(7, 3)}


async def test_a_subscription_that_is_not_replicated_writes_no_update(service):
    topic, controller = await _topic_with_controller(service)
    conn, consumer = await _subscribe(service, topic, replicated=False)
    await topic.ml.add_entry(_data(0))
    pos = await topic.ml.add_entry(_data(1))
    snapshot = markers.snapshot("x", pos, {"b": Position(7, 3)})
    await topic.ml.add_entry(encode_marker_entry(SNAPSHOT, snapshot, replicate_to=["a"]))
    await topic.ml.add_entry(_data(2))
    await _ack_all(consumer.subscription, consumer, conn, 3)
    await controller.flush()
    assert controller.stats()["updates_written"] == 0
    assert await _stored_markers(topic, UPDATE) == []


async def test_skip_moves_a_replicated_subscription_past_a_snapshot(service):
    topic, controller = await _topic_with_controller(service)
    conn, consumer = await _subscribe(service, topic, replicated=True)
    sub = consumer.subscription
    first = await topic.ml.add_entry(_data(0))
    await topic.ml.add_entry(encode_marker_entry(SNAPSHOT, markers.snapshot("x", first, {"b": Position(7, 3)}),
                                                 replicate_to=["a"]))
    last = await topic.ml.add_entry(_data(1))
    await wait_for_async(lambda: len(conn.messages()) == 2, 5, what="both messages delivered")
    await sub.mark_delete_up_to(last)
    await controller.flush()
    (update,) = await _stored_markers(topic, UPDATE)
    assert markers.cluster_positions(update.clusters) == {"b": Position(7, 3)}
