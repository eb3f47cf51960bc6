"""The Kafka group coordinator on a real broker service (in-memory managed ledger, and real ZooKeeper +
bookies): aiokafka's own request structs in, response structs out, as the Kafka listener hands them over.

What must hold: members join, get the leader's assignment, learn of rebalances by heartbeat; a silent member
is removed after its session; committed offsets (with their metadata) survive the coordination topic's
unload and a broker restart on the same storage, and show as a subscription named after the group.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.protocol.commit import OffsetCommitRequest_v3, OffsetFetchRequest_v1, OffsetFetchRequest_v3
from aiokafka.protocol.coordination import FindCoordinatorRequest_v0, FindCoordinatorRequest_v1
from aiokafka.protocol.group import (HeartbeatRequest_v1, JoinGroupRequest_v0, JoinGroupRequest_v2,
                                     LeaveGroupRequest_v1, SyncGroupRequest_v1)
from aiokafka.protocol.admin import DeleteGroupsRequest_v1, DescribeGroupsRequest_v2, ListGroupsRequest_v1

from broker.kafka.config import KafkaConfig
from broker.kafka.context import RequestContext
from broker.kafka.groups import GroupCoordinator
from broker.kafka.groups import errors as E
from broker.kafka.groups.placement import coordination_partition, coordination_topic
from broker.kafka.groups.state import GroupLimits
from broker.ownership_api import LookupResult, SelfOwnership
from tests.kit.broker_thread import broker, storage  # noqa: F401  (fixtures)
from tests.kit.wait import wait_for_async

CONFIG = KafkaConfig(listeners="PLAINTEXT://127.0.0.1:19092")


def ctx(client_id: str = "app") -> RequestContext:
    return RequestContext(client_id=client_id, principal=None, correlation_id=1, api_version=0,
                          listener_name="PLAINTEXT", peer="127.0.0.1:40000")


async def call(coordinator: GroupCoordinator, request, client_id: str = "app"):
    return await coordinator.handle(request.API_KEY, request.API_VERSION, request, ctx(client_id))


def start_coordinator(broker, **kwargs) -> GroupCoordinator:
    async def make():
        c = GroupCoordinator(broker.service, CONFIG, limits=GroupLimits(min_session_timeout_ms=200), **kwargs)
        await c.start()
        return c
    return broker.run(make)


def join_request(group: str, member_id: str = "", *, session_ms: int = 10_000, metadata: bytes = b"meta"):
    return JoinGroupRequest_v2(group, session_ms, 30_000, member_id, "consumer", [("range", metadata)])


def test_find_coordinator_answers_this_brokers_kafka_address(broker):
    c = start_coordinator(broker)
    try:
        r0 = broker.run(call, c, FindCoordinatorRequest_v0("orders-app"))
        r1 = broker.run(call, c, FindCoordinatorRequest_v1("orders-app", 0))
        assert (r0.error_code, r0.host, r0.port) == (E.NONE, "127.0.0.1", 19092)
        assert (r1.error_code, r1.host, r1.port, r1.coordinator_id) == (E.NONE, "127.0.0.1", 19092, r0.coordinator_id)
        assert broker.run(call, c, FindCoordinatorRequest_v1("orders-app", 1)).error_code == E.COORDINATOR_NOT_AVAILABLE
        assert broker.run(call, c, FindCoordinatorRequest_v0("")).error_code == E.INVALID_GROUP_ID
    finally:
        broker.run(c.close)


def test_two_members_rebalance_and_share_the_leaders_assignment(broker):
    c = start_coordinator(broker)
    try:
        async def scenario():
            first = await call(c, join_request("g1"), "a")
            assert first.error_code == E.NONE and first.leader_id == first.member_id
            sync = await call(c, SyncGroupRequest_v1("g1", first.generation_id, first.member_id,
                                                     [(first.member_id, b"all")]))
            assert (sync.error_code, sync.member_assignment) == (E.NONE, b"all")
            # a second member raises the barrier: the first learns it by heartbeat and rejoins
            second_join = asyncio.ensure_future(call(c, join_request("g1"), "b"))
            await wait_for_async(lambda: c.groups["g1"].state.value == "PreparingRebalance", 5)
            hb = await call(c, HeartbeatRequest_v1("g1", first.generation_id, first.member_id))
            assert hb.error_code == E.REBALANCE_IN_PROGRESS
            again = await call(c, join_request("g1", first.member_id), "a")
            second = await second_join
            assert again.generation_id == second.generation_id == first.generation_id + 1
            assert again.leader_id == first.member_id and {m for m, _ in again.members} == {
                first.member_id, second.member_id}
            follower = asyncio.ensure_future(call(c, SyncGroupRequest_v1("g1", second.generation_id,
                                                                         second.member_id, [])))
            leader = await call(c, SyncGroupRequest_v1("g1", again.generation_id, again.member_id,
                                                       [(again.member_id, b"p0"), (second.member_id, b"p1")]))
            assert (leader.member_assignment, (await follower).member_assignment) == (b"p0", b"p1")
            assert (await call(c, HeartbeatRequest_v1("g1", first.generation_id, first.member_id))).error_code \
                == E.ILLEGAL_GENERATION
            assert (await call(c, HeartbeatRequest_v1("g1", again.generation_id, "nobody"))).error_code \
                == E.UNKNOWN_MEMBER_ID
            described = (await call(c, DescribeGroupsRequest_v2(["g1"]))).groups[0]
            assert described[2] == "Stable" and described[4] == "range"
            assert {m[0]: m[4] for m in described[5]} == {again.member_id: b"p0", second.member_id: b"p1"}
            # leaving: the other member is told to rejoin, and leads the next generation alone
            assert (await call(c, LeaveGroupRequest_v1("g1", second.member_id))).error_code == E.NONE
            hb = await call(c, HeartbeatRequest_v1("g1", again.generation_id, again.member_id))
            assert hb.error_code == E.REBALANCE_IN_PROGRESS
            alone = await call(c, join_request("g1", again.member_id), "a")
            assert alone.leader_id == again.member_id and len(alone.members) == 1
            await call(c, SyncGroupRequest_v1("g1", alone.generation_id, alone.member_id, []))
            listed = await call(c, ListGroupsRequest_v1())
            assert ("g1", "consumer") in listed.groups
        broker.run(scenario)
    finally:
        broker.run(c.close)


def test_a_silent_member_is_removed_after_its_session(broker):
    c = start_coordinator(broker)
    try:
        async def scenario():
            a = await call(c, join_request("g2", session_ms=400), "a")
            await call(c, SyncGroupRequest_v1("g2", a.generation_id, a.member_id, []))
            await wait_for_async(lambda: "g2" not in c.groups, 10, what="the silent member expired")
            described = (await call(c, DescribeGroupsRequest_v2(["g2"]))).groups[0]
            assert described[2] == "Dead" and described[5] == []  # no members, no stored offsets: forgotten
            assert (await call(c, HeartbeatRequest_v1("g2", a.generation_id, a.member_id))).error_code \
                == E.UNKNOWN_MEMBER_ID
        broker.run(scenario)
    finally:
        broker.run(c.close)


def test_close_answers_a_waiting_join(broker):
    """Regression: close() once hung, its deadline task swallowing the cancellation (wait_for woken by the
    answers close() gives at the same moment)."""
    c = start_coordinator(broker)

    async def scenario():
        a = await call(c, join_request("g3"), "a")
        await call(c, SyncGroupRequest_v1("g3", a.generation_id, a.member_id, []))
        waiting = asyncio.ensure_future(call(c, join_request("g3"), "b"))  # waits for a to rejoin
        await wait_for_async(lambda: c.groups["g3"].state.value == "PreparingRebalance", 5)
        await c.close()
        assert (await waiting).error_code == E.NOT_COORDINATOR
        assert (await call(c, HeartbeatRequest_v1("g3", 1, a.member_id))).error_code == E.COORDINATOR_NOT_AVAILABLE
    broker.run(scenario)


COMMIT = [("orders", [(0, 42, "first ✓ checkpoint"), (1, 7, "")]), ("persistent://public/default/x", [(0, 0, "z")])]


def test_committed_offsets_survive_unload_and_restart(broker):
    c = start_coordinator(broker)
    group_topic = coordination_topic("public", "default", coordination_partition("billing", c.partitions))
    try:
        r = broker.run(call, c, OffsetCommitRequest_v3("billing", -1, "", -1, COMMIT))
        assert [(t, sorted(ps)) for t, ps in r.topics] == [("orders", [(0, E.NONE), (1, E.NONE)]),
                                                            ("persistent://public/default/x", [(0, E.NONE)])]
        fetched = broker.run(call, c, OffsetFetchRequest_v3("billing", [("orders", [0, 1, 2])]))
        assert fetched.error_code == E.NONE
        assert fetched.topics == [("orders", [(0, 42, "first ✓ checkpoint", 0), (1, 7, "", 0), (2, -1, "", 0)])]
        # the group is a subscription of its coordination topic, in the topic's stats
        assert "billing" in broker.stats(group_topic)["subscriptions"]
        assert broker.run(broker.service.unload_topic, group_topic)
        fetched = broker.run(call, c, OffsetFetchRequest_v1("billing", [("orders", [0])]))
        assert fetched.topics == [("orders", [(0, 42, "first ✓ checkpoint", 0)])]
    finally:
        broker.run(c.close)
    broker.restart_service()  # topics unloaded, a new service on the same storage
    c = start_coordinator(broker)
    try:
        everything = broker.run(call, c, OffsetFetchRequest_v3("billing", None))
        assert sorted((t, sorted(ps)) for t, ps in everything.topics) == [
            ("orders", [(0, 42, "first ✓ checkpoint", 0), (1, 7, "", 0)]),
            ("persistent://public/default/x", [(0, 0, "z", 0)])]
        described = broker.run(call, c, DescribeGroupsRequest_v2(["billing", "never-seen"])).groups
        assert [(g[1], g[2]) for g in described] == [("billing", "Empty"), ("never-seen", "Dead")]
        assert ("billing", "") in broker.run(call, c, ListGroupsRequest_v1()).groups
        deleted = broker.run(call, c, DeleteGroupsRequest_v1(["billing", "never-seen"]))
        assert deleted.results == [("billing", E.NONE), ("never-seen", E.GROUP_ID_NOT_FOUND)]
        assert broker.run(call, c, OffsetFetchRequest_v3("billing", None)).topics == []
        assert "billing" not in broker.stats(group_topic)["subscriptions"]
    finally:
        broker.run(c.close)


def test_commits_are_checked_against_the_group(broker):
    c = start_coordinator(broker)
    try:
        async def scenario():
            a = await call(c, join_request("g4"), "a")
            # CompletingRebalance: the leader has not synced yet
            r = await call(c, OffsetCommitRequest_v3("g4", a.generation_id, a.member_id, -1, [("t", [(0, 1, "")])]))
            assert r.topics == [("t", [(0, E.REBALANCE_IN_PROGRESS)])]
            await call(c, SyncGroupRequest_v1("g4", a.generation_id, a.member_id, []))
            stale = await call(c, OffsetCommitRequest_v3("g4", a.generation_id - 1, a.member_id, -1,
                                                          [("t", [(0, 1, "")])]))
            assert stale.topics == [("t", [(0, E.ILLEGAL_GENERATION)])]
            big = await call(c, OffsetCommitRequest_v3("g4", a.generation_id, a.member_id, -1,
                                                        [("t", [(0, 1, "x" * 5000), (1, 2, "ok")])]))
            assert big.topics == [("t", [(0, E.OFFSET_METADATA_TOO_LARGE), (1, E.NONE)])]
            fetched = await call(c, OffsetFetchRequest_v3("g4", [("t", [0, 1])]))
            assert fetched.topics == [("t", [(0, -1, "", 0), (1, 2, "ok", 0)])]  # the refused one stored nothing
            no_group = await call(c, OffsetCommitRequest_v3("g-none", 3, "m", -1, [("t", [(0, 1, "")])]))
            assert no_group.topics == [("t", [(0, E.ILLEGAL_GENERATION)])]
        broker.run(scenario)
    finally:
        broker.run(c.close)


class _Elsewhere(SelfOwnership):
    """Ownership of a broker that owns nothing (every group is coordinated by another broker)."""

    async def is_owned_by_me(self, topic: str) -> bool:
        return False

    async def lookup(self, topic: str, *, authoritative: bool = False, listener_name: str = ""):
        return LookupResult(False, "pulsar://127.0.0.1:1", http_url="http://127.0.0.1:2")


def test_not_coordinator_when_another_broker_owns_the_group(broker):
    c = start_coordinator(broker)
    try:
        async def scenario():
            a = await call(c, join_request("g5"), "a")
            assert a.error_code == E.NONE
            mine = broker.service.ownership
            broker.service.ownership = _Elsewhere(mine.broker_service_url)
            try:
                assert (await call(c, HeartbeatRequest_v1("g5", a.generation_id, a.member_id))).error_code \
                    == E.NOT_COORDINATOR
                assert "g5" not in c.groups  # forgotten: its members rejoin at the new coordinator
                r = await call(c, OffsetCommitRequest_v3("g5", -1, "", -1, [("t", [(0, 1, "")])]))
                assert r.topics == [("t", [(0, E.NOT_COORDINATOR)])]
                assert (await call(c, OffsetFetchRequest_v3("g5", None))).error_code == E.NOT_COORDINATOR
                assert (await call(c, JoinGroupRequest_v0("g5", 10_000, "", "consumer", [("range", b"")]))).error_code \
                    == E.NOT_COORDINATOR
            finally:
                broker.service.ownership = mine
        broker.run(scenario)
    finally:
        broker.run(c.close)


def test_versions_served_match_aiokafka():
    from aiokafka.protocol.commit import OffsetCommitRequest, OffsetFetchRequest
    from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

    versions = GroupCoordinator(None, CONFIG).supported_versions()
    for request in (OffsetCommitRequest("g", -1, "", -1, []), OffsetFetchRequest("g", None),
                    JoinGroupRequest("g", 10_000, 30_000, "", "", "consumer", [("range", b"")]),
                    SyncGroupRequest("g", 1, "m", "", []), HeartbeatRequest("g", 1, "m"), LeaveGroupRequest("g", "m")):
        built = request.prepare(versions)  # raises when aiokafka has no struct in the range
        assert versions[built.API_KEY][0] <= built.API_VERSION <= versions[built.API_KEY][1]


def _garbage(field, rng):
    """A random value of an aiokafka wire type, as a decoder could hand it over (nulls, extremes, junk)."""
    from aiokafka.protocol import types as T

    if isinstance(field, T.Schema):
        return tuple(_garbage(f, rng) for f in field.fields)
    if isinstance(field, T.Array):
        return rng.choice([None, [], [_garbage(field.array_of, rng) for _ in range(rng.randint(1, 3))]])
    if isinstance(field, T.String):
        return rng.choice([None, "", "g", "x" * 5000, "ü/|%\x00", "orders"])
    if field is T.Bytes or isinstance(field, T.Bytes):
        return rng.choice([None, b"", b"\xff" * 100])
    if field is T.Boolean:
        return rng.choice([True, False])
    bits = {T.Int8: 8, T.Int16: 16, T.Int32: 32, T.Int64: 64}[field]
    return rng.choice([-1, 0, 1, 2 ** (bits - 1) - 1, -(2 ** (bits - 1)), 10_000 % 2 ** (bits - 1)])


def test_random_well_framed_requests_get_answers_and_break_nothing(broker):
    """Any request a Kafka decoder can produce (nulls, extremes, unknown members, huge strings) is answered
    with an encodable response of its version, and the coordinator serves a group normally afterwards."""
    import random

    from broker.kafka.groups.coordinator import SUPPORTED_VERSIONS
    from aiokafka.protocol import admin, commit, coordination, group

    modules = (admin, commit, coordination, group)
    classes = {}
    for module in modules:
        for value in vars(module).values():
            key = getattr(value, "API_KEY", None)
            if isinstance(value, type) and hasattr(value, "RESPONSE_TYPE") and key in SUPPORTED_VERSIONS:
                low, high = SUPPORTED_VERSIONS[key]
                if low <= value.API_VERSION <= high:
                    classes[(key, value.API_VERSION)] = value
    assert len(classes) == sum(high - low + 1 for low, high in SUPPORTED_VERSIONS.values())
    c = start_coordinator(broker)
    rng = random.Random(17)
    print("seed 17")
    try:
        async def scenario():
            for (key, version), cls in sorted(classes.items()):
                for _ in range(25):
                    struct = cls(*[_garbage(f, rng) for f in cls.SCHEMA.fields])
                    request = cls.decode(struct.encode())  # what the listener's decoder hands over
                    response = await c.handle(key, version, request, ctx())
                    assert type(response) is cls.RESPONSE_TYPE
                    response.encode()  # writable on the wire
            ok = await call(c, join_request("after-garbage"))
            assert ok.error_code == E.NONE
        broker.run(scenario, timeout_s=120)
    finally:
        broker.run(c.close)


@pytest.fixture
def indexed_broker(tmp_path, zk_connect):
    """A broker on real bookies whose managed ledgers add the broker entry index (Kafka offsets)."""
    from tests.kit.broker_thread import BrokerThread, real_storage

    extra = real_storage(tmp_path, zk_connect)  # the kit's managed ledgers add broker entry metadata
    bookies = extra.pop("bookies")
    extra.pop("held")
    b = BrokerThread(**extra).start()
    yield b
    b.stop()
    for bk in bookies:
        bk.process.cleanup()


def test_commits_are_mirrored_onto_the_partitions_subscription(indexed_broker):
    """Committing offset O moves the partition's subscription named after the group to the entry before the
    one holding O (found by the broker entry index), forwards and backwards; the stored offset stays exact."""
    from tests.kit.broker_thread import make_client, unique_topic

    broker = indexed_broker
    topic = unique_topic("mirror")
    client = make_client(broker.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(6):
            producer.send(f"m{i}".encode())
    finally:
        client.close()
    c = start_coordinator(broker)

    def commit(offset: int):
        r = broker.run(call, c, OffsetCommitRequest_v3("mirror-group", -1, "", -1, [(topic, [(0, offset, "")])]))
        assert r.topics == [(topic, [(0, E.NONE)])]
        return broker.stats(topic)["subscriptions"].get("mirror-group")

    def kafka_offset_property():
        return broker.call(lambda: broker.service.topics()[topic].subscriptions["mirror-group"].cursor.properties)

    try:
        assert commit(3)["msgBacklog"] == 3 and kafka_offset_property() == {"kafka.offset": 3}
        assert commit(6)["msgBacklog"] == 0  # the end: everything consumed
        assert commit(1)["msgBacklog"] == 5  # backwards, as Kafka allows
        assert commit(0)["msgBacklog"] == 6 and kafka_offset_property() == {"kafka.offset": 0}
        fetched = broker.run(call, c, OffsetFetchRequest_v3("mirror-group", [(topic, [0])]))
        assert fetched.topics == [(topic, [(0, 0, "", 0)])]
        deleted = broker.run(call, c, DeleteGroupsRequest_v1(["mirror-group"]))
        assert deleted.results == [("mirror-group", E.NONE)]
        assert "mirror-group" not in broker.stats(topic)["subscriptions"]
    finally:
        broker.run(c.close)


def test_offsets_and_deletion_follow_the_brokers_authorization_rules():
    """With authorization on, committing and fetching a group's offsets of a topic needs ``consume`` on it (the
    group is the subscription), and deleting a group needs the Kafka tenant's admin: TOPIC_AUTHORIZATION_FAILED
    / GROUP_AUTHORIZATION_FAILED otherwise, and nothing changes."""
    from broker.service import ServiceConfig
    from config_store import Policies
    from config_store.permissions import grant_topic_permission
    from tests.kit.broker_thread import BrokerThread

    policies = Policies()
    grant_topic_permission(policies, "persistent://public/default/granted", "app", ["consume"])
    import base64

    from magnetar.auth import tokens

    secret = "data:;base64," + base64.b64encode(tokens.create_secret_key()).decode()
    config = ServiceConfig(authentication_enabled=True, authentication_providers=("token",), token_secret_key=secret,
                           authorization_enabled=True, superuser_roles=("admin",))
    broker = BrokerThread(config=config, policies={"public/default": policies}).start()
    try:
        c = start_coordinator(broker)

        async def scenario():
            def as_role(role):
                return RequestContext(client_id="app", principal=role, correlation_id=1, api_version=0,
                                      listener_name="PLAINTEXT")
            commit = OffsetCommitRequest_v3("auth-group", -1, "", -1,
                                            [("granted", [(0, 5, "")]), ("other", [(0, 7, "")])])
            r = await c.handle(8, 3, commit, as_role("app"))
            assert r.topics == [("granted", [(0, E.NONE)]), ("other", [(0, E.TOPIC_AUTHORIZATION_FAILED)])]
            fetched = await c.handle(9, 3, OffsetFetchRequest_v3("auth-group", [("granted", [0]), ("other", [0])]),
                                     as_role("app"))
            assert fetched.topics == [("granted", [(0, 5, "", 0)]),
                                      ("other", [(0, -1, "", E.TOPIC_AUTHORIZATION_FAILED)])]
            everything = await c.handle(9, 3, OffsetFetchRequest_v3("auth-group", None), as_role("stranger"))
            assert everything.topics == []  # the committed topic is not the stranger's to read
            refused = await c.handle(42, 1, DeleteGroupsRequest_v1(["auth-group"]), as_role("app"))
            assert refused.results == [("auth-group", E.GROUP_AUTHORIZATION_FAILED)]
            assert (await c.handle(9, 3, OffsetFetchRequest_v3("auth-group", None), as_role("admin"))).topics == [
                ("granted", [(0, 5, "", 0)])]
            deleted = await c.handle(42, 1, DeleteGroupsRequest_v1(["auth-group"]), as_role("admin"))
            assert deleted.results == [("auth-group", E.NONE)]
        try:
            broker.run(scenario)
        finally:
            broker.run(c.close)
    finally:
        broker.stop()
