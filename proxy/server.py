"""The proxy's binary-protocol listeners (``pulsar+ssl://`` and, for development, ``pulsar://``) and the client
connections they accepted.

Both listeners accept plain TCP: the connection limits are applied before anything else, and a TLS port
then upgrades the socket itself (:class:`proxy.connection.ProxyConnection`), so a refused connection costs no
TLS handshake. :meth:`ProxyServer.close` stops accepting, closes every connection (each flushes what it has
queued, for a short grace) and awaits what they still run.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Optional

from .connection import ProxyConnection
from .context import ProxyContext
from .errors import ProxyStartError

__all__ = ["ProxyServer", "ServerState"]

log = logging.getLogger("proxy.server")

_BACKLOG = 1024


class ServerState(enum.Enum):
    NEW = "new"
    SERVING = "serving"
    CLOSED = "closed"


class ProxyServer:
    """Listens on ``port`` (plain; 0: not served) and ``tls_port`` (TLS; 0: not served) of ``host``.

    After :meth:`start`, ``port`` / ``tls_port`` are the bound ports.
    """

    def __init__(self, ctx: ProxyContext, *, host: str, port: int = 0, tls_port: int = 0) -> None:
        if tls_port and ctx.server_tls is None:
            raise ProxyStartError("a TLS port needs the proxy's certificate (tls_cert_file, tls_key_file)")
        self.ctx = ctx
        self.host = host
        self.port = port
        self.tls_port = tls_port
        self.state = ServerState.NEW
        self._servers: list[asyncio.base_events.Server] = []

    async def start(self) -> None:
        if self.state is not ServerState.NEW:
            return
        self.state = ServerState.SERVING
        loop = asyncio.get_running_loop()
        try:
            if self.port:
                self.port = await self._listen(loop, self.port, tls=False)
            if self.tls_port:
                self.tls_port = await self._listen(loop, self.tls_port, tls=True)
        except BaseException:
            await self.close()
            raise

    async def _listen(self, loop: asyncio.AbstractEventLoop, port: int, *, tls: bool) -> int:
        ctx = self.ctx
        try:
            server = await loop.create_server(lambda: ProxyConnection(ctx, tls=tls), self.host, port,
                                              backlog=_BACKLOG, reuse_address=True)
        except OSError as e:
            kind = "pulsar+ssl://" if tls else "pulsar://"
            raise ProxyStartError(f"cannot listen on {self.host}:{port} ({kind}): {e.strerror or e}") from None
        self._servers.append(server)
        bound = server.sockets[0].getsockname()[1]
        log.info("binary protocol (%s) on %s:%d", "TLS" if tls else "plain", self.host, bound)
        return bound

    async def close(self, *, grace_s: float = 5.0) -> None:
        """Stops accepting and closes every connection (idempotent)."""
        if self.state is ServerState.CLOSED:
            return
        self.state = ServerState.CLOSED
        for server in self._servers:
            server.close()
        connections = list(self.ctx.connections)
        for conn in connections:
            conn.close()
        if connections:
            done = asyncio.gather(*(c.wait_tasks() for c in connections), return_exceptions=True)
            try:
                await asyncio.wait_for(done, grace_s)
            except TimeoutError:
                log.warning("%d connection(s) still busy after %.1f s", len(connections), grace_s)
        for server in self._servers:
            await _wait_closed(server)

    @property
    def connections(self) -> int:
        return len(self.ctx.connections)


async def _wait_closed(server: asyncio.base_events.Server, timeout_s: float = 1.0) -> Optional[BaseException]:
    try:
        await asyncio.wait_for(server.wait_closed(), timeout_s)
    except (TimeoutError, OSError) as e:
        return e
    return None
