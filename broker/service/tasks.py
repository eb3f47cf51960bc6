"""Small asyncio helpers shared by the service's modules."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Coroutine, TypeVar

log = logging.getLogger("broker.service")

T = TypeVar("T")


def spawn(tasks: set[asyncio.Task], coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
    """Runs ``coro`` in the background, kept in ``tasks`` until it ends: referenced (a task nobody references
    may be collected mid-flight) and there for its owner to cancel and await on close."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


async def shielded(aw: Awaitable[T]) -> T:
    """Awaits ``aw`` so that cancelling the caller does not cut it short.

    Used for storage writes (cursor persists, cursor creation and deletion): a compare-and-set write
    interrupted by a cancellation may still land in ZooKeeper while the writer never learns the new
    version, and its next write would then fence the cursor. If the caller is cancelled the write runs on
    and its outcome is only logged.
    """
    task = asyncio.ensure_future(aw)

    def retrieve(t: asyncio.Future) -> None:
        if not t.cancelled() and t.exception() is not None:
            log.debug("a shielded storage write failed after its caller left: %s", t.exception())

    task.add_done_callback(retrieve)
    return await asyncio.shield(task)
