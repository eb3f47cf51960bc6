"""Opening a managed ledger that another broker may still be writing: recovery and claiming.

Opening (:meth:`ManagedLedgerImpl._initialize <broker.managed_ledger.ledger.ManagedLedgerImpl._initialize>`,
called by the factory): read or create the metadata; if a ledger is listed last, open it *with recovery*:
when the previous owner left it open this fences that writer and fixes its last entry, so every entry it
acknowledged is kept and nothing after it can be added. An empty last ledger is dropped (and deleted).
Then a new ledger is created and compare-and-set into the list: from here on the previous owner's metadata
writes fail too. Then the durable cursors are loaded and each is re-written once (compare-and-set), which
makes the previous owner's cursor writes fail as well. A terminated managed ledger gets no new ledger.

:class:`LedgerOpening` is a part of ``ManagedLedgerImpl`` (which inherits it), not a class of its own: it
fills in the managed ledger's metadata version, properties, layout, last confirmed position and cursors.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from bookie.client import LedgerNotFoundError
from bookie.errors import BookieError
from config_store import BadVersionError, MetadataError, NodeExistsError
from config_store.managed_ledgers import ManagedCursorInfo, ManagedLedgerInfo, ManagedLedgerMetaState

from .api import Position
from .cursor import ManagedCursorImpl
from .errors import ManagedLedgerFencedError, ManagedLedgerMetadataError, ManagedLedgerWriteError
from .layout import LedgerStats

__all__ = ["LedgerOpening"]

log = logging.getLogger("broker.managed_ledger.ledger")

_CLAIM_ATTEMPTS_MAX = 10


class LedgerOpening:
    """Opening with recovery, for :class:`broker.managed_ledger.ledger.ManagedLedgerImpl` (see the module
    docstring)."""

    async def _open_and_claim(self) -> None:
        try:
            versioned = await self._store.get(self.name)
            if versioned is None:
                info = ManagedLedgerInfo()
                self._version = await self._store.create(self.name, info)
            else:
                info, self._version = versioned.value, versioned.version
            self._properties = dict(info.properties)
            self._terminated = self._terminate_stored = info.state is ManagedLedgerMetaState.TERMINATED
            for li in info.ledgers:
                self.layout.append(LedgerStats(li.ledger_id, li.entries, li.size, li.timestamp_ms))
            dropped = await self._recover_last_ledger(keep_empty=self._terminated)
            await self._recover_index()  # reads the last stored index (broker.managed_ledger.indexes)
            if not self._terminated:
                self._appender.start(await self._create_ledger_and_switch())
            last_ledger = self.layout.last_ledger_id
            self._last_confirmed = self.layout.last_position() or Position(last_ledger or 0, -1)
            await self._load_cursors()
        except (NodeExistsError, BadVersionError) as e:
            raise ManagedLedgerFencedError(f"[{self.name}] another broker is opening this managed ledger: {e}") from e
        except MetadataError as e:
            raise ManagedLedgerMetadataError(f"[{self.name}] cannot open: {e}") from e
        except BookieError as e:
            raise ManagedLedgerWriteError(f"[{self.name}] cannot open: {e}") from e
        if dropped is not None:
            await self._delete_ledger_quietly(dropped)

    async def _recover_last_ledger(self, *, keep_empty: bool = False) -> Optional[int]:
        """Establishes the last ledger's final length (recovering it if its writer left it open); returns its
        id if it is empty and was dropped from the list (never with ``keep_empty``: a terminated ledger's
        list is not rewritten)."""
        last = self.layout.last_ledger_id
        if last is None:
            return None
        try:
            handle = await self._client.open_ledger(last, recovery=True)
        except LedgerNotFoundError:
            log.warning("[%s] last ledger %d has no metadata; dropping it from the list", self.name, last)
            self.layout.remove([last])
            return None
        entries = handle.last_add_confirmed + 1
        stats = self.layout.get(last)
        size = handle.metadata.length or stats.size
        self.layout.set_counts(last, entries, size, stats.timestamp_ms or int(time.time() * 1000))
        if entries == 0 and not keep_empty:
            self.layout.remove([last])
            return last
        self._reader.remember(handle)
        log.info("[%s] last ledger %d ends at entry %d", self.name, last, handle.last_add_confirmed)
        return None

    async def _load_cursors(self) -> None:
        for cursor_name, versioned in (await self._store.cursors(self.name)).items():
            info, version = await self._claim_cursor(cursor_name, versioned.value, versioned.version)
            self._cursors[cursor_name] = ManagedCursorImpl.from_info(self, cursor_name, info, version)

    async def _claim_cursor(self, cursor_name: str, info: ManagedCursorInfo, version: int):
        """Re-writes the cursor node once so that a previous owner's later writes lose their race."""
        for _ in range(_CLAIM_ATTEMPTS_MAX):
            try:
                return info, await self._store.write_cursor(self.name, cursor_name, info, expected_version=version)
            except BadVersionError:
                current = await self._store.get_cursor(self.name, cursor_name)
                if current is None:
                    break
                info, version = current.value, current.version
        raise ManagedLedgerFencedError(f"[{self.name}][{cursor_name}] cursor keeps changing under us")
