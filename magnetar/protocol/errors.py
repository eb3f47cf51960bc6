"""Errors of the binary-protocol codec.

Every error here is a :class:`ProtocolError`: the peer sent bytes that break Pulsar's framing or message
formats. Nothing in this package raises anything else for bad input, so a connection can catch
``ProtocolError``, log its message, close the connection and keep the process alive. None is retriable:
the same bytes fail the same way.
"""

from __future__ import annotations

from typing import Any

from magnetar.errors import MagnetarError


class ProtocolError(MagnetarError):
    """Bytes that break Pulsar's binary protocol.

    Attributes:
        frames: frames that :class:`~magnetar.protocol.frames.FrameDecoder` decoded in the same ``feed``
            call before it met the bad one; the connection may still act on them before it closes.
    """

    frames: tuple[Any, ...] = ()


class FrameTooLargeError(ProtocolError):
    """A frame announces more bytes than the configured maximum frame size."""


class ChecksumError(ProtocolError):
    """A stored entry's CRC32C does not match its bytes (frames report this as ``checksum_ok`` instead)."""


class BatchFormatError(ProtocolError):
    """A batched payload does not split into the announced ``[size][SingleMessageMetadata][payload]`` items."""


class CompressionError(ProtocolError):
    """A payload does not decompress with its codec, or not to the size its metadata announces."""


class CodecUnavailableError(CompressionError):
    """The codec's Python package is not installed; the message names the package to install."""


class InvalidMessageIdError(ProtocolError, ValueError):
    """Bytes that are not a serialized ``MessageIdData``."""
