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
asyncio clients in this process: nats-py's ``publish_async`` (one future per message, up to
``max_pending`` in flight) and redis-py pipelines of ``XADD`` (whatever is due at each tick, one pipeline
per tick, up to ``redis_pipelines`` in flight over as many connections).

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
                    f'jetstream {{\n  store_dir: "{root / "store"}"\n  max_file_store: 16G\n  max_memory_store: 256M\n}}\n')
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


async def drive_nats(url: str, *, rate: float, seconds: float, payload: bytes, point: str,
                     max_pending: int = 10_000, drain_s: float = 30.0) -> PointResult:
    """Publishes to a fresh JetStream stream on the schedule; each message's ack future records its latency."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    result = PointResult()
    nc = await nats.connect(url, max_reconnect_attempts=0)
    try:
        js = nc.jetstream(publish_async_max_pending=max_pending)
        stream, subject = f"LAT_{point}", f"lat.{point}"
        await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE, num_replicas=1))
        perf_ns = time.perf_counter_ns
        samples = result.samples_ns
        last_ack = [0]
        pacer = Pacer(rate)

        def acked(k: int, fut: asyncio.Future) -> None:
            now = perf_ns()
            if fut.cancelled():
                result.fail(1, asyncio.CancelledError())
            elif fut.exception() is not None:
                result.fail(1, fut.exception())
            else:
                samples.append(now - pacer.scheduled_ns(k))
                last_ack[0] = now

        async def send(first: int, n: int) -> None:
            for k in range(first, first + n):
                fut = await js.publish_async(subject, payload)
                fut.add_done_callback(lambda f, k=k: acked(k, f))

        await paced(pacer, seconds, send, max_batch=1000)
        await _drained(js.publish_async_pending, drain_s)
        if js.publish_async_pending():
            result.fail(js.publish_async_pending(), TimeoutError(f"no ack within {drain_s:g} s after the run"))
        result.elapsed_s = max(0.0, (last_ack[0] - pacer.start_ns) / 1e9)
        await js.delete_stream(stream)
    finally:
        await nc.close()
    return result


async def drive_redis(url: str, *, rate: float, seconds: float, payload: bytes, point: str,
                      pipelines: int = 32, drain_s: float = 30.0) -> PointResult:
    """XADDs to a fresh stream on the schedule: each tick's due messages in one pipeline, run as a task."""
    import redis.asyncio as aioredis

    result = PointResult()
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=pipelines, timeout=None)
    client = aioredis.Redis(connection_pool=pool)
    key = f"lat:{point}"
    tasks: set[asyncio.Task] = set()
    try:
        await client.delete(key)
        perf_ns = time.perf_counter_ns
        samples = result.samples_ns
        last_ack = [0]
        pacer = Pacer(rate)

        async def pipeline(first: int, n: int) -> None:
            pipe = client.pipeline(transaction=False)
            for _ in range(n):
                pipe.xadd(key, {"d": payload})
            try:
                await pipe.execute()
            except Exception as exc:  # noqa: BLE001 - counted and reported in the table
                result.fail(n, exc)
                return
            now = perf_ns()
            samples.extend(now - pacer.scheduled_ns(k) for k in range(first, first + n))
            last_ack[0] = now

        async def send(first: int, n: int) -> None:
            while len(tasks) >= pipelines:  # all connections busy: the schedule runs on, the wait is counted
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            task = asyncio.create_task(pipeline(first, n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        await paced(pacer, seconds, send, max_batch=1000)
        await _drained(lambda: len(tasks), drain_s)
        if tasks:
            result.fail(0, TimeoutError(f"{len(tasks)} pipelines unanswered {drain_s:g} s after the run"))
        result.elapsed_s = max(0.0, (last_ack[0] - pacer.start_ns) / 1e9)
        await client.delete(key)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()
        await pool.disconnect()
    return result
