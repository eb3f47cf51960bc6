"""``/admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction``: trigger a topic compaction (PUT, 204;
409 while one runs) and read its status (GET: Pulsar's ``LongRunningProcessStatus``,
``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ...}``), at the topic's owner (307 from
elsewhere, 404 for a topic that does not exist). Served from ``topics.py``'s route table.
"""

from __future__ import annotations

from aiohttp import web

from .body import topic_of
from .errors import RestError
from .keys import CONTEXT

routes = web.RouteTableDef()

_T = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/compaction"
_TOPIC_SEGMENT = 6


async def _compaction_of(request: web.Request):
    ctx = request.app[CONTEXT]
    topic = topic_of(request, _TOPIC_SEGMENT)
    await ctx.policies(topic.tenant, topic.namespace_portion)
    if not topic.persistent:
        raise RestError(405, f"Topic {topic} is non-persistent: compaction is not allowed")
    if await ctx.partitions(topic):
        raise RestError(405, f"Compaction of a partitioned topic's base name is not supported ({topic}); "
                             "compact each partition")
    served = await ctx.served_topic(request, topic)
    return served.compaction


@routes.put(_T)
async def trigger_compaction(request: web.Request) -> web.Response:
    (await _compaction_of(request)).trigger()
    return web.Response(status=204)


@routes.get(_T)
async def compaction_status(request: web.Request) -> web.Response:
    return web.json_response((await _compaction_of(request)).status_json())
