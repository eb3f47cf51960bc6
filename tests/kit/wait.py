"""Wait for a condition with a deadline — never sleep "to let things settle".

``wait_for`` (threads, sync code) and ``wait_for_async`` (on the event loop) poll ``predicate`` until it
returns a truthy value, which they return; at the deadline they raise AssertionError naming the condition (``what=``)
and the last value seen (or the last exception the predicate raised).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")


def _describe(predicate: Callable[..., Any], what: str | None) -> str:
    return what or getattr(predicate, "__name__", repr(predicate))


def wait_for(predicate: Callable[[], T], timeout_s: float, *, interval_s: float = 0.01,
             what: str | None = None) -> T:
    """Polls ``predicate()`` until truthy (returned) or ``timeout_s`` passes (AssertionError)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:  # a predicate may fail until the condition holds (e.g. not connected yet)
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {_describe(predicate, what)}; "
                                 f"last: {last!r}")
        time.sleep(interval_s)


async def wait_for_async(predicate: Callable[[], T | Awaitable[T]], timeout_s: float, *,
                         interval_s: float = 0.01, what: str | None = None) -> T:
    """Like :func:`wait_for` on the event loop; ``predicate`` may be a plain or an async function."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: Any = None
    while True:
        try:
            last = predicate()
            if inspect.isawaitable(last):
                last = await last
            if last:
                return last
        except Exception as e:
            last = e
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {_describe(predicate, what)}; "
                                 f"last: {last!r}")
        await asyncio.sleep(interval_s)
