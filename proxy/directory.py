"""The brokers of the proxy's region, as registered in its ZooKeeper (``/brokers/<id>``), kept current.

The proxy asks these brokers its lookups (round robin) and forwards clients only to their registered
endpoints (:mod:`proxy.targets`). The list follows a children watch on ``/brokers``; because a broker that
restarts quickly under the same id may leave the child list looking unchanged, a target missing from the cache
triggers one re-read (at most once per ``refresh_min_interval_s``) before it is refused, and the whole list is
re-read every ``refresh_interval_s`` anyway.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
from typing import Mapping, Optional

from config_store import MetadataError, MetadataStore, WatchHandle
from config_store.brokers import BROKERS, BrokerRegistration, BrokerRegistry

from .errors import BrokerUnavailableError, TargetDeniedError
from .targets import BrokerEndpoint, allowed_endpoints, binary_url, parse_target, web_url

__all__ = ["BrokerDirectory", "DirectoryState"]

log = logging.getLogger("proxy.directory")


class DirectoryState(enum.Enum):
    NEW = "new"
    STARTED = "started"
    CLOSED = "closed"


class BrokerDirectory:
    """Registered brokers of one region (see the module docstring). ``await start()``, ``await close()``.

    Args:
        store: the region's metadata store.
        tls_enabled_with_broker: use and allow only the brokers' TLS endpoints.
    """

    def __init__(self, store: MetadataStore, *, tls_enabled_with_broker: bool, refresh_interval_s: float = 30.0,
                 refresh_min_interval_s: float = 1.0) -> None:
        self._registry = BrokerRegistry(store)
        self._store = store
        self.tls = tls_enabled_with_broker
        self.refresh_interval_s = refresh_interval_s
        self.refresh_min_interval_s = refresh_min_interval_s
        self.state = DirectoryState.NEW
        self._brokers: dict[str, BrokerRegistration] = {}
        self._allowed: Mapping[tuple[str, int], BrokerEndpoint] = {}
        self._round_robin = itertools.count()
        self._loaded = asyncio.Event()
        self._refresh_lock = asyncio.Lock()
        self._last_refresh = 0.0
        self._last_refresh_began = 0.0
        self._watch: Optional[WatchHandle] = None
        self._task: Optional[asyncio.Task] = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self, *, timeout_s: float = 30.0) -> None:
        """Reads the brokers and starts following them (idempotent); returns once the first read is done."""
        if self.state is not DirectoryState.NEW:
            return
        self.state = DirectoryState.STARTED
        self._watch = self._store.watch_children(BROKERS, self._on_children)
        self._task = asyncio.get_running_loop().create_task(self._refresh_periodically(), name="proxy-brokers")
        await asyncio.wait_for(self._loaded.wait(), timeout_s)

    async def close(self) -> None:
        if self.state is DirectoryState.CLOSED:
            return
        self.state = DirectoryState.CLOSED
        if self._watch is not None:
            self._watch.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _on_children(self, _children: list[str]) -> None:
        await self.refresh()

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval_s)
            try:
                await self.refresh()
            except MetadataError as e:
                log.warning("cannot re-read the registered brokers (keeping the last list): %s", e)

    async def refresh(self) -> None:
        """Re-reads every registration (callers in a burst share one read)."""
        called = time.monotonic()
        async with self._refresh_lock:
            if self._last_refresh_began >= called:
                return  # a read that began after this call was made has just finished
            self._last_refresh_began = time.monotonic()
            brokers = await self._registry.list_brokers()
            self._last_refresh = time.monotonic()
            if set(brokers) != set(self._brokers):
                log.info("registered brokers: %s", ", ".join(sorted(brokers)) or "none")
            self._brokers = brokers
            self._allowed = allowed_endpoints(brokers.values(), tls_only=self.tls)
            self._loaded.set()

    # -- queries -------------------------------------------------------------------------------------------

    @property
    def brokers(self) -> list[BrokerRegistration]:
        return [self._brokers[k] for k in sorted(self._brokers)]

    def _next(self, url_of) -> str:
        candidates = [url for url in map(url_of, self.brokers) if url]
        if not candidates:
            kind = "with a TLS URL " if self.tls else ""
            raise BrokerUnavailableError(f"no broker {kind}is registered in this region")
        return candidates[next(self._round_robin) % len(candidates)]

    def next_binary_url(self) -> str:
        """A registered broker's binary-protocol URL to ask a lookup, round robin.

        Raises:
            BrokerUnavailableError: none is registered (with a TLS URL, when TLS towards brokers is on).
        """
        return self._next(lambda reg: binary_url(reg, tls=self.tls))

    def next_web_url(self) -> str:
        """A registered broker's admin REST base URL, round robin (BrokerUnavailableError if none)."""
        return self._next(lambda reg: web_url(reg, tls=self.tls))

    def is_registered_web_url(self, url: str) -> bool:
        """Whether ``url`` (scheme://host:port/...) is at the web address of a registered broker."""
        return any(url == base or url.startswith(base + "/") for base in (web_url(r, tls=self.tls)
                                                                         for r in self.brokers) if base)

    async def resolve_target(self, proxy_to_broker_url: str) -> BrokerEndpoint:
        """The registered endpoint a client named (see :mod:`proxy.targets`).

        Raises:
            TargetDeniedError: it is not a registered broker endpoint of this region.
        """
        key = parse_target(proxy_to_broker_url)
        endpoint = self._allowed.get(key)
        if endpoint is None and time.monotonic() - self._last_refresh >= self.refresh_min_interval_s:
            try:
                await self.refresh()
            except MetadataError as e:
                log.warning("cannot re-read the registered brokers: %s", e)
            endpoint = self._allowed.get(key)
        if endpoint is None:
            raise TargetDeniedError(f"{proxy_to_broker_url} is not a broker of this region")
        return endpoint

    async def check_binary_url(self, url: str) -> BrokerEndpoint:
        """``resolve_target`` for a URL a broker answered (a lookup redirect): the proxy asks only its brokers."""
        return await self.resolve_target(url)
