"""Entry logs written with O_DIRECT and with buffered writes: every synced record reads back at the location
``append`` returned, padding records are invisible to scans, and each sync ends the file on a block."""

from __future__ import annotations

import os

import pytest

from bookie import codec
from bookie.entrylog import EntryLogWriter, iter_log, list_entry_logs, log_path, read_records


@pytest.mark.parametrize("direct_io", [True, False], ids=["direct", "buffered"])
def test_synced_records_read_back_and_padding_is_skipped(tmp_path, direct_io) -> None:
    writer = EntryLogWriter(tmp_path, first_log_id=1, max_size_bytes=64 * 1024, direct_io=direct_io)
    written = []  # (ledger, entry, payload, location)
    try:
        for round_ in range(6):  # several syncs, and enough bytes to roll over a few logs
            for entry in range(round_ * 10, round_ * 10 + 10):
                payload = os.urandom(37 + 500 * (entry % 7))
                written.append((3, entry, payload, writer.append(3, entry, entry - 1, payload)))
            writer.sync()
            size = log_path(tmp_path, writer.current_log_id).stat().st_size
            assert size % 4096 == 0 if direct_io else size > 0
    finally:
        writer.close()
    assert len(list_entry_logs(tmp_path)) > 1, "the logs should have rolled"
    for _, entry, payload, loc in written:
        (record,) = read_records(tmp_path, 3, [(entry, loc)])
        assert record == codec.EntryRecord(3, entry, entry - 1, payload)
    scanned = [
        (record.ledger_id, record.entry_id, record.payload, log_id, offset, size)
        for log_id, path in list_entry_logs(tmp_path)
        for offset, size, record in iter_log(path)
    ]
    assert scanned == [(3, e, p, loc.log_id, loc.offset, loc.size) for _, e, p, loc in written]


@pytest.mark.parametrize("direct_io", [True, False], ids=["direct", "buffered"])
def test_writes_go_out_in_pieces_each_paced(tmp_path, direct_io) -> None:
    """``pace`` runs before every piece (direct) and every fsync: where the storage yields to the journal."""
    calls: list[int] = []  # file size of the current log at each pace: what was written before it
    writer = EntryLogWriter(tmp_path, first_log_id=1, max_size_bytes=1 << 30, direct_io=direct_io,
                            write_bytes=16 * 1024,
                            pace=lambda: calls.append(log_path(tmp_path, 1).stat().st_size))
    try:
        locations = [writer.append(5, e, e - 1, bytes([e]) * 1000) for e in range(100)]  # ~100 KiB
        writer.sync()
        paced = list(calls)
    finally:
        writer.close()
    calls = paced
    if direct_io:
        pieces = -(-log_path(tmp_path, 1).stat().st_size // (16 * 1024))
        assert len(calls) == pieces + 1, "one pace per 16 KiB piece and one before the fdatasync"
        assert all(b - a <= 16 * 1024 for a, b in zip(calls, calls[1:])), "a write larger than a piece"
    else:
        assert len(calls) == 1, "buffered writes go to the page cache; only the fsync is paced"
    records = read_records(tmp_path, 5, list(enumerate(locations)))
    assert [r.payload for r in records] == [bytes([e]) * 1000 for e in range(100)]


def test_write_bytes_must_be_whole_blocks(tmp_path) -> None:
    with pytest.raises(ValueError, match="multiple of 4096"):
        EntryLogWriter(tmp_path, first_log_id=1, max_size_bytes=1 << 20, write_bytes=5000)
