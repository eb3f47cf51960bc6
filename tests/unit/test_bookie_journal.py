"""The journal: group commit, the force stage apart from the write stage (acknowledged only after the covering
sync, in order, writing overlapping a slow sync, close during a sync), replay from a checkpoint, torn tails cut
at every possible offset, rolling and reclaiming files."""

from __future__ import annotations

import asyncio
import errno
import os
import pathlib
import shutil
import threading
import time
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie import codec
from bookie.journal import (Journal, JournalClosedError, JournalObserver, JournalState, Position,
                            list_journal_files)
from tests.kit.wait import wait_for_async


class CountingObserver(JournalObserver):
    def __init__(self) -> None:
        self.syncs = 0
        self.entries = 0
        self.failed_syncs: list[float] = []

    def on_sync(self, seconds, entries, records, nbytes) -> None:
        self.syncs += 1
        self.entries += entries

    def on_sync_failed(self, seconds) -> None:
        self.failed_syncs.append(seconds)


@pytest.fixture(params=[True, False], ids=["direct", "buffered"])
def direct_io(request) -> bool:
    return request.param


def record_spans(data: bytes) -> list[tuple[int, int, int]]:
    """``(start, end, type)`` of every record of a journal file's bytes, padding included."""
    import io

    f = io.BytesIO(data)
    f.seek(codec.FILE_HEADER_SIZE)
    spans, offset = [], codec.FILE_HEADER_SIZE
    while (record := codec.read_journal_record(f)) is not None:
        record_type, _body, size = record
        spans.append((offset, offset + size, record_type))
        offset += size
    return spans


def replay_all(directory: pathlib.Path, start=None) -> list[tuple[int, bytes]]:
    journal = Journal(directory, max_file_size_bytes=1 << 30)
    return [(r.record_type, r.body) for r in journal.replay(start)]


async def write_records(directory: pathlib.Path, bodies: list[bytes], **kwargs) -> Journal:
    journal = Journal(directory, max_file_size_bytes=kwargs.pop("max_file_size_bytes", 1 << 30), **kwargs)
    for _ in journal.replay(None):
        pass
    journal.start(asyncio.get_running_loop())
    await asyncio.gather(*(journal.append(codec.RecordType.ADD, body, 1) for body in bodies))
    await journal.close()
    return journal


async def test_group_commit_shares_fsyncs(tmp_path):
    observer = CountingObserver()
    bodies = [os.urandom(100) for _ in range(2000)]
    await write_records(tmp_path, bodies, observer=observer)
    assert observer.entries == 2000
    assert observer.syncs < 2000 / 10, f"{observer.syncs} fsyncs for 2000 records queued at once"
    assert replay_all(tmp_path) == [(codec.RecordType.ADD, b) for b in bodies]


async def test_append_completes_only_after_write(tmp_path, direct_io):
    journal = Journal(tmp_path, max_file_size_bytes=1 << 30, direct_io=direct_io)
    for _ in journal.replay(None):
        pass
    journal.start(asyncio.get_running_loop())
    future = journal.append(codec.RecordType.FENCE, codec.encode_ledger_id(7))
    await future
    (file_id, path), = list_journal_files(tmp_path)
    size = path.stat().st_size
    if direct_io:  # the header block, then the record padded to the next block
        assert size == 2 * 4096
        kinds = [t for _s, _e, t in record_spans(path.read_bytes())]
        assert kinds == [codec.RecordType.PAD, codec.RecordType.FENCE, codec.RecordType.PAD]
    else:
        assert size == codec.FILE_HEADER_SIZE + codec.JOURNAL_HEAD_SIZE + 8
    assert journal.written_position == Position(file_id, size)
    await journal.barrier()
    await journal.close()


async def test_torn_tail_cut_at_every_offset_of_last_record(tmp_path, direct_io):
    source = tmp_path / "source"
    bodies = [b"first", os.urandom(300), b"last-record-body-" + os.urandom(40)]
    await write_records(source, bodies, direct_io=direct_io)
    (_, path), = list_journal_files(source)
    full = path.read_bytes()
    start_of_last, end_of_last, _ = [span for span in record_spans(full) if span[2] == codec.RecordType.ADD][-1]
    assert end_of_last == len(full) or direct_io
    for cut in range(start_of_last, end_of_last):
        work = tmp_path / f"cut-{cut}"
        work.mkdir()
        (work / path.name).write_bytes(full[:cut])
        assert replay_all(work) == [(codec.RecordType.ADD, b) for b in bodies[:-1]], f"cut at {cut}"
        assert (work / path.name).stat().st_size == start_of_last, "the torn tail must be truncated away"
        # And a second replay sees the same (the cut is durable, nothing left to cut).
        assert replay_all(work) == [(codec.RecordType.ADD, b) for b in bodies[:-1]]
        shutil.rmtree(work)
    if direct_io:  # a cut inside the padding after the last record loses nothing
        work = tmp_path / "cut-padding"
        work.mkdir()
        (work / path.name).write_bytes(full[:end_of_last + 5])
        assert replay_all(work) == [(codec.RecordType.ADD, b) for b in bodies]
        assert (work / path.name).stat().st_size == end_of_last


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=200))
def test_garbage_appended_is_cut(tmp_path_factory, garbage):
    directory = tmp_path_factory.mktemp("j")
    bodies = [b"a" * 10, b"b" * 20]
    asyncio.run(write_records(directory, bodies))
    (_, path), = list_journal_files(directory)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(garbage)
    assert replay_all(directory) == [(codec.RecordType.ADD, b) for b in bodies]
    assert path.stat().st_size == size


async def test_roll_replay_from_checkpoint_and_reclaim(tmp_path, direct_io):
    bodies = [bytes([i]) * 100 for i in range(50)]
    journal = Journal(tmp_path, max_file_size_bytes=1000 if not direct_io else 5 * 4096, direct_io=direct_io)
    for _ in journal.replay(None):
        pass
    journal.start(asyncio.get_running_loop())
    checkpoint = None
    for i, body in enumerate(bodies):
        await journal.append(codec.RecordType.ADD, body)
        if i == 29:
            checkpoint = journal.written_position
    files = list_journal_files(tmp_path)
    assert len(files) >= 5, "records must roll over into several files"
    removed = journal.reclaim(checkpoint)
    assert removed >= 1
    assert all(file_id >= checkpoint.file_id for file_id, _ in list_journal_files(tmp_path))
    await journal.close()
    replayed = replay_all(tmp_path, checkpoint)
    assert replayed == [(codec.RecordType.ADD, b) for b in bodies[30:]]


async def test_restart_opens_a_fresh_file(tmp_path):
    await write_records(tmp_path, [b"x"])
    await write_records(tmp_path, [b"y"])
    ids = [file_id for file_id, _ in list_journal_files(tmp_path)]
    assert ids == sorted(ids) and len(ids) == 2
    assert replay_all(tmp_path) == [(codec.RecordType.ADD, b"x"), (codec.RecordType.ADD, b"y")]


async def test_write_failure_fails_waiters_and_later_appends(tmp_path, direct_io):
    journal = Journal(tmp_path, max_file_size_bytes=1 << 30, direct_io=direct_io)
    for _ in journal.replay(None):
        pass
    journal.start(asyncio.get_running_loop())
    await journal.append(codec.RecordType.ADD, b"ok")
    os.close(journal._fd)  # simulate a dead disk: the next write fails with EBADF
    with pytest.raises(OSError):
        await journal.append(codec.RecordType.ADD, b"lost")
    with pytest.raises(OSError):
        await journal.append(codec.RecordType.ADD, b"refused")
    journal._fd = -1
    await journal.close()


# -- the force stage --------------------------------------------------------------------------------------


class GatedSync:
    """A ``sync_file`` that syncs for real, remembers how much of the file each finished sync covers, and
    holds its first ``hold`` calls until ``release`` is set (a slow disk); ``fail`` makes it raise instead."""

    def __init__(self, *, hold: int = 0, delay_s: float = 0.0) -> None:
        self.hold = hold
        self.delay_s = delay_s
        self.calls = 0
        self.covered = 0  # bytes of the file made durable by the syncs finished so far
        self.entered = threading.Event()  # a held call is waiting
        self.release = threading.Event()
        self.fail: Optional[OSError] = None
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        size = os.fstat(fd).st_size  # everything written before the sync started
        with self._lock:
            self.calls += 1
            held = self.calls <= self.hold
        if held:
            self.entered.set()
            assert self.release.wait(30), "the test never released the sync"
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow disk, widening the window an early acknowledgement would use
        if self.fail is not None:
            raise self.fail
        os.fdatasync(fd)
        with self._lock:
            self.covered = max(self.covered, size)


def open_journal(directory: pathlib.Path, **kwargs) -> Journal:
    journal = Journal(directory, max_file_size_bytes=kwargs.pop("max_file_size_bytes", 1 << 30), **kwargs)
    for _ in journal.replay(None):
        pass
    journal.start(asyncio.get_running_loop())
    return journal


async def not_done_within(aw, timeout_s: float = 0.2) -> bool:
    """True when ``aw`` (a future or task) is still pending after ``timeout_s`` (something must NOT happen)."""
    done, _ = await asyncio.wait({aw}, timeout=timeout_s)
    return not done


async def test_acknowledgement_never_precedes_the_covering_sync(tmp_path, direct_io):
    sync = GatedSync(delay_s=0.002)
    journal = open_journal(tmp_path, direct_io=direct_io, sync_file=sync)
    acked: list[tuple[int, int]] = []  # (record index, bytes durable when its acknowledgement ran)
    futures = []
    bodies = []
    for _round in range(30):
        for _ in range(20):
            index = len(futures)
            bodies.append(f"record-{index}-".encode() * (1 + index % 7))
            future = journal.append(codec.RecordType.ADD, bodies[-1], 1)
            future.add_done_callback(lambda _f, index=index: acked.append((index, sync.covered)))
            futures.append(future)
        await futures[-20]  # many groups, not one: the rest of this round may still be in flight
    await asyncio.gather(*futures)
    await journal.close()
    (_, path), = list_journal_files(tmp_path)
    ends = [end for _start, end, kind in record_spans(path.read_bytes()) if kind == codec.RecordType.ADD]
    assert sync.calls > 1, "the records should have gone out in several groups"
    assert [index for index, _ in acked] == list(range(len(bodies))), "acknowledged out of order"
    early = [(index, ends[index], covered) for index, covered in acked if ends[index] > covered]
    assert early == [], "(record, its end, bytes synced) acknowledged before a sync covered them"
    assert replay_all(tmp_path) == [(codec.RecordType.ADD, b) for b in bodies]


async def test_the_next_group_is_written_while_a_slow_sync_runs(tmp_path, direct_io):
    sync = GatedSync(hold=1)
    journal = open_journal(tmp_path, direct_io=direct_io, sync_file=sync)
    try:
        first = journal.append(codec.RecordType.ADD, b"first", 1)
        await wait_for_async(sync.entered.is_set, 5, what="the first group's sync started")
        first_end = journal.written_position
        second = journal.append(codec.RecordType.ADD, b"second", 1)
        await wait_for_async(lambda: journal.written_position > first_end, 5,
                             what="the second group written while the first sync is held")
        assert await not_done_within(first), "acknowledged while its sync is still running"
        assert not second.done()
        order = []
        first.add_done_callback(lambda _f: order.append("first"))
        second.add_done_callback(lambda _f: order.append("second"))
    finally:
        sync.release.set()
    await asyncio.gather(first, second)
    assert order == ["first", "second"]
    assert sync.calls == 2, "the second group is forced by a sync of its own, after the first"
    await journal.close()
    assert replay_all(tmp_path) == [(codec.RecordType.ADD, b"first"), (codec.RecordType.ADD, b"second")]


async def test_close_during_a_sync_waits_for_it_and_refuses_new_records(tmp_path, direct_io):
    sync = GatedSync(hold=1)
    journal = open_journal(tmp_path, direct_io=direct_io, sync_file=sync)
    try:
        first = journal.append(codec.RecordType.ADD, b"first", 1)
        await wait_for_async(sync.entered.is_set, 5, what="the first group's sync started")
        second = journal.append(codec.RecordType.ADD, b"second", 1)
        barrier = journal.barrier()
        closing = asyncio.create_task(journal.close())
        await wait_for_async(lambda: journal.state is JournalState.CLOSING, 5, what="the journal closing")
        with pytest.raises(JournalClosedError):
            journal.append(codec.RecordType.ADD, b"late", 1)
        with pytest.raises(JournalClosedError):
            journal.barrier()
        assert await not_done_within(closing), "close returned while a sync was in flight"
        assert not first.done() and not second.done() and not barrier.done()
    finally:
        sync.release.set()
    await closing
    assert [first.result(), second.result(), barrier.result()] == [None, None, None]
    assert journal.state is JournalState.CLOSED
    await journal.close()  # idempotent
    assert replay_all(tmp_path) == [(codec.RecordType.ADD, b"first"), (codec.RecordType.ADD, b"second")]


async def test_a_failed_sync_fails_its_records_and_every_later_one(tmp_path, direct_io):
    sync = GatedSync(hold=1)
    sync.fail = OSError(errno.EIO, "injected sync failure")
    observer = CountingObserver()
    journal = open_journal(tmp_path, direct_io=direct_io, sync_file=sync, observer=observer)
    try:
        first = journal.append(codec.RecordType.ADD, b"first", 1)
        await wait_for_async(sync.entered.is_set, 5, what="the first group's sync started")
        first_end = journal.written_position
        second = journal.append(codec.RecordType.ADD, b"second", 1)
        await wait_for_async(lambda: journal.written_position > first_end, 5, what="the second group written")
        closing = asyncio.create_task(journal.close())
    finally:
        sync.release.set()
    await closing
    for future in (first, second):
        with pytest.raises(OSError, match="injected sync failure"):
            future.result()
    assert isinstance(journal.failed, OSError)
    assert journal.state is JournalState.CLOSED
    # The metrics see the failed sync (BookKeeper's JOURNAL_SYNC success="false"), and no successful one.
    assert len(observer.failed_syncs) == 1 and observer.failed_syncs[0] >= 0
    assert observer.syncs == 0


async def test_a_new_file_takes_no_record_before_the_old_one_is_synced(tmp_path, direct_io):
    sync = GatedSync(hold=1)
    journal = open_journal(tmp_path, direct_io=direct_io, sync_file=sync, max_file_size_bytes=4096)
    try:
        big = b"fills the first file" * 250
        first = journal.append(codec.RecordType.ADD, big, 1)
        await wait_for_async(sync.entered.is_set, 5, what="the first file's last sync started")
        await wait_for_async(lambda: len(list_journal_files(tmp_path)) == 2, 5, what="the next file opened")
        rolled_to = journal.written_position
        second = journal.append(codec.RecordType.ADD, b"second", 1)
        assert await not_done_within(second)
        assert journal.written_position == rolled_to, "a record went into the new file before the old synced"
        assert not first.done()
    finally:
        sync.release.set()
    await asyncio.gather(first, second)
    assert journal.written_position > rolled_to
    await journal.close()
    assert replay_all(tmp_path) == [(codec.RecordType.ADD, big), (codec.RecordType.ADD, b"second")]


class StageObserver(JournalObserver):
    def __init__(self) -> None:
        self.stages: list[tuple[float, float, float, float]] = []

    def on_stages(self, queue_s: float, write_s: float, force_wait_s: float, fsync_s: float) -> None:
        self.stages.append((queue_s, write_s, force_wait_s, fsync_s))


async def test_stages_show_a_slow_sync_and_the_wait_behind_it(tmp_path, direct_io):
    """A held sync shows as ``fsync`` time of its group and as ``force_wait`` of the group written meanwhile."""
    sync = GatedSync(hold=1)
    observer = StageObserver()
    journal = open_journal(tmp_path, direct_io=direct_io, sync_file=sync, observer=observer)
    try:
        first = journal.append(codec.RecordType.ADD, b"first", 1)
        await wait_for_async(sync.entered.is_set, 5, what="the first group's sync started")
        first_end = journal.written_position
        second = journal.append(codec.RecordType.ADD, b"second", 1)
        await wait_for_async(lambda: journal.written_position > first_end, 5, what="the second group written")
        await asyncio.sleep(0.2)  # the slow disk: the first sync lasts at least this long
    finally:
        sync.release.set()
    await asyncio.gather(first, second)
    await journal.close()
    assert len(observer.stages) == 2
    (q1, w1, fw1, fs1), (q2, w2, fw2, fs2) = observer.stages
    assert fs1 >= 0.2, observer.stages
    assert fw2 >= 0.15, f"the second group waited behind the slow sync: {observer.stages}"
    assert fs2 < 0.2 and fw1 < 0.15, observer.stages
    assert all(v >= 0 for stage in observer.stages for v in stage)


# -- idleness, for the storage thread's flush pieces -------------------------------------------------------


async def test_wait_idle_waits_for_every_accepted_record_to_complete(tmp_path):
    sync = GatedSync(hold=1)
    journal = Journal(tmp_path, max_file_size_bytes=1 << 30, sync_file=sync)
    assert journal.wait_idle(0) is True, "a journal that is not open is idle"
    for _ in journal.replay(None):
        pass
    journal.start(asyncio.get_running_loop())
    try:
        assert not journal.busy and journal.wait_idle(0) is True
        first = journal.append(codec.RecordType.ADD, b"first", 1)
        assert journal.busy, "a queued record makes the journal busy"
        await wait_for_async(sync.entered.is_set, 5, what="the first group's sync started")
        barrier = journal.barrier()
        # A record waiting for its sync keeps it busy: a bounded wait ends at its timeout, not idle.
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, journal.wait_idle, 0.05) is False
        waiter = loop.run_in_executor(None, journal.wait_idle, 30.0)
        assert await not_done_within(waiter), "wait_idle returned while a sync was held"
    finally:
        sync.release.set()
    assert await waiter is True
    assert first.done() or await first is None
    await barrier
    assert not journal.busy
    await journal.close()
    assert journal.wait_idle(0) is True


async def test_a_failed_journal_is_idle_once_its_records_failed(tmp_path):
    sync = GatedSync()
    sync.fail = OSError(errno.EIO, "injected sync failure")
    journal = open_journal(tmp_path, sync_file=sync)
    future = journal.append(codec.RecordType.ADD, b"doomed", 1)
    with pytest.raises(OSError):
        await future
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, journal.wait_idle, 5.0) is True
    assert not journal.busy
    await journal.close()
