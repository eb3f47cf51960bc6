"""Errors the ledger client adds to the bookie's own (``bookie.errors``)."""

from __future__ import annotations

from bookie.errors import BookieError


class NotEnoughBookiesError(BookieError):
    """Fewer writable bookies are registered than an ensemble (or a replacement) needs."""

    retriable = True


class LedgerClosedError(BookieError):
    """The ledger is closed (or the handle is): no more adds."""


class LedgerStateError(BookieError):
    """The ledger's metadata changed under the writer in a way it cannot follow (e.g. someone closed it)."""


class LedgerRecoveryError(BookieError):
    """Recovery could not establish the ledger's end: too few bookies answered. Try again later."""

    retriable = True


class LedgerNotFoundError(BookieError):
    """No ledger with that id exists in the region's metadata."""
