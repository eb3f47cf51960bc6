"""A ``BrokerService`` running in its own event-loop thread, for tests that drive it with pulsar-client.

(``tests/kit/brokers.py`` runs whole broker *processes*; this runs only the binary-protocol service,
in-process, so a test can reach into topics and subscriptions.)

pulsar-client is synchronous and blocks; running the broker on a loop of its own thread lets a test call
the client directly and still reach into the broker through :meth:`BrokerThread.run` (a coroutine function
executed on the broker's loop, its result returned) or :meth:`BrokerThread.call` (a plain function).

By default the broker runs on the in-memory managed ledger (``tests/kit/memory_ledger.py``) and an in-memory
configuration store holding the namespaces asked for; ``ml_factory_builder`` / ``config_store_builder``
(async callables run on the broker loop) plug in the real ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import threading
import uuid
from typing import Any, Awaitable, Callable, Optional

import pytest

from broker.ownership_api import SelfOwnership
from broker.service import BrokerService, ServiceConfig
from config_store import ConfigurationStore, MemoryMetadataStore, NodeExistsError, Policies, TenantInfo

from .memory_ledger import MemoryManagedLedgerFactory

log = logging.getLogger("tests.kit.broker_thread")

Builder = Callable[[], Awaitable[Any]]
Closer = Callable[[], Awaitable[None]]


class BrokerThread:
    """See the module docstring. Use as a context manager or call ``start()`` / ``stop()``.

    Args:
        config: the service settings (port 0 by default: a free port).
        namespaces: ``tenant/ns`` to create in the configuration store.
        policies: namespace -> Policies for those namespaces.
        ml_factory_builder: ``async () -> ManagedLedgerFactory`` (default: in-memory).
        config_store_builder: ``async () -> ConfigurationStore`` (default: in-memory).
        closers: ``async ()`` callables run on the loop after the service closed (close what builders made).
    """

    def __init__(self, *, config: Optional[ServiceConfig] = None, namespaces: tuple[str, ...] = ("public/default",),
                 policies: Optional[dict[str, Policies]] = None, cluster_name: str = "test",
                 ml_factory_builder: Optional[Builder] = None, config_store_builder: Optional[Builder] = None,
                 closers: tuple[Closer, ...] = ()) -> None:
        self.config = config or ServiceConfig(stats_update_interval_s=1.0)
        self.namespaces = namespaces
        self.policies = policies or {}
        self.cluster_name = cluster_name
        self._ml_factory_builder = ml_factory_builder
        self._config_store_builder = config_store_builder
        self._closers = closers
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self.service: Optional[BrokerService] = None
        self.ml_factory: Any = None
        self.config_store: Optional[ConfigurationStore] = None
        self._metadata_store: Any = None
        self.ownership: Optional[SelfOwnership] = None
        self.storage = "memory"
        self.bookies: list = []
        self.crashed = False

    # --------------------------------------------------------------------------------- lifecycle

    def start(self, *, timeout_s: float = 60.0) -> "BrokerThread":
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()
            if not self.crashed:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.close()

        self._thread = threading.Thread(target=main, name="broker-loop", daemon=True)
        self._thread.start()
        ready.wait(timeout_s)
        try:
            self.run(self._setup, timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    async def _setup(self) -> None:
        if self._config_store_builder is not None:
            self.config_store = await self._config_store_builder()
        else:
            self._metadata_store = MemoryMetadataStore()
            await self._metadata_store.start()
            self.config_store = ConfigurationStore(self._metadata_store)
        for ns in self.namespaces:
            await self.create_namespace(ns, self.policies.get(ns))
        if self._ml_factory_builder is not None:
            self.ml_factory = await self._ml_factory_builder()
        else:
            self.ml_factory = MemoryManagedLedgerFactory()
        await self.start_service()

    async def start_service(self) -> None:
        """(Re)starts the service on the same storage (a broker restart / failover on one machine)."""
        self.ownership = SelfOwnership("pulsar://127.0.0.1:0")
        self.service = BrokerService(config=dataclasses.replace(self.config), ml_factory=self.ml_factory,
                                     configuration_store=self.config_store, ownership=self.ownership,
                                     cluster_name=self.cluster_name)
        await self.service.start()
        self.ownership.broker_service_url = self.service.service_url
        self.ownership.broker_service_url_tls = self.service.service_url_tls

    async def create_namespace(self, namespace: str, policies: Optional[Policies] = None) -> None:
        tenant, ns = namespace.split("/")
        try:
            await self.config_store.create_tenant(tenant, TenantInfo(allowed_clusters=[self.cluster_name]))
        except NodeExistsError:
            pass
        try:
            await self.config_store.create_namespace(tenant, ns, policies or Policies())
        except NodeExistsError:
            await self.config_store.update_namespace_policies(tenant, ns, lambda _old: policies or Policies())

    def stop(self, *, timeout_s: float = 60.0) -> None:
        """Closes the service and everything it holds; after :meth:`crash`, only what the crashed broker still
        holds (see :meth:`_release_after_crash`)."""
        if self.crashed and self.loop is not None and not self.loop.is_running() and not self.loop.is_closed():
            self._release_after_crash(timeout_s)
            return
        if self.loop is None or not self.loop.is_running():
            return
        try:
            self.run(self._teardown, timeout_s=timeout_s)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not None:
                self._thread.join(timeout_s)

    async def _teardown(self) -> None:
        if self.service is not None:
            await self.service.close()
        if self.ml_factory is not None:
            await self.ml_factory.close()
        await self._close_held()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _close_held(self) -> None:
        """The test's closers (ZooKeeper sessions, ledger client) and the in-memory metadata store."""
        for closer in self._closers:
            try:
                await closer()
            except Exception:
                log.exception("closing test resources failed")
        if self._metadata_store is not None:
            await self._metadata_store.close()

    def _release_after_crash(self, timeout_s: float) -> None:
        """At the test's end: closes the ZooKeeper sessions and bookie connections a crashed broker still holds
        (a crashed process's would die with it) so that none of its clients outlives the test, and its loop."""
        async def release() -> None:
            async with asyncio.timeout(timeout_s):
                await self._close_held()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        def run() -> None:  # on a thread of its own: the caller may be inside a running loop (an async test)
            try:
                self.loop.run_until_complete(release())
            except Exception:
                log.exception("releasing what a crashed broker held failed")
            finally:
                self.loop.close()
        thread = threading.Thread(target=run, name="broker-release", daemon=True)
        thread.start()
        thread.join(timeout_s + 5)

    def crash(self, *, timeout_s: float = 10.0) -> None:
        """A broker crash as clients and storage see it: every socket closes at once and the loop stops where
        it is. Nothing is flushed, unloaded or closed (pending cursor writes and snapshots are lost); what it
        still holds (ZooKeeper sessions, bookie connections) is closed by :meth:`stop` at the test's end."""
        self.crashed = True

        def cut() -> None:
            self.service._server.stop_accepting()
            for conn in list(self.service.connections):
                conn._transport.abort()
            self.loop.stop()
        self.loop.call_soon_threadsafe(cut)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> "BrokerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --------------------------------------------------------------------------------- reaching in

    @property
    def url(self) -> str:
        return self.service.service_url

    @property
    def url_tls(self) -> str:
        """``pulsar+ssl://127.0.0.1:<tls_port>`` (the config's ``tls_port``), or ""."""
        return self.service.service_url_tls

    def run(self, fn: Callable[..., Awaitable[Any]], *args: Any, timeout_s: float = 30.0, **kwargs: Any) -> Any:
        """Runs ``await fn(*args, **kwargs)`` on the broker loop and returns its result."""
        future = asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 30.0, **kwargs: Any) -> Any:
        """Runs the plain function ``fn`` on the broker loop (to read broker state safely)."""
        async def wrapper() -> Any:
            return fn(*args, **kwargs)
        return self.run(wrapper, timeout_s=timeout_s)

    def topic(self, name: str):
        return self.call(lambda: self.service.topics().get(name))

    def stats(self, name: str) -> dict:
        async def get() -> dict:
            topic = await self.service.get_topic(name, create=False)
            return topic.stats().to_json() if topic else {}
        return self.run(get)

    def set_policies(self, namespace: str, policies: Policies) -> None:
        self.run(self.create_namespace, namespace, policies)

    def restart_service(self) -> None:
        """Closes the service (unloading every topic) and starts a new one on the same storage and port 0."""
        async def restart() -> None:
            await self.service.close()
            await self.start_service()
        self.run(restart)


# ------------------------------------------------------------------------------------------ pytest fixtures
# Import them into a test module: ``from tests.kit.broker_thread import broker, client, new_client``.

_PULSAR_LOGGER = logging.getLogger("pulsar-client")
_PULSAR_LOGGER.setLevel(logging.WARNING)


def make_client(url: str, **kwargs: Any):
    import pulsar

    kwargs.setdefault("operation_timeout_seconds", 15)
    kwargs.setdefault("logger", _PULSAR_LOGGER)
    return pulsar.Client(url, **kwargs)


def unique_topic(prefix: str = "t", namespace: str = "public/default") -> str:
    return f"persistent://{namespace}/{prefix}-{uuid.uuid4().hex[:8]}"


def real_storage(tmp_path, zk_connect: str, *, bookies: int = 3, start: bool = True,
                 **ml_config: Any) -> dict[str, Any]:
    """BrokerThread keyword arguments for real storage: ``bookies`` bookie processes (started here unless
    ``start`` is False: then they must be running already), a ZooKeeper session for the ledger client and
    managed ledgers, another one for the configuration store (as a broker process holds them), all closed
    when the BrokerThread stops. ``held`` in the result gives the test those sessions (to crash them)."""
    from bookie.client import LedgerClient, LedgerClientConfig
    from broker.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
    from config_store import KazooMetadataStore, RegionStore

    from .bookies import start_bookies
    from .wait import wait_for_async

    started = start_bookies(bookies, tmp_path, zk_connect) if start else []
    held: dict[str, Any] = {}
    config = ManagedLedgerConfig(**{"ensemble_size": min(3, bookies), "write_quorum_size": min(2, bookies),
                                    "ack_quorum_size": min(2, bookies), "cursor_persist_interval_ms": 100,
                                    # as a broker process (BrokerConfig's default): timestamp and index on
                                    "broker_entry_metadata_interceptors": ("timestamp", "index"),
                                    **ml_config})

    async def ml_factory():
        store = held["ml_store"] = KazooMetadataStore(zk_connect, session_timeout_ms=10_000)
        await store.start()
        client = held["ledger_client"] = LedgerClient(RegionStore(store),
                                                      config=LedgerClientConfig(add_timeout_s=5.0, read_timeout_s=5.0))
        await client.start()
        await wait_for_async(lambda: len(client.writable_bookies()) >= bookies, timeout_s=30,
                             what=f"{bookies} writable bookies")
        return ManagedLedgerFactory(client, store, config=config)

    async def config_store():
        store = held["config_store"] = KazooMetadataStore(zk_connect, session_timeout_ms=10_000)
        await store.start()
        return ConfigurationStore(store)

    async def close():
        for key in ("ledger_client", "ml_store", "config_store"):
            if key in held:
                await held.pop(key).close()

    return {"ml_factory_builder": ml_factory, "config_store_builder": config_store, "closers": (close,),
            "bookies": started, "held": held}


def _storages() -> list[str]:
    chosen = os.environ.get("MAGNETAR_BROKER_STORAGE", "memory,bookies")
    return [s for s in ("memory", "bookies") if s in chosen.split(",")]


@pytest.fixture(params=_storages())
def storage(request) -> str:
    """Which managed ledger the broker runs on: ``memory`` (the test double) or ``bookies`` (real
    ZooKeeper + 3 bookie processes). ``MAGNETAR_BROKER_STORAGE=memory`` runs only the first."""
    return request.param


@pytest.fixture
def broker(request, storage):
    """A started BrokerThread on ``storage``; ``@pytest.mark.parametrize("broker", [{...BrokerThread
    kwargs...}], indirect=True)`` customizes it."""
    kwargs = dict(getattr(request, "param", None) or {})
    bookies = []
    if storage == "bookies":
        # The session's ZooKeeper may be started right here (a dynamic request, after the autouse fixture
        # that kills what a test started): mark it as pre-existing so it outlives this test.
        zk_server = request.getfixturevalue("zk_server")
        before = getattr(request.node, "_kit_before", None)
        if before is not None:
            before.add(zk_server.process)
        extra = real_storage(request.getfixturevalue("tmp_path"), request.getfixturevalue("zk_connect"))
        bookies = extra.pop("bookies")
        extra.pop("held")
        kwargs.update(extra)
    b = BrokerThread(**kwargs).start()
    b.storage = storage
    b.bookies = bookies
    yield b
    b.stop()
    for bk in bookies:
        bk.process.cleanup()


@pytest.fixture
def new_client(broker):
    """``new_client(**kwargs)`` -> a pulsar.Client on the broker; all are closed at the end."""
    clients = []

    def factory(**kwargs: Any):
        c = make_client(broker.url, **kwargs)
        clients.append(c)
        return c

    yield factory
    for c in clients:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def client(new_client):
    return new_client()
