"""What :class:`bookie.storage.Storage` keeps in memory about itself and each ledger.

All of it is owned by the event loop: the storage thread sees ledger states only as the immutable
:class:`~bookie.index.LedgerRecord` snapshots a flush takes.
"""

from __future__ import annotations

import enum

from .index import LedgerRecord

__all__ = ["LedgerState", "StorageState"]


class StorageState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class LedgerState:
    """What the bookie knows of one ledger (mutated on the event loop only).

    ``lac`` is the highest LAC any stored add carried (persisted with the ledger's record); ``explicit_lac``
    the highest the writer sent with WriteLastAddConfirmed, kept in memory only (see
    :meth:`bookie.storage.Storage.write_lac`).
    """

    __slots__ = ("fenced", "deleted", "lac", "last_entry_id", "explicit_lac")

    def __init__(self, fenced: bool = False, deleted: bool = False, lac: int = -1, last_entry_id: int = -1):
        self.fenced = fenced
        self.deleted = deleted
        self.lac = lac
        self.last_entry_id = last_entry_id
        self.explicit_lac = -1

    def record(self) -> LedgerRecord:
        return LedgerRecord(self.fenced, self.deleted, self.lac, self.last_entry_id)


