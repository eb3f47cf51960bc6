"""Errors of the managed-ledger layer.

:class:`ManagedLedgerError` is the root, a :class:`~magnetar.errors.MagnetarError`, defined here once
(``api.ManagedLedgerError`` is the same class, named for the interfaces and the test doubles implementing
them). Ledger-client (``bookie``) and metadata-store (``config_store``) errors are mapped at this
boundary; the original is kept as ``__cause__``.
"""

from __future__ import annotations

from magnetar.errors import MagnetarError


class ManagedLedgerError(MagnetarError):
    """Root of managed-ledger errors. Messages start with ``[managed-ledger-name]``."""


class ManagedLedgerFencedError(ManagedLedgerError):
    """Another broker has taken this managed ledger over (its ledger was fenced by a recovery, or its
    metadata changed under us), or a write failed and left the ledger unusable. Nothing more can be
    appended through this object: close it and let the owner (re)open the managed ledger."""


class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger (or cursor) was closed or deleted."""


class ManagedLedgerTerminatedError(ManagedLedgerError):
    """The managed ledger was terminated (topic termination): it takes no more appends, for good."""


class ManagedLedgerWriteError(ManagedLedgerError):
    """An append failed for a reason other than fencing (bookies unavailable, no ledger could be created).
    The managed ledger is fenced afterwards; reopening it recovers a well-defined end."""

    retriable = True


class ManagedLedgerReadError(ManagedLedgerError):
    """Entries could not be read from the bookies. ``retriable`` mirrors the cause."""


class ManagedLedgerMetadataError(ManagedLedgerError):
    """The managed ledger's metadata could not be read or written (ZooKeeper unavailable, corrupt JSON)."""


class ManagedLedgerNotFoundError(ManagedLedgerError):
    """No managed ledger with that name exists."""


class CursorNotFoundError(ManagedLedgerError):
    """No cursor with that name exists on the managed ledger."""


class InvalidCursorPositionError(ManagedLedgerError, ValueError):
    """A position that does not exist in the managed ledger, or is beyond its last confirmed entry."""


class EntryTooLargeError(ManagedLedgerError, ValueError):
    """An entry larger than the ledger client accepts."""


class IndexNotEnabledError(ManagedLedgerError):
    """The managed ledger adds no index to its entries (``broker_entry_metadata_interceptors`` lacks
    ``index``)."""


class IndexOutOfRangeError(ManagedLedgerError, LookupError):
    """No retained entry holds the message with that index. ``first_index`` / ``next_index``: the range
    that does exist, ``[first_index, next_index)`` (Kafka's log start and log end offsets)."""

    def __init__(self, message: str, *, index: int, first_index: int, next_index: int) -> None:
        super().__init__(message)
        self.index = index
        self.first_index = first_index
        self.next_index = next_index


class IndexBeyondEndError(IndexOutOfRangeError):
    """The index is beyond the next one to be assigned (no such message yet)."""


class IndexTrimmedError(IndexOutOfRangeError):
    """The message with that index was trimmed away (retention), or the index is negative."""


__all__ = ["ManagedLedgerError", "ManagedLedgerFencedError", "ManagedLedgerClosedError", "ManagedLedgerWriteError",
           "ManagedLedgerReadError", "ManagedLedgerMetadataError", "ManagedLedgerNotFoundError",
           "CursorNotFoundError", "InvalidCursorPositionError", "EntryTooLargeError", "IndexNotEnabledError",
           "IndexOutOfRangeError", "IndexBeyondEndError", "IndexTrimmedError"]
