"""The bookie's errors, shared by the storage node and the ledger client.

Every error is a :class:`BookieError` (itself a :class:`magnetar.errors.MagnetarError`) and carries the
wire :class:`~magnetar.proto.bookie_pb2.Status` it corresponds to, so the server can answer with
``err.status`` and the client can turn a status back into the same class with :func:`status_to_error`.
``retriable`` says whether the same request may succeed later (possibly on another replica).
"""

from __future__ import annotations

from magnetar.errors import MagnetarError
from magnetar.proto import bookie_pb2

Status = bookie_pb2.Status


class BookieError(MagnetarError):
    """Root of every bookie and ledger-client error."""

    status: int = Status.INTERNAL


class InvalidRequestError(BookieError):
    """The request is malformed or out of order (e.g. entry ids not ascending); nothing of it was stored."""

    status = Status.INVALID_ARGUMENT


class LedgerFencedError(BookieError):
    """The ledger is fenced: a recovery took it over, normal adds are refused for good."""

    status = Status.FENCED


class BookieReadOnlyError(BookieError):
    """The bookie is read-only (free disk under its threshold); another bookie should take the write."""

    status = Status.READ_ONLY
    retriable = True


class NoSuchEntryError(BookieError):
    """This bookie does not hold the entry."""

    status = Status.NO_SUCH_ENTRY


class NoSuchLedgerError(BookieError):
    """This bookie knows nothing of the ledger (never written here, or deleted)."""

    status = Status.NO_SUCH_LEDGER


class EntryConflictError(BookieError):
    """An entry with this id is already stored with other bytes: two writers, or a client bug."""

    status = Status.ENTRY_CONFLICT


class EntryTooLargeError(BookieError):
    """An entry exceeds the bookie's ``entry_max_size_bytes``."""

    status = Status.TOO_LARGE


class BookieInternalError(BookieError):
    """The bookie failed (disk error, corrupt record); the client should try another replica."""

    status = Status.INTERNAL
    retriable = True


class BookieUnavailableError(BookieError):
    """The bookie cannot be reached, is shutting down, or did not answer in time."""

    status = Status.UNAVAILABLE
    retriable = True


class CorruptRecordError(BookieInternalError):
    """A stored record failed its length or CRC32C check; it is never returned as data.

    ``truncated``: the file ended inside the record (a torn tail after a crash, which the journal cuts off)
    rather than holding wrong bytes. ``bookie.codec`` raises it as ``CorruptRecord``.
    """

    def __init__(self, reason: str, *, truncated: bool = False) -> None:
        super().__init__(reason)
        self.truncated = truncated


_BY_STATUS: dict[int, type[BookieError]] = {
    Status.INVALID_ARGUMENT: InvalidRequestError,
    Status.FENCED: LedgerFencedError,
    Status.READ_ONLY: BookieReadOnlyError,
    Status.NO_SUCH_ENTRY: NoSuchEntryError,
    Status.NO_SUCH_LEDGER: NoSuchLedgerError,
    Status.ENTRY_CONFLICT: EntryConflictError,
    Status.TOO_LARGE: EntryTooLargeError,
    Status.INTERNAL: BookieInternalError,
    Status.UNAVAILABLE: BookieUnavailableError,
}


def status_to_error(status: int, message: str) -> BookieError:
    """The typed error for a non-OK wire status (``PARTIAL`` and unknown values give a plain BookieError).

    Args:
        status: a ``bookie_pb2.Status`` value.
        message: what went wrong, for a person (the bookie's message, prefixed by the caller as it likes).
    """
    cls = _BY_STATUS.get(status, BookieError)
    err = cls(message)
    if cls is BookieError:
        err.status = status
    return err


__all__ = [
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
