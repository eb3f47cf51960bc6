"""The bookie's add port: the AddEntries pipeline over plain TCP connections (frames of :mod:`bookie.add_frames`).

Each connection is an asyncio ``Protocol`` (no reader task, no queue): the bytes a read brings are cut into
frames, each AddRequest is accepted in that same call (:meth:`BookieService.accept_add`: the same validation,
write cache and journal group commit as the gRPC stream), and answers leave strictly in request order, those
ready together coalesced into one response's ``more``, in one transport write: at once for an answer known
on arrival (a refusal), else in the call that sees the head request's journal group durable (a done
callback on its waiter). A frame that is not an AddRequest is answered INVALID_ARGUMENT and the connection
goes on; a connection that breaks the framing (a wrong preamble, a length over the limit, a frame cut short)
is logged and cut. Nothing a peer sends ends the listener or touches another connection.

Backpressure: a connection stops reading while the storage has no room (its write cache is full), while
:data:`~bookie.service.PIPELINE_MAX_REQUESTS` of its requests wait for answers, or while its peer does not
read the answers (the transport's write buffer is over its high mark); frames already read wait here.
Shutdown: :meth:`AddListener.stop_accepting`, then the service's ``drain()`` (from then on requests are
answered UNAVAILABLE), then :meth:`AddListener.close`: every connection stops reading, answers what it
accepted and closes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Optional

from magnetar.net import tune_tcp_socket

from .add_frames import PREAMBLE, FrameBuffer, FrameError, check_preamble, encode_frame
from .service import ANSWERS_PER_MESSAGE_MAX, PIPELINE_MAX_REQUESTS, BookieService

log = logging.getLogger("bookie.add_listener")

PREAMBLE_TIMEOUT_S = 10.0


class _AddConnection(asyncio.Protocol):
    """One add connection: requests in, answers out in the same order."""

    def __init__(self, listener: "AddListener") -> None:
        self.listener = listener
        self.service = listener.service
        self.transport: Optional[asyncio.Transport] = None
        self.peer = None
        self.ended = asyncio.get_running_loop().create_future()  # set once the connection is gone
        self._head = b""  # the preamble's bytes so far; None once it was checked
        self._frames = FrameBuffer()
        self._incoming: collections.deque = collections.deque()  # (raw, received) read, not yet accepted
        self._pending: collections.deque = collections.deque()  # accepted, answered in this order
        self._watched = None  # the head request's waiter, once a done callback is on it
        self._write_blocked = False
        self._finishing = False  # no more reading: close once every accepted request is answered
        self._room: Optional[asyncio.Task] = None
        self._preamble_timer: Optional[asyncio.TimerHandle] = None

    # -- transport events ----------------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.listener._connections.add(self)
        try:
            tune_tcp_socket(transport.get_extra_info("socket"), keepalive_idle_s=self.listener.keepalive_idle_s,
                            keepalive_timeout_s=self.listener.keepalive_timeout_s)
        except OSError as err:
            log.info("add connection from %s ended: %s", self.peer, err)
            transport.abort()
            return
        self._preamble_timer = asyncio.get_running_loop().call_later(
            PREAMBLE_TIMEOUT_S, self._broken, FrameError(f"no preamble within {PREAMBLE_TIMEOUT_S:g} s"))

    def data_received(self, data: bytes) -> None:
        if self._finishing or self.transport.is_closing():
            return
        try:
            if self._head is not None:
                self._head += data
                if len(self._head) < len(PREAMBLE):
                    return
                check_preamble(self._head[:len(PREAMBLE)])
                data = self._head[len(PREAMBLE):]
                self._head = None
                self._preamble_timer.cancel()
                self.service.metrics.add_streams["tcp"].inc()
            bodies = self._frames.feed(data)
        except FrameError as err:
            self._broken(err)
            return
        if bodies:
            received = time.perf_counter()
            self._incoming.extend((body, received) for body in bodies)
            self._accept()

    def eof_received(self) -> bool:
        if self._head is not None:
            self._broken(FrameError(f"the connection ended before its preamble ({len(self._head)} bytes)"))
        elif self._frames.partial:
            self._broken(FrameError(f"the connection ended inside a frame ({self._frames.partial} bytes of it)"))
        else:
            self.finish()  # the peer sent all it will: answer what was read, then close
        return True  # keep the transport open for the answers

    def pause_writing(self) -> None:
        self._write_blocked = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._update_reading()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if exc is not None:
            log.info("add connection from %s ended: %s", self.peer, exc)
        if self._preamble_timer is not None:
            self._preamble_timer.cancel()
        if self._room is not None:
            self._room.cancel()
        self._incoming.clear()
        self._pending.clear()  # what was accepted stays stored; nobody is left to answer
        self.listener._connections.discard(self)
        if not self.ended.done():
            self.ended.set_result(None)

    # -- requests and answers ------------------------------------------------------------------------------

    def _accept(self) -> None:
        """Accepts the frames read, in order, while the storage has room and the answers are not too far
        behind; then answers what is already settled."""
        incoming, pending, service = self._incoming, self._pending, self.service
        storage = service.storage
        while incoming and not self._finishing and len(pending) < PIPELINE_MAX_REQUESTS:
            if not storage.has_room():
                if self._room is None:
                    self._room = asyncio.get_running_loop().create_task(self._wait_for_room())
                break
            raw, received = incoming.popleft()
            pending.append(service.accept_add(raw, received))
        self._answer()

    async def _wait_for_room(self) -> None:
        try:
            await self.service.storage.wait_for_room()
        finally:
            self._room = None
        if not self.transport.is_closing():
            self._accept()

    def _on_settled(self, waiter) -> None:
        if waiter is not self._watched:
            return  # answered meanwhile, in a call that saw it done before this callback ran
        self._watched = None
        try:
            self._answer()
        except Exception:  # noqa: BLE001 - one connection's failure never ends the listener
            log.exception("add connection from %s failed", self.peer)
            self.transport.abort()

    def _answer(self) -> None:
        """Writes the answers of the settled requests at the head of the line, in one transport write."""
        pending = self._pending
        if self.transport is None or self.transport.is_closing():
            return
        frames = []
        while pending and pending[0][2].settled():
            first = self.service.add_response(pending.popleft())
            more = []
            while pending and len(more) < ANSWERS_PER_MESSAGE_MAX and pending[0][2].settled():
                more.append(self.service.add_response(pending.popleft()))
            if more:
                first.more.extend(more)
            frames.append(encode_frame(first.SerializeToString()))
        if frames:
            self.transport.write(frames[0] if len(frames) == 1 else b"".join(frames))
        if pending:
            waiter = pending[0][2].waiter
            if waiter is not self._watched:  # one done callback per head, however often this runs
                self._watched = waiter
                waiter.add_done_callback(self._on_settled)
        elif self._finishing:
            self.transport.close()
            return
        if self._incoming and self._room is None and len(pending) < PIPELINE_MAX_REQUESTS and not self._finishing:
            self._accept()  # frames read earlier waited for room in the line of answers
            return
        self._update_reading()

    def _update_reading(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        reading = not (self._finishing or self._write_blocked or self._incoming
                       or len(self._pending) >= PIPELINE_MAX_REQUESTS)
        if reading != self.transport.is_reading():
            if reading:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()

    def finish(self) -> None:
        """Stops reading; the connection closes once every request it accepted is answered."""
        if self.transport is None or self.transport.is_closing():
            return
        self._finishing = True
        self._incoming.clear()
        self._update_reading()
        if not self._pending:
            self.transport.close()

    def _broken(self, err: FrameError) -> None:
        log.warning("add connection from %s: %s; closing it", self.peer, err)
        self.service.metrics.add_connections_broken.inc()
        self.transport.abort()


class AddListener:
    """Serves the add port of one bookie. ``await start()``, ``stop_accepting()``, ``await close()``.

    Args:
        service: the bookie's service (``accept_add`` and ``add_response``, the steps of every request).
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
        self._connections: set[_AddConnection] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _AddConnection(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self, *, timeout_s: float = 5.0) -> None:
        """Stops accepting; every connection stops reading and closes once it answered what it accepted,
        within ``timeout_s`` (the rest are cut). Idempotent."""
        self.stop_accepting()
        connections = list(self._connections)
        for conn in connections:
            conn.finish()
        if connections:
            await asyncio.wait([c.ended for c in connections], timeout=timeout_s)
            for conn in connections:
                if not conn.ended.done():
                    conn.transport.abort()
            await asyncio.gather(*(c.ended for c in connections))
        if self._server is not None:
            await self._server.wait_closed()
