"""One admin call on every partition of a partitioned topic, each run at the partition's owner.

Pulsar's broker answers a call on a partitioned topic's base name by making the same call once per partition
through its own admin client: partitions may be owned by different brokers, and each call is redirected (307)
to its owner like any other. Magnetar does the same through this broker's own HTTP URL, so a fan-out needs no
ownership knowledge of its own and stays right while bundles move.

Every partition's answer is gathered whole (status and body) and judged afterwards by :func:`judge`, the
rule Pulsar's handlers apply to theirs: the first error decides, except that an error a caller tolerates
(409 "already exists" when creating a subscription, 412 when resetting a cursor) only counts when every
partition answered it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Iterable, Optional
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from magnetar.topic_name import TopicName

from .context import AdminContext
from .errors import RestError

_GATEWAY_ERROR = 502  # a partition's owner failed (5xx) or could not be reached


@dataclass(frozen=True)
class PartitionAnswer:
    """What one partition's call answered: ``body`` is the JSON (None when empty) or the raw text."""

    partition: TopicName
    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return self.status < 400

    @property
    def reason(self) -> str:
        if isinstance(self.body, dict) and isinstance(self.body.get("reason"), str):
            return self.body["reason"]
        return str(self.body) if self.body is not None else f"HTTP {self.status}"

    def error(self) -> RestError:
        """This answer as the fan-out's own error: a 4xx keeps its status, a 5xx becomes 502."""
        status = self.status if self.status < 500 else _GATEWAY_ERROR
        return RestError(status, f"{self.partition}: {self.reason}")


def judge(answers: Iterable[PartitionAnswer], *, tolerated: Optional[int] = None,
          missing_ok: bool = False) -> Optional[PartitionAnswer]:
    """The answer that fails a fan-out, or None if it succeeded (pure).

    Args:
        tolerated: a status that fails the fan-out only if every partition answered it (the operation was
            done wherever it could be, as Pulsar's create-subscription and reset-cursor decide).
        missing_ok: 404s are success (a partition not created yet has nothing to do).
    """
    answers = list(answers)
    errors = [a for a in answers if not a.ok and not (missing_ok and a.status == 404)]
    for a in errors:
        if a.status != tolerated:
            return a
    if errors and len(errors) == len(answers):
        return errors[0]
    return None


def partition_calls(topic: TopicName, partitions: int, suffix: str = "") -> list[tuple[TopicName, str]]:
    """``(partition, /admin/v2/<partition><suffix>)`` for every partition of ``topic``."""
    return [(p, f"/admin/v2/{p.rest_path}{suffix}") for p in (topic.partition(i) for i in range(partitions))]


def same_call_per_partition(request: web.Request, topic: TopicName, partitions: int,
                            topic_segment: int) -> list[tuple[TopicName, str]]:
    """This request's raw path (still encoded) and query for every partition of ``topic``, the topic segment
    replaced; ``authoritative`` is dropped, since each partition's owner is looked up on its own."""
    raw = request.rel_url.raw_path.split("/")
    query = [(k, v) for k, v in request.rel_url.query.items() if k != "authoritative"]
    tail = "?" + urlencode(query) if query else ""
    calls = []
    for i in range(partitions):
        partition = topic.partition(i)
        raw[topic_segment] = partition.encoded_local_name
        calls.append((partition, "/".join(raw) + tail))
    return calls


async def fan_out(ctx: AdminContext, method: str, calls: Iterable[tuple[TopicName, str]], *,
                  body: Optional[bytes] = None) -> list[PartitionAnswer]:
    """Makes each call (at most ``ctx.fanout_concurrency`` at a time) through this broker's own URL, so
    every partition's owner runs it; the answers in the order of ``calls``. Never raises for an answer:
    a broker that cannot be reached answers 502."""
    limit = asyncio.Semaphore(ctx.fanout_concurrency)
    base = ctx.self_url()
    client = ctx.client()
    headers = {"Content-Type": "application/json"} if body is not None else None

    async def one(partition: TopicName, path: str) -> PartitionAnswer:
        async with limit:
            try:
                async with client.request(method, base + path, data=body, headers=headers) as response:
                    return PartitionAnswer(partition, response.status, _decode(await response.text()))
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                return PartitionAnswer(partition, _GATEWAY_ERROR,
                                       {"reason": f"{method} {path} failed: {e or type(e).__name__}"})

    return list(await asyncio.gather(*(one(p, path) for p, path in calls)))


def _decode(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
