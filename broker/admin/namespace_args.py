"""What policy routes share: the ``{tenant}/{namespace}`` of a path, checked; compare-and-set updates of a
namespace's or a topic's own policies that answer 404 for a namespace that does not exist; removing a deleted
topic's own policies; whether a topic exists; the answer of a topic-level GET."""

from __future__ import annotations

from typing import Any, Callable, Optional

from aiohttp import web

from config_store import NotFoundError
from config_store.configuration import check_name
from config_store.errors import InvalidMetadataError
from config_store.models import Policies, TopicPolicies
from magnetar.topic_name import TopicName

from .body import topic_of
from .context import AdminContext
from .errors import RestError, bad_request, not_found
from .keys import CONTEXT
from .tenants import tenant_name


def namespace_names(request: web.Request) -> tuple[str, str]:
    """``(tenant, namespace)`` of the request's path; 400 for a malformed name."""
    tenant = tenant_name(request)
    try:
        return tenant, check_name("namespace", request.match_info["namespace"])
    except InvalidMetadataError as e:
        raise bad_request(str(e)) from None


async def update_namespace(ctx: AdminContext, tenant: str, namespace: str,
                           fn: Callable[[Policies], Policies]) -> None:
    """Applies ``fn`` to the namespace's policies (compare-and-set, retried); 404 if it does not exist."""
    try:
        await ctx.configuration.update_namespace_policies(tenant, namespace, fn)
    except NotFoundError:
        raise not_found(f"Namespace {tenant}/{namespace} does not exist") from None


async def set_namespace_policy(ctx: AdminContext, tenant: str, namespace: str, field: str, value: Any) -> None:
    """Sets one field of the namespace's policies (None: removes it); 404 if the namespace does not exist."""
    def apply(p: Policies) -> Policies:
        setattr(p, field, value)
        return p

    await update_namespace(ctx, tenant, namespace, apply)


def topic_policies_key(topic: TopicName) -> tuple[str, str, str, str]:
    """``(tenant, namespace, domain, local name)``: where the topic's own policies are stored, for the name
    as given (a partitioned topic's base name covers its partitions)."""
    return topic.tenant, topic.namespace_portion, topic.domain.value, topic.local_name


async def own_topic_policies(ctx: AdminContext, topic: TopicName) -> Optional[TopicPolicies]:
    """The topic's own policies, None when none are set."""
    try:
        return (await ctx.configuration.get_topic_policies(*topic_policies_key(topic))).value
    except NotFoundError:
        return None


async def update_topic_policies(ctx: AdminContext, topic: TopicName,
                                fn: Callable[[TopicPolicies], TopicPolicies]) -> None:
    """Applies ``fn`` to the topic's own policies (created empty when none are set); 404 without namespace."""
    try:
        await ctx.configuration.set_topic_policies(*topic_policies_key(topic), fn)
    except NotFoundError:
        raise not_found(f"Namespace {topic.namespace} does not exist") from None


async def set_topic_policy(ctx: AdminContext, topic: TopicName, field: str, value: Any) -> None:
    """Sets one field of the topic's own policies (None: removes it); a partition's go to its partitioned
    topic."""
    def apply(p: TopicPolicies) -> TopicPolicies:
        setattr(p, field, value)
        return p

    await update_topic_policies(ctx, policies_owner(topic), apply)


async def remove_topic_policies(ctx: AdminContext, topic: TopicName, *, partitions: int = 0) -> None:
    """Removes the topic's own policies and, for a partitioned topic of ``partitions`` partitions, any stored
    under its partitions' names, as Pulsar does when it deletes a topic: one created again under the name
    starts without topic-level policies. Having none is no error. Called once the topic's data is gone."""
    tenant, namespace, domain, local = topic_policies_key(topic)
    names = {local}
    if partitions:
        partition_names = {topic.partition(i).local_name for i in range(partitions)}
        names |= partition_names & set(await ctx.configuration.list_topic_policies(tenant, namespace, domain))
    for name in sorted(names):
        try:
            await ctx.configuration.delete_topic_policies(tenant, namespace, domain, name)
        except NotFoundError:
            pass  # none set, or removed meanwhile


def policy_answer(value: Any) -> web.Response:
    """A topic-level policy GET's answer: the value as JSON, or 204 without a body when it is not set (Pulsar
    resumes a null, which JAX-RS sends as 204 No Content)."""
    return web.Response(status=204) if value is None else web.json_response(value)


def policies_owner(topic: TopicName) -> TopicName:
    """The name whose policies a topic follows: a partition follows its partitioned topic (as the broker reads
    them)."""
    return topic.base if topic.is_partition else topic


async def topic_exists(ctx: AdminContext, topic: TopicName) -> bool:
    """Whether ``topic`` is loaded here or stored in this region (persistent topics)."""
    if ctx.service is not None and str(topic) in ctx.service.topics():
        return True
    if topic.persistent and ctx.ml_factory is not None:
        return bool(await ctx.ml_factory.exists(topic.path))
    return False


async def require_topic(ctx: AdminContext, topic: TopicName) -> None:
    """404 unless ``topic`` exists: a partitioned topic (for a partition: one of its partitioned topic's), or
    a topic loaded or stored; as Pulsar checks before a topic-level policy is set."""
    owner = policies_owner(topic)
    count = await ctx.partitions(owner)
    if count > (topic.partition_index if topic.is_partition else 0) or await topic_exists(ctx, topic):
        return
    raise not_found(f"Topic {topic} does not exist")


async def topic_policy_scope(ctx: AdminContext, topic: TopicName) -> tuple[Policies, Optional[TopicPolicies]]:
    """For a topic-level policy call: the namespace's policies (404 without namespace) and the topic's own
    (None when none are set, a partition reading its partitioned topic's). 404 unless the topic exists or has
    policies of its own (routes that need no topic may have stored some before it was created; deleting a
    topic removes them)."""
    namespace_policies = await ctx.policies(topic.tenant, topic.namespace_portion)
    own = await own_topic_policies(ctx, policies_owner(topic))
    if own is None:
        await require_topic(ctx, topic)
    return namespace_policies, own


async def persistent_topic_scope(
    request: web.Request, segment: int, refusal: str
) -> tuple[AdminContext, TopicName, Policies, Optional[TopicPolicies]]:
    """:func:`topic_policy_scope` of the topic named at path ``segment`` of a route serving persistent topics
    only: a non-persistent one is answered 405 with ``refusal`` (why the policy does not apply to it)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, segment)
    if not topic.persistent:
        raise RestError(405, f"Topic {topic} is non-persistent: {refusal}")
    namespace_policies, own = await topic_policy_scope(ctx, topic)
    return ctx, topic, namespace_policies, own
