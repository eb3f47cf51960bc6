"""The pure Kafka group state machine (broker/kafka/groups/state.py): examples of Kafka's answers, and
properties over random schedules of joins, syncs, heartbeats, leaves and clock jumps."""

from __future__ import annotations

import itertools

from hypothesis import given, settings, strategies as st

from broker.kafka.groups import errors as E
from broker.kafka.groups.state import Group, GroupLimits, GroupState, JoinResult, SyncResult

S = GroupState
SESSION = 10_000
REBALANCE = 30_000


def join(group, token, member_id="", *, new_id="", now=0, protocols=(("range", b"m"),), session=SESSION,
         rebalance=REBALANCE, ptype="consumer"):
    return group.join(token, member_id, new_member_id=new_id, client_id="c", client_host="/127.0.0.1",
                      session_timeout_ms=session, rebalance_timeout_ms=rebalance, protocol_type=ptype,
                      protocols=protocols, now_ms=now)


def by_token(replies):
    return {r.token: r for r in replies}


def test_first_member_becomes_leader_and_group_completes():
    g = Group("g")
    [r] = join(g, 1, new_id="a")
    assert isinstance(r, JoinResult) and r.error == E.NONE
    assert (r.generation, r.leader_id, r.member_id, r.protocol) == (1, "a", "a", "range")
    assert r.members == (("a", b"m"),)
    assert g.state is S.COMPLETING_REBALANCE
    [s] = g.sync(2, "a", 1, {"a": b"A"}, now_ms=1)
    assert s == SyncResult(2, E.NONE, b"A") and g.state is S.STABLE


def test_second_member_waits_for_the_first_to_rejoin():
    g = Group("g")
    join(g, 1, new_id="a")
    g.sync(2, "a", 1, {"a": b"A"}, now_ms=0)
    assert join(g, 3, new_id="b", now=5) == []  # the barrier is up: a must rejoin
    assert g.state is S.PREPARING_REBALANCE
    assert g.heartbeat("a", 1, now_ms=6) == E.REBALANCE_IN_PROGRESS
    replies = by_token(join(g, 4, "a", now=7))
    assert replies[3].generation == replies[4].generation == 2
    assert replies[4].leader_id == "a" and {m for m, _ in replies[4].members} == {"a", "b"}
    assert replies[3].members == ()  # only the leader learns the members
    assert g.sync(5, "b", 2, {}, now_ms=8) == []  # waits for the leader
    out = by_token(g.sync(6, "a", 2, {"a": b"A", "b": b"B"}, now_ms=9))
    assert out[5].assignment == b"B" and out[6].assignment == b"A"


def test_heartbeat_errors_as_kafka():
    g = Group("g")
    assert g.heartbeat("x", 0, now_ms=0) == E.UNKNOWN_MEMBER_ID
    join(g, 1, new_id="a")
    assert g.heartbeat("a", 0, now_ms=0) == E.ILLEGAL_GENERATION
    assert g.heartbeat("a", 1, now_ms=0) == E.NONE
    g.delete() if g.state is S.EMPTY else None
    g.unload()
    assert g.heartbeat("a", 1, now_ms=0) == E.COORDINATOR_NOT_AVAILABLE


def test_inconsistent_protocols_and_bad_session_timeouts_are_refused_without_change():
    g = Group("g", GroupLimits(min_session_timeout_ms=100, max_session_timeout_ms=1000))
    assert join(g, 1, new_id="a", session=50)[0].error == E.INVALID_SESSION_TIMEOUT
    assert join(g, 1, new_id="a", session=500, protocols=())[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert g.members == {} and g.state is S.EMPTY
    join(g, 1, new_id="a", session=500, rebalance=500)
    assert join(g, 2, new_id="b", session=500, protocols=(("roundrobin", b""),))[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(g, 2, new_id="b", session=500, ptype="connect")[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert list(g.members) == ["a"] and g.state is S.COMPLETING_REBALANCE
    assert join(g, 3, "nobody", session=500)[0].error == E.UNKNOWN_MEMBER_ID


def test_protocol_chosen_by_votes_among_common_ones():
    g = Group("g")
    join(g, 1, new_id="a", protocols=(("rr", b"1"), ("range", b"2")))
    g.sync(2, "a", 1, {}, now_ms=0)
    join(g, 3, new_id="b", protocols=(("range", b"3"), ("sticky", b"")))
    replies = by_token(join(g, 4, "a", protocols=(("rr", b"1"), ("range", b"2"))))
    assert replies[4].protocol == "range"  # the only protocol both support
    assert dict(replies[4].members) == {"a": b"2", "b": b"3"}


def test_last_member_leaving_empties_the_group_and_bumps_the_generation():
    g = Group("g")
    join(g, 1, new_id="a")
    g.sync(2, "a", 1, {}, now_ms=0)
    assert g.leave("a", now_ms=1) == (E.NONE, [])
    assert g.state is S.EMPTY and g.generation == 2
    assert g.leave("a", now_ms=1)[0] == E.UNKNOWN_MEMBER_ID
    assert g.check_commit("", -1) == E.NONE  # a standalone consumer may commit to an empty group
    assert g.delete() == E.NONE and g.state is S.DEAD


def test_delete_refuses_a_group_with_members():
    g = Group("g")
    join(g, 1, new_id="a")
    assert g.delete() == E.NON_EMPTY_GROUP and g.state is S.COMPLETING_REBALANCE


def test_commit_checks():
    g = Group("g")
    join(g, 1, new_id="a")
    assert g.check_commit("a", 1) == E.REBALANCE_IN_PROGRESS  # CompletingRebalance
    g.sync(2, "a", 1, {}, now_ms=0)
    assert g.check_commit("a", 1) == E.NONE
    assert g.check_commit("a", 0) == E.ILLEGAL_GENERATION
    assert g.check_commit("b", 1) == E.UNKNOWN_MEMBER_ID
    assert g.check_commit("", -1) == E.UNKNOWN_MEMBER_ID  # not empty: a standalone commit would race members


def test_session_expiry_removes_a_silent_member_and_rebalances():
    g = Group("g")
    join(g, 1, new_id="a", now=0)
    join(g, 2, new_id="b", now=0)
    join(g, 5, "a", now=0)  # the barrier b's arrival raised
    g.sync(4, "b", 2, {}, now_ms=0)
    g.sync(3, "a", 2, {"a": b"A"}, now_ms=0)
    assert g.state is S.STABLE
    assert g.heartbeat("a", 2, now_ms=SESSION - 1) == E.NONE
    assert g.next_deadline_ms() == SESSION  # b's session
    assert g.expire(SESSION) == []
    assert list(g.members) == ["a"] and g.state is S.PREPARING_REBALANCE
    assert g.heartbeat("a", 2, now_ms=SESSION + 1) == E.REBALANCE_IN_PROGRESS


def test_rebalance_deadline_drops_members_that_did_not_rejoin():
    g = Group("g")
    join(g, 1, new_id="a", session=60_000, rebalance=REBALANCE)
    g.sync(2, "a", 1, {}, now_ms=0)
    assert join(g, 3, new_id="b", now=10, session=60_000) == []
    assert g.next_deadline_ms() == 10 + REBALANCE
    [r] = g.expire(10 + REBALANCE)
    assert r.token == 3 and r.error == E.NONE and r.leader_id == "b" and r.generation == 2
    assert list(g.members) == ["b"]


def test_lost_join_answer_is_answered_again():
    g = Group("g")
    join(g, 1, new_id="a")
    join(g, 2, new_id="b")
    join(g, 4, "a")
    [r] = join(g, 3, "b")  # CompletingRebalance, same metadata: the same generation's answer
    assert r.error == E.NONE and r.generation == 2 and g.state is S.COMPLETING_REBALANCE


def test_unload_answers_every_waiting_request():
    g = Group("g")
    join(g, 1, new_id="a")
    g.sync(2, "a", 1, {}, now_ms=0)
    join(g, 3, new_id="b")
    replies = g.unload()
    assert [(r.token, r.error) for r in replies] == [(3, E.NOT_COORDINATOR)] and g.state is S.DEAD
    assert join(g, 4, new_id="c")[0].error == E.COORDINATOR_NOT_AVAILABLE


# ------------------------------------------------------------------------------------------ properties

PARTITIONS = [("t", p) for p in range(6)] + [("u", 0)]


class Simulation:
    """Clients that follow Kafka's consumer protocol (rejoin on REBALANCE_IN_PROGRESS / errors; the leader
    assigns every partition round-robin over the members its JoinGroup answer named)."""

    def __init__(self) -> None:
        self.g = Group("g")
        self.now = 0
        self.tokens = itertools.count(1)
        self.ids = itertools.count(1)
        self.pending: dict[int, tuple[str, str]] = {}  # token -> (client, kind)
        self.clients: dict[str, dict] = {}  # client name -> {member_id, generation, assignment}
        self.generations = [0]
        self.leader_views: dict[int, set[str]] = {}  # generation -> members the leader was told of
        self.last_heartbeat: dict[str, int] = {}

    def deliver(self, replies) -> None:
        for r in replies:
            client, kind = self.pending.pop(r.token)
            c = self.clients.get(client)
            if c is None:
                continue
            if isinstance(r, JoinResult):
                if r.error != E.NONE:
                    if r.error == E.UNKNOWN_MEMBER_ID:
                        c["member_id"] = ""
                    continue
                c["member_id"], c["generation"] = r.member_id, r.generation
                self.last_heartbeat[r.member_id] = self.now
                if r.leader_id == r.member_id:
                    self.leader_views[r.generation] = {m for m, _ in r.members}
                    members = sorted(m for m, _ in r.members)
                    c["plan"] = {m: [p for i, p in enumerate(PARTITIONS) if members[i % len(members)] == m]
                                 for m in members}
                else:
                    c["plan"] = None
            else:
                if r.error == E.NONE:
                    c["assignment"] = r.assignment
        self.check()

    def check(self) -> None:
        g = self.g
        assert g.generation >= self.generations[-1]
        self.generations.append(g.generation)
        if g.state is S.STABLE:
            assert set(g.members) == self.leader_views[g.generation]
            owners: dict[tuple, list[str]] = {}
            for mid, m in g.members.items():
                for p in decode(m.assignment):
                    owners.setdefault(p, []).append(mid)
            assert sorted(owners) == sorted(PARTITIONS) and all(len(v) == 1 for v in owners.values())
        if g.leader_id is not None:
            assert g.leader_id in g.members
        assert g.state is S.EMPTY or g.state is S.DEAD or g.members or g.state is S.PREPARING_REBALANCE

    def step(self, action: str, who: int, dt: int) -> None:
        self.now += dt
        name = f"c{who}"
        c = self.clients.setdefault(name, {"member_id": "", "generation": -1, "plan": None, "assignment": b""})
        token = next(self.tokens)
        if action == "join":
            if any(cl == name and kind == "join" for cl, kind in self.pending.values()):
                return
            self.pending[token] = (name, "join")
            self.deliver(join(self.g, token, c["member_id"], new_id=f"m{next(self.ids)}", now=self.now))
        elif action == "sync" and c["member_id"]:
            plan = c["plan"] or {}
            self.pending[token] = (name, "sync")
            self.deliver(self.g.sync(token, c["member_id"], c["generation"],
                                     {m: encode(ps) for m, ps in plan.items()}, now_ms=self.now))
        elif action == "heartbeat" and c["member_id"]:
            if self.g.heartbeat(c["member_id"], c["generation"], now_ms=self.now) in (E.NONE, E.REBALANCE_IN_PROGRESS):
                self.last_heartbeat[c["member_id"]] = self.now
        elif action == "leave" and c["member_id"]:
            err, replies = self.g.leave(c["member_id"], now_ms=self.now)
            c["member_id"] = ""
            self.deliver(replies)
        self.deliver(self.g.expire(self.now))  # a transition Kafka forbids would raise GroupStateError


def encode(partitions) -> bytes:
    return ";".join(f"{t}:{p}" for t, p in partitions).encode()


def decode(data: bytes) -> list[tuple[str, int]]:
    return [(t, int(p)) for t, p in (x.split(":") for x in data.decode().split(";") if x)]


actions = st.lists(st.tuples(st.sampled_from(["join", "join", "sync", "sync", "heartbeat", "leave"]),
                             st.integers(0, 3), st.sampled_from([0, 0, 1, 100, 3_000, SESSION, REBALANCE])),
                   max_size=60)


@settings(max_examples=300, deadline=None)
@given(actions)
def test_random_schedules_keep_kafka_invariants(steps):
    sim = Simulation()
    for action, who, dt in steps:
        sim.step(action, who, dt)


@settings(max_examples=200, deadline=None)
@given(actions, st.integers(0, 3))
def test_a_member_that_stops_heartbeating_is_gone_after_its_session(steps, silent):
    """Run a schedule, then let every client but ``silent`` keep heartbeating (and rejoining and syncing):
    once the silent member's session (or the rebalance deadline) has passed, it is no longer a member."""
    sim = Simulation()
    for action, who, dt in steps:
        sim.step(action, who, dt)
    silent_id = sim.clients.get(f"c{silent}", {}).get("member_id", "")
    for _ in range(8):
        for who in range(4):
            if who == silent:
                continue
            for action in ("heartbeat", "join", "sync"):
                sim.step(action, who, 1_000)
    sim.step("heartbeat", (silent + 1) % 4, REBALANCE + SESSION)
    assert silent_id not in sim.g.members or not silent_id


@settings(max_examples=200, deadline=None)
@given(actions)
def test_next_deadline_is_when_expire_has_work(steps):
    sim = Simulation()
    for action, who, dt in steps:
        sim.step(action, who, dt)
    deadline = sim.g.next_deadline_ms()
    if deadline is None:
        return
    members, state, generation = dict(sim.g.members), sim.g.state, sim.g.generation
    if deadline > sim.now:
        assert sim.g.expire(deadline - 1) == [] and (set(sim.g.members), sim.g.state, sim.g.generation) == (
            set(members), state, generation)
