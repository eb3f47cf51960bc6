"""Compaction thresholds over REST, at Pulsar's paths, the body a bare JSON number of bytes:

* ``PUT|GET|DELETE /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold``: the namespace's
  ``compaction_threshold`` (GET answers ``null`` when none is set);
* ``POST|PUT|GET|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/compactionThreshold``: the topic's own
  (``TopicPolicies.compactionThreshold``; Pulsar sets it with POST), overriding its namespace's; GET
  ``?applied=true`` answers what applies (topic, else namespace, else 0), without it 204 (no body) when the
  topic has none, as Pulsar. The topic need not exist yet.

0 means never. A body that is not a non-negative integer is a 400 and nothing is stored; an unknown namespace
is a 404. Brokers see changes through the policies watches; the owner's periodic check
(``broker/service/compaction_monitor.py``) then compacts a topic whose uncompacted backlog exceeds it.
"""

from __future__ import annotations

from aiohttp import web

from ..service.policies.auto_compaction import effective_threshold
from .body import expect_int, query_bool, read_json, topic_of
from .keys import CONTEXT
from .namespace_args import namespace_names as _names
from .namespace_args import (own_topic_policies, policies_owner, policy_answer,
                             set_namespace_policy, set_topic_policy)

routes = web.RouteTableDef()

NS = "/admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold"
T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/compactionThreshold"
_TOPIC_SEGMENT = 6  # ['', 'admin', 'v2', domain, tenant, namespace, topic, ...]
_INT64_MAX = (1 << 63) - 1


async def _read_threshold(request: web.Request) -> int:
    return expect_int(await read_json(request), "the compaction threshold (bytes)", minimum=0, maximum=_INT64_MAX)


# ---------------------------------------------------------------------------------------------- namespaces


@routes.get(NS)
async def get_namespace_compaction_threshold(request: web.Request) -> web.Response:
    return web.json_response((await request.app[CONTEXT].policies(*_names(request))).compaction_threshold)


@routes.put(NS)
async def set_namespace_compaction_threshold(request: web.Request) -> web.Response:
    tenant, namespace = _names(request)
    threshold = await _read_threshold(request)

    await set_namespace_policy(request.app[CONTEXT], tenant, namespace, "compaction_threshold", threshold)
    return web.Response(status=204)


@routes.delete(NS)
async def remove_namespace_compaction_threshold(request: web.Request) -> web.Response:
    """Removes the namespace's threshold: no automatic compaction (204 whether or not one was set)."""
    tenant, namespace = _names(request)

    await set_namespace_policy(request.app[CONTEXT], tenant, namespace, "compaction_threshold", None)
    return web.Response(status=204)


# ---------------------------------------------------------------------------------------------- topics


@routes.get(T)
async def get_topic_compaction_threshold(request: web.Request) -> web.Response:
    """The topic's own threshold (204 without a body when none is set); with ``applied=true`` the one that
    applies."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    namespace_policies = await ctx.policies(topic.tenant, topic.namespace_portion)
    own = await own_topic_policies(ctx, policies_owner(topic))
    if query_bool(request, "applied"):
        return web.json_response(effective_threshold(namespace_policies, own))
    return policy_answer(None if own is None else own.compaction_threshold)


async def _set_topic_threshold(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    threshold = await _read_threshold(request)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    await set_topic_policy(ctx, topic, "compaction_threshold", threshold)
    return web.Response(status=204)


routes.post(T)(_set_topic_threshold)
routes.put(T)(_set_topic_threshold)


@routes.delete(T)
async def remove_topic_compaction_threshold(request: web.Request) -> web.Response:
    """Removes the topic's own threshold: its namespace's applies again (204 whether or not set)."""
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    await set_topic_policy(ctx, topic, "compaction_threshold", None)
    return web.Response(status=204)
