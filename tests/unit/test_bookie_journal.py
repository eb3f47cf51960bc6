"""The journal: group commit, replay from a checkpoint, torn tails cut at every possible offset, rolling and
reclaiming files."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie import codec
from bookie.journal import Journal, JournalObserver, Position, list_journal_files


class CountingObserver(JournalObserver):
    def __init__(self) -> None:
        self.syncs = 0
        self.entries = 0

    def on_sync(self, seconds, entries, records, nbytes) -> None:
        self.syncs += 1
        self.entries += entries


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
