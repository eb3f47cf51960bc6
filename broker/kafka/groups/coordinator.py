"""``GroupCoordinator``: Kafka's group APIs on a broker, around the pure :mod:`.state` machine.

Which broker coordinates a group is :mod:`.placement`'s answer (the owner of the group's coordination
topic); every group request first checks that this broker owns that topic right now, else it answers
NOT_COORDINATOR and forgets what it kept of the groups of that topic (their members rejoin at the new
coordinator, where they are unknown and get new member ids, as after a Kafka coordinator move). Committed
offsets are :mod:`.offsets`' (stored in the coordination topic's cursors, so a new owner reads them).

JoinGroup and SyncGroup answers may wait (the join barrier, the leader's assignment): each request gets a
token and a future; the state machine's replies resolve them. One task (``_sweeper``) runs the session and
rebalance deadlines of every group, woken early whenever an operation changes the next deadline; ``close()``
cancels it, and answers every waiting request NOT_COORDINATOR. Admin APIs (ListGroups, DescribeGroups,
DeleteGroups) live in :mod:`.admin`; the per-version response structs are built by :func:`respond`.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional

from magnetar.errors import MagnetarError

from . import errors as E
from .admin import GroupAdmin
from .mirror import mirror_commits
from .offsets import METADATA_MAX_BYTES, OffsetStore
from .nodes import NodeLocator
from .placement import (DEFAULT_OFFSETS_PARTITIONS, KafkaNode, coordination_partition, coordination_topic,
                        subscription_name)
from .state import Group, GroupLimits, GroupState, JoinResult, Reply, SyncResult

if TYPE_CHECKING:
    from broker.ownership_api import LookupResult
    from broker.service.topics.topic import Topic

log = logging.getLogger("broker.kafka.groups")

__all__ = ["GroupCoordinator", "GROUP_API_KEYS", "SUPPORTED_VERSIONS", "respond"]

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, \
    LIST_GROUPS, DELETE_GROUPS = 8, 9, 10, 11, 12, 13, 14, 15, 16, 42

# The versions served: those aiokafka 0.14 defines structs for without a gap below them (JoinGroup v5 and
# SyncGroup v3 need v3/v4 and v2 first; DescribeGroups v3's response struct there lacks a field).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    OFFSET_COMMIT: (0, 3), OFFSET_FETCH: (0, 3), FIND_COORDINATOR: (0, 1), JOIN_GROUP: (0, 2), HEARTBEAT: (0, 1),
    LEAVE_GROUP: (0, 1), SYNC_GROUP: (0, 1), DESCRIBE_GROUPS: (0, 2), LIST_GROUPS: (0, 1), DELETE_GROUPS: (0, 1),
}
GROUP_API_KEYS = frozenset(SUPPORTED_VERSIONS)


class GroupRequestError(MagnetarError):
    """A request this coordinator cannot answer in Kafka's terms (an API key or version it does not serve)."""


def respond(request: Any, **fields: Any) -> Any:
    """The response struct matching ``request``'s version, fields by name (``throttle_time_ms`` 0 by default;
    fields the version does not have are dropped)."""
    cls = type(request).RESPONSE_TYPE
    values = {name: fields.get(name, 0 if name == "throttle_time_ms" else None) for name in cls.SCHEMA.names}
    return cls(**values)


class CoordinatorState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class GroupCoordinator:
    """Kafka's group coordinator for one broker. See the module docstring.

    Args:
        service: the broker's ``BrokerService`` (ownership, topics).
        kafka_config: the broker's ``KafkaConfig`` (tenant and namespace of the coordination topics, listeners).
        limits: session-timeout bounds and group size.
        offsets_partitions: how many coordination topics (Kafka's ``offsets.topic.num.partitions``).
        clock_ms: monotonic milliseconds (tests may swap it).
    """

    def __init__(self, service: Any, kafka_config: Any, *, limits: Optional[GroupLimits] = None,
                 offsets_partitions: Optional[int] = None, clock_ms: Optional[Callable[[], int]] = None) -> None:
        self.service = service
        self.config = kafka_config
        self.limits = limits or GroupLimits()
        self.partitions = offsets_partitions or getattr(kafka_config, "offsets_topic_partitions",
                                                        DEFAULT_OFFSETS_PARTITIONS)
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self.state = CoordinatorState.NEW
        self.groups: dict[str, Group] = {}
        self.store = OffsetStore()
        self.admin = GroupAdmin(self)
        # FindCoordinator's answer for an ownership lookup (replaceable: tests, another registry).
        self.locate_node: Callable[["LookupResult", str], Awaitable[Optional[KafkaNode]]] = \
            NodeLocator(service, kafka_config).locate
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._sweeper: Optional[asyncio.Task] = None
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self.state is not CoordinatorState.NEW:
            return
        self.state = CoordinatorState.RUNNING
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="kafka group deadlines")

    async def close(self) -> None:
        """Answers every waiting JoinGroup/SyncGroup NOT_COORDINATOR and stops the deadline task. Idempotent."""
        if self.state is CoordinatorState.CLOSED:
            return
        self.state = CoordinatorState.CLOSED
        for group in list(self.groups.values()):
            self._deliver(group.unload())
        self.groups.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for fut in self._waiting.values():
            if not fut.done():
                fut.cancel()
        self._waiting.clear()

    async def __aenter__(self) -> "GroupCoordinator":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def supported_versions(self) -> dict[int, tuple[int, int]]:
        return dict(SUPPORTED_VERSIONS)

    # ------------------------------------------------------------------------------------------ dispatch

    async def handle(self, api_key: int, api_version: int, request: Any, ctx: Any) -> Any:
        """Answers one group request (an aiokafka request struct) with the response struct of its version.

        Raises:
            GroupRequestError: an API key or version not in :func:`supported_versions` (the listener answers
                those itself; this is the guard).
        """
        low_high = SUPPORTED_VERSIONS.get(api_key)
        if low_high is None or not low_high[0] <= api_version <= low_high[1]:
            raise GroupRequestError(f"API key {api_key} v{api_version} is not a group API version served here")
        if self.state is not CoordinatorState.RUNNING:
            return self.admin.error_response(api_key, request, E.COORDINATOR_NOT_AVAILABLE)
        handler = {
            FIND_COORDINATOR: self._find_coordinator, JOIN_GROUP: self._join, SYNC_GROUP: self._sync,
            HEARTBEAT: self._heartbeat, LEAVE_GROUP: self._leave, OFFSET_COMMIT: self._offset_commit,
            OFFSET_FETCH: self._offset_fetch, LIST_GROUPS: self.admin.list_groups,
            DESCRIBE_GROUPS: self.admin.describe_groups, DELETE_GROUPS: self.admin.delete_groups,
        }[api_key]
        try:
            return await handler(request, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Kafka group request %d v%d failed", api_key, api_version)
            return self.admin.error_response(api_key, request, E.UNKNOWN_SERVER_ERROR)

    # ------------------------------------------------------------------------------------------ placement

    def topic_of(self, group_id: str) -> str:
        return coordination_topic(self.config.tenant, self.config.namespace,
                                  coordination_partition(group_id, self.partitions))

    async def coordination_topic(self, group_id: str) -> tuple[int, Optional["Topic"]]:
        """(NONE, the loaded coordination topic) when this broker coordinates ``group_id``, else an error.
        Losing a coordination topic forgets the groups kept for it."""
        if not group_id:
            return E.INVALID_GROUP_ID, None
        name = self.topic_of(group_id)
        try:
            owned = await self.service.ownership.is_owned_by_me(name)
            if not owned:
                # FindCoordinator's lookup may have chosen this broker for an unowned bundle (a redirect): like
                # a Pulsar broker at the end of a redirect, acquire it on an authoritative lookup of its own.
                owned = (await self.service.ownership.lookup(name, authoritative=True)).is_self
        except Exception as exc:
            log.warning("[%s] ownership check failed: %s", name, exc)
            return E.COORDINATOR_NOT_AVAILABLE, None
        if not owned:
            self._forget_topic(name)
            return E.NOT_COORDINATOR, None
        from broker.service.errors import ServiceNotReadyError

        try:
            topic = await self.service.get_topic(name)
        except ServiceNotReadyError:
            self._forget_topic(name)
            return E.NOT_COORDINATOR, None
        except Exception as exc:
            log.warning("[%s] loading the coordination topic failed: %s", name, exc)
            return E.COORDINATOR_NOT_AVAILABLE, None
        return E.NONE, topic

    def _forget_topic(self, name: str) -> None:
        for group_id in [g for g in self.groups if self.topic_of(g) == name]:
            self._deliver(self.groups.pop(group_id).unload())

    async def _find_coordinator(self, request: Any, ctx: Any) -> Any:
        version = type(request).API_VERSION
        key = request.consumer_group if version == 0 else request.coordinator_key
        if version >= 1 and request.coordinator_type != 0:  # transactions: no transaction coordinator here
            return respond(request, error_code=E.COORDINATOR_NOT_AVAILABLE, error_message="transactions are not "
                           "supported", coordinator_id=-1, host="", port=-1)
        if not key:
            return respond(request, error_code=E.INVALID_GROUP_ID, error_message="empty group id",
                           coordinator_id=-1, host="", port=-1)
        node: Optional[KafkaNode] = None
        reason = "the group's coordinator has no known Kafka address yet"
        try:
            found = await self.service.ownership.lookup(self.topic_of(key))
            listener = getattr(ctx, "listener_name", "") or ""
            node = await self.locate_node(found, listener)
        except Exception as exc:
            log.warning("finding the coordinator of group %r failed: %s", key, exc)
            reason = f"finding the group's coordinator failed: {exc}"
        if node is None:
            return respond(request, error_code=E.COORDINATOR_NOT_AVAILABLE, error_message=reason,
                           coordinator_id=-1, host="", port=-1)
        return respond(request, error_code=E.NONE, error_message=None, coordinator_id=node.node_id,
                       host=node.host, port=node.port)

    # ------------------------------------------------------------------------------------------ membership

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id, self.limits)
        return group

    def _prune(self, group_id: str) -> None:
        """An Empty group is forgotten here (its stored offsets stay): memory holds only groups with members,
        as Kafka drops an empty group from its cache; the next JoinGroup starts it again at generation 0."""
        group = self.groups.get(group_id)
        if group is not None and group.state in (GroupState.EMPTY, GroupState.DEAD) and not group.members:
            del self.groups[group_id]

    def _wait(self) -> tuple[int, asyncio.Future]:
        token = next(self._tokens)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[token] = fut
        return token, fut

    def _deliver(self, replies: list[Reply]) -> None:
        for reply in replies:
            fut = self._waiting.pop(reply.token, None)
            if fut is not None and not fut.done():
                fut.set_result(reply)
        self._wake.set()

    async def _answer(self, token: int, fut: asyncio.Future) -> Reply:
        try:
            return await fut
        finally:
            self._waiting.pop(token, None)

    async def _join(self, request: Any, ctx: Any) -> Any:
        version = type(request).API_VERSION
        error, _ = await self.coordination_topic(request.group)
        if error != E.NONE:
            return self._join_response(request, JoinResult(0, error, member_id=request.member_id or ""))
        group = self._group(request.group)
        token, fut = self._wait()
        client_id = getattr(ctx, "client_id", "") or ""
        replies = group.join(
            token, request.member_id or "", new_member_id=f"{client_id or 'member'}-{uuid.uuid4()}",
            client_id=client_id, client_host="/" + (getattr(ctx, "peer", "") or "").rsplit(":", 1)[0],
            session_timeout_ms=request.session_timeout,
            rebalance_timeout_ms=request.rebalance_timeout if version >= 1 else 0,
            protocol_type=request.protocol_type or "", protocols=request.group_protocols or [],
            now_ms=self.clock_ms())
        self._deliver(replies)
        self._prune(request.group)  # a new group whose first JoinGroup was refused
        return self._join_response(request, await self._answer(token, fut))

    @staticmethod
    def _join_response(request: Any, r: Reply) -> Any:
        assert isinstance(r, JoinResult)
        return respond(request, error_code=r.error, generation_id=r.generation, group_protocol=r.protocol,
                       leader_id=r.leader_id, member_id=r.member_id, members=list(r.members))

    async def _sync(self, request: Any, ctx: Any) -> Any:
        error, _ = await self.coordination_topic(request.group)
        group = self.groups.get(request.group)
        if error == E.NONE and group is None:
            error = E.UNKNOWN_MEMBER_ID
        if error != E.NONE:
            return respond(request, error_code=error, member_assignment=b"")
        token, fut = self._wait()
        assignments = {mid: data for mid, data in (request.group_assignment or [])}
        self._deliver(group.sync(token, request.member_id, request.generation_id, assignments, now_ms=self.clock_ms()))
        r = await self._answer(token, fut)
        assert isinstance(r, SyncResult)
        return respond(request, error_code=r.error, member_assignment=r.assignment)

    async def _heartbeat(self, request: Any, ctx: Any) -> Any:
        error, _ = await self.coordination_topic(request.group)
        if error == E.NONE:
            group = self.groups.get(request.group)
            error = E.UNKNOWN_MEMBER_ID if group is None else \
                group.heartbeat(request.member_id, request.generation_id, now_ms=self.clock_ms())
            self._wake.set()
        return respond(request, error_code=error)

    async def _leave(self, request: Any, ctx: Any) -> Any:
        error, _ = await self.coordination_topic(request.group)
        if error == E.NONE:
            group = self.groups.get(request.group)
            if group is None:
                error = E.UNKNOWN_MEMBER_ID
            else:
                error, replies = group.leave(request.member_id, now_ms=self.clock_ms())
                self._deliver(replies)
                self._prune(request.group)
        return respond(request, error_code=error)

    # ------------------------------------------------------------------------------------------ offsets

    async def _offset_commit(self, request: Any, ctx: Any) -> Any:
        version = type(request).API_VERSION
        group_id = request.consumer_group
        generation = request.consumer_group_generation_id if version >= 1 else -1
        member_id = request.consumer_id if version >= 1 else ""
        topics = [(t, list(ps or [])) for t, ps in (request.topics or [])]
        error, topic = await self.coordination_topic(group_id)
        if error == E.NONE:
            group = self.groups.get(group_id)
            if group is not None:
                error = group.check_commit(member_id or "", generation)
            elif generation >= 0:
                error = E.ILLEGAL_GENERATION  # no such group here: a member of an older coordinator
        results: dict[tuple[str, int], int] = {}
        accepted: dict[tuple[str, int], tuple[int, str]] = {}
        topic_errors = {t: await self._topic_error(ctx, t, group_id) for t, _ in topics} if error == E.NONE else {}
        for t, partitions in topics:
            for p in partitions:
                partition, offset, metadata = p[0], p[1], p[-1] or ""
                if error != E.NONE:
                    results[(t, partition)] = error
                elif topic_errors[t] != E.NONE:
                    results[(t, partition)] = topic_errors[t]
                elif partition < 0:
                    results[(t, partition)] = E.UNKNOWN_TOPIC_OR_PARTITION
                elif len(metadata.encode("utf-8")) > METADATA_MAX_BYTES:
                    results[(t, partition)] = E.OFFSET_METADATA_TOO_LARGE
                else:
                    accepted[(t, partition)] = (offset, metadata)
        if accepted:
            from broker.managed_ledger.errors import ManagedLedgerFencedError

            try:
                await self.store.commit(topic, group_id, accepted)
                code = E.NONE
            except ManagedLedgerFencedError:
                self._forget_topic(self.topic_of(group_id))
                code = E.NOT_COORDINATOR
            except Exception as exc:
                log.warning("[%s] committing offsets of group %r failed: %s", topic.name, group_id, exc)
                code = E.COORDINATOR_NOT_AVAILABLE
            results.update({key: code for key in accepted})
            if code == E.NONE:
                await mirror_commits(self.service, self.config, group_id, accepted)
        return respond(request, topics=[(t, [(p[0], results[(t, p[0])]) for p in partitions])
                                        for t, partitions in topics])

    async def _offset_fetch(self, request: Any, ctx: Any) -> Any:
        version = type(request).API_VERSION
        error, topic = await self.coordination_topic(request.consumer_group)
        wanted = None if request.topics is None else [(t, list(ps or [])) for t, ps in request.topics]
        if error != E.NONE:
            if version < 2:  # no top-level error code before v2: every partition carries it
                return respond(request, topics=[(t, [(p, -1, "", error) for p in ps]) for t, ps in wanted or []])
            return respond(request, topics=[], error_code=error)
        committed = self.store.read(topic, request.consumer_group)
        listed = wanted is None
        if listed:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(committed):
                by_topic.setdefault(t, []).append(p)
            wanted = list(by_topic.items())
        errors = {t: await self._topic_error(ctx, t, request.consumer_group) for t, _ in wanted}
        if listed:  # every committed topic: those the principal may not read are left out, as in Kafka
            wanted = [(t, ps) for t, ps in wanted if errors[t] == E.NONE]
        answer = [(t, [(p, *committed.get((t, p), (-1, "")), errors[t]) if errors[t] == E.NONE else
                       (p, -1, "", errors[t]) for p in ps]) for t, ps in wanted]
        return respond(request, topics=answer, error_code=E.NONE)

    async def _topic_error(self, ctx: Any, kafka_topic: Any, group_id: str) -> int:
        """NONE when ``kafka_topic`` names a topic whose committed offsets the connection's principal may
        read and write for ``group_id``: Pulsar's ``consume`` permission on the topic, with the group as the
        subscription (subscription permissions apply), as the broker's authorization rules say."""
        from broker.kafka.names import InvalidTopicNameError, pulsar_name

        try:
            name = pulsar_name(kafka_topic, tenant=self.config.tenant, namespace=self.config.namespace)
        except (InvalidTopicNameError, ValueError, TypeError):
            return E.UNKNOWN_TOPIC_OR_PARTITION
        security = getattr(self.service, "security", None)
        if security is None or not security.authorization_enabled:
            return E.NONE
        if await security.can_consume(getattr(ctx, "principal", None), None, name, subscription_name(group_id)):
            return E.NONE
        security.count_denial("consume")
        return E.TOPIC_AUTHORIZATION_FAILED

    # ------------------------------------------------------------------------------------------ deadlines

    async def _sweep(self) -> None:
        # The state is checked as well as the task cancelled: wait_for may swallow a cancellation that
        # arrives as its event is set (close() sets it while answering the waiting requests).
        while self.state is CoordinatorState.RUNNING:
            self._wake.clear()
            now = self.clock_ms()
            for group_id, group in list(self.groups.items()):
                deadline = group.next_deadline_ms()
                if deadline is not None and deadline <= now:
                    self._deliver(group.expire(now))
                    self._prune(group_id)
            self._wake.clear()
            deadlines = [d for d in (g.next_deadline_ms() for g in self.groups.values()) if d is not None]
            timeout = None if not deadlines else max(0.0, (min(deadlines) - self.clock_ms()) / 1000)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
