"""A topic-list watcher (Pulsar's WATCH_TOPIC_LIST) on one connection, for tools and tests.

The broker sends the namespace's persistent topics matching a pattern, then an update each time that set
changes. Pattern consumers of Pulsar's Java client use this to subscribe to new topics at once; this client has
no pattern consumer, so the watch is offered as it is: the current ``topics`` and the stream of updates.

It does not reconnect: when its connection closes the watch ends (``closed``; :meth:`TopicListWatch.next_update`
raises the reason).
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, NamedTuple

from magnetar.protocol import pb

from .errors import ClientError, ConnectionClosedError, NotAllowedError

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["TopicListUpdate", "TopicListWatch"]


class TopicListUpdate(NamedTuple):
    new_topics: list[str]
    deleted_topics: list[str]
    topics_hash: str


class TopicListWatch:
    """One watcher; create it with :meth:`start`. ``topics`` and ``topics_hash`` follow every update received.

    At most ``updates_max`` updates wait to be taken by :meth:`next_update`; past that the watch ends with an
    error rather than drop one silently.
    """

    def __init__(self, conn: Connection, watcher_id: int, namespace: str, pattern: str, *, updates_max: int) -> None:
        self.conn = conn
        self.watcher_id = watcher_id
        self.namespace = namespace
        self.pattern = pattern
        self.topics: set[str] = set()
        self.topics_hash = ""
        self.closed = False
        self.close_reason: BaseException | None = None
        self._updates: collections.deque[TopicListUpdate] = collections.deque()
        self._updates_max = updates_max
        self._changed = asyncio.Event()

    @classmethod
    async def start(cls, conn: Connection, namespace: str, pattern: str, *, topics_hash: str | None = None,
                    updates_max: int = 10_000, timeout_s: float | None = None) -> TopicListWatch:
        """Asks the broker for a watcher of ``namespace``'s topics matching ``pattern`` (domain included, as
        applications write it: ``persistent://public/default/orders-.*``).

        ``topics_hash``: the hash of a list already held; when it still holds, the broker sends no topics
        (``topics`` then starts empty).

        Raises:
            NotAllowedError: the connection was not opened with ``topic_watchers=True`` or the broker does not
                serve watchers (checked here, before asking).
            ServerError: the broker refused (a bad namespace or pattern...).
        """
        if not conn.broker_supports_topic_watchers:
            raise NotAllowedError(f"the broker at {conn.logical_url} did not advertise topic list watchers on this "
                                  f"connection (open it with topic_watchers=True)")
        watch = cls(conn, conn.new_watcher_id(), namespace, pattern, updates_max=updates_max)
        conn.register_topic_list_watcher(watch.watcher_id, watch)  # before asking: no update may be missed
        request = pb.CommandWatchTopicList(watcher_id=watch.watcher_id, namespace=namespace, topics_pattern=pattern)
        if topics_hash is not None:
            request.topics_hash = topics_hash
        try:
            response = await conn.request(request, timeout_s=timeout_s)
        except BaseException:
            conn.unregister_topic_list_watcher(watch.watcher_id, watch)
            raise
        success = response.watchTopicListSuccess
        watch.topics = set(success.topic)
        watch.topics_hash = success.topics_hash
        return watch

    async def next_update(self, timeout_s: float | None = None) -> TopicListUpdate:
        """The oldest update not taken yet, waiting for one.

        Raises:
            TimeoutError: none within ``timeout_s``.
            ClientError: the watch ended (closed, its connection closed, or too many updates left waiting).
        """
        async with asyncio.timeout(timeout_s):
            while not self._updates:
                if self.closed:
                    raise self.close_reason or ClientError(f"topic list watcher {self.watcher_id} is closed")
                self._changed.clear()
                await self._changed.wait()
        return self._updates.popleft()

    async def close(self, timeout_s: float | None = None) -> None:
        """Tells the broker to stop (WATCH_TOPIC_LIST_CLOSE) and ends the watch; idempotent."""
        if self.closed:
            return
        self._end(ClientError(f"topic list watcher {self.watcher_id} is closed"))
        if self.conn.is_ready:
            await self.conn.request(pb.CommandWatchTopicListClose(watcher_id=self.watcher_id), timeout_s=timeout_s)

    def _end(self, reason: BaseException) -> None:
        self.closed = True
        self.close_reason = reason
        self.conn.unregister_topic_list_watcher(self.watcher_id, self)
        self._changed.set()

    # -- called by the connection (on the loop, never awaiting) --------------------------------------------

    def _handle_topic_list_update(self, conn: Connection, update: pb.CommandWatchTopicUpdate) -> None:
        if self.closed:
            return
        if len(self._updates) >= self._updates_max:
            self._end(ClientError(f"topic list watcher {self.watcher_id}: more than {self._updates_max} updates "
                                  f"were left waiting; the watch ended"))
            return
        self.topics.difference_update(update.deleted_topics)
        self.topics.update(update.new_topics)
        self.topics_hash = update.topics_hash
        self._updates.append(TopicListUpdate(list(update.new_topics), list(update.deleted_topics),
                                             update.topics_hash))
        self._changed.set()

    def _handle_connection_closed(self, conn: Connection, exc: BaseException | None) -> None:
        if not self.closed:
            self._end(exc if isinstance(exc, ClientError) else
                      ConnectionClosedError(f"the connection of topic list watcher {self.watcher_id} closed"))
