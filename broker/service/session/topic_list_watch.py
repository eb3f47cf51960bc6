"""Topic-list watchers: Pulsar's WATCH_TOPIC_LIST, a namespace's topics matching a pattern, pushed as they change.

Theory of operation
-------------------
A client that sets ``FeatureFlags.supports_topic_watchers`` in CONNECT (Pulsar's Java client does;
pulsar-client's C++ core does not) is told in CONNECTED that this broker serves them, when it does
(``TopicListWatchService.available``; a feature is never advertised unless served). It may then send
WATCH_TOPIC_LIST(watcher_id, namespace, pattern): the broker answers WATCH_TOPIC_LIST_SUCCESS with the
namespace's persistent topics that match the pattern and their hash (no topics when the client's hash still
holds), then WATCH_TOPIC_UPDATE(new_topics, deleted_topics, hash of the new set) whenever that set changes,
until WATCH_TOPIC_LIST_CLOSE or the connection closes. The success always leaves before the first update: the
watcher is registered and answered in one step, and updates are written in order after it.

Where the topics come from. A namespace's persistent topics are what GET_TOPICS_OF_NAMESPACE lists: the
managed ledgers stored in the region's ZooKeeper (one node per topic, whichever broker created it) and the
partitions of the partitioned topics in the global configuration store. :class:`NamespaceTopics` follows both
with watches (``ManagedLedgerFactory.watch_list``, ``ConfigurationStore.watch_partitioned_topics``), as
Pulsar's ``TopicListService`` follows metadata-store notifications, so a watcher on broker A hears of a topic
created or deleted on broker B one ZooKeeper notification later. One :class:`NamespaceTopics` per namespace
serves every watcher of it on this broker; the first watcher starts it, the last one closes it.

Pattern matching and hashes are ``topic_list.py``'s (pure).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING, Any, Callable, Optional

from magnetar.protocol import pb

from ..errors import MetadataError, ServiceNotReadyError, TooManyRequestsError, UnsupportedError
from .topic_list import TopicPattern, compile_topics_pattern, diff, namespace_topic_names, parse_namespace, topics_hash

if TYPE_CHECKING:
    from broker.managed_ledger.api import ManagedLedgerFactory
    from config_store import ConfigurationStore

    from .connection import Connection

log = logging.getLogger("broker.service.session.topic_list_watch")

WATCHERS_PER_CONNECTION_MAX = 1000
Listener = Callable[[list[str], list[str]], None]


class NamespaceTopicsState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    WATCHING = "watching"
    CLOSED = "closed"


class NamespaceTopics:
    """The persistent topics of one namespace, kept current by metadata watches (see the module docstring).

    ``topics`` is the whole set once :meth:`start` returned; each listener is called with ``(added, removed)``
    (sorted names) after every later change. Listeners run on the loop and must not block.
    """

    def __init__(self, tenant: str, namespace: str, *, ml_factory: "ManagedLedgerFactory",
                 configuration_store: "Optional[ConfigurationStore]") -> None:
        self.tenant = tenant
        self.namespace = namespace
        self.state = NamespaceTopicsState.NEW
        self.topics: frozenset[str] = frozenset()
        self._ml_factory = ml_factory
        self._configuration_store = configuration_store
        self._managed_ledgers: Optional[list[str]] = None
        self._partitioned: Optional[dict[str, int]] = None
        self._ready = asyncio.Event()
        self._watches: list[Any] = []
        self._listeners: list[Listener] = []

    def __repr__(self) -> str:
        return f"NamespaceTopics({self.tenant}/{self.namespace}, {self.state.value}, {len(self.topics)} topics)"

    async def start(self, *, timeout_s: float) -> None:
        """Arms the watches and waits for their first answers. MetadataError when they do not come in time."""
        if self.state is not NamespaceTopicsState.NEW:
            raise RuntimeError(f"{self!r} was already started")
        self.state = NamespaceTopicsState.STARTING
        self._watches.append(self._ml_factory.watch_list(f"{self.tenant}/{self.namespace}/persistent",
                                                         self._on_managed_ledgers))
        if self._configuration_store is not None:
            self._watches.append(self._configuration_store.watch_partitioned_topics(
                self.tenant, self.namespace, "persistent", self._on_partitioned))
        else:
            self._partitioned = {}
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            self.close()
            raise MetadataError(f"listing the topics of {self.tenant}/{self.namespace} took more than "
                                f"{timeout_s:g}s; the metadata store may be unreachable") from None
        if self.state is NamespaceTopicsState.STARTING:
            self.state = NamespaceTopicsState.WATCHING

    def close(self) -> None:
        """Cancels the watches; idempotent."""
        self.state = NamespaceTopicsState.CLOSED
        for watch in self._watches:
            watch.cancel()
        self._watches.clear()
        self._listeners.clear()

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    def _on_managed_ledgers(self, names: list[str]) -> None:
        self._managed_ledgers = list(names)
        self._update()

    def _on_partitioned(self, counts: dict[str, int]) -> None:
        self._partitioned = dict(counts)
        self._update()

    def _update(self) -> None:
        if self.state is NamespaceTopicsState.CLOSED or self._managed_ledgers is None or self._partitioned is None:
            return
        new = frozenset(namespace_topic_names(self.tenant, self.namespace, "persistent",
                                              managed_ledgers=self._managed_ledgers, partitioned=self._partitioned))
        added, removed = diff(self.topics, new)
        self.topics = new
        if not self._ready.is_set():
            self._ready.set()  # the first complete set: nobody holds an older one to update
            return
        if not added and not removed:
            return
        log.debug("[%s/%s] topics added %s, removed %s", self.tenant, self.namespace, added, removed)
        for listener in list(self._listeners):
            try:
                listener(added, removed)
            except Exception:
                log.exception("[%s/%s] topic-list listener failed", self.tenant, self.namespace)


class TopicListWatcher:
    """One client's watch: the namespace's topics its pattern matches, updates written to its connection."""

    def __init__(self, conn: "Connection", watcher_id: int, pattern: TopicPattern,
                 namespace_topics: NamespaceTopics) -> None:
        self.conn = conn
        self.watcher_id = watcher_id
        self.pattern = pattern
        self.namespace_topics = namespace_topics
        self.matching: set[str] = set(pattern.filter(namespace_topics.topics))

    def __repr__(self) -> str:
        return f"TopicListWatcher({self.watcher_id}, {self.pattern.pattern!r}, {self.conn.remote_address})"

    @property
    def topics_hash(self) -> str:
        return topics_hash(self.matching)

    def on_change(self, added: list[str], removed: list[str]) -> None:
        new = [t for t in added if t not in self.matching and self.pattern.matches(t)]
        gone = [t for t in removed if t in self.matching]
        if not new and not gone:
            return
        self.matching.update(new)
        self.matching.difference_update(gone)
        self.conn.send_command(pb.CommandWatchTopicUpdate(watcher_id=self.watcher_id, new_topics=new,
                                                          deleted_topics=gone, topics_hash=self.topics_hash))


_PENDING = object()  # a watcher id whose creation is under way


class TopicListWatchService:
    """The broker's topic-list watchers, by connection and watcher id (see the module docstring).

    Args:
        ml_factory: lists and watches the region's managed ledgers (served when it ``watches_list``).
        configuration_store: the partitioned topics (None: there are none).
        enabled: serve watchers at all (Pulsar ``enableBrokerTopicListWatcher``).
        pattern_max_length: longest pattern evaluated (Pulsar ``subscriptionPatternMaxLength``).
        start_timeout_s: how long the first watcher of a namespace waits for its topic list.
    """

    def __init__(self, *, ml_factory: "ManagedLedgerFactory", configuration_store: "Optional[ConfigurationStore]",
                 enabled: bool = True, pattern_max_length: int = 50, start_timeout_s: float = 30.0) -> None:
        self._ml_factory = ml_factory
        self._configuration_store = configuration_store
        self._enabled = enabled
        self.pattern_max_length = pattern_max_length
        self._start_timeout_s = start_timeout_s
        self._namespaces: dict[tuple[str, str], NamespaceTopics] = {}
        self._starting: dict[tuple[str, str], asyncio.Future] = {}
        self._users: dict[tuple[str, str], int] = {}
        self._watchers: dict["Connection", dict[int, Any]] = {}
        self._closed = False

    @property
    def available(self) -> bool:
        """Whether watchers are served (and so may be advertised in CONNECTED)."""
        return self._enabled and not self._closed and bool(getattr(self._ml_factory, "watches_list", False))

    def watcher_count(self) -> int:
        return sum(1 for by_id in self._watchers.values() for w in by_id.values() if w is not _PENDING)

    def watched_namespaces(self) -> list[str]:
        return sorted(f"{t}/{n}" for t, n in self._namespaces)

    # --------------------------------------------------------------------------------- watchers

    async def watch(self, conn: "Connection", *, watcher_id: int, namespace: str, pattern: str) -> TopicListWatcher:
        """Creates watcher ``watcher_id`` of ``conn`` (or returns the one already there, as Pulsar answers a
        repeated request again).

        Raises:
            UnsupportedError (not served), InvalidTopicNameError (bad namespace), TopicsPatternError (a pattern
            the broker does not evaluate), ServiceNotReadyError (the same id is being created, or was closed
            meanwhile), TooManyRequestsError, MetadataError (the topic list could not be read).
        """
        if not self.available:
            raise UnsupportedError("topic list watchers are not supported by this broker")
        key = parse_namespace(namespace)
        compiled = compile_topics_pattern(pattern, max_length=self.pattern_max_length)
        mine = self._watchers.setdefault(conn, {})
        existing = mine.get(watcher_id)
        if existing is _PENDING:
            raise ServiceNotReadyError(f"topic list watcher {watcher_id} is being created on this connection")
        if existing is not None:
            return existing
        if len(mine) >= WATCHERS_PER_CONNECTION_MAX:
            raise TooManyRequestsError(f"a connection may hold at most {WATCHERS_PER_CONNECTION_MAX} topic list "
                                       f"watchers")
        mine[watcher_id] = _PENDING
        try:
            topics = await self._acquire(key)
        except BaseException:
            if mine.get(watcher_id) is _PENDING:
                del mine[watcher_id]
            raise
        if mine.get(watcher_id) is not _PENDING or conn.closed:
            self._release(key)
            raise ServiceNotReadyError(f"topic list watcher {watcher_id} was closed before it was created")
        watcher = TopicListWatcher(conn, watcher_id, compiled, topics)
        topics.add_listener(watcher.on_change)
        mine[watcher_id] = watcher
        log.info("%s: watching the topics of %s matching %r (watcher %d, %d topics)", conn.remote_address,
                 namespace, pattern, watcher_id, len(watcher.matching))
        return watcher

    def close_watcher(self, conn: "Connection", watcher_id: int) -> None:
        """Stops watcher ``watcher_id`` of ``conn``; one being created is dropped when its creation ends."""
        mine = self._watchers.get(conn)
        if mine is None:
            return
        watcher = mine.pop(watcher_id, None)
        if not mine:
            del self._watchers[conn]
        if isinstance(watcher, TopicListWatcher):
            self._forget(watcher)
            log.info("%s: closed topic list watcher %d", conn.remote_address, watcher_id)

    def connection_closed(self, conn: "Connection") -> None:
        for watcher in list(self._watchers.pop(conn, {}).values()):
            if isinstance(watcher, TopicListWatcher):
                self._forget(watcher)

    def close(self) -> None:
        """Drops every watcher and watch (the connections are closing); idempotent."""
        self._closed = True
        self._watchers.clear()
        for topics in self._namespaces.values():
            topics.close()
        self._namespaces.clear()
        self._users.clear()

    # --------------------------------------------------------------------------------- namespaces

    def _forget(self, watcher: TopicListWatcher) -> None:
        topics = watcher.namespace_topics
        topics.remove_listener(watcher.on_change)
        self._release((topics.tenant, topics.namespace))

    async def _acquire(self, key: tuple[str, str]) -> NamespaceTopics:
        """The started NamespaceTopics of ``key``, counted as used once more (pair with :meth:`_release`)."""
        while True:
            topics = self._namespaces.get(key)
            if topics is not None:
                self._users[key] = self._users.get(key, 0) + 1
                return topics
            starting = self._starting.get(key)
            if starting is None:
                break
            await asyncio.shield(starting)  # another watcher starts it; its failure is ours
        topics = NamespaceTopics(*key, ml_factory=self._ml_factory, configuration_store=self._configuration_store)
        fut = asyncio.get_running_loop().create_future()
        self._starting[key] = fut
        try:
            await topics.start(timeout_s=self._start_timeout_s)
        except BaseException as exc:
            topics.close()
            fut.set_exception(exc if isinstance(exc, Exception) else ServiceNotReadyError("cancelled"))
            fut.exception()  # retrieved: waiters re-raise it
            raise
        finally:
            self._starting.pop(key, None)
        if self._closed:
            topics.close()
            fut.set_exception(ServiceNotReadyError("the broker is shutting down"))
            fut.exception()
            raise ServiceNotReadyError("the broker is shutting down")
        self._namespaces[key] = topics
        self._users[key] = self._users.get(key, 0) + 1
        fut.set_result(None)
        return topics

    def _release(self, key: tuple[str, str]) -> None:
        users = self._users.get(key, 0) - 1
        if users > 0:
            self._users[key] = users
            return
        self._users.pop(key, None)
        topics = self._namespaces.pop(key, None)
        if topics is not None:
            topics.close()
            log.debug("[%s/%s] no topic list watchers left; watches cancelled", *key)
