"""The TCP listener: one :class:`~.connection.Connection` per accepted socket."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Optional

from .connection import Connection

if TYPE_CHECKING:
    from ..service import BrokerService

log = logging.getLogger("broker.service.session.server")


class ProtocolServer:
    """Accepts ``pulsar://`` connections for a service; ``close()`` stops accepting and closes them all."""

    def __init__(self, service: "BrokerService", host: str, port: int) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.connections: set[Connection] = set()
        self.created = 0
        self.closed = 0
        self._server: Optional[asyncio.Server] = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("serving the binary protocol on %s:%d", self.host, self.port)
        return self.port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        conn = Connection(self.service, reader, writer)
        self.connections.add(conn)
        self.created += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            self.closed += 1
            if task is not None:
                self._tasks.discard(task)

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
