"""The TCP listener: one :class:`~.connection.Connection` per accepted socket.

A TLS listener (``pulsar+ssl://``) accepts plain TCP and upgrades each socket itself, with the certificate of
the moment (``ReloadingServerContext``: renewed files are served without a restart) and a handshake deadline,
so a refused handshake is counted by reason (``magnetar_broker_auth_failures_total``: ``untrusted_cert``,
``no_client_cert``, ``malformed`` for anything that is not TLS) and never reaches the protocol.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Optional

from magnetar.auth.tls import handshake_failure

from .connection import Connection

if TYPE_CHECKING:
    from magnetar.auth.tls import ReloadingServerContext

    from ..service import BrokerService

log = logging.getLogger("broker.service.session.server")


class ProtocolServer:
    """Accepts ``pulsar://`` (or, with ``tls``, ``pulsar+ssl://``) connections for a service; ``close()`` stops
    accepting and closes them all."""

    def __init__(self, service: "BrokerService", host: str, port: int, *,
                 tls: "Optional[ReloadingServerContext]" = None, handshake_timeout_s: float = 10.0) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.tls = tls
        self.handshake_timeout_s = handshake_timeout_s
        self.refused_handshakes = 0
        self.connections: set[Connection] = set()
        self.created = 0
        self.closed = 0
        self._server: Optional[asyncio.Server] = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("serving the binary protocol%s on %s:%d", " over TLS" if self.tls else "", self.host, self.port)
        return self.port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self.tls is not None and not await self._handshake(writer):
                return
            conn = Connection(self.service, reader, writer)
            self.connections.add(conn)
            self.created += 1
            try:
                await conn.run()
            finally:
                self.connections.discard(conn)
                self.closed += 1
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _handshake(self, writer: asyncio.StreamWriter) -> bool:
        """Upgrades an accepted socket to TLS; False (socket closed, refusal counted) when that fails."""
        try:
            await writer.start_tls(self.tls.context(), ssl_handshake_timeout=self.handshake_timeout_s)
            return True
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        except (ssl.SSLError, OSError, TimeoutError, EOFError) as err:
            peer = writer.get_extra_info("peername")
            self.refused_handshakes += 1
            writer.transport.abort()
            if isinstance(err, (ConnectionResetError, ssl.SSLEOFError, BrokenPipeError)) or \
                    isinstance(err, ssl.SSLZeroReturnError):
                log.debug("%s: closed during the TLS handshake", peer)
                return False  # a port probe or a client that gave up: nothing was refused
            refusal = handshake_failure(err)
            self.service.security.count_failure(refusal.reason)
            log.info("%s: TLS handshake refused (%s): %s", peer, refusal.reason, refusal)
            return False
        except Exception:  # never let one client's bytes stop the listener
            log.exception("TLS handshake failed unexpectedly")
            writer.transport.abort()
            return False

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self, *, timeout_s: float = 5.0) -> None:
        self.stop_accepting()
        for conn in list(self.connections):
            conn.close()
        if self._tasks:
            done, pending = await asyncio.wait(list(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout_s)
            except TimeoutError:
                pass
            self._server = None
