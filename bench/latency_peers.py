"""The peers of ``bench/latency.py``: NATS JetStream and Redis Streams, each started here and driven open-loop.

Each peer is a server process started by the benchmark on a free loopback port, with its data in the run's
temporary directory (the same disk as Magnetar's bookies), in its own process group (killed at the end):

* ``nats-server`` (Debian's package) with JetStream, file storage. A fresh stream per point (one subject,
  file storage, one replica) is created before the schedule starts and deleted after it.
  Durability as stated in :data:`NATS_SYNC`: 2.9 has no setting to fsync each write.
* ``redis-server`` (Debian's package) with ``appendonly yes`` and ``appendfsync always`` (the AOF is written
  and fsynced before the replies of each event-loop round go out), no RDB snapshots. A fresh stream per
  point, deleted after it.

Drivers use the same fixed schedule as Magnetar's (:class:`magnetar.perf_worker.Pacer`) and record each
message's latency from its scheduled time to its acknowledgement (nanoseconds, one list per point). They are
asyncio clients in this process, pipelined, with up to ``max_pending`` (10,000, as
pulsar-client's queue) messages unanswered, written so that the Python client's per-message cost stays
small: nats-py publishes with a reply subject per message and one subscription for the acknowledgements
(see :func:`drive_nats`); redis-py sends each tick's ``XADD`` commands at once on one of its connections
(Redis's group commit needs several, see :func:`drive_redis`) and a reader task per connection takes the
replies in order.

A missing binary or client package is not an error: :func:`missing` says what to install, and the caller
skips that system.
"""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from magnetar.net import free_port  # noqa: E402
from magnetar.perf_worker import Pacer  # noqa: E402
from tests.kit.process import ManagedProcess  # noqa: E402

HOST = "127.0.0.1"
NATS_SYNC = ("JetStream file store, 1 replica; nats-server 2.9 acknowledges once the message is written to "
             "its file (page cache) and fsyncs every 2 min (no sync_interval setting before 2.10)")
REDIS_SYNC = "appendonly yes, appendfsync always (fsync before replies), no RDB snapshots"
INSTALL_HINT = "scripts/ensure-bench-peers"

# system -> (server binary, Python module of its client, pip package of the client)
_NEEDS = {"nats": ("nats-server", "nats", "nats-py"), "redis": ("redis-server", "redis", "redis")}


def missing(system: str) -> Optional[str]:
    """None when ``system`` can run here; else a line saying what is missing and how to install it."""
    binary, module, package = _NEEDS[system]
    lacks = []
    if shutil.which(binary) is None:
        lacks.append(f"the {binary} binary")
    if importlib.util.find_spec(module) is None:
        lacks.append(f"the {package} client")
    if not lacks:
        return None
    return (f"{system}: skipped, {' and '.join(lacks)} not found; install with {INSTALL_HINT} "
            f"(Debian's {binary} and the pinned clients of pyproject.toml's bench extra)")


@dataclass
class PointResult:
    """One point of one peer: the latencies (ns, from the schedule) of the acknowledged messages."""

    samples_ns: list[int] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    elapsed_s: float = 0.0  # from the schedule's start to the last acknowledgement

    def fail(self, count: int, exc: BaseException) -> None:
        self.errors += count
        if not self.first_error:
            self.first_error = f"{type(exc).__name__}: {exc}"


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------------------------------------


def start_nats(base: pathlib.Path) -> tuple[ManagedProcess, str]:
    """``nats-server`` with JetStream on a free port, store under ``base/nats``; returns it and its URL."""
    root = base / "nats"
    root.mkdir(parents=True, exist_ok=True)
    port = free_port(HOST)
    conf = root / "nats.conf"
    conf.write_text(f'listen: "{HOST}:{port}"\n'
                    f'jetstream {{\n  store_dir: "{root / "store"}"\n'
                    '  max_file_store: 16G\n  max_memory_store: 256M\n}\n')
    proc = ManagedProcess("nats-server", [shutil.which("nats-server"), "-c", str(conf)],
                          log_path=base / "logs" / "nats-server.log", health=lambda: _port_answers(port))
    proc.start(timeout_s=30)
    return proc, f"nats://{HOST}:{port}"


def start_redis(base: pathlib.Path) -> tuple[ManagedProcess, str]:
    """``redis-server`` with an always-fsynced AOF on a free port, under ``base/redis``; returns it and its URL."""
    root = base / "redis"
    root.mkdir(parents=True, exist_ok=True)
    port = free_port(HOST)
    conf = root / "redis.conf"
    conf.write_text("\n".join([
        f"bind {HOST}", f"port {port}", f'dir "{root}"', "daemonize no", 'logfile ""', 'save ""',
        "appendonly yes", "appendfsync always", "protected-mode yes", "",
    ]))
    proc = ManagedProcess("redis-server", [shutil.which("redis-server"), str(conf)],
                          log_path=base / "logs" / "redis-server.log", health=lambda: _port_answers(port))
    proc.start(timeout_s=30)
    return proc, f"redis://{HOST}:{port}"


# --------------------------------------------------------------------------------------------------------
# The open-loop sending loop, shared by both drivers
# --------------------------------------------------------------------------------------------------------


async def paced(pacer: Pacer, seconds: float, send: Callable[[int, int], Awaitable[None]], *,
                max_batch: int) -> None:
    """Calls ``send(first_k, n)`` with the messages due on ``pacer``'s schedule until ``seconds`` pass.

    The schedule starts now. ``send`` may wait (backpressure): messages that fall due meanwhile are sent at
    the next call, and their latency, measured from :meth:`Pacer.scheduled_ns`, includes the wait.
    """
    deadline = time.monotonic() + seconds
    pacer.start_ns = pacer.clock_ns()
    while time.monotonic() < deadline:
        due = pacer.due(max_batch)
        if not due:
            await asyncio.sleep(pacer.wait_s())
            continue
        first = pacer.sent
        pacer.sent += due
        await send(first, due)


async def _drained(pending: Callable[[], int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while pending() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


# --------------------------------------------------------------------------------------------------------
# Drivers
# --------------------------------------------------------------------------------------------------------


class _InFlight:
    """Counts sends and acknowledgements; :meth:`room` waits while ``max_pending`` are unanswered."""

    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.sent = 0
        self.answered = 0
        self._room = asyncio.Event()

    @property
    def pending(self) -> int:
        return self.sent - self.answered

    def answer(self, count: int = 1) -> None:
        self.answered += count
        if self.pending < self.max_pending:
            self._room.set()

    async def room(self) -> None:
        while self.pending >= self.max_pending:  # the schedule runs on: the wait is counted in latency
            self._room.clear()
            await self._room.wait()


async def drive_nats(url: str, *, rate: float, seconds: float, payload: bytes, point: str,
                     max_pending: int = 10_000, drain_s: float = 30.0) -> PointResult:
    """Publishes to a fresh JetStream stream on the schedule, acknowledgements read as they come.

    A JetStream publish is a core NATS publish with a reply subject, answered by the server with a PubAck
    once the stream stored the message (what ``js.publish`` does). Here each message's reply subject is
    ``<inbox>.<k>``, and one subscription on ``<inbox>.*`` takes every PubAck: no future, no task per
    message, so the client's cost does not cap the rate (nats-py's ``publish_async`` made about 5,000 msg/s
    on a loaded 2-core machine; the same client this way about twice that and more).
    """
    import nats
    from nats.js.api import StorageType, StreamConfig

    result = PointResult()
    nc = await nats.connect(url, max_reconnect_attempts=0, pending_size=64 * 1024 * 1024)
    try:
        js = nc.jetstream()
        stream, subject = f"LAT_{point}", f"lat.{point}"
        await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE, num_replicas=1))
        inbox = nc.new_inbox()
        cut = len(inbox) + 1
        perf_ns = time.perf_counter_ns
        samples = result.samples_ns
        last_ack = [0]
        pacer = Pacer(rate)
        flight = _InFlight(max_pending)

        async def acked(msg) -> None:
            now = perf_ns()
            if msg.data.startswith(b'{"error"') or b'"error":' in msg.data:
                result.fail(1, RuntimeError(msg.data.decode(errors="replace")[:200]))
            else:
                samples.append(now - pacer.scheduled_ns(int(msg.subject[cut:])))
                last_ack[0] = now
            flight.answer()

        await nc.subscribe(f"{inbox}.*", cb=acked, pending_msgs_limit=4 * max_pending,
                           pending_bytes_limit=256 * 1024 * 1024)
        await nc.flush()
        publish = nc.publish

        async def send(first: int, n: int) -> None:
            for k in range(first, first + n):
                await flight.room()
                await publish(subject, payload, reply=f"{inbox}.{k}")
                flight.sent += 1

        await paced(pacer, seconds, send, max_batch=1000)
        await nc.flush()
        await _drained(lambda: flight.pending, drain_s)
        if flight.pending:
            result.fail(flight.pending, TimeoutError(f"no ack within {drain_s:g} s after the run"))
        result.elapsed_s = max(0.0, (last_ack[0] - pacer.start_ns) / 1e9)
        await js.delete_stream(stream)
    finally:
        await nc.close()
    return result


async def drive_redis(url: str, *, rate: float, seconds: float, payload: bytes, point: str,
                      connections: int = 8, max_pending: int = 10_000, drain_s: float = 30.0) -> PointResult:
    """XADDs to a fresh stream on the schedule over ``connections`` pipelined connections.

    Redis answers a connection's commands in order, so each tick's due ``XADD`` commands are written at once
    on the next connection (round robin; the command's bytes are the same every time: packed once) and a
    reader task per connection takes its replies in order. With ``appendfsync always`` a reply leaves only
    after the AOF write holding its command was fsynced; Redis fsyncs once per event-loop round for every
    client, and reads at most 16 KiB of one client's commands per round, so one connection gets about 14
    commands of 1 KiB per fsync (measured with redis-benchmark -P 1000 here: ~5,000 SET/s on one connection,
    ~27,000 on eight). Several connections are how a Redis application gets its group commit.
    """
    import collections

    import redis.asyncio as aioredis
    from redis.exceptions import ResponseError

    result = PointResult()
    host, _, port = url.removeprefix("redis://").partition(":")
    key = f"lat:{point}"
    conns = [aioredis.Connection(host=host, port=int(port)) for _ in range(max(1, connections))]
    readers: list[asyncio.Task] = []
    try:
        for conn in conns:
            await conn.connect()
        await conns[0].send_command("DEL", key)
        await conns[0].read_response()
        one = b"".join(conns[0].pack_command("XADD", key, "*", "d", payload))
        perf_ns = time.perf_counter_ns
        samples = result.samples_ns
        last_ack = [0]
        pacer = Pacer(rate)
        flight = _InFlight(max_pending)
        ranges = [collections.deque() for _ in conns]  # per connection: (first k, count) in send order

        async def read_replies(conn, sent: collections.deque) -> None:
            while True:
                try:
                    await conn.read_response()
                    failed = None
                except ResponseError as exc:
                    failed = exc
                first, count = sent[0]
                if count == 1:
                    sent.popleft()
                else:
                    sent[0] = (first + 1, count - 1)
                if failed is not None:
                    result.fail(1, failed)
                else:
                    now = perf_ns()
                    samples.append(now - pacer.scheduled_ns(first))
                    last_ack[0] = now
                flight.answer()

        readers = [asyncio.create_task(read_replies(c, r)) for c, r in zip(conns, ranges)]
        turn = [0]

        async def send(first: int, n: int) -> None:
            while n > 0:
                await flight.room()
                take = min(n, max(1, flight.max_pending - flight.pending))
                i = turn[0] % len(conns)
                turn[0] += 1
                ranges[i].append((first, take))
                flight.sent += take
                await conns[i].send_packed_command([one * take], check_health=False)
                first += take
                n -= take

        await paced(pacer, seconds, send, max_batch=1000)
        await _drained(lambda: flight.pending if not any(r.done() for r in readers) else 0, drain_s)
        for r in readers:
            if r.done() and r.exception() is not None:
                raise r.exception()
        if flight.pending:
            result.fail(flight.pending, TimeoutError(f"no reply within {drain_s:g} s after the run"))
        result.elapsed_s = max(0.0, (last_ack[0] - pacer.start_ns) / 1e9)
        for r in readers:
            r.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        readers = []
        await conns[0].send_command("DEL", key)
        await conns[0].read_response()
    finally:
        for r in readers:
            r.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for conn in conns:
            await conn.disconnect()
    return result
