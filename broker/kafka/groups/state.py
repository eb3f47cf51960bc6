"""One Kafka consumer group's membership, as Kafka's group coordinator keeps it: a pure state machine.

Theory of operation. A group is in one of five states (Kafka's names):

* ``Empty``: no members (it may still have committed offsets, kept by the coordinator, not here).
* ``PreparingRebalance``: a join barrier is up. Every known member must send JoinGroup again; the barrier
  falls when all of them have (a pending JoinGroup each) or when the rebalance deadline (now + the largest
  rebalance timeout of the members) passes, and then the members that did not rejoin are removed.
* ``CompletingRebalance``: the barrier fell: the generation went up by one, a protocol was chosen among
  the protocols every member supports (each member votes for its first supported choice), every pending
  JoinGroup was answered, the leader's answer carrying the members and their metadata. The group waits
  for the leader's SyncGroup with the assignment.
* ``Stable``: the leader's assignment arrived; every SyncGroup (pending or later) gets its member's part.
* ``Dead``: deleted (DeleteGroups on an empty group) or moved to another coordinator.

A new member, a member changing its protocols, and the leader rejoining start a rebalance; a member that
leaves or whose session times out (no heartbeat, JoinGroup or SyncGroup within its session timeout while
not waiting for an answer) is removed, which starts one too. Heartbeats answer ``REBALANCE_IN_PROGRESS``
during ``PreparingRebalance`` (that is how members learn they must rejoin), ``UNKNOWN_MEMBER_ID`` for a
member the group does not have, ``ILLEGAL_GENERATION`` for a stale generation.

Answers to JoinGroup and SyncGroup may come later than the request (at the barrier, at the leader's
SyncGroup), so every operation takes the caller's ``token`` for its request and returns the replies that
became due, each carrying the token it answers; the caller (the coordinator) owns one future per token.
Time is passed in (``now_ms``); :meth:`Group.next_deadline_ms` says when :meth:`Group.expire` must run next.
Nothing here does I/O or imports asyncio. Static membership (``group.instance.id``) is not modelled.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Union

from magnetar.errors import MagnetarError

from . import errors as E

__all__ = ["GroupState", "GroupLimits", "Member", "JoinResult", "SyncResult", "Reply", "Group", "GroupStateError"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState

# Kafka's valid previous states, turned around: the states each state may move to.
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.PREPARING_REBALANCE: frozenset({S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.DEAD}),
    S.STABLE: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.DEAD: frozenset(),
}

# Heartbeat of a known member at the current generation: (error, refreshes its session).
HEARTBEAT: dict[GroupState, tuple[int, bool]] = {
    S.EMPTY: (E.UNKNOWN_MEMBER_ID, False),
    S.PREPARING_REBALANCE: (E.REBALANCE_IN_PROGRESS, True),
    S.COMPLETING_REBALANCE: (E.NONE, True),  # members may heartbeat between their JoinGroup and SyncGroup
    S.STABLE: (E.NONE, True),
}

# SyncGroup of a known member at the current generation, by state: an error now, or None (handled).
SYNC: dict[GroupState, Optional[int]] = {
    S.EMPTY: E.UNKNOWN_MEMBER_ID,
    S.PREPARING_REBALANCE: E.REBALANCE_IN_PROGRESS,
    S.COMPLETING_REBALANCE: None,
    S.STABLE: None,
}


class GroupStateError(MagnetarError):
    """A transition Kafka's state machine does not allow (a bug here, never a client's doing)."""


@dataclass(frozen=True)
class GroupLimits:
    """Bounds on what members may ask (Kafka's ``group.min/max.session.timeout.ms``, ``group.max.size``)."""

    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 1_800_000
    max_members: int = 1_000


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    heartbeat_deadline_ms: int = 0
    join_token: Optional[int] = None  # a JoinGroup waiting for the barrier
    sync_token: Optional[int] = None  # a SyncGroup waiting for the leader's assignment

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    @property
    def kept_alive(self) -> bool:
        """Waiting for an answer: its session does not run out meanwhile (as in Kafka)."""
        return self.join_token is not None or self.sync_token is not None


@dataclass(frozen=True)
class JoinResult:
    token: int
    error: int
    generation: int = -1
    protocol: str = ""
    leader_id: str = ""
    member_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # the leader's answer only: (member id, metadata)


@dataclass(frozen=True)
class SyncResult:
    token: int
    error: int
    assignment: bytes = b""


Reply = Union[JoinResult, SyncResult]


@dataclass
class Group:
    """One group (see the module docstring). Generations only increase; member ids come from the caller."""

    group_id: str
    limits: GroupLimits = field(default_factory=GroupLimits)
    state: GroupState = S.EMPTY
    generation: int = 0
    protocol_type: Optional[str] = None
    protocol: Optional[str] = None
    leader_id: Optional[str] = None
    members: dict[str, Member] = field(default_factory=dict)  # insertion order: the join order
    rebalance_deadline_ms: Optional[int] = None

    # ----------------------------------------------------------------------------------------- requests

    def join(self, token: int, member_id: str, *, new_member_id: str, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: Iterable[tuple[str, bytes]], now_ms: int) -> list[Reply]:
        """JoinGroup. ``member_id`` "" is a new member, which gets ``new_member_id``."""
        protocols = tuple((str(n), bytes(m or b"")) for n, m in protocols)
        if self.state is S.DEAD:
            return [JoinResult(token, E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)]
        if not (self.limits.min_session_timeout_ms <= session_timeout_ms <= self.limits.max_session_timeout_ms):
            return [JoinResult(token, E.INVALID_SESSION_TIMEOUT, member_id=member_id)]
        if member_id and member_id not in self.members:
            return [JoinResult(token, E.UNKNOWN_MEMBER_ID, member_id=member_id)]
        if not self._supports(protocol_type, protocols, excluding=member_id):
            return [JoinResult(token, E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)]
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout
        if all(mid == member_id for mid in self.members):
            self.protocol_type = protocol_type  # the only member decides the group's protocol type
        if not member_id:
            if len(self.members) >= self.limits.max_members:
                return [JoinResult(token, E.GROUP_MAX_SIZE_REACHED, member_id=new_member_id)]
            member = Member(new_member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                            protocol_type, protocols, heartbeat_deadline_ms=now_ms + session_timeout_ms)
            self.members[new_member_id] = member
            if self.leader_id is None:
                self.leader_id = new_member_id
            replies = self._set_join_token(member, token)
            if self.state is not S.PREPARING_REBALANCE:
                replies += self._prepare_rebalance(now_ms)
            return replies + self._maybe_complete_join(now_ms)
        member = self.members[member_id]
        same = member.protocols == protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        if self.state in (S.COMPLETING_REBALANCE, S.STABLE) and same and \
                (self.state is S.COMPLETING_REBALANCE or member_id != self.leader_id):
            # Kafka: the member lost its JoinGroup answer; the current generation's answer again
            member.heartbeat_deadline_ms = now_ms + session_timeout_ms
            return [self._join_answer(token, member)]
        member.protocols = protocols
        replies = self._set_join_token(member, token)
        if self.state is not S.PREPARING_REBALANCE:
            replies += self._prepare_rebalance(now_ms)
        return replies + self._maybe_complete_join(now_ms)

    def sync(self, token: int, member_id: str, generation: int, assignments: Mapping[str, bytes], *,
             now_ms: int) -> list[Reply]:
        """SyncGroup. ``assignments`` (member id -> assignment) counts only from the leader."""
        error = self._member_error(member_id, generation)
        if error is None:
            error = SYNC[self.state]
        if error is not None:
            return [SyncResult(token, error)]
        member = self.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state is S.STABLE:
            return [SyncResult(token, E.NONE, member.assignment)]
        replies: list[Reply] = []
        if member.sync_token is not None:
            replies.append(SyncResult(member.sync_token, E.REBALANCE_IN_PROGRESS))
        member.sync_token = token
        if member_id == self.leader_id:
            for mid, m in self.members.items():
                m.assignment = bytes(assignments.get(mid) or b"")
            self._transition(S.STABLE)
            for m in self.members.values():
                if m.sync_token is not None:
                    replies.append(SyncResult(m.sync_token, E.NONE, m.assignment))
                    m.sync_token = None
                    m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        return replies

    def heartbeat(self, member_id: str, generation: int, *, now_ms: int) -> int:
        error = self._member_error(member_id, generation)
        if error is not None:
            return error
        error, refresh = HEARTBEAT[self.state]
        if refresh:
            member = self.members[member_id]
            member.heartbeat_deadline_ms = max(member.heartbeat_deadline_ms, now_ms + member.session_timeout_ms)
        return error

    def leave(self, member_id: str, *, now_ms: int) -> tuple[int, list[Reply]]:
        if self.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, []
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID, []
        return E.NONE, self._remove(member_id, now_ms)

    def check_commit(self, member_id: str, generation: int) -> int:
        """The error for OffsetCommit from ``member_id`` at ``generation`` (NONE: the commit may proceed).
        Generation -1 without a member is a standalone consumer or a tool, allowed while the group is Empty."""
        if self.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and self.state is S.EMPTY:
            return E.NONE
        if self.state is S.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def delete(self) -> int:
        """DeleteGroups: only an Empty group may go."""
        if self.state is S.DEAD:
            return E.GROUP_ID_NOT_FOUND
        if self.state is not S.EMPTY:
            return E.NON_EMPTY_GROUP
        self._transition(S.DEAD)
        return E.NONE

    def unload(self) -> list[Reply]:
        """The coordinator moves away: every waiting request is told NOT_COORDINATOR, the group is Dead."""
        replies: list[Reply] = []
        for m in self.members.values():
            if m.join_token is not None:
                replies.append(JoinResult(m.join_token, E.NOT_COORDINATOR, member_id=m.member_id))
            if m.sync_token is not None:
                replies.append(SyncResult(m.sync_token, E.NOT_COORDINATOR))
            m.join_token = m.sync_token = None
        if self.state is not S.DEAD:
            self._transition(S.DEAD)
        return replies

    # ----------------------------------------------------------------------------------------- time

    def next_deadline_ms(self) -> Optional[int]:
        """When :meth:`expire` has work next (None: nothing scheduled)."""
        deadlines = [m.heartbeat_deadline_ms for m in self.members.values() if not m.kept_alive]
        if self.state is S.PREPARING_REBALANCE and self.rebalance_deadline_ms is not None:
            deadlines.append(self.rebalance_deadline_ms)
        return min(deadlines) if deadlines and self.state is not S.DEAD else None

    def expire(self, now_ms: int) -> list[Reply]:
        """Removes members whose session ran out and closes a join barrier whose deadline passed."""
        if self.state is S.DEAD:
            return []
        replies: list[Reply] = []
        for mid in [mid for mid, m in self.members.items() if not m.kept_alive and m.heartbeat_deadline_ms <= now_ms]:
            if mid in self.members:
                replies += self._remove(mid, now_ms)
        if self.state is S.PREPARING_REBALANCE and self.rebalance_deadline_ms is not None \
                and now_ms >= self.rebalance_deadline_ms:
            for mid in [mid for mid, m in self.members.items() if m.join_token is None]:
                self._forget(mid)
            replies += self._complete_join(now_ms)
        return replies

    # ----------------------------------------------------------------------------------------- views

    def describe(self) -> tuple[str, str, str, list[tuple[str, str, str, bytes, bytes]]]:
        """(state, protocol type, protocol, members as (id, client id, host, metadata, assignment)); metadata
        and assignment only while Stable, as Kafka's DescribeGroups."""
        stable = self.state is S.STABLE
        members = [(m.member_id, m.client_id, m.client_host, m.metadata(self.protocol or "") if stable else b"",
                    m.assignment if stable else b"") for m in self.members.values()]
        protocol = self.protocol or "" if self.state in (S.STABLE, S.COMPLETING_REBALANCE) else ""
        return self.state.value, self.protocol_type or "", protocol, members

    # ----------------------------------------------------------------------------------------- internals

    def _transition(self, to: GroupState) -> None:
        if to not in TRANSITIONS[self.state]:
            raise GroupStateError(f"group {self.group_id!r}: {self.state.value} -> {to.value} is not allowed")
        self.state = to

    def _member_error(self, member_id: str, generation: int) -> Optional[int]:
        if self.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if member_id not in self.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return E.ILLEGAL_GENERATION
        return None

    def _supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...], *, excluding: str) -> bool:
        if not protocol_type or not protocols:
            return False
        others = [m for mid, m in self.members.items() if mid != excluding]
        if not others:
            return True
        if protocol_type != self.protocol_type:
            return False
        common = set.intersection(*(set(m.protocol_names()) for m in others))
        return any(name in common for name, _ in protocols)

    def _set_join_token(self, member: Member, token: int) -> list[Reply]:
        replies: list[Reply] = []
        if member.join_token is not None:  # a repeated JoinGroup replaces the one waiting
            replies.append(JoinResult(member.join_token, E.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_token = token
        return replies

    def _prepare_rebalance(self, now_ms: int) -> list[Reply]:
        replies: list[Reply] = []
        if self.state is S.COMPLETING_REBALANCE:  # the assignment never came: waiting syncs must rejoin
            for m in self.members.values():
                if m.sync_token is not None:
                    replies.append(SyncResult(m.sync_token, E.REBALANCE_IN_PROGRESS))
                    m.sync_token = None
        for m in self.members.values():
            m.assignment = b""
        self._transition(S.PREPARING_REBALANCE)
        self.rebalance_deadline_ms = now_ms + max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        return replies

    def _maybe_complete_join(self, now_ms: int) -> list[Reply]:
        if self.state is S.PREPARING_REBALANCE and all(m.join_token is not None for m in self.members.values()):
            return self._complete_join(now_ms)
        return []

    def _complete_join(self, now_ms: int) -> list[Reply]:
        self.rebalance_deadline_ms = None
        self.generation += 1
        if not self.members:
            self.protocol = self.leader_id = self.protocol_type = None
            self._transition(S.EMPTY)
            return []
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self.protocol = self._select_protocol()
        self._transition(S.COMPLETING_REBALANCE)
        replies: list[Reply] = []
        for m in self.members.values():
            token, m.join_token = m.join_token, None
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            replies.append(self._join_answer(token, m))
        return replies

    def _join_answer(self, token: int, member: Member) -> JoinResult:
        members = tuple((m.member_id, m.metadata(self.protocol or "")) for m in self.members.values()) \
            if member.member_id == self.leader_id else ()
        return JoinResult(token, E.NONE, self.generation, self.protocol or "", self.leader_id or "",
                          member.member_id, members)

    def _select_protocol(self) -> str:
        members = list(self.members.values())
        common = set.intersection(*(set(m.protocol_names()) for m in members))
        votes: dict[str, int] = {}
        for m in members:
            choice = next(name for name in m.protocol_names() if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        order = [name for name in members[0].protocol_names() if name in votes]
        return max(order, key=lambda name: votes[name])  # ties: the first member's preference

    def _forget(self, member_id: str) -> list[Reply]:
        member = self.members.pop(member_id)
        replies: list[Reply] = []
        if member.join_token is not None:
            replies.append(JoinResult(member.join_token, E.UNKNOWN_MEMBER_ID, member_id=member_id))
        if member.sync_token is not None:
            replies.append(SyncResult(member.sync_token, E.UNKNOWN_MEMBER_ID))
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return replies

    def _remove(self, member_id: str, now_ms: int) -> list[Reply]:
        replies = self._forget(member_id)
        if self.state in (S.STABLE, S.COMPLETING_REBALANCE):
            replies += self._prepare_rebalance(now_ms)
        return replies + self._maybe_complete_join(now_ms)
