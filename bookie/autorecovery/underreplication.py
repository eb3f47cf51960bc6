"""The region's auto-recovery metadata in ZooKeeper (BookKeeper's ``LedgerUnderreplicationManager`` role).

Layout, beside the ledgers (``/ledgers/<id>`` children that are not decimal are ignored by ledger listings)::

    /ledgers/underreplication/ledgers/<ledger-id>    UnderReplicatedLedger (JSON): fragments still to repair
    /ledgers/underreplication/locks/<ledger-id>      ephemeral: the worker repairing that ledger (its id)
    /ledgers/underreplication/auditor                ephemeral: the elected auditor (its id)
    /ledgers/underreplication/missing/<bookie-id>    since when (ms) the auditor has seen the bookie gone
    /ledgers/underreplication/decommission/<bookie>  the bookie is to be emptied (ms of the request)
    /ledgers/underreplication/disable                present: auto-recovery paused (no marking, no copying)

Guarantees: records change by compare-and-set only (marking merges, repairing removes one fragment, a record
with no fragment left is deleted at the version read); a lock is an ephemeral node, so a worker that dies
releases its ledgers when its session expires; the auditor node is ephemeral too, so election is "whoever
creates it", and the others watch it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Optional

from config_store import (BadVersionError, MetadataStore, NodeExistsError, NotFoundError, Versioned)
from config_store.configuration import check_name
from config_store.errors import InvalidMetadataError

from .model import Fragment, UnderReplicatedLedger

log = logging.getLogger("bookie.autorecovery")

BASE = "/ledgers/underreplication"
LEDGERS = f"{BASE}/ledgers"
LOCKS = f"{BASE}/locks"
AUDITOR = f"{BASE}/auditor"
MISSING = f"{BASE}/missing"
DECOMMISSION = f"{BASE}/decommission"
DISABLE = f"{BASE}/disable"

_CAS_ATTEMPTS_MAX = 50


def _now_ms() -> int:
    return int(time.time() * 1000)


class UnderReplicationStore:
    """Typed access to the layout above over a region's :class:`MetadataStore`."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # -- records ----------------------------------------------------------------------------------------

    async def mark(self, ledger_id: int, fragments: list[Fragment]) -> bool:
        """Records ``fragments`` of the ledger as under-replicated (merged with what is recorded); True when
        the record changed."""
        path = f"{LEDGERS}/{ledger_id}"
        for _ in range(_CAS_ATTEMPTS_MAX):
            current = await self.read(ledger_id)
            if current is None:
                record = UnderReplicatedLedger(ledger_id, (), _now_ms()).with_fragments(fragments)
                try:
                    await self.store.create(path, record.to_json(), make_parents=True)
                    return True
                except NodeExistsError:
                    continue
            record = current.value.with_fragments(fragments)
            if record == current.value:
                return False
            try:
                await self.store.set(path, record.to_json(), expected_version=current.version)
                return True
            except (BadVersionError, NotFoundError):
                continue
        raise BadVersionError(f"under-replication record of ledger {ledger_id}: too many concurrent changes")

    async def read(self, ledger_id: int) -> Optional[Versioned[UnderReplicatedLedger]]:
        got = await self.store.get(f"{LEDGERS}/{ledger_id}")
        if got is None:
            return None
        return Versioned(UnderReplicatedLedger.from_json(got.value), got.version)

    async def resolve(self, ledger_id: int, key: tuple[int, str]) -> None:
        """Removes one fragment from the ledger's record (the record goes when it is empty)."""
        path = f"{LEDGERS}/{ledger_id}"
        for _ in range(_CAS_ATTEMPTS_MAX):
            current = await self.read(ledger_id)
            if current is None:
                return
            record = current.value.without(key)
            try:
                if record.fragments:
                    if record != current.value:
                        await self.store.set(path, record.to_json(), expected_version=current.version)
                else:
                    await self.store.delete(path, expected_version=current.version)
                return
            except (BadVersionError, NotFoundError):
                continue
        raise BadVersionError(f"under-replication record of ledger {ledger_id}: too many concurrent changes")

    async def drop(self, ledger_id: int) -> None:
        """Forgets the ledger's record (the ledger was deleted)."""
        await self.store.delete(f"{LEDGERS}/{ledger_id}")

    async def list_ledgers(self) -> list[int]:
        return sorted(int(c) for c in await self.store.children(LEDGERS) if c.isdigit())

    async def list_records(self) -> list[UnderReplicatedLedger]:
        out = []
        for ledger_id in await self.list_ledgers():
            try:
                got = await self.read(ledger_id)
            except InvalidMetadataError as err:
                log.warning("ledger %d: %s", ledger_id, err)
                continue
            if got is not None:
                out.append(got.value)
        return out

    # -- locks ------------------------------------------------------------------------------------------

    async def try_lock(self, ledger_id: int, owner: str) -> bool:
        try:
            await self.store.create(f"{LOCKS}/{ledger_id}", owner.encode(), ephemeral=True, make_parents=True)
            return True
        except NodeExistsError:
            return False

    async def unlock(self, ledger_id: int) -> None:
        await self.store.delete(f"{LOCKS}/{ledger_id}")

    async def lock_owner(self, ledger_id: int) -> Optional[str]:
        got = await self.store.get(f"{LOCKS}/{ledger_id}")
        return got.value.decode() if got is not None else None

    # -- auditor election -------------------------------------------------------------------------------

    async def try_become_auditor(self, owner: str) -> bool:
        try:
            await self.store.create(AUDITOR, owner.encode(), ephemeral=True, make_parents=True)
            return True
        except NodeExistsError:
            return False

    async def auditor(self) -> Optional[str]:
        got = await self.store.get(AUDITOR)
        return got.value.decode() if got is not None else None

    async def resign_auditor(self, owner: str) -> None:
        got = await self.store.get(AUDITOR)
        if got is not None and got.value.decode() == owner:
            try:
                await self.store.delete(AUDITOR, expected_version=got.version)
            except (BadVersionError, NotFoundError):
                pass

    # -- bookies ----------------------------------------------------------------------------------------

    async def missing_since(self) -> dict[str, int]:
        out = {}
        for bookie in await self.store.children(MISSING):
            got = await self.store.get(f"{MISSING}/{bookie}")
            if got is not None:
                try:
                    out[bookie] = int(json.loads(got.value)["sinceMs"])
                except (ValueError, KeyError, TypeError):
                    out[bookie] = _now_ms()
        return out

    async def note_missing(self, bookie_id: str, since_ms: int) -> None:
        try:
            await self.store.create(f"{MISSING}/{check_name('bookie id', bookie_id)}", json.dumps({"sinceMs": since_ms}).encode(),
                                    make_parents=True)
        except NodeExistsError:
            pass

    async def forget_missing(self, bookie_id: str) -> None:
        await self.store.delete(f"{MISSING}/{bookie_id}")

    async def decommissioning(self) -> list[str]:
        return await self.store.children(DECOMMISSION)

    async def decommission(self, bookie_id: str) -> None:
        try:
            await self.store.create(f"{DECOMMISSION}/{check_name('bookie id', bookie_id)}", json.dumps({"sinceMs": _now_ms()}).encode(),
                                    make_parents=True)
        except NodeExistsError:
            pass

    async def recommission(self, bookie_id: str) -> None:
        await self.store.delete(f"{DECOMMISSION}/{bookie_id}")

    # -- enable / disable -------------------------------------------------------------------------------

    async def enabled(self) -> bool:
        return await self.store.exists(DISABLE) is None

    async def set_enabled(self, enabled: bool) -> None:
        if enabled:
            await self.store.delete(DISABLE)
        else:
            try:
                await self.store.create(DISABLE, b"", make_parents=True)
            except NodeExistsError:
                pass
