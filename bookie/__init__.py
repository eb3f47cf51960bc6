"""The bookie: Magnetar's storage node (journal with group commit, entry logs, LMDB index, gRPC
``BookieService``) and, under ``bookie.client``, the ledger client brokers use.

Public face of the storage node: :class:`BookieConfig` (its settings) and the error classes shared with the
client (:mod:`bookie.errors`). The process itself is ``bookie.server.run`` (``magnetar bookie``).
"""

from .config import BookieConfig
from .errors import (BookieError, BookieInternalError, BookieReadOnlyError, BookieUnavailableError,
                     CorruptRecordError, EntryConflictError, EntryTooLargeError, InvalidRequestError,
                     LedgerFencedError, NoSuchEntryError, NoSuchLedgerError, status_to_error)

__all__ = [
    "BookieConfig",
    "BookieError",
    "BookieInternalError",
    "BookieReadOnlyError",
    "BookieUnavailableError",
    "CorruptRecordError",
    "EntryConflictError",
    "EntryTooLargeError",
    "InvalidRequestError",
    "LedgerFencedError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "status_to_error",
]
