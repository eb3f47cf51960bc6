"""Managed ledgers and cursors: a topic's storage on top of the ledger client.

The interfaces (``api``) stand apart from their implementations, as in Pulsar. ``ManagedLedgerFactory``
here is the implementation (constructed as ``ManagedLedgerFactory(ledger_client, metadata_store,
config=ManagedLedgerConfig())``); the abstract interface it implements is ``api.ManagedLedgerFactory``.
Metadata layout: ``config_store.managed_ledgers``.
"""

from . import api
from .api import Entry, InitialPosition, ManagedCursor, ManagedLedger, Position
from .config import ManagedLedgerConfig
from .cursor import CursorState, ManagedCursorImpl
from .errors import (CursorNotFoundError, EntryTooLargeError, IndexBeyondEndError, IndexNotEnabledError,
                     IndexOutOfRangeError, IndexTrimmedError, InvalidCursorPositionError, ManagedLedgerClosedError,
                     ManagedLedgerError, ManagedLedgerFencedError, ManagedLedgerMetadataError,
                     ManagedLedgerNotFoundError, ManagedLedgerReadError, ManagedLedgerWriteError)
from .factory import ManagedLedgerFactory
from .ledger import LedgerState, ManagedLedgerImpl
from .ranges import RangeSet

__all__ = [
    "api", "Position", "Entry", "InitialPosition", "ManagedLedger", "ManagedCursor", "ManagedLedgerFactory",
    "ManagedLedgerConfig", "ManagedLedgerImpl", "ManagedCursorImpl", "LedgerState", "CursorState", "RangeSet",
    "ManagedLedgerError", "ManagedLedgerFencedError", "ManagedLedgerClosedError", "ManagedLedgerWriteError",
    "ManagedLedgerReadError", "ManagedLedgerMetadataError", "ManagedLedgerNotFoundError", "CursorNotFoundError",
    "InvalidCursorPositionError", "EntryTooLargeError", "IndexNotEnabledError", "IndexOutOfRangeError",
    "IndexBeyondEndError", "IndexTrimmedError",
]
