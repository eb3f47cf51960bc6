"""What carries a :class:`~bookie.client.bookie_client.BookieClient`'s pipelined adds: a gRPC AddEntries
stream, or a TCP connection to the bookie's add port (frames of :mod:`bookie.add_frames`).

Both carry the same conversation (AddRequests out, AddResponses back in request order), so the client's
batching, in-flight accounting, ordered settling and timeouts do not depend on which one is used. Each
stream is opened once, written by the client's sender task, read by its reader task, and closed once;
every failure surfaces as :class:`~bookie.errors.BookieUnavailableError` (or ``grpc.RpcError`` on gRPC, mapped
by the client) naming the bookie, and the client then fails every pending entry UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
from typing import Optional

from google.protobuf.message import DecodeError
from grpc import aio

from bookie.add_frames import HEADER_BYTES, PREAMBLE, FrameError, body_length
from bookie.errors import BookieUnavailableError
from magnetar.net import tune_tcp_socket
from magnetar.proto import bookie_pb2

from .wire import frame_add_request

_READ_BUFFER_BYTES = 1024 * 1024


class GrpcAddStream:
    """One AddEntries call on the bookie's gRPC channel."""

    def __init__(self, bookie_id: str, multicallable) -> None:
        self.bookie_id = bookie_id
        self._call = multicallable(wait_for_ready=False)

    async def open(self) -> None:
        """Nothing to wait for: the call starts with its first write."""

    async def write(self, request_id: int, framed_entries: list[bytes], *, recovery: bool) -> None:
        await self._call.write(frame_add_request(request_id, framed_entries, recovery=recovery))

    async def read(self) -> bookie_pb2.AddResponse:
        response = await self._call.read()
        if response is aio.EOF:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: add stream closed by the bookie")
        return response

    def close(self) -> None:
        self._call.cancel()


class TcpAddStream:
    """One connection to the bookie's add port (``host:port``)."""

    def __init__(self, bookie_id: str, address: str, *, connect_timeout_s: float, keepalive_idle_s: float,
                 keepalive_timeout_s: float) -> None:
        self.bookie_id = bookie_id
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_idle_s = keepalive_idle_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None

    async def open(self) -> None:
        host, _, port = self.address.rpartition(":")
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                self._reader, self._writer = await asyncio.open_connection(
                    host.strip("[]"), int(port), limit=_READ_BUFFER_BYTES)
        except TimeoutError:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: no connection to its add port {self.address} "
                                         f"within {self.connect_timeout_s:g} s") from None
        except (OSError, ValueError) as err:
            raise BookieUnavailableError(
                f"bookie {self.bookie_id}: cannot connect to its add port {self.address}: {err}") from None
        tune_tcp_socket(self._writer.get_extra_info("socket"), keepalive_idle_s=self.keepalive_idle_s,
                        keepalive_timeout_s=self.keepalive_timeout_s)
        self._writer.write(PREAMBLE)

    async def write(self, request_id: int, framed_entries: list[bytes], *, recovery: bool) -> None:
        writer = self._writer
        writer.write(frame_add_request(request_id, framed_entries, recovery=recovery, length_prefixed=True))
        try:
            await writer.drain()  # returns at once unless the socket's send buffer is over its high mark
        except (ConnectionError, OSError) as err:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: add connection failed: {err}") from None

    async def read(self) -> bookie_pb2.AddResponse:
        reader = self._reader
        try:
            header = await reader.readexactly(HEADER_BYTES)
            body = await reader.readexactly(body_length(header))
        except asyncio.IncompleteReadError:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: add connection closed by the bookie") from None
        except (ConnectionError, OSError) as err:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: add connection failed: {err}") from None
        except FrameError as err:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: add connection: {err}") from None
        try:
            return bookie_pb2.AddResponse.FromString(body)
        except DecodeError as err:
            raise BookieUnavailableError(
                f"bookie {self.bookie_id}: malformed AddResponse ({len(body)} bytes): {err}") from None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.transport.abort()
