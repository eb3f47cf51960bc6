"""A flush yields to the journal: its entry-log pieces wait while a journal sync is in flight, every wait is
bounded (a journal that never goes idle slows a flush, never stops it), and what a flush guarantees (reads,
checkpoint, crash replay) is unchanged."""

from __future__ import annotations

import asyncio
import os
import pathlib
import threading

from bookie import directio
from bookie.entrylog import list_entry_logs
from bookie.ledger_storage import StorageObserver
from bookie.storage import Storage
from magnetar.proto import bookie_pb2 as pb
from tests.kit.wait import wait_for_async
from tests.unit.test_bookie_storage import add, crash_copy, make_config, open_storage, payload, read, request

S = pb.Status
PIECE_BYTES = 16 * 1024


class YieldLog(StorageObserver):
    """Records each wait of the storage thread for the journal (called on the storage thread)."""

    def __init__(self) -> None:
        self.idle: list[bool] = []  # per wait: the journal went idle (False: the wait timed out)

    def on_flush_yield(self, seconds: float, idle: bool) -> None:
        assert seconds >= 0
        self.idle.append(idle)


class HeldSync:
    """Swapped in as the journal's ``sync_file``: holds every sync until ``release`` (a stalled disk)."""

    def __init__(self, real) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        assert self.release.wait(60), "the test never released the journal sync"
        self.real(fd)


async def start_with_held_journal(data_dir: pathlib.Path, observer: YieldLog, **overrides):
    """A storage holding 64 acknowledged 1 KiB entries of ledger 1 in its write cache, and one add of ledger 2
    whose journal sync is held: the journal is busy until the test releases it."""
    storage = Storage(make_config(data_dir, entry_log_write_bytes=PIECE_BYTES, **overrides), observer=observer)
    await storage.start()
    assert (await add(storage, [(1, e, payload(1, e, 1000)) for e in range(64)]))[0] == S.OK
    held = HeldSync(storage.journal._sync_file)
    storage.journal._sync_file = held  # the journal's test seam (see Journal's ``sync_file``)
    req = request([(2, 0, b"held")], request_id=2)
    ticket = storage.add(req, req.SerializeToString())
    await wait_for_async(held.entered.is_set, 10, what="the held add's journal sync started")
    assert storage.journal.busy
    return storage, held, ticket


def direct_io_works(directory: pathlib.Path) -> bool:
    fd, direct = directio.open_for_append(directory / "o_direct-probe", direct=True)
    os.close(fd)
    (directory / "o_direct-probe").unlink()
    return direct


async def test_a_flush_piece_waits_while_a_journal_sync_is_in_flight(tmp_path):
    observer = YieldLog()
    storage, held, ticket = await start_with_held_journal(tmp_path / "bookie", observer, flush_yield_max_ms=60_000)
    try:
        waiting = threading.Event()
        real_wait_idle = storage.journal.wait_idle

        def wait_idle(timeout_s: float) -> bool:
            waiting.set()
            return real_wait_idle(timeout_s)

        storage.journal.wait_idle = wait_idle
        flush = asyncio.create_task(storage.flush())
        await wait_for_async(waiting.is_set, 10, what="the flush waiting for the journal")
        done, _ = await asyncio.wait({flush}, timeout=0.3)
        assert not done, "the flush went on while the journal sync was in flight"
        assert observer.idle == []
        if direct_io_works(tmp_path):
            (_log_id, path), = list_entry_logs(storage.ledgers_dir)
            assert path.stat().st_size == 0, "the first piece was written in front of the journal sync"
    finally:
        held.release.set()
    await flush
    assert await ticket.waiter is None
    assert len(observer.idle) >= 1 and observer.idle[0] is True, "the first wait ended with the journal idle"
    assert all(observer.idle), "nothing else kept the journal busy: no wait should have timed out"
    assert storage.cached_bytes == 0
    assert await read(storage, 1, range(64)) == {e: (S.OK, payload(1, e, 1000)) for e in range(64)}
    assert await read(storage, 2, [0]) == {0: (S.OK, b"held")}
    await storage.close()


async def test_a_flush_completes_under_a_journal_that_never_goes_idle(tmp_path):
    """The journal's sync is held for the whole flush: every wait times out and the flush still commits,
    and a crash right after it restarts with everything it flushed."""
    observer = YieldLog()
    storage, held, ticket = await start_with_held_journal(tmp_path / "a", observer, flush_yield_max_ms=1)
    try:
        await asyncio.wait_for(storage.flush(), 60)
        assert storage.journal.busy and not ticket.waiter.done(), "the journal was busy all along"
        pieces = 64 * 1000 // PIECE_BYTES
        assert len(observer.idle) >= pieces + 2, "a wait per piece, before the fdatasync and the commit"
        assert not any(observer.idle), "each wait ended at its bound, the journal still busy"
        assert storage.entry_count == 65, "the flush committed ledger 1's entries and the held add's one"
        crashed = crash_copy(tmp_path / "a", tmp_path / "b")
    finally:
        held.release.set()
    assert await ticket.waiter is None
    await storage.close()
    restarted = await open_storage(crashed)
    try:
        assert await read(restarted, 1, range(64)) == {e: (S.OK, payload(1, e, 1000)) for e in range(64)}
        assert await read(restarted, 2, [0]) == {0: (S.OK, b"held")}
    finally:
        await restarted.close()


async def test_a_zero_bound_never_waits(tmp_path):
    observer = YieldLog()
    storage, held, ticket = await start_with_held_journal(tmp_path / "bookie", observer, flush_yield_max_ms=0)
    try:
        await asyncio.wait_for(storage.flush(), 60)
        assert observer.idle == []
    finally:
        held.release.set()
    await ticket.waiter
    await storage.close()
