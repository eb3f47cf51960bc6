"""What carries a :class:`~bookie.client.bookie_client.BookieClient`'s pipelined adds: a gRPC AddEntries
stream, or a TCP connection to the bookie's add port (frames of :mod:`bookie.add_frames`).

Both carry the same conversation (AddRequests out, AddResponses back in request order), so the client's
batching, in-flight accounting, ordered settling and timeouts do not depend on which one is used. Each
stream is opened once, written by the client's sender task, and closed once; ``deliver(on_response)`` hands
each response to the client as it comes and returns only by raising when the stream ends. On TCP the
response is handed over in the call that reads its bytes (an asyncio ``Protocol``: no reader task to wake),
so a publish's receipt can leave in that same turn. Every failure surfaces as
:class:`~bookie.errors.BookieUnavailableError` (or ``grpc.RpcError`` on gRPC, mapped by the client) naming the
bookie, and the client then fails every pending entry UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Optional

from google.protobuf.message import DecodeError
from grpc import aio

from bookie.add_frames import PREAMBLE, FrameBuffer, FrameError
from bookie.errors import BookieUnavailableError
from magnetar.net import tune_tcp_socket
from magnetar.proto import bookie_pb2

from .wire import frame_add_request

OnResponse = Callable[[bookie_pb2.AddResponse], None]


class GrpcAddStream:
    """One AddEntries call on the bookie's gRPC channel."""

    def __init__(self, bookie_id: str, multicallable) -> None:
        self.bookie_id = bookie_id
        self._call = multicallable(wait_for_ready=False)

    async def open(self) -> None:
        """Nothing to wait for: the call starts with its first write."""

    async def write(self, request_id: int, framed_entries: list[bytes], *, recovery: bool) -> None:
        await self._call.write(frame_add_request(request_id, framed_entries, recovery=recovery))

    async def deliver(self, on_response: OnResponse) -> None:
        while True:
            response = await self._call.read()
            if response is aio.EOF:
                raise BookieUnavailableError(f"bookie {self.bookie_id}: add stream closed by the bookie")
            on_response(response)

    def close(self) -> None:
        self._call.cancel()


class _AddResponses(asyncio.Protocol):
    """The client's end of an add connection: frames in, each parsed and handed on in the same call."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id
        self.transport: Optional[asyncio.Transport] = None
        self.on_response: Optional[OnResponse] = None
        self.early: list[bookie_pb2.AddResponse] = []  # read before deliver() was called
        loop = asyncio.get_running_loop()
        self.ended = loop.create_future()  # its result: the BookieError (or other failure) that ended it
        self._frames = FrameBuffer()
        self._writable: Optional[asyncio.Future] = None  # while the transport's write buffer is over its mark

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.ended.done():
            return
        try:
            bodies = self._frames.feed(data)
        except FrameError as err:
            self.end(BookieUnavailableError(f"bookie {self.bookie_id}: add connection: {err}"))
            return
        for body in bodies:
            try:
                response = bookie_pb2.AddResponse.FromString(body)
            except DecodeError as err:
                self.end(BookieUnavailableError(
                    f"bookie {self.bookie_id}: malformed AddResponse ({len(body)} bytes): {err}"))
                return
            if self.on_response is None:
                self.early.append(response)
                continue
            try:
                self.on_response(response)
            except Exception as err:  # noqa: BLE001 - the client's verdict on the stream (an answer out of order)
                self.end(err)
                return

    def eof_received(self) -> bool:
        self.end(BookieUnavailableError(f"bookie {self.bookie_id}: add connection closed by the bookie"))
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if exc is None:
            self.end(BookieUnavailableError(f"bookie {self.bookie_id}: add connection closed by the bookie"))
        else:
            self.end(BookieUnavailableError(f"bookie {self.bookie_id}: add connection failed: {exc}"))
        self.resume_writing()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def writable(self) -> None:
        """Returns at once unless the transport's write buffer is over its high mark."""
        if self._writable is not None:
            await self._writable

    def end(self, err: BaseException) -> None:
        if not self.ended.done():
            self.ended.set_result(err)
        if self.transport is not None:
            self.transport.abort()


class TcpAddStream:
    """One connection to the bookie's add port (``host:port``)."""

    def __init__(self, bookie_id: str, address: str, *, connect_timeout_s: float, keepalive_idle_s: float,
                 keepalive_timeout_s: float) -> None:
        self.bookie_id = bookie_id
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_idle_s = keepalive_idle_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self._protocol: Optional[_AddResponses] = None

    async def open(self) -> None:
        host, _, port = self.address.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                transport, protocol = await loop.create_connection(
                    lambda: _AddResponses(self.bookie_id), host.strip("[]"), int(port))
        except TimeoutError:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: no connection to its add port {self.address} "
                                         f"within {self.connect_timeout_s:g} s") from None
        except (OSError, ValueError) as err:
            raise BookieUnavailableError(
                f"bookie {self.bookie_id}: cannot connect to its add port {self.address}: {err}") from None
        self._protocol = protocol
        tune_tcp_socket(transport.get_extra_info("socket"), keepalive_idle_s=self.keepalive_idle_s,
                        keepalive_timeout_s=self.keepalive_timeout_s)
        transport.write(PREAMBLE)

    async def write(self, request_id: int, framed_entries: list[bytes], *, recovery: bool) -> None:
        protocol = self._protocol
        if protocol.ended.done():
            raise protocol.ended.result()
        protocol.transport.write(
            frame_add_request(request_id, framed_entries, recovery=recovery, length_prefixed=True))
        await protocol.writable()

    async def deliver(self, on_response: OnResponse) -> None:
        protocol = self._protocol
        protocol.on_response = on_response
        early, protocol.early = protocol.early, []
        for response in early:
            on_response(response)
        raise await protocol.ended

    def close(self) -> None:
        if self._protocol is not None:
            self._protocol.end(BookieUnavailableError(f"bookie {self.bookie_id}: add stream closed"))
