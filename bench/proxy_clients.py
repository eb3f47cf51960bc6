"""Client connections to a proxy's TLS port, made by ``bench/proxy.py`` (parts 3 and 4), and the proxy process's
CPU time and memory read from ``/proc``.

A connection here is what pulsar-client's first connection to a proxy is: TCP, a TLS handshake (the chain and the
host name verified), CONNECT (with a token when one is given) and CONNECTED, then an idle lookup connection that
answers the proxy's PINGs. It is built from Magnetar's frame codec on an ``asyncio.Protocol``, with a TLS receive
buffer of 16 KiB, so that this process can hold 10,000 of them.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import ssl
import sys
import time
from asyncio import sslproto
from dataclasses import dataclass
from typing import Any, Callable, Optional

from magnetar.auth.tls import TlsSettings, client_context
from magnetar.perf_worker import new_histogram
from magnetar.protocol import FrameDecoder, encode_command, pb, wrap
from magnetar.protocol.client.commands import connect_command

_PONG = encode_command(wrap(pb.CommandPong()))


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ProxyTarget:
    """The proxy under measurement.

    Attributes:
        host, port: its TLS port (``pulsar+ssl://``); ``host`` is also the name its certificate is checked for.
        ca_file: the CA its certificate chains to.
        token: sent in CONNECT ("": no credentials).
        pid: its process (CPU time and RSS are read from ``/proc/PID``).
        active_connections: its count of open client connections (``pulsar_proxy_active_connections``).
    """

    host: str
    port: int
    ca_file: str
    token: str
    pid: int
    active_connections: Callable[[], float]


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (``VmRSS``)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used so far."""
    text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _CompactClientTLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a 16 KiB receive buffer instead of 256 KiB (as :mod:`proxy.tls` does on the
    proxy's side): 10,000 connections held here would otherwise take 2.5 GiB of this process's memory."""

    max_size = 16 * 1024


class ConnectRefused(Exception):
    """The proxy answered CONNECT with something other than CONNECTED."""


class _ClientConnection(asyncio.Protocol):
    """The application side of one client connection: CONNECT once TLS is up, ``connected`` resolved by
    CONNECTED, PINGs answered (an idle connection stays open), ``closed`` resolved when the socket is gone."""

    def __init__(self, connect_frame: bytes) -> None:
        loop = asyncio.get_running_loop()
        self.connect_frame = connect_frame
        self.connected: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.transport: Optional[asyncio.Transport] = None
        self._decoder = FrameDecoder()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.connect_frame)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except Exception as exc:  # noqa: BLE001 - any garbage ends this connection, not the bench
            self._fail(ConnectRefused(f"bad frame from the proxy: {exc}"))
            return
        for frame in frames:
            kind = frame.command.type
            if kind == pb.BaseCommand.CONNECTED:
                if not self.connected.done():
                    self.connected.set_result(None)
            elif kind == pb.BaseCommand.PING:
                self.transport.write(_PONG)
            elif not self.connected.done():
                detail = frame.command.error.message if kind == pb.BaseCommand.ERROR else ""
                self._fail(ConnectRefused(f"{pb.BaseCommand.Type.Name(kind)} {detail}".strip()))

    def _fail(self, exc: BaseException) -> None:
        if not self.connected.done():
            self.connected.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if not self.connected.done():
            self.connected.set_exception(ConnectionError(f"closed before CONNECTED: {exc or 'EOF'}"))
        if not self.closed.done():
            self.closed.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_connected(host: str, port: int, context: ssl.SSLContext, connect_frame: bytes, *,
                         timeout_s: float) -> _ClientConnection:
    """A TLS connection to ``host:port`` that has sent CONNECT and received CONNECTED.

    Raises:
        ssl.SSLError, OSError, ConnectRefused, TimeoutError: it did not get that far (nothing is left open).
    """
    loop = asyncio.get_running_loop()
    app = _ClientConnection(connect_frame)
    handshake = loop.create_future()
    tls = _CompactClientTLS(loop, app, context, handshake, server_side=False, server_hostname=host,
                            ssl_handshake_timeout=timeout_s)
    transport = None
    try:
        async with asyncio.timeout(timeout_s):
            transport, _ = await loop.create_connection(lambda: tls, host, port)
            await handshake
            await app.connected
    except BaseException:
        if transport is not None:
            transport.abort()
        if app.connected.done() and not app.connected.cancelled():
            app.connected.exception()  # retrieved: no "never retrieved" warning
        raise
    return app


def connect_frame(token: str) -> bytes:
    if token:
        return encode_command(connect_command(auth_method_name="token", auth_data=token.encode()))
    return encode_command(connect_command())


def _client_tls(target: ProxyTarget) -> ssl.SSLContext:
    return client_context(TlsSettings(trust_certs_file=target.ca_file), verify_hostname=True)


async def close_all(conns: list[_ClientConnection], *, timeout_s: float = 30.0) -> None:
    """Closes every connection (TLS close_notify), aborting the ones still open after ``timeout_s``."""
    for c in conns:
        c.close()
    pending = [c.closed for c in conns if not c.closed.done()]
    if pending:
        _, late = await asyncio.wait(pending, timeout=timeout_s)
        if late:
            for c in conns:
                if not c.closed.done() and c.transport is not None:
                    c.transport.abort()
            await asyncio.wait(late, timeout=5.0)


async def measure_connect_rate(target: ProxyTarget, *, seconds: float, workers: int) -> dict[str, Any]:
    """Connections per second that complete TLS + CONNECT/CONNECTED, from ``workers`` loops for ``seconds``."""
    context, frame = _client_tls(target), connect_frame(target.token)
    host, port = target.host, target.port
    hist = new_histogram()
    errors: dict[str, int] = {}
    done: list[_ClientConnection] = []
    loop = asyncio.get_running_loop()
    cpu_before = cpu_seconds(target.pid)
    started = loop.time()
    deadline = started + seconds

    async def worker() -> int:
        count = 0
        while loop.time() < deadline:
            t0 = time.perf_counter_ns()
            try:
                conn = await open_connected(host, port, context, frame, timeout_s=10.0)
            except (OSError, ssl.SSLError, ConnectRefused, TimeoutError) as exc:
                key = f"{type(exc).__name__}: {exc}"[:120]
                errors[key] = errors.get(key, 0) + 1
                continue
            hist.record_value(max(1, (time.perf_counter_ns() - t0) // 1000))
            conn.close()
            done.append(conn)
            count += 1
        return count

    counts = await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = loop.time() - started
    cpu_used = cpu_seconds(target.pid) - cpu_before
    await close_all(done)
    total = sum(counts)
    return {
        "seconds": round(elapsed, 3), "workers": workers, "connections": total,
        "per_s": round(total / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": hist.get_value_at_percentile(50) / 1000 if total else 0.0,
        "p99_ms": hist.get_value_at_percentile(99) / 1000 if total else 0.0,
        "proxy_cpu_ms_per_connection": round(cpu_used * 1000 / total, 3) if total else 0.0,
        "errors": sum(errors.values()), "error_kinds": errors,
    }


async def measure_idle_memory(target: ProxyTarget, *, count: int, concurrency: int,
                              settle_s: float = 15.0) -> dict[str, Any]:
    """The proxy's RSS before, with ``count`` idle connections that completed CONNECT, right after closing them,
    and the lowest it went in the ``settle_s`` that follow (the proxy gives freed heap back on a timer, every
    ``heap_trim_check_interval_ms``, 10 s by default)."""
    context, frame = _client_tls(target), connect_frame(target.token)
    host, port, pid = target.host, target.port, target.pid
    before = rss_bytes(pid)
    conns: list[_ClientConnection] = []
    failures: dict[str, int] = {}
    gate = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def one() -> None:
        async with gate:
            for _ in range(3):  # a refused or timed-out handshake under load is tried again
                try:
                    conns.append(await open_connected(host, port, context, frame, timeout_s=20.0))
                    return
                except (OSError, ssl.SSLError, ConnectRefused, TimeoutError) as exc:
                    key = f"{type(exc).__name__}: {exc}"[:120]
                    failures[key] = failures.get(key, 0) + 1

    try:
        progress = asyncio.create_task(_report_progress(conns, count))
        try:
            await asyncio.gather(*(one() for _ in range(count)))
        finally:
            progress.cancel()
            await asyncio.gather(progress, return_exceptions=True)
        opened_s = loop.time() - started
        still_open = sum(1 for c in conns if not c.closed.done())
        await _wait_active_at_least(target, still_open)  # the proxy has counted every connection still open
        active = target.active_connections()
        with_idle = rss_bytes(pid)
    finally:
        await close_all(conns)
    await _wait_active_below(target, 1)
    after_close = rss_bytes(pid)
    settled = after_close
    settle_until = loop.time() + settle_s
    while loop.time() < settle_until:
        await asyncio.sleep(0.5)
        settled = min(settled, rss_bytes(pid))
    held = len(conns)
    return {
        "connections": held, "still_open": still_open, "proxy_active_connections": int(active),
        "open_s": round(opened_s, 2), "failures": sum(failures.values()), "failure_kinds": failures,
        "rss_before_bytes": before, "rss_idle_bytes": with_idle, "rss_after_close_bytes": after_close,
        "rss_settled_bytes": settled, "settle_s": settle_s,
        "per_connection_bytes": round((with_idle - before) / held) if held else 0,
    }


async def _report_progress(conns: list, count: int) -> None:
    while True:
        await asyncio.sleep(5.0)
        _say(f"   {len(conns):,} / {count:,} connections open")


async def _wait_active_at_least(target: ProxyTarget, count: int, *, timeout_s: float = 30.0) -> None:
    """Until the proxy counts at least ``count`` open connections (it has finished every handshake), or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if target.active_connections() >= count:
            return
        await asyncio.sleep(0.2)


async def _wait_active_below(target: ProxyTarget, limit: int, *, timeout_s: float = 30.0) -> None:
    """Until the proxy counts fewer than ``limit`` open connections (it has seen every close), or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if target.active_connections() < limit:
            return
        await asyncio.sleep(0.2)
