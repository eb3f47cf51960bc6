"""Reading entries of a managed ledger by position: the tail cache first, then the bookies.

Closed ledgers are read through ReadHandles kept in a small LRU (opened without recovery: a closed ledger's
end is in its metadata). A ledger still being written (the current one, or the one a rollover is closing) is
read through a ReadHandle built on its writer's metadata and last-add-confirmed, so exactly the entries the
managed ledger has confirmed are readable. Contiguous misses go to the bookies ``batch_entries`` at a time.
"""

from __future__ import annotations

import collections
from typing import Callable, Iterable, Optional

from bookie.client import LedgerClient, ReadHandle, WriteHandle
from bookie.errors import BookieError
from config_store import MetadataError

from .api import Entry, Position
from .cache import EntryCache
from .errors import ManagedLedgerReadError

_READ_HANDLES_MAX = 16


class EntryReader:
    def __init__(self, name: str, client: LedgerClient, cache: EntryCache, *, batch_entries: int,
                 writers: Callable[[], Iterable[Optional[WriteHandle]]]) -> None:
        self._name = name
        self._client = client
        self._cache = cache
        self._batch_entries = batch_entries
        self._writers = writers
        self._handles: collections.OrderedDict[int, ReadHandle] = collections.OrderedDict()

    def remember(self, handle: ReadHandle) -> ReadHandle:
        """Keeps a handle of a closed ledger (e.g. the one recovery or a rollover just produced); returns the
        handle kept. A handle opened while the ledger was still being written (its LAC what the bookies said
        then) never replaces one that knows more: an open without recovery can finish after the writer's
        close handed over the closed handle, and must not hide entries the closed one can read."""
        old = self._handles.get(handle.ledger_id)
        if old is not None and _knows_more(old, handle):
            handle = old
        self._handles[handle.ledger_id] = handle
        self._handles.move_to_end(handle.ledger_id)
        while len(self._handles) > _READ_HANDLES_MAX:
            self._handles.popitem(last=False)
        return handle

    def remember_closed_writer(self, writer: WriteHandle) -> None:
        self.remember(ReadHandle(self._client, writer.metadata, 0, writer.last_add_confirmed))

    def forget(self, ledger_ids: Iterable[int]) -> None:
        for ledger_id in ledger_ids:
            self._handles.pop(ledger_id, None)

    def clear(self) -> None:
        self._handles.clear()

    async def _handle(self, ledger_id: int, last_entry_id: int) -> ReadHandle:
        for writer in self._writers():
            if writer is not None and writer.ledger_id == ledger_id:
                return ReadHandle(self._client, writer.metadata, 0, writer.last_add_confirmed)
        handle = self._handles.get(ledger_id)
        if handle is not None and not handle.is_closed and handle.last_add_confirmed < last_entry_id:
            handle = None  # opened while the ledger was written: it has been closed since, or confirmed more
        if handle is None:
            handle = self.remember(await self._client.open_ledger(ledger_id, recovery=False))
        else:
            self._handles.move_to_end(ledger_id)
        return handle

    async def read(self, positions: list[Position]) -> list[Entry]:
        """The entries at ``positions`` (existing ones, ascending), in that order.

        Raises ManagedLedgerReadError (``retriable`` as its cause) when the bookies cannot serve them.
        """
        found: dict[Position, bytes] = {}
        missing: list[Position] = []
        for p in positions:
            data = self._cache.get(p)
            if data is None:
                missing.append(p)
            else:
                found[p] = data
        i = 0
        while i < len(missing):
            first = missing[i]
            j = i + 1
            while (j < len(missing) and j - i < self._batch_entries and missing[j].ledger_id == first.ledger_id
                   and missing[j].entry_id == missing[j - 1].entry_id + 1):
                j += 1
            try:
                handle = await self._handle(first.ledger_id, missing[j - 1].entry_id)
                for e in await handle.read(first.entry_id, missing[j - 1].entry_id):
                    found[Position(e.ledger_id, e.entry_id)] = e.payload
            except (BookieError, MetadataError) as e:
                error = ManagedLedgerReadError(f"[{self._name}] cannot read {first}..{missing[j - 1]}: {e}")
                error.retriable = e.retriable
                raise error from e
            i = j
        return [Entry(p, found[p]) for p in positions]


def _knows_more(old: ReadHandle, new: ReadHandle) -> bool:
    """Whether ``old`` can read more of its ledger than ``new``: closed beats open, then the higher LAC."""
    if old.is_closed != new.is_closed:
        return old.is_closed
    return old.last_add_confirmed > new.last_add_confirmed
