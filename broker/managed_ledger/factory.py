"""The managed-ledger factory: opens each managed ledger once per broker and closes them all at the end."""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

from bookie.client import LedgerClient
from config_store import MetadataError, MetadataStore, RegionStore
from config_store.managed_ledgers import ManagedLedgerStore, check_managed_ledger_name

from . import api
from .config import ManagedLedgerConfig
from .errors import ManagedLedgerClosedError, ManagedLedgerError, ManagedLedgerMetadataError, ManagedLedgerNotFoundError
from .ledger import ManagedLedgerImpl

log = logging.getLogger(__name__)


class ManagedLedgerFactory(api.ManagedLedgerFactory):
    """Opens managed ledgers on a ledger client and a region's metadata store.

    Guarantees: one :class:`ManagedLedgerImpl` per name at a time (concurrent ``open`` calls share one
    opening; a closed or deleted one is forgotten, so the next ``open`` loads it afresh); ``close`` closes
    every managed ledger it opened and is idempotent. The factory owns neither the ledger client nor the
    metadata store: their owner closes them after the factory.

    Args:
        ledger_client: a started :class:`bookie.client.LedgerClient`.
        metadata_store: the region's :class:`config_store.MetadataStore` (or its :class:`RegionStore`).
        config: the default :class:`ManagedLedgerConfig` (``open`` may pass another one per ledger).
    """

    def __init__(self, ledger_client: LedgerClient, metadata_store: MetadataStore | RegionStore, *,
                 config: ManagedLedgerConfig = ManagedLedgerConfig()) -> None:
        store = metadata_store.store if isinstance(metadata_store, RegionStore) else metadata_store
        self.config = config
        self._client = ledger_client
        self._store = ManagedLedgerStore(store)
        self._opening: dict[str, asyncio.Task] = {}
        self._ledgers: dict[str, ManagedLedgerImpl] = {}
        self._closed = False

    async def open(self, name: str, *, config: Optional[ManagedLedgerConfig] = None) -> ManagedLedgerImpl:
        """The managed ledger ``name`` (``tenant/ns/persistent/topic``), created if new. On first open it
        recovers (fences) a ledger another broker left open and starts a new ledger (see ``ledger.py``).

        Raises ManagedLedgerFencedError if another broker is opening it concurrently,
        ManagedLedgerMetadataError / ManagedLedgerWriteError when ZooKeeper / the bookies fail.
        """
        if self._closed:
            raise ManagedLedgerClosedError("managed-ledger factory is closed")
        try:
            check_managed_ledger_name(name)
        except MetadataError as e:
            raise ManagedLedgerError(str(e)) from None
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml
        task = self._opening.get(name)
        if task is None:
            ml = ManagedLedgerImpl(name, client=self._client, store=self._store, config=config or self.config,
                                   on_closed=self._forget)
            task = asyncio.get_running_loop().create_task(self._initialize(ml), name=f"ml-open:{name}")
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # waiters may all be cancelled
            self._opening[name] = task
        return await asyncio.shield(task)

    async def _initialize(self, ml: ManagedLedgerImpl) -> ManagedLedgerImpl:
        try:
            await ml._initialize()
            self._ledgers[ml.name] = ml
            return ml
        finally:
            self._opening.pop(ml.name, None)

    def _forget(self, ml: ManagedLedgerImpl) -> None:
        if self._ledgers.get(ml.name) is ml:
            del self._ledgers[ml.name]

    async def exists(self, name: str) -> bool:
        try:
            return name in self._ledgers or await self._store.get(name) is not None
        except MetadataError as e:
            raise ManagedLedgerMetadataError(f"[{name}] cannot check existence: {e}") from e

    async def delete(self, name: str) -> None:
        """Deletes the managed ledger (every ledger, cursor and its metadata); ManagedLedgerNotFoundError if
        it does not exist."""
        if not await self.exists(name):
            raise ManagedLedgerNotFoundError(f"[{name}] no such managed ledger")
        ml = await self.open(name)
        await ml.delete()

    async def list(self, prefix: str) -> list[str]:
        try:
            return await self._store.list(prefix)
        except MetadataError as e:
            raise ManagedLedgerMetadataError(f"cannot list managed ledgers under {prefix!r}: {e}") from e

    watches_list = True

    def watch_list(self, prefix: str, callback) -> api.ListWatch:
        """A ZooKeeper children watch on the region's managed-ledger folder ``prefix`` (see the interface)."""
        return self._store.watch_list(prefix, callback)

    @property
    def ledgers(self) -> dict[str, ManagedLedgerImpl]:
        """The managed ledgers open right now."""
        return dict(self._ledgers)

    async def close(self) -> None:
        """Closes every managed ledger this factory opened (persisting cursors). Idempotent."""
        if self._closed:
            return
        self._closed = True
        opening = list(self._opening.values())
        await asyncio.gather(*opening, return_exceptions=True)
        for ml in list(self._ledgers.values()):
            try:
                await ml.close()
            except ManagedLedgerError as e:
                log.warning("[%s] close failed: %s", ml.name, e)
        self._ledgers.clear()

    async def __aenter__(self) -> "ManagedLedgerFactory":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
