"""The source's I/O inside a Spark Python worker: one event loop thread, one connection per region.

Spark calls the reader from plain (blocking) Python, once per task, and keeps a worker process for many
tasks (``spark.python.worker.reuse``). The ledger client and the metadata store are asyncio objects, so each
worker process runs one event loop in a daemon thread and keeps, per region ZooKeeper connect string, a
:class:`RegionConnection` (a ZooKeeper session, the ledger client with its bookie channels) for the tasks
that follow: connecting costs more than reading a small split. A forked child starts afresh (loops and
sockets do not survive a fork); at interpreter exit the connections are closed.

:func:`read_split` reads one split's entries chunk by chunk, asking for the next chunk before decoding the
current one, so bookie round trips overlap with the decoding, and yields Arrow record batches.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import gc
import logging
import os
import threading
from contextlib import contextmanager
from typing import Awaitable, Iterator, Optional, TypeVar

import pyarrow as pa

from bookie.client import LedgerClient, LedgerClientConfig, LedgerNotFoundError, ReadHandle
from bookie.errors import BookieError
from config_store import KazooMetadataStore, MetadataError, RegionStore
from config_store.managed_ledgers import ManagedLedgerStore

from .decode import RowBuilder
from .errors import SourceDataError, SourceUnavailableError
from .planning import Split

__all__ = ["RegionConnection", "runtime", "read_split"]

log = logging.getLogger("spark.source")

T = TypeVar("T")

CALL_TIMEOUT_S = 120.0
_CHUNK_BYTES_TARGET = 4 * 1024 * 1024
_CHUNK_ENTRIES_FIRST = 64
_CHUNK_ENTRIES_MAX = 2000
_ZK_SESSION_TIMEOUT_MS = 30_000
_ZK_CONNECT_TIMEOUT_MS = 10_000


class RegionConnection:
    """A region's ZooKeeper session, its managed-ledger lists and a ledger client on its bookies."""

    def __init__(self, metadata_url: str) -> None:
        self.metadata_url = metadata_url
        self.store = KazooMetadataStore(metadata_url, session_timeout_ms=_ZK_SESSION_TIMEOUT_MS,
                                        connect_timeout_ms=_ZK_CONNECT_TIMEOUT_MS)
        self.managed_ledgers = ManagedLedgerStore(self.store)
        self.client = LedgerClient(RegionStore(self.store), config=LedgerClientConfig(read_timeout_s=30.0))

    async def start(self) -> "RegionConnection":
        try:
            await self.store.start()
            await self.client.start()
        except (MetadataError, BookieError) as e:
            await self.close()
            raise SourceUnavailableError(f"cannot use the region's ZooKeeper {self.metadata_url}: {e}") from None
        return self

    async def open_ledger(self, ledger_id: int) -> ReadHandle:
        """A handle reading up to what is confirmed (no recovery: the writer is left alone)."""
        return await self.client.open_ledger(ledger_id, recovery=False)

    async def close(self) -> None:
        for closer in (self.client.close, self.store.close):
            try:
                await closer()
            except Exception:  # noqa: BLE001 - closing is best effort; nothing depends on it
                log.debug("closing %s failed", self.metadata_url, exc_info=True)


class Runtime:
    """One asyncio loop in a daemon thread and the region connections it holds (see the module docstring)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="magnetar-spark-source", daemon=True)
        self._thread.start()
        self._connections: dict[str, RegionConnection] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._closed = False

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Awaitable[T], timeout_s: float = CALL_TIMEOUT_S) -> T:
        """Runs ``coro`` on the loop and waits for its result (cancelled at the deadline)."""
        return wait(self.submit(coro), timeout_s, "the region")

    async def connection(self, metadata_url: str) -> RegionConnection:
        """The (shared) connection to the region whose ZooKeeper is ``metadata_url``; opened on first use."""
        conn = self._connections.get(metadata_url)
        if conn is not None:
            return conn
        pending = self._connecting.get(metadata_url)
        if pending is None:
            pending = self._connecting[metadata_url] = self.loop.create_task(RegionConnection(metadata_url).start())
        try:
            conn = await asyncio.shield(pending)
        finally:
            if pending.done():
                self._connecting.pop(metadata_url, None)
        self._connections[metadata_url] = conn
        return conn

    async def _close_all(self) -> None:
        conns = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    def close(self, timeout_s: float = 5.0) -> None:
        """Closes every connection and stops the loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.submit(self._close_all()).result(timeout_s)
        except Exception:  # noqa: BLE001 - at exit: nothing to report to
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)


_runtime: Optional[Runtime] = None
_runtime_pid = 0
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime (a new one after a fork)."""
    global _runtime, _runtime_pid
    with _runtime_lock:
        if _runtime is None or _runtime_pid != os.getpid():
            _runtime, _runtime_pid = Runtime(), os.getpid()
            atexit.register(_runtime.close)
        return _runtime


def wait(future: "concurrent.futures.Future[T]", timeout_s: float, what: str) -> T:
    try:
        return future.result(timeout_s)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise SourceUnavailableError(f"{what} did not answer within {timeout_s:g} s") from None


# ------------------------------------------------------------------------------------------ reading


async def _open(rt: Runtime, split: Split) -> ReadHandle:
    conn = await rt.connection(split.metadata_url)
    try:
        handle = await conn.open_ledger(split.ledger_id)
        if handle.last_add_confirmed < split.last_entry_id:
            await handle.read_last_add_confirmed()
    except LedgerNotFoundError:
        raise SourceDataError(f"{split.topic} in {split.region}: ledger {split.ledger_id} was deleted after the "
                              "read was planned (retention or a deleted topic)") from None
    except (BookieError, MetadataError) as e:
        raise SourceUnavailableError(f"{split.topic} in {split.region}: ledger {split.ledger_id}: {e}") from None
    if handle.last_add_confirmed < split.last_entry_id:
        raise SourceUnavailableError(
            f"{split.topic} in {split.region}: ledger {split.ledger_id} was confirmed up to entry "
            f"{split.last_entry_id} when planned, its bookies now confirm only {handle.last_add_confirmed}")
    return handle


async def _read(handle: ReadHandle, split: Split, first: int, last: int):
    try:
        return await handle.read(first, last)
    except BookieError as e:
        raise SourceUnavailableError(f"{split.topic} in {split.region}: ledger {split.ledger_id} entries "
                                     f"{first}..{last}: {e}") from None


@contextmanager
def _cycles_not_collected():
    """Pauses the cycle collector. Decoding allocates many short-lived objects (a protobuf message and a tuple
    per batched message) and no reference cycle, so plain reference counting frees all of it; the collector's
    passes, set off by those allocations, only walked the worker's long-lived heap: 40 % of the decoding's time
    (measured: 6.5 against 3.7 µs per row, one core, bench/spark_read.py's entries)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decode(builder: RowBuilder, entries, rows_per_batch: int) -> list[pa.RecordBatch]:
    """One chunk's entries as record batches of ``rows_per_batch`` rows (what is left stays in ``builder``)."""
    batches = []
    with _cycles_not_collected():
        for entry in entries:
            builder.add_entry(entry.ledger_id, entry.entry_id, entry.payload)
            if builder.rows >= rows_per_batch:
                batches.append(builder.flush())
    return batches


def read_split(split: Split, rows_per_batch: int, value_schema=None) -> Iterator[pa.RecordBatch]:
    """Yields the rows of ``split`` as record batches of at most about ``rows_per_batch`` rows (with
    ``value_schema``, a :class:`~spark.source.values.ValueSchema`, its fields in place of ``value``)."""
    rt = runtime()
    handle = rt.run(_open(rt, split))
    builder = RowBuilder(split.topic, split.region, split.partition, value_schema)
    chunk = _CHUNK_ENTRIES_FIRST
    next_first = split.first_entry_id

    def request() -> Optional[tuple[int, concurrent.futures.Future]]:
        nonlocal next_first
        if next_first > split.last_entry_id:
            return None
        first, last = next_first, min(split.last_entry_id, next_first + chunk - 1)
        next_first = last + 1
        return first, rt.submit(_read(handle, split, first, last))

    pending = request()
    try:
        while pending is not None:
            first, future = pending
            entries = wait(future, CALL_TIMEOUT_S, f"the bookies of {split.region}")
            size = sum(len(e.payload) for e in entries)
            chunk = max(16, min(_CHUNK_ENTRIES_MAX, _CHUNK_BYTES_TARGET * len(entries) // max(size, 1)))
            pending = request()  # in flight while this chunk is decoded
            yield from _decode(builder, entries, rows_per_batch)
        if builder.rows:
            yield builder.flush()
    finally:
        if pending is not None:
            pending[1].cancel()
