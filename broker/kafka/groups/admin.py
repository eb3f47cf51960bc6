"""The group admin APIs (ListGroups, DescribeGroups, DeleteGroups) and error answers of every group API.

A group is known here when this broker keeps its membership (it coordinates it and members joined since)
or when the subscription named after it exists on a coordination topic this broker serves (committed
offsets, no members: Kafka's ``Empty`` group). DeleteGroups removes both, and the group's mirrored
subscriptions on the partitions this broker serves.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from . import errors as E
from .mirror import partition_topic_names
from .placement import coordination_topic, subscription_name
from .state import GroupState

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger("broker.kafka.groups")


class GroupAdmin:
    def __init__(self, coordinator: "GroupCoordinator") -> None:
        self.c = coordinator

    @staticmethod
    def error_response(api_key: int, request: Any, error: int) -> Any:
        """``request``'s response carrying ``error`` everywhere an error fits (one per partition or group)."""
        from .coordinator import respond

        version = type(request).API_VERSION
        if api_key == 8:
            return respond(request, topics=[(t, [(p[0], error) for p in ps or []]) for t, ps in request.topics or []])
        if api_key == 9:
            topics = [(t, [(p, -1, "", error) for p in ps or []]) for t, ps in request.topics or []] \
                if version < 2 else []
            return respond(request, topics=topics, error_code=error)
        if api_key == 15:
            return respond(request, groups=[(error, g, "", "", "", []) for g in request.groups or []])
        if api_key == 16:
            return respond(request, error_code=error, groups=[])
        if api_key == 42:
            return respond(request, results=[(g, error) for g in request.groups_names or []])
        return respond(request, error_code=error, error_message=None, coordinator_id=-1, host="", port=-1,
                       generation_id=-1, group_protocol="", leader_id="", member_id="", members=[],
                       member_assignment=b"")

    async def _served_coordination_topics(self) -> list[Any]:
        served = []
        for k in range(self.c.partitions):
            name = coordination_topic(self.c.config.tenant, self.c.config.namespace, k)
            try:
                if await self.c.service.ownership.is_owned_by_me(name):
                    served.append(await self.c.service.get_topic(name))
            except Exception as exc:  # moving away or unreadable: its groups are listed by its next owner
                log.debug("[%s] not listed: %s", name, exc)
        return served

    async def list_groups(self, request: Any, ctx: Any) -> Any:
        from .coordinator import respond

        groups: dict[str, str] = {}
        for topic in await self._served_coordination_topics():
            for group_id in self.c.store.groups(topic):
                groups.setdefault(group_id, "")
        for group_id, group in self.c.groups.items():
            if group.state is not GroupState.DEAD:
                groups[group_id] = group.protocol_type or groups.get(group_id, "")
        return respond(request, error_code=E.NONE, groups=sorted(groups.items()))

    async def describe_groups(self, request: Any, ctx: Any) -> Any:
        from .coordinator import respond

        answers = []
        for group_id in request.groups or []:
            error, topic = await self.c.coordination_topic(group_id)
            if error != E.NONE:
                answers.append((error, group_id, "", "", "", []))
                continue
            group = self.c.groups.get(group_id)
            if group is not None and group.state is not GroupState.DEAD:
                state, protocol_type, protocol, members = group.describe()
                answers.append((E.NONE, group_id, state, protocol_type, protocol, members))
            elif self.c.store.has(topic, group_id):
                answers.append((E.NONE, group_id, GroupState.EMPTY.value, "", "", []))
            else:
                answers.append((E.NONE, group_id, GroupState.DEAD.value, "", "", []))
        return respond(request, groups=answers)

    async def delete_groups(self, request: Any, ctx: Any) -> Any:
        from .coordinator import respond

        results = []
        for group_id in request.groups_names or []:
            results.append((group_id, await self._delete(group_id, ctx)))
        return respond(request, results=results)

    async def _may_delete(self, ctx: Any) -> bool:
        """Deleting a group (its offsets and subscriptions) is the Kafka tenant's admins' business."""
        security = getattr(self.c.service, "security", None)
        if security is None or not security.authorization_enabled:
            return True
        if await security.can_administer_tenant(getattr(ctx, "principal", None), None, self.c.config.tenant):
            return True
        security.count_denial("admin")
        return False

    async def _delete(self, group_id: str, ctx: Any) -> int:
        if not await self._may_delete(ctx):
            return E.GROUP_AUTHORIZATION_FAILED
        error, topic = await self.c.coordination_topic(group_id)
        if error != E.NONE:
            return error
        group = self.c.groups.get(group_id)
        if group is not None and group.state is not GroupState.DEAD:
            error = group.delete()
            if error != E.NONE:
                return error
        committed = self.c.store.read(topic, group_id)
        try:
            stored = await self.c.store.delete(topic, group_id)
        except Exception as exc:
            log.warning("[%s] deleting group %r failed: %s", topic.name, group_id, exc)
            return E.COORDINATOR_NOT_AVAILABLE
        self.c.groups.pop(group_id, None)
        if group is None and not stored:
            return E.GROUP_ID_NOT_FOUND
        loaded = self.c.service.topics()
        for t, p in committed:
            for name in partition_topic_names(self.c.config, t, p):
                served = loaded.get(name)
                if served is not None and subscription_name(group_id) in served.subscriptions:
                    try:
                        await served.delete_subscription(subscription_name(group_id), force=True)
                    except Exception as exc:
                        log.warning("[%s] deleting group %r's subscription failed: %s", name, group_id, exc)
        return E.NONE
