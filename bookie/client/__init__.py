"""The ledger client brokers use to write and read replicated ledgers on bookies.

Public face: :class:`LedgerClient` (create / open with recovery / delete), :class:`WriteHandle`,
:class:`ReadHandle`, :class:`LedgerEntry`, :class:`LedgerClientConfig`, and the client's errors.
"""

from .errors import LedgerClosedError, LedgerNotFoundError, LedgerRecoveryError, LedgerStateError, NotEnoughBookiesError
from .ledger_client import LedgerClient, LedgerClientConfig
from .read_handle import LedgerEntry, ReadHandle
from .write_handle import WriteHandle

__all__ = [
    "LedgerClient",
    "LedgerClientConfig",
    "WriteHandle",
    "ReadHandle",
    "LedgerEntry",
    "NotEnoughBookiesError",
    "LedgerClosedError",
    "LedgerStateError",
    "LedgerRecoveryError",
    "LedgerNotFoundError",
]
