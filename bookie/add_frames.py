"""The frames of a bookie's add port: AddEntries over a plain TCP connection (pure; no I/O, no asyncio).

Theory of operation. gRPC carries every bookie call, but the pipelined add stream is the one hot path, and
one grpc.aio stream write costs ~130-190 µs of CPU where the same bytes written to an asyncio transport
cost tens of µs (docs/latency.md). So a bookie may also listen on an *add port* that speaks only this::

    client -> bookie: PREAMBLE (8 bytes: b"MGADD" + version 0x00 0x01 + 0x0a), then frames of AddRequest
    bookie -> client: frames of AddResponse
    frame:            u32 big-endian length | that many bytes (one serialized protobuf message)

Request and response messages are exactly those of the gRPC AddEntries stream (``magnetar.bookie.v1``), and
so is the conversation: the bookie answers requests strictly in the order it received them, one response
per request, several coalesced into one message through ``AddResponse.more``. A frame body may be empty (an
empty protobuf message) and at most :data:`FRAME_MAX_BYTES` long (gRPC's message limit on bookie channels);
a longer length, like a wrong preamble, is a protocol error that ends the connection (nothing of the frame
is read or stored). A body that does not parse as an AddRequest is answered INVALID_ARGUMENT like on gRPC,
and the connection goes on.
"""

from __future__ import annotations

import struct

from .errors import InvalidRequestError

PREAMBLE = b"MGADD\x00\x01\n"
HEADER_BYTES = 4
FRAME_MAX_BYTES = 64 * 1024 * 1024

_HEADER = struct.Struct(">I")


class FrameError(InvalidRequestError):
    """Bytes on an add connection that break the framing (a bad preamble, a length over the limit)."""


def frame_header(body_bytes: int) -> bytes:
    """The 4-byte header of a frame whose body is ``body_bytes`` long."""
    if not 0 <= body_bytes <= FRAME_MAX_BYTES:
        raise FrameError(f"a frame body of {body_bytes} bytes; at most {FRAME_MAX_BYTES}")
    return _HEADER.pack(body_bytes)


def encode_frame(body: bytes) -> bytes:
    """``body`` as one frame (header and body in one bytes object: one transport write)."""
    return frame_header(len(body)) + body


def body_length(header: bytes) -> int:
    """The body length a frame header announces; FrameError when it is over the limit."""
    (length,) = _HEADER.unpack(header)
    if length > FRAME_MAX_BYTES:
        raise FrameError(f"a frame announces {length} bytes; at most {FRAME_MAX_BYTES} are accepted")
    return length


def check_preamble(data: bytes) -> None:
    """FrameError unless ``data`` is this protocol's preamble."""
    if data != PREAMBLE:
        raise FrameError(f"not an add connection: the first {len(data)} bytes are {data[:16]!r}, "
                         f"expected {PREAMBLE!r}")


class FrameBuffer:
    """Splits the bytes of a connection, as they arrive in pieces of any size, into frame bodies.

    ``feed`` returns the bodies the new bytes complete, in order; the bytes of a frame not yet complete stay
    here (``partial`` says how many). A header announcing more than :data:`FRAME_MAX_BYTES` raises
    FrameError, and the connection is broken from then on: feed nothing more.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def partial(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        bodies: list[bytes] = []
        pos, end = 0, len(buf)
        while end - pos >= HEADER_BYTES:
            length = body_length(bytes(buf[pos:pos + HEADER_BYTES]))
            stop = pos + HEADER_BYTES + length
            if stop > end:
                break
            bodies.append(bytes(buf[pos + HEADER_BYTES:stop]))
            pos = stop
        if pos:
            del buf[:pos]
        return bodies
