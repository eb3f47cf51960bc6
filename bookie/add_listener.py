"""The bookie's add port: the AddEntries pipeline over plain TCP connections (frames of :mod:`bookie.add_frames`).

Each connection is one add stream: its frames feed :meth:`BookieService.add_pipeline` (the same validation,
write cache, journal group commit, ordering and coalescing as the gRPC stream) and each response goes back
as one frame in one transport write. A connection that breaks the framing (a wrong preamble, a length
over the limit, a frame cut short) is logged and closed; a frame that is not an AddRequest is answered
INVALID_ARGUMENT and the connection goes on. Nothing a peer sends ends the listener or touches another
connection. Shutdown: :meth:`AddListener.stop_accepting` first, then the service's ``drain()`` (which ends
every pipeline once what was accepted is answered), then :meth:`AddListener.close` waits for the
connections to finish writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator, Optional

from magnetar.net import tune_tcp_socket

from .add_frames import HEADER_BYTES, PREAMBLE, FrameError, body_length, check_preamble, encode_frame
from .service import BookieService

log = logging.getLogger("bookie.add_listener")

PREAMBLE_TIMEOUT_S = 10.0
_READ_BUFFER_BYTES = 1024 * 1024  # the stream reader pauses the socket above twice this


async def _frames(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The frame bodies of a connection, until the peer closes it between two frames."""
    while True:
        try:
            header = await reader.readexactly(HEADER_BYTES)
        except asyncio.IncompleteReadError as err:
            if err.partial:
                raise FrameError(f"the connection ended inside a frame header ({len(err.partial)} bytes)") from None
            return
        length = body_length(header)
        try:
            yield await reader.readexactly(length)
        except asyncio.IncompleteReadError as err:
            raise FrameError(f"the connection ended inside a frame ({len(err.partial)} of {length} bytes)") from None


class AddListener:
    """Serves the add port of one bookie. ``await start()``, ``stop_accepting()``, ``await close()``.

    Args:
        service: the bookie's service (its add pipeline).
        host, port: where to listen (port 0: a free one, see :attr:`port`).
        keepalive_idle_s, keepalive_timeout_s: TCP keepalive of accepted connections
            (:func:`magnetar.net.tune_tcp_socket`).
    """

    def __init__(self, service: BookieService, host: str, port: int, *, keepalive_idle_s: float,
                 keepalive_timeout_s: float) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.keepalive_idle_s = keepalive_idle_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self._server: Optional[asyncio.base_events.Server] = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=_READ_BUFFER_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self, *, timeout_s: float = 5.0) -> None:
        """Stops accepting and waits up to ``timeout_s`` for the connections to end (after the service's
        ``drain()`` they end once answered), then cuts the rest. Idempotent."""
        self.stop_accepting()
        tasks = list(self._connections)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        clean = False
        try:
            tune_tcp_socket(writer.get_extra_info("socket"), keepalive_idle_s=self.keepalive_idle_s,
                            keepalive_timeout_s=self.keepalive_timeout_s)
            try:
                async with asyncio.timeout(PREAMBLE_TIMEOUT_S):
                    check_preamble(await reader.readexactly(len(PREAMBLE)))
            except asyncio.IncompleteReadError as err:
                raise FrameError(f"the connection ended before its preamble ({len(err.partial)} bytes)") from None
            except TimeoutError:
                raise FrameError(f"no preamble within {PREAMBLE_TIMEOUT_S:g} s") from None
            self.service.metrics.add_streams["tcp"].inc()
            async with contextlib.aclosing(self.service.add_pipeline(_frames(reader))) as responses:
                async for response in responses:
                    writer.write(encode_frame(response.SerializeToString()))
                    await writer.drain()
            clean = True
        except FrameError as err:
            log.warning("add connection from %s: %s; closing it", peer, err)
            self.service.metrics.add_connections_broken.inc()
        except (ConnectionError, OSError) as err:
            log.info("add connection from %s ended: %s", peer, err)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one connection's failure never ends the listener
            log.exception("add connection from %s failed", peer)
        finally:
            self._connections.discard(task)
            if clean:
                writer.close()
            else:
                writer.transport.abort()
