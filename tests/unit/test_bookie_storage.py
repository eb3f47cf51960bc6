"""Ledger storage in-process (temporary directories): adds, reads from cache and from entry logs, replay,
checkpoints, fencing, deletion and entry-log garbage collection."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from bookie.config import BookieConfig
from bookie.entrylog import list_entry_logs
from bookie.journal import list_journal_files
from bookie.storage import Storage
from magnetar.proto import bookie_pb2 as pb

S = pb.Status


def make_config(data_dir: pathlib.Path, **overrides) -> BookieConfig:
    values = dict(
        data_dir=data_dir,
        flush_interval_ms=3_600_000,  # flushes only when a test asks (or the cache fills)
        gc_interval_ms=3_600_000,
        write_cache_max_bytes=8 << 20,
        entry_max_size_bytes=256 << 10,
        disk_free_min_bytes=0,
        disk_free_resume_bytes=0,
    )
    values.update(overrides)
    return BookieConfig(**values)


def request(entries, *, request_id=1, recovery=False) -> pb.AddRequest:
    return pb.AddRequest(
        request_id=request_id,
        recovery=recovery,
        entries=[pb.Entry(ledger_id=l, entry_id=e, last_add_confirmed=e - 1, payload=p) for l, e, p in entries],
    )


async def add(storage: Storage, entries, **kwargs):
    req = request(entries, **kwargs)
    ticket = storage.add(req, req.SerializeToString())
    if ticket.answer is not None:
        return ticket.answer
    result = await ticket.waiter
    if result is None:
        return ticket.then or (S.OK, "", None)
    return result


async def read(storage: Storage, ledger_id: int, entry_ids) -> dict[int, tuple[int, bytes]]:
    out = {}
    async for chunk in storage.read_entries(ledger_id, list(entry_ids)):
        for r in chunk:
            out[r.entry_id] = (r.status, r.payload)
    return out


def payload(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    seed = f"{ledger_id}:{entry_id}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


async def open_storage(data_dir: pathlib.Path, **overrides) -> Storage:
    storage = Storage(make_config(data_dir, **overrides))
    await storage.start()
    return storage


def crash_copy(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    """What a SIGKILL would leave on disk: the files as they are (every acked record is fsynced)."""
    shutil.copytree(src, dst)
    return dst


@pytest.fixture
async def storage(tmp_path):
    s = await open_storage(tmp_path / "bookie")
    yield s
    await s.close()


async def test_write_cache_and_flushed_reads_agree(storage):
    entries = [(1, e, payload(1, e, 50 + e)) for e in range(200)] + [(2, e, payload(2, e)) for e in range(0, 50, 2)]
    for chunk_start in range(0, len(entries), 25):
        assert (await add(storage, entries[chunk_start : chunk_start + 25]))[0] == S.OK
    from_cache = await read(storage, 1, range(200))
    await storage.flush()
    assert storage.cached_bytes == 0
    from_logs = await read(storage, 1, range(200))
    assert from_cache == from_logs == {e: (S.OK, payload(1, e, 50 + e)) for e in range(200)}
    sparse = await read(storage, 2, range(0, 10))
    assert sparse == {e: ((S.OK, payload(2, e)) if e % 2 == 0 else (S.NO_SUCH_ENTRY, b"")) for e in range(10)}
    lac = storage.read_lac(1)
    assert (lac.last_add_confirmed, lac.last_entry_id, lac.fenced, lac.known) == (198, 199, False, True)
    assert storage.read_lac(99).known is False


async def test_reads_are_chunked(storage):
    big = 200_000
    for e in range(12):
        assert (await add(storage, [(5, e, payload(5, e, big))]))[0] == S.OK
    await storage.flush()
    chunks = [chunk async for chunk in storage.read_entries(5, list(range(12)))]
    assert len(chunks) > 1
    assert all(sum(len(r.payload) for r in c) <= (1 << 20) + big for c in chunks)
    assert [r.entry_id for c in chunks for r in c] == list(range(12))


async def test_validation(storage):
    status, message, _ = await add(storage, [(1, 5, b"a"), (1, 4, b"b")])
    assert status == S.INVALID_ARGUMENT and "ascending" in message
    status, _, _ = await add(storage, [(1, 5, b"a"), (2, 1, b"x"), (1, 5, b"b")])
    assert status == S.INVALID_ARGUMENT
    status, message, _ = await add(storage, [(1, 1, b"x" * ((256 << 10) + 1))])
    assert status == S.TOO_LARGE and "entry_max_size_bytes" in message
    assert storage.read_lac(1).known is False, "a refused request stores nothing"
    # Interleaved ledgers, each ascending, are fine.
    assert (await add(storage, [(1, 1, b"a"), (2, 1, b"b"), (1, 2, b"c"), (2, 2, b"d")]))[0] == S.OK


async def test_idempotent_re_add_and_conflicts(storage):
    assert (await add(storage, [(1, e, payload(1, e)) for e in range(10)]))[0] == S.OK
    # Same bytes again (in cache): OK.
    assert (await add(storage, [(1, 3, payload(1, 3))]))[0] == S.OK
    # Other bytes: ENTRY_CONFLICT, stored bytes unchanged.
    status, message, _ = await add(storage, [(1, 3, b"other")])
    assert status == S.ENTRY_CONFLICT and "1:3" in message
    await storage.flush()
    # Same again once flushed (found through the index and compared from the entry log).
    assert (await add(storage, [(1, 4, payload(1, 4))]))[0] == S.OK
    assert (await add(storage, [(1, 4, b"nope")]))[0] == S.ENTRY_CONFLICT
    # Mixed outcomes: PARTIAL with per-entry statuses; the new entry is stored.
    status, _, entry_status = await add(storage, [(1, 5, b"nope"), (1, 6, payload(1, 6)), (1, 20, b"new")])
    assert status == S.PARTIAL
    assert list(entry_status) == [S.ENTRY_CONFLICT, S.OK, S.OK]
    got = await read(storage, 1, [3, 4, 5, 20])
    assert got == {3: (S.OK, payload(1, 3)), 4: (S.OK, payload(1, 4)), 5: (S.OK, payload(1, 5)), 20: (S.OK, b"new")}


async def test_fencing(storage):
    assert (await add(storage, [(3, 0, b"a"), (3, 1, b"b")]))[0] == S.OK
    info = await storage.fence(3)
    assert (info.fenced, info.known, info.last_entry_id) == (True, True, 1)
    status, message, _ = await add(storage, [(3, 2, b"c")])
    assert status == S.FENCED and "fenced" in message
    assert (await add(storage, [(3, 2, b"c")], recovery=True))[0] == S.OK
    # Fencing a ledger never seen: known=False, and a later normal add is refused.
    info = await storage.fence(4)
    assert (info.fenced, info.known) == (True, False)
    assert (await add(storage, [(4, 0, b"late")]))[0] == S.FENCED
    # Mixed: one ledger fenced, one not.
    status, _, entry_status = await add(storage, [(3, 3, b"x"), (6, 0, b"y")])
    assert status == S.PARTIAL and list(entry_status) == [S.FENCED, S.OK]


async def test_read_only_refuses_adds_but_serves_reads(storage):
    assert (await add(storage, [(1, 0, b"a")]))[0] == S.OK
    storage.set_read_only(True, "free disk 5 bytes is under disk_free_min_bytes=10")
    status, message, _ = await add(storage, [(1, 1, b"b")])
    assert status == S.READ_ONLY and "disk_free_min_bytes" in message
    assert await read(storage, 1, [0, 1]) == {0: (S.OK, b"a"), 1: (S.NO_SUCH_ENTRY, b"")}
    # Recovery adds still pass (a recovery must be able to close a ledger).
    assert (await add(storage, [(1, 5, b"r")], recovery=True))[0] == S.OK
    storage.set_read_only(False)
    assert (await add(storage, [(1, 1, b"b")]))[0] == S.OK


async def test_replay_serves_journal_only_entries_after_crash(tmp_path):
    live = await open_storage(tmp_path / "a")
    assert (await add(live, [(1, e, payload(1, e)) for e in range(100)]))[0] == S.OK
    await live.flush()
    # These are only in the journal (no flush follows).
    assert (await add(live, [(1, e, payload(1, e)) for e in range(100, 150)]))[0] == S.OK
    assert (await add(live, [(2, 0, b"two")]))[0] == S.OK
    await live.fence(1)
    crashed = crash_copy(tmp_path / "a", tmp_path / "b")
    await live.close()
    restarted = await open_storage(crashed)
    try:
        got = await read(restarted, 1, range(150))
        assert got == {e: (S.OK, payload(1, e)) for e in range(150)}
        assert await read(restarted, 2, [0]) == {0: (S.OK, b"two")}
        assert restarted.read_lac(1).fenced
        assert (await add(restarted, [(1, 150, b"late")]))[0] == S.FENCED
    finally:
        await restarted.close()


async def test_checkpoint_reclaims_journal_and_bounds_replay(tmp_path):
    data = tmp_path / "a"
    live = await open_storage(data, journal_max_size_bytes=64 << 10)
    for batch in range(40):
        entries = [(1, batch * 10 + i, payload(1, batch * 10 + i, 1000)) for i in range(10)]
        assert (await add(live, entries))[0] == S.OK
    assert len(list_journal_files(data / "journal")) > 3
    await live.flush()
    await live.removals_done()
    remaining = list_journal_files(data / "journal")
    assert len(remaining) == 1, f"journal files before the checkpoint must go: {remaining}"
    assert (await add(live, [(1, 400, b"after checkpoint")]))[0] == S.OK
    crashed = crash_copy(data, tmp_path / "b")
    await live.close()
    restarted = Storage(make_config(crashed))
    records = []
    original = restarted._apply_replayed
    restarted._apply_replayed = lambda record: (records.append(record), original(record))
    await restarted.start()
    try:
        assert len(records) == 1, "only what follows the checkpoint is replayed"
        got = await read(restarted, 1, range(401))
        assert all(got[e] == (S.OK, payload(1, e, 1000)) for e in range(400))
        assert got[400] == (S.OK, b"after checkpoint")
    finally:
        await restarted.close()


async def test_clean_close_leaves_nothing_to_replay(tmp_path):
    live = await open_storage(tmp_path / "a")
    assert (await add(live, [(1, 0, b"x")]))[0] == S.OK
    await live.close()
    again = Storage(make_config(tmp_path / "a"))
    records = []
    original = again._apply_replayed
    again._apply_replayed = lambda record: (records.append(record), original(record))
    await again.start()
    try:
        assert records == []
        assert await read(again, 1, [0]) == {0: (S.OK, b"x")}
    finally:
        await again.close()


async def test_delete_is_durable_and_not_resurrected_by_replay(tmp_path):
    live = await open_storage(tmp_path / "a")
    assert (await add(live, [(7, e, b"seven") for e in range(5)]))[0] == S.OK
    assert await live.delete_ledger(7) is True
    assert await live.delete_ledger(7) is False
    assert await live.delete_ledger(12345) is False
    assert live.read_lac(7).known is False
    assert await read(live, 7, [0]) == {0: (S.NO_SUCH_ENTRY, b"")}
    status, _, _ = await add(live, [(7, 9, b"late")])
    assert status == S.NO_SUCH_LEDGER
    crashed = crash_copy(tmp_path / "a", tmp_path / "b")
    await live.close()
    restarted = await open_storage(crashed)
    try:
        assert restarted.read_lac(7).known is False
        assert await read(restarted, 7, range(5)) == {e: (S.NO_SUCH_ENTRY, b"") for e in range(5)}
        assert restarted.ledger_count == 0
    finally:
        await restarted.close()


async def test_dead_journal_files_and_entry_logs_are_removed_in_steps_off_the_storage_thread(tmp_path, monkeypatch):
    import threading

    import bookie.storage_flush as storage_flush

    calls = []  # (file name, step, thread) of every removal the storage asked for
    real = storage_flush.remove_in_steps

    def spy(path, step_bytes, pace=None):
        calls.append((path.name, step_bytes, threading.current_thread().name))
        return real(path, step_bytes, pace)

    monkeypatch.setattr(storage_flush, "remove_in_steps", spy)
    data = tmp_path / "a"
    live = await open_storage(data, journal_max_size_bytes=64 << 10, entry_log_max_size_bytes=64 << 10,
                              file_removal_step_bytes=16 << 10)
    try:
        for batch in range(20):
            entries = [(1, batch * 10 + i, payload(1, batch * 10 + i, 1000)) for i in range(10)]
            assert (await add(live, entries))[0] == S.OK
        journals = {path.name for _, path in list_journal_files(data / "journal")}
        await live.flush()
        await live.roll_entry_log()
        logs = {path.name for _, path in list_entry_logs(data / "ledgers")}
        assert await live.delete_ledger(1)
        await live.flush()
        assert await live.collect_garbage() > 0
        await live.removals_done()
        removed = {name for name, _, _ in calls}
        assert journals - removed == {max(journals)}, "every journal file before the checkpoint, not the current one"
        assert logs <= removed, "the entry logs of the deleted ledger"
        assert not removed & {path.name for _, path in list_journal_files(data / "journal")}
        assert not removed & {path.name for _, path in list_entry_logs(data / "ledgers")}
        assert {(step, thread.split("_")[0]) for _, step, thread in calls} == {(16 << 10, "bookie-remove")}
        assert len(calls) == len(removed), "each file asked for once"
    finally:
        await live.close()


def log_sizes(data: pathlib.Path) -> dict[int, int]:
    return {log_id: path.stat().st_size for log_id, path in list_entry_logs(data / "ledgers")}


async def test_gc_unlinks_dead_logs_and_compacts_mostly_dead_ones(tmp_path):
    data = tmp_path / "a"
    live = await open_storage(data, entry_log_max_size_bytes=256 << 10, gc_compaction_live_ratio=0.6)
    size = 4000
    # Ledger 1 alone fills the first logs; then 1 and 2 share logs (flushed together).
    for e in range(100):
        assert (await add(live, [(1, e, payload(1, e, size))]))[0] == S.OK
    await live.flush()
    await live.roll_entry_log()
    for e in range(100, 130):
        assert (await add(live, [(1, e, payload(1, e, size)), (2, e, payload(2, e, size // 3))]))[0] == S.OK
    await live.flush()
    await live.roll_entry_log()
    before = log_sizes(data)
    assert len(before) >= 3
    assert await live.delete_ledger(1)
    await live.flush()  # commits the tombstone
    reclaimed = await live.collect_garbage()
    await live.removals_done()
    after = log_sizes(data)
    assert reclaimed > 0
    assert sum(after.values()) < sum(before.values()) * 0.4, (before, after)
    assert not set(before) & set(after) - {max(before)}, "every old log was unlinked or compacted away"
    got = await read(live, 2, range(100, 130))
    assert got == {e: (S.OK, payload(2, e, size // 3)) for e in range(100, 130)}
    await live.close()
    restarted = await open_storage(data)
    try:
        assert await read(restarted, 2, range(100, 130)) == got
        assert await read(restarted, 1, [0, 120]) == {0: (S.NO_SUCH_ENTRY, b""), 120: (S.NO_SUCH_ENTRY, b"")}
    finally:
        await restarted.close()


async def test_corrupt_entry_log_record_is_internal_never_data(tmp_path):
    data = tmp_path / "a"
    live = await open_storage(data)
    try:
        assert (await add(live, [(1, e, payload(1, e, 500)) for e in range(3)]))[0] == S.OK
        await live.flush()
        loc = live.index.get(1, 1)
        with open(data / "ledgers" / f"{loc.log_id:016x}.log", "r+b") as f:
            f.seek(loc.offset + loc.size - 10)
            byte = f.read(1)
            f.seek(loc.offset + loc.size - 10)
            f.write(bytes([byte[0] ^ 0xFF]))
        got = await read(live, 1, range(3))
        assert got[0] == (S.OK, payload(1, 0, 500))
        assert got[1] == (S.INTERNAL, b"")
        assert got[2] == (S.OK, payload(1, 2, 500))
    finally:
        await live.close()


async def test_write_cache_backpressure_flushes(tmp_path):
    live = await open_storage(tmp_path / "a", write_cache_max_bytes=1 << 20, entry_max_size_bytes=64 << 10)
    try:
        for e in range(100):
            await live.wait_for_room()
            assert (await add(live, [(1, e, payload(1, e, 60_000))]))[0] == S.OK
            assert live.cached_bytes <= (1 << 20) + 60_000
        got = await read(live, 1, range(100))
        assert all(got[e] == (S.OK, payload(1, e, 60_000)) for e in range(100))
    finally:
        await live.close()


async def test_add_refused_while_closing(tmp_path):
    live = await open_storage(tmp_path / "a")
    await live.close()
    assert (await add(live, [(1, 0, b"x")]))[0] == S.UNAVAILABLE


async def test_a_data_dir_serves_one_bookie_at_a_time(storage):
    from bookie.errors import BookieError

    with pytest.raises(BookieError, match="in use by another bookie"):
        Storage(storage.config)


async def test_restarts_without_writes_do_not_pile_up_journal_files(tmp_path):
    for _ in range(4):
        s = await open_storage(tmp_path / "a")
        await s.close()
    assert len(list_journal_files(tmp_path / "a" / "journal")) == 1


async def test_storage_implements_the_ledger_storage_interface(storage):
    from bookie.ledger_storage import LedgerStorage, StorageClosedError

    assert isinstance(storage, LedgerStorage)
    assert storage.data_dir == storage.config.data_dir
    assert storage.entry_max_size_bytes == storage.config.entry_max_size_bytes
    await storage.close()
    with pytest.raises(StorageClosedError):
        await storage.fence(1)


def test_the_service_depends_on_the_interface_not_the_implementation():
    """``bookie.service`` must import without the storage implementation (nor its journal, index...)."""
    import subprocess
    import sys

    code = "import sys, bookie.service; print(' '.join(sorted(m for m in sys.modules if m.startswith('bookie'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "bookie.ledger_storage" in loaded
    assert not {"bookie.storage", "bookie.journal", "bookie.index", "bookie.entrylog"} & set(loaded), loaded
