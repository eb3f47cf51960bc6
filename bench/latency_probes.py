"""Two small probes behind the findings of docs/latency.md, each runnable alone (no Magnetar process needed),
and a summary of the py-spy profiles ``bench/latency.py --profile`` records.

    .venv/bin/python bench/latency_probes.py journal-fsync --dir /var/tmp --seconds 8 --rounds 4
    .venv/bin/python bench/latency_probes.py grpc-write
    .venv/bin/python bench/latency_probes.py py-spy-top /tmp/prof/magnetar/broker-1-magnetar-10000-gil.txt

``journal-fsync``: a journal's groups (16 KiB ``O_DIRECT`` append + ``fdatasync``, one every millisecond, as
``bookie/journal.py`` writes them) next to an entry-log flush of ~12 MB every second (10,000 msg/s of 1 KiB)
on the same file system, the flush written four ways, and the journal's sync-time percentiles of each:

* ``none``: no flush (the floor);
* ``burst``: 4 MiB ``O_DIRECT`` writes then ``fdatasync``: what ``bookie/storage_flush.py`` does today through
  ``bookie/directio.py``'s 4 MiB staging buffer;
* ``chunked``: the same bytes in 256 KiB writes;
* ``yielding``: 256 KiB writes, each (and the final ``fdatasync``) issued only while no journal sync is in
  flight (waiting at most 5 ms): a flush that never sits in front of a journal fsync.

``--modes`` picks among those and two that run the bookie's own writer, ``bookie.entrylog.EntryLogWriter``,
appending 1 KiB entry records and syncing: ``writer-4m`` as flushes wrote before bounded pieces (4 MiB
writes, no waits), ``writer`` with the bookie's defaults (``entry_log_write_bytes`` 256 KiB, and before each
piece and the fsync a wait of at most ``flush_yield_max_ms`` 5 ms for the journal, here the probe's journal
thread, to be idle).

``--zero-filled`` writes the journal file full of zeros first, so that the groups overwrite instead of
append (BookKeeper's preallocation): an ``fdatasync`` then has no file size or extents to commit.

``grpc-write``: how long one ``grpc.aio`` stream ``write`` keeps the calling event loop (CPU time of the
calling thread and wall time per write) by message size, to a sink server in another process: the cost the
broker's ``BookieClient`` pays per AddRequest (``bookie/client/bookie_client.py``, ``_run_stream``); then
the same over a plain asyncio TCP stream (length-prefixed messages, one byte back for each), for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import multiprocessing
import os
import pathlib
import threading
import time

GROUP_BYTES = 16 * 1024
FLUSH_BYTES_PER_S = 12 * 1024 * 1024


def _aligned(size: int, fill: bytes) -> mmap.mmap:
    buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
    buf.write(fill * size)
    return buf


class _JournalBusy:
    """Whether a journal sync is in flight; the ``yielding`` flush waits until none is."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._syncing = False

    def set(self, syncing: bool) -> None:
        with self._cond:
            self._syncing = syncing
            if not syncing:
                self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._syncing, timeout_s)


MODES = ("none", "burst", "chunked", "yielding", "writer-4m", "writer")


def _writer_flusher(stop: threading.Event, directory: pathlib.Path, mode: str, busy: _JournalBusy) -> None:
    from bookie.config import BookieConfig
    from bookie.entrylog import EntryLogWriter

    defaults = BookieConfig(data_dir=directory)
    if mode == "writer":
        wait_s = defaults.flush_yield_max_ms / 1000
        write_bytes, pace = defaults.entry_log_write_bytes, (lambda: busy.wait_idle(wait_s))
    else:
        write_bytes, pace = 4 << 20, None
    directory.mkdir(exist_ok=True)
    writer = EntryLogWriter(directory, first_log_id=1, max_size_bytes=1 << 40, write_bytes=write_bytes, pace=pace)
    payload = b"e" * 1024
    entry = 0
    try:
        while not stop.is_set():
            began = time.monotonic()
            for _ in range(FLUSH_BYTES_PER_S // 1024):
                writer.append(1, entry, entry - 1, payload)
                entry += 1
            writer.sync()
            stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))
    finally:
        writer.close()
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


def _flusher(stop: threading.Event, path: pathlib.Path, mode: str, busy: _JournalBusy) -> None:
    if mode.startswith("writer"):
        _writer_flusher(stop, path.with_suffix(".d"), mode, busy)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    chunk = 4 << 20 if mode == "burst" else 256 << 10
    buf = _aligned(chunk, b"e")
    offset = 0
    try:
        while not stop.is_set():
            began = time.monotonic()
            for _ in range(FLUSH_BYTES_PER_S // chunk):
                if mode == "yielding":
                    busy.wait_idle(0.005)
                os.pwrite(fd, buf, offset)
                offset += chunk
            if mode == "yielding":
                busy.wait_idle(0.005)
            os.fdatasync(fd)
            stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))
    finally:
        os.close(fd)


def _journal(path: pathlib.Path, seconds: float, busy: _JournalBusy, zero_filled: bool) -> list[float]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    if zero_filled:  # written ahead, so that a group's fdatasync has no size or extent change to commit
        zeros = _aligned(16 << 20, b"\0")
        for offset in range(0, int(seconds * 1000 + 1000) * GROUP_BYTES, len(zeros)):
            os.pwrite(fd, zeros, offset)
        os.fsync(fd)
    buf = _aligned(GROUP_BYTES, b"j")
    offset = 0
    took = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            began = time.perf_counter()
            busy.set(True)
            os.pwrite(fd, buf, offset)
            os.fdatasync(fd)
            busy.set(False)
            took.append(time.perf_counter() - began)
            offset += GROUP_BYTES
            time.sleep(0.001)
    finally:
        os.close(fd)
    return took


def _ms(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def journal_fsync(directory: pathlib.Path, seconds: float, rounds: int, zero_filled: bool = False,
                  modes: tuple[str, ...] = MODES[:4]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    journal, entry_log = directory / "probe-journal", directory / "probe-entry.log"
    try:
        for r in range(rounds):
            for mode in modes:
                busy, stop = _JournalBusy(), threading.Event()
                flusher = None
                if mode != "none":
                    flusher = threading.Thread(target=_flusher, args=(stop, entry_log, mode, busy))
                    flusher.start()
                try:
                    took = _journal(journal, seconds, busy, zero_filled)
                finally:
                    stop.set()
                    if flusher is not None:
                        flusher.join()
                print(f"round {r + 1} flush {mode:9}: {len(took):5d} syncs, p50 {_ms(took, 50):6.2f} "
                      f"p99 {_ms(took, 99):7.2f} p99.9 {_ms(took, 99.9):7.2f} max {max(took) * 1000:7.2f} ms",
                      flush=True)
    finally:
        for path in (journal, entry_log):
            path.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------------

_METHOD = "/probe.Sink/Put"


def _sink_server(ports: "multiprocessing.Queue") -> None:
    import grpc
    from grpc import aio

    async def put(request_iterator, _context):
        async for _raw in request_iterator:
            yield b"k"

    async def main() -> None:
        server = aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
        handler = grpc.method_handlers_generic_handler(
            "probe.Sink", {"Put": grpc.stream_stream_rpc_method_handler(put)})
        server.add_generic_rpc_handlers((handler,))
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


async def _writes(port: int, size: int, count: int) -> tuple[float, float]:
    from grpc import aio

    async with aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        call = ch.stream_stream(_METHOD)()
        message = b"x" * size

        async def read_all() -> None:
            for _ in range(count):
                await call.read()

        reader = asyncio.create_task(read_all())
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(count):
            await call.write(message)
        await reader
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        await call.done_writing()
        return wall, cpu


def _tcp_sink_server(ports: "multiprocessing.Queue") -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                await reader.readexactly(size)
                writer.write(b"k")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ports.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


async def _tcp_writes(port: int, size: int, count: int) -> tuple[float, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    message = size.to_bytes(4, "big") + b"x" * size

    async def read_all() -> None:
        await reader.readexactly(count)

    acks = asyncio.create_task(read_all())
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(count):
        writer.write(message)
        await writer.drain()
    await acks
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    writer.close()
    return wall, cpu


def grpc_write() -> None:
    ctx = multiprocessing.get_context("spawn")
    for label, target, writes in (("grpc.aio stream", _sink_server, _writes),
                                  ("asyncio TCP (4-byte length + bytes)", _tcp_sink_server, _tcp_writes)):
        ports = ctx.Queue()
        server = ctx.Process(target=target, args=(ports,), daemon=True)
        server.start()
        try:
            port = ports.get(timeout=30)
            print(f"-- {label}", flush=True)
            for size in (1024, 10 * 1024, 100 * 1024, 1024 * 1024):
                count = max(200, min(5000, (50 << 20) // size))
                wall, cpu = asyncio.run(writes(port, size, count))
                print(f"{size:>8} B x {count:>5}: {wall / count * 1e6:8.1f} us wall, {cpu / count * 1e6:8.1f} us "
                      f"CPU of the writing thread per write, {count * size / wall / 1e6:7.1f} MB/s", flush=True)
        finally:
            server.kill()
            server.join(5)


def py_spy_top(path: pathlib.Path, top: int) -> None:
    """Samples per thread, the frames most often on top (self) and most often anywhere in the stack
    (inclusive) of a py-spy ``--format raw --threads`` file, as ``bench/latency.py --profile`` writes."""
    import collections
    import re

    threads: collections.Counter = collections.Counter()
    leaf: collections.Counter = collections.Counter()
    anywhere: collections.Counter = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        thread, *frames = stack.split(";")
        total += count
        threads[re.sub(r" \(\d+\)", "", thread)] += count
        if frames:
            leaf[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count
    print(f"{path}: {total} samples")
    for title, counter in (("threads", threads), ("self", leaf), ("inclusive", anywhere)):
        print(f"-- {title}")
        for name, count in counter.most_common(top):
            print(f"{count:7d} {100 * count / max(total, 1):5.1f} %  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="probe", required=True)
    j = sub.add_parser("journal-fsync", help="journal sync times next to entry-log flushes written four ways")
    j.add_argument("--dir", default="/var/tmp", help="a folder on the disk to probe (files are removed after)")
    j.add_argument("--seconds", type=float, default=8.0)
    j.add_argument("--rounds", type=int, default=2)
    j.add_argument("--zero-filled", action="store_true",
                   help="write the journal file full of zeros first (overwrites instead of appends)")
    j.add_argument("--modes", default=",".join(MODES[:4]),
                   help=f"comma-separated flush modes, of {','.join(MODES)} (see the module docstring)")
    sub.add_parser("grpc-write", help="CPU and wall time of one grpc.aio stream write, by size")
    t = sub.add_parser("py-spy-top", help="summarise a py-spy raw profile written by bench/latency.py --profile")
    t.add_argument("file", type=pathlib.Path)
    t.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.probe == "journal-fsync":
        modes = tuple(m for m in args.modes.split(",") if m)
        unknown = sorted(set(modes) - set(MODES))
        if unknown:
            parser.error(f"unknown --modes {','.join(unknown)}; choose among {','.join(MODES)}")
        journal_fsync(pathlib.Path(args.dir), args.seconds, args.rounds, args.zero_filled, modes)
    elif args.probe == "py-spy-top":
        py_spy_top(args.file, args.top)
    else:
        grpc_write()


if __name__ == "__main__":
    main()
