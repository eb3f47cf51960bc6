"""The managed ledger's read-handle cache keeps the handle that can read the most of a ledger (regression:
an open without recovery that finished after a terminate's close replaced the closed handle with one whose
LAC was -1, and reads of entries the closed handle covered failed until the topic was reloaded)."""

from bookie.client import ReadHandle
from broker.managed_ledger.reader import EntryReader
from config_store import LedgerMetadata, LedgerState


def _handle(state: LedgerState, lac: int) -> ReadHandle:
    md = LedgerMetadata(ledger_id=1, ensemble_size=1, write_quorum_size=1, ack_quorum_size=1,
                        ensembles=[(0, ["b"])], state=state, last_entry_id=lac if state is LedgerState.CLOSED else -1)
    return ReadHandle(None, md, 0, lac)


def _reader() -> EntryReader:
    return EntryReader("t", None, None, batch_entries=10, writers=lambda: ())


def test_a_stale_open_handle_never_replaces_the_closed_one() -> None:
    reader = _reader()
    closed = _handle(LedgerState.CLOSED, 9)
    assert reader.remember(closed) is closed
    assert reader.remember(_handle(LedgerState.OPEN, -1)) is closed
    assert reader._handles[1] is closed


def test_a_handle_that_knows_more_replaces_one_that_knows_less() -> None:
    reader = _reader()
    reader.remember(_handle(LedgerState.OPEN, 3))
    newer = _handle(LedgerState.OPEN, 7)
    assert reader.remember(newer) is newer
    closed = _handle(LedgerState.CLOSED, 7)
    assert reader.remember(closed) is closed
