"""One Kafka client connection: the only code that touches its socket.

Theory of operation
-------------------
The reader loop reads size-prefixed frames. A frame whose announced size is negative or above
``max_request_size_bytes`` closes the connection before its body is read (nothing is buffered for it). Each
frame's header and body are decoded at once (:mod:`broker.kafka.codec`, pure); a frame that cannot be
decoded, an unknown API key or an unsupported version closes the connection, as Kafka brokers do (ApiVersions
at an unknown version is answered by the dispatcher instead). Decoded requests run as tasks, so a Fetch long
poll does not hold up a Metadata behind it, but answers leave strictly in request order (Kafka clients match
answers to requests by order as well as correlation id): each request takes a slot in ``_slots`` and the
writer loop writes slots from the head as they complete. A request without an answer (Produce with acks=0)
completes its slot with nothing. A refused frame, or the client closing its side, stops reading; requests
already read get up to two seconds to finish (a Produce with acks=0 sent just before the client closed is
stored, as Kafka does) and are answered in order if the socket still takes it. At most ``max_in_flight_requests`` requests are in progress; beyond that the
reader stops reading (TCP back-pressure). A handler that raises closes the connection (logged); the broker
and every other connection go on.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import socket
from typing import Any, Awaitable, Callable, Optional

from .codec import FrameError, RequestHeader, decode_request, encode_response, frame_size, parse_header
from .context import RequestContext

log = logging.getLogger("broker.kafka.connection")

Dispatch = Callable[[RequestHeader, Any, RequestContext], Awaitable[Optional[Any]]]
_ids = itertools.count(1)
_DRAIN_GRACE_S = 2.0


class KafkaConnection:
    """Serves one socket until the client leaves, a frame is refused, or :meth:`close`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, dispatch: Dispatch,
                 listener_name: str, max_request_size_bytes: int, max_in_flight_requests: int,
                 on_unsupported: Optional[Callable[[RequestHeader], Optional[Any]]] = None) -> None:
        self._reader = reader
        self._writer = writer
        self._dispatch = dispatch
        self._on_unsupported = on_unsupported
        self.listener_name = listener_name
        self.max_request_size_bytes = max_request_size_bytes
        self.connection_id = next(_ids)
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.principal: Optional[str] = None  # set by SASL authentication
        self.sasl_mechanism: Optional[str] = None
        self.state: dict[str, Any] = {}  # handler families' per-connection state (the producer identity)
        self.closed = False
        self.close_reason = ""
        self._slots: collections.deque[asyncio.Future] = collections.deque()
        self._close_after: set[asyncio.Future] = set()
        self._slot_added = asyncio.Event()
        self._in_flight = asyncio.Semaphore(max_in_flight_requests)
        self._tasks: set[asyncio.Task] = set()
        self._writer_task: Optional[asyncio.Task] = None

    def __repr__(self) -> str:
        return f"KafkaConnection({self.connection_id}, {self.peer})"

    async def serve(self) -> None:
        """Runs the reader loop (this task) and the writer loop until the connection ends."""
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._writer_task = asyncio.create_task(self._write_loop(), name=f"kafka-writer-{self.connection_id}")
        try:
            await self._read_loop()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client left: what it sent is still carried out (a Produce with acks=0 before closing)
        except FrameError as exc:
            self.close_reason = str(exc)
            log.info("[%s] closing: %s", self.peer, exc)
        try:
            if self._tasks:  # requests already read finish (and are answered in order, if anyone listens)
                await asyncio.wait(set(self._tasks), timeout=_DRAIN_GRACE_S)
        finally:
            await self.close()

    async def _read_loop(self) -> None:
        while not self.closed:
            prefix = await self._reader.readexactly(4)
            size = frame_size(prefix)
            if size < 0 or size > self.max_request_size_bytes:
                raise FrameError(f"a request of {size} bytes is outside 0..{self.max_request_size_bytes} "
                                 "(kafka_max_request_size_bytes)")
            frame = await self._reader.readexactly(size)
            header, offset = parse_header(frame)
            try:
                request = decode_request(header, frame, offset)
            except FrameError:
                answer = self._on_unsupported(header) if self._on_unsupported is not None else None
                if answer is None:
                    raise
                slot = asyncio.get_running_loop().create_future()
                slot.set_result(encode_response(header, answer))
                self._push(slot)
                continue
            await self._in_flight.acquire()
            slot = asyncio.get_running_loop().create_future()
            self._push(slot)
            ctx = RequestContext(client_id=header.client_id, principal=self.principal,
                                 correlation_id=header.correlation_id, api_version=header.api_version,
                                 listener_name=self.listener_name, api_key=header.api_key, peer=self.peer,
                                 connection_id=self.connection_id, extra={"connection": self})
            task = asyncio.create_task(self._run(header, request, ctx, slot),
                                       name=f"kafka-{header.api_key}-{self.connection_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _push(self, slot: asyncio.Future) -> None:
        self._slots.append(slot)
        self._slot_added.set()

    async def _run(self, header: RequestHeader, request: Any, ctx: RequestContext, slot: asyncio.Future) -> None:
        try:
            response = await self._dispatch(header, request, ctx)
            data = encode_response(header, response) if response is not None else None
            if ctx.extra.get("close_after"):
                self._close_after.add(slot)
        except asyncio.CancelledError:
            if not slot.done():
                slot.cancel()
            raise
        except Exception as exc:
            log.exception("[%s] api key %d v%d (correlation id %d) failed; closing the connection",
                          self.peer, header.api_key, header.api_version, header.correlation_id)
            if not slot.done():
                slot.set_exception(exc)
        else:
            if not slot.done():
                slot.set_result(data)
        finally:
            self._in_flight.release()

    async def _write_loop(self) -> None:
        try:
            while True:
                while not self._slots:
                    self._slot_added.clear()
                    await self._slot_added.wait()
                slot = self._slots[0]
                try:
                    data = await slot
                except (Exception, asyncio.CancelledError):
                    if asyncio.current_task().cancelling():
                        raise
                    self.closed = True
                    self._writer.close()
                    return
                self._slots.popleft()
                if data is not None:
                    self._writer.write(data)
                if slot in self._close_after:  # e.g. a refused authentication: answered, then closed
                    await self._writer.drain()
                    self.closed = True
                    self._writer.close()
                    return
                    if self._writer.transport.get_write_buffer_size() > 1 << 20:
                        await self._writer.drain()
        except ConnectionError:
            pass

    async def close(self) -> None:
        """Stops reading, cancels what is in progress, closes the socket. Idempotent."""
        if self.closed and self._writer_task is None:
            return
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        writer_task, self._writer_task = self._writer_task, None
        if writer_task is not None:
            writer_task.cancel()
            await asyncio.gather(writer_task, return_exceptions=True)
        # answers already complete still go out (e.g. those before a refused frame), in order
        while self._slots and self._slots[0].done() and not self._slots[0].cancelled() \
                and self._slots[0].exception() is None:
            data = self._slots.popleft().result()
            if data is not None and not self._writer.is_closing():
                self._writer.write(data)
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass
