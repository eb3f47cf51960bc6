"""What the proxy's connections cost in memory, with real sockets, real TLS and glibc's real allocator: the TLS
upgrade the proxy uses holds no receive buffer per connection, a closed connection is freed by reference
counting (not left for the cyclic collector), and the heap trimmer gives freed heap back to the system."""

from __future__ import annotations

import asyncio
import gc
import ssl
from typing import Optional

import pytest

from magnetar.auth.tls import TlsSettings, client_context, server_context
from proxy import tls as proxy_tls
from proxy.memory import HeapTrimmer, glibc_allocator
from tests.kit.certs import TestCa
from tests.kit.wait import wait_for_async

pytestmark = pytest.mark.timeout(120)

HOST = "127.0.0.1"


class _Echo(asyncio.Protocol):
    """The server side of one connection, upgraded to TLS as :class:`proxy.connection.ProxyConnection` does."""

    def __init__(self, context: ssl.SSLContext, lost: list) -> None:
        self.context = context
        self.lost = lost
        self.transport: Optional[asyncio.Transport] = None
        self.early = b""  # what came with the end of the TLS handshake, before the upgrade returned
        self.task: Optional[asyncio.Task] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.task = asyncio.get_running_loop().create_task(self._upgrade(transport))

    async def _upgrade(self, raw: asyncio.BaseTransport) -> None:
        self.transport = await proxy_tls.start_tls_server(raw, self, self.context, handshake_timeout_s=10.0)
        if self.early:
            self.transport.write(self.early)

    def data_received(self, data: bytes) -> None:
        if self.transport is None:
            self.early += data
        else:
            self.transport.write(data)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.lost.append(self)


def _closed_server_transports(port: int) -> list:
    """Socket transports of the server's side (local port ``port``) that closed and are still in memory."""
    return [o for o in gc.get_objects()
            if isinstance(o, asyncio.Transport) and o.is_closing() and hasattr(o, "_read_ready_cb")
            and (o.get_extra_info("sockname") or (None, None))[1] == port]


async def test_closed_tls_connections_are_freed_without_the_cyclic_collector(tmp_path) -> None:
    ca = TestCa(tmp_path / "ca")
    cert = ca.server("server")
    server_tls = server_context(TlsSettings(cert_file=str(cert.cert), key_file=str(cert.key)))
    client_tls = client_context(TlsSettings(trust_certs_file=str(ca.ca_file)), verify_hostname=True)
    lost: list = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Echo(server_tls, lost), HOST, 0)
    port = server.sockets[0].getsockname()[1]
    count = 40
    gc.collect()
    gc.disable()  # what is freed below is freed by reference counting alone
    try:
        for _ in range(count):
            reader, writer = await asyncio.open_connection(HOST, port, ssl=client_tls)
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            writer.close()
            await writer.wait_closed()
        await wait_for_async(lambda: len(lost) >= count, 10, what="the server saw every connection close")
        protocols = list(lost)
        # The TLS protocol's receive buffer is the thread's shared one, not one per connection.
        buffers = {id(p.transport._ssl_protocol._ssl_buffer) for p in protocols}  # noqa: SLF001
        assert len(buffers) == 1
        del protocols
        lost.clear()
        await wait_for_async(lambda: not _closed_server_transports(port), 5,
                             what="no closed server-side socket transport left in memory")
    finally:
        gc.enable()
        server.close()
        await server.wait_closed()


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(glibc_allocator() is None, reason="issue 14: glibc's malloc_trim is what the trimmer calls; other C libraries keep their heap")
async def test_the_heap_trimmer_returns_freed_heap_after_enough_closed_connections() -> None:
    closed = [0]
    trimmer = HeapTrimmer(closed_connections=lambda: closed[0], after_closed=100, check_interval_s=0.05)
    # What thousands of closed connections leave: freed blocks below a few that stay (as the tables that grew
    # meanwhile stay), so the heap's top is not free and glibc keeps the lot.
    blocks = [bytearray(16 * 1024) for _ in range(4096)]  # 64 MiB from glibc's heap (over pymalloc's 512 B)
    pins = blocks[511::512]  # one block in 512 stays
    held = _resident_bytes()
    del blocks
    assert not trimmer.due()  # nothing closed yet
    closed[0] = 99
    assert not trimmer.due()
    closed[0] = 100
    assert trimmer.due()
    trimmer.start()
    try:
        await wait_for_async(lambda: trimmer.trims == 1, 10, what="one trim")
        assert _resident_bytes() < held - 32 * 2**20, "the freed 64 MiB went (mostly) back to the system"
        assert not trimmer.due()  # counted from the trim on
    finally:
        await trimmer.close()
        await trimmer.close()  # idempotent
    assert pins
