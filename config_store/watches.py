"""Watches that survive reconnects and session loss: :class:`WatchHandle`, made by
:meth:`MetadataStore.watch_data <config_store.store.MetadataStore.watch_data>` / ``watch_children``.

ZooKeeper watches are one-shot and kazoo drops them all when the connection is lost. A
:class:`WatchHandle` is therefore a small task: whenever it is marked dirty (by a ZooKeeper watch event, a
reconnect or a new session) it re-reads the node *and re-arms the watch in the same request*, then calls the
callback if the state changed (by ``mzxid`` for data, by the child list for children). A read that fails
for lack of a connection waits for the next connection and tries again, so a watch survives reconnects and
session loss; a change is never missed, though intermediate states may be coalesced.

A handle works on its store's loop and backend primitives (``_read_watch``, ``_post``); the store creates,
tracks and, on close, cancels it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from typing import TYPE_CHECKING, Any, Callable

from .errors import MetadataError, StoreClosedError

if TYPE_CHECKING:
    from .store import MetadataStore

__all__ = ["WatchHandle"]

log = logging.getLogger("config_store")


class WatchHandle:
    """A live watch on one path; :meth:`cancel` stops it. Created by ``watch_data`` / ``watch_children``.

    The callback runs on the event loop, once with the current state as soon as it has been read and again
    after every change. If it returns an awaitable, the watch awaits it before the next delivery.
    """

    def __init__(self, store: "MetadataStore", path: str, kind: str, callback: Callable[[Any], Any]) -> None:
        self.path = path
        self.kind = kind
        self._store = store
        self._callback = callback
        self._dirty = asyncio.Event()
        self._dirty.set()
        self._cancelled = False
        self._task: asyncio.Task | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Stops deliveries; idempotent. The task is cancelled now and awaited by the store's close()."""
        if not self._cancelled:
            self._cancelled = True
            self._store._watches.discard(self)
            if self._task is not None:
                self._task.cancel()

    def _fire(self, *_event: Any) -> None:
        """Marks the watch dirty; safe from any thread (kazoo calls it from its watcher thread)."""
        self._store._post(self._mark_dirty)

    def _mark_dirty(self) -> None:
        if not self._cancelled:
            self._dirty.set()

    async def _run(self) -> None:
        last_token: Any = object()
        failures = 0
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                value, token = await self._store._read_watch(self.kind, self.path, self._fire)
            except StoreClosedError:
                return
            except MetadataError as e:
                failures += 1
                self._dirty.set()
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("[%s] watch on %s: read failed (%s); retrying", self._store.name, self.path, e)
                if e.retriable:
                    await self._store._connected.wait()
                if failures > 1:
                    await asyncio.sleep(min(0.05 * 2 ** min(failures, 6), 2.0) * random.uniform(0.8, 1.2))
                continue
            failures = 0
            if token == last_token:
                continue
            last_token = token
            try:
                result = self._callback(value)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("[%s] %s watch callback on %s failed", self._store.name, self.kind, self.path)
