"""The LMDB index of ledger storage: where each flushed entry lives, per-ledger state, per-log accounting.

Four named databases in one environment (``<data_dir>/ledgers/index``):

* ``entries``: ``(ledger_id, entry_id)`` big-endian u64 pair -> ``(log_id u64, offset u64, size u32)``
  little-endian. Big-endian keys make LMDB's byte order the (ledger, entry) order, so a ledger is a
  contiguous key range (cheap to delete).
* ``ledgers``: ``ledger_id`` -> :class:`LedgerRecord` (fenced, deleted, max LAC, highest entry id). A deleted
  ledger keeps a tombstone (ledger ids are never reused) so that a late add cannot resurrect it and so that
  garbage collection can tell dead bytes from live ones.
* ``logs``: ``log_id`` -> bytes of records per ledger in that entry log (what GC weighs).
* ``meta``: ``checkpoint`` -> the journal position up to which everything is flushed.

Writers are the storage thread only (one write transaction per flush, committed with a sync, so the index,
ledger states and checkpoint move together). Readers (the event loop, the read pool) use their own short
read transactions.
"""

from __future__ import annotations

import pathlib
import struct
from typing import Iterable, Mapping, NamedTuple, Optional

import lmdb

from .journal import Position

_KEY = struct.Struct(">QQ")
_LOC = struct.Struct("<QQI")
_LEDGER_KEY = struct.Struct(">Q")
_LEDGER = struct.Struct("<Bqq")
_LOG_HEAD = struct.Struct("<I")
_LOG_ITEM = struct.Struct("<QQ")
_CHECKPOINT = struct.Struct("<QQ")

_FLAG_FENCED = 1
_FLAG_DELETED = 2


class Location(NamedTuple):
    log_id: int
    offset: int
    size: int


class LedgerRecord(NamedTuple):
    fenced: bool
    deleted: bool
    last_add_confirmed: int
    last_entry_id: int


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _KEY.pack(ledger_id, entry_id)


def encode_location(log_id: int, offset: int, size: int) -> bytes:
    return _LOC.pack(log_id, offset, size)


def decode_location(value: bytes) -> Location:
    return Location(*_LOC.unpack(value))


def encode_ledger(record: LedgerRecord) -> bytes:
    flags = (_FLAG_FENCED if record.fenced else 0) | (_FLAG_DELETED if record.deleted else 0)
    return _LEDGER.pack(flags, record.last_add_confirmed, record.last_entry_id)


def decode_ledger(value: bytes) -> LedgerRecord:
    flags, lac, last = _LEDGER.unpack(value)
    return LedgerRecord(bool(flags & _FLAG_FENCED), bool(flags & _FLAG_DELETED), lac, last)


def encode_log_usage(usage: Mapping[int, int]) -> bytes:
    return _LOG_HEAD.pack(len(usage)) + b"".join(_LOG_ITEM.pack(k, v) for k, v in sorted(usage.items()))


def decode_log_usage(value: bytes) -> dict[int, int]:
    (count,) = _LOG_HEAD.unpack_from(value)
    return {k: v for k, v in (_LOG_ITEM.unpack_from(value, _LOG_HEAD.size + i * _LOG_ITEM.size) for i in range(count))}


class FlushBatch(NamedTuple):
    """Everything one flush commits atomically."""

    locations: list[tuple[bytes, bytes]]  # (entry key, location), keys ascending
    ledgers: dict[int, LedgerRecord]
    deleted_ledgers: list[int]  # remove their entries (their tombstones are in ``ledgers``)
    log_usage: dict[int, dict[int, int]]  # log id -> ledger id -> bytes added
    checkpoint: Optional[Position]


class Index:
    """The LMDB environment. Thread-safe for readers; one writer thread at a time (the storage thread)."""

    def __init__(self, path: pathlib.Path, *, map_size_bytes: int = 1 << 36) -> None:
        path = pathlib.Path(path)
        path.mkdir(parents=True, exist_ok=True)
        # sync=True: a commit is durable when it returns (the checkpoint depends on it). max_readers covers
        # the read pool, the event loop and the storage thread. lock=True: readers and the writer are in
        # different threads of this one process.
        self.env = lmdb.open(
            str(path), map_size=map_size_bytes, max_dbs=4, sync=True, metasync=True, max_readers=256,
            readahead=False,
        )
        self._entries = self.env.open_db(b"entries")
        self._ledgers = self.env.open_db(b"ledgers")
        self._logs = self.env.open_db(b"logs")
        self._meta = self.env.open_db(b"meta")

    def close(self) -> None:
        self.env.close()

    # -- reads -----------------------------------------------------------------------------------------

    def get(self, ledger_id: int, entry_id: int) -> Optional[Location]:
        with self.env.begin(db=self._entries, buffers=False) as txn:
            value = txn.get(_KEY.pack(ledger_id, entry_id))
        return None if value is None else Location(*_LOC.unpack(value))

    def get_many(self, ledger_id: int, entry_ids: Iterable[int]) -> list[Optional[Location]]:
        out: list[Optional[Location]] = []
        pack, unpack = _KEY.pack, _LOC.unpack
        with self.env.begin(db=self._entries, buffers=False) as txn:
            get = txn.get
            for entry_id in entry_ids:
                value = get(pack(ledger_id, entry_id))
                out.append(None if value is None else Location(*unpack(value)))
        return out

    def checkpoint(self) -> Optional[Position]:
        with self.env.begin(db=self._meta) as txn:
            value = txn.get(b"checkpoint")
        return None if value is None else Position(*_CHECKPOINT.unpack(value))

    def load_ledgers(self) -> dict[int, LedgerRecord]:
        with self.env.begin(db=self._ledgers) as txn:
            return {_LEDGER_KEY.unpack(k)[0]: decode_ledger(v) for k, v in txn.cursor()}

    def load_log_usage(self) -> dict[int, dict[int, int]]:
        with self.env.begin(db=self._logs) as txn:
            return {_LEDGER_KEY.unpack(k)[0]: decode_log_usage(v) for k, v in txn.cursor()}

    def count_entries(self, ledger_id: Optional[int] = None) -> int:
        with self.env.begin(db=self._entries) as txn:
            if ledger_id is None:
                return txn.stat(self._entries)["entries"]
            cursor = txn.cursor()
            count = 0
            if cursor.set_range(_KEY.pack(ledger_id, 0)):
                for key in cursor.iternext(keys=True, values=False):
                    if _KEY.unpack(key)[0] != ledger_id:
                        break
                    count += 1
            return count

    # -- writes (storage thread) -----------------------------------------------------------------------

    def commit_flush(self, batch: FlushBatch) -> None:
        """Commits one flush: locations, ledger states, deletions, log usage and checkpoint, atomically."""
        with self.env.begin(write=True) as txn:
            if batch.locations:
                cursor = txn.cursor(db=self._entries)
                cursor.putmulti(batch.locations)
            for ledger_id in batch.deleted_ledgers:
                self._delete_ledger_entries(txn, ledger_id)
            for ledger_id, record in batch.ledgers.items():
                txn.put(_LEDGER_KEY.pack(ledger_id), encode_ledger(record), db=self._ledgers)
            for log_id, added in batch.log_usage.items():
                key = _LEDGER_KEY.pack(log_id)
                old = txn.get(key, db=self._logs)
                usage = decode_log_usage(old) if old is not None else {}
                for ledger_id, nbytes in added.items():
                    usage[ledger_id] = usage.get(ledger_id, 0) + nbytes
                txn.put(key, encode_log_usage(usage), db=self._logs)
            if batch.checkpoint is not None:
                txn.put(b"checkpoint", _CHECKPOINT.pack(*batch.checkpoint), db=self._meta)

    def _delete_ledger_entries(self, txn: lmdb.Transaction, ledger_id: int) -> None:
        cursor = txn.cursor(db=self._entries)
        if not cursor.set_range(_KEY.pack(ledger_id, 0)):
            return
        while True:
            key = cursor.key()
            if len(key) != _KEY.size or _KEY.unpack(key)[0] != ledger_id:
                break
            if not cursor.delete():  # deletes and moves to the next key
                break

    def commit_moves(
        self, moves: list[tuple[bytes, bytes, bytes]], log_usage: dict[int, dict[int, int]]
    ) -> int:
        """Compaction: points each key at its new copy if it still points at the old one; returns how many."""
        moved = 0
        with self.env.begin(write=True) as txn:
            for key, old, new in moves:
                if txn.get(key, db=self._entries) == old:
                    txn.put(key, new, db=self._entries)
                    moved += 1
            for log_id, added in log_usage.items():
                lkey = _LEDGER_KEY.pack(log_id)
                prev = txn.get(lkey, db=self._logs)
                usage = decode_log_usage(prev) if prev is not None else {}
                for ledger_id, nbytes in added.items():
                    usage[ledger_id] = usage.get(ledger_id, 0) + nbytes
                txn.put(lkey, encode_log_usage(usage), db=self._logs)
        return moved

    def remove_log(self, log_id: int) -> None:
        with self.env.begin(write=True, db=self._logs) as txn:
            txn.delete(_LEDGER_KEY.pack(log_id))

    def locations_in_log(self, keys: list[bytes]) -> list[Optional[bytes]]:
        """Current raw locations of ``keys`` (compaction checks which copies are still referenced)."""
        with self.env.begin(db=self._entries, buffers=False) as txn:
            return [txn.get(k) for k in keys]
