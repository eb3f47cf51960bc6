"""Payload compression, codec by codec, as Pulsar's clients do it.

=======  =============================================  ============================
codec    format on the wire                             Python package
=======  =============================================  ============================
NONE     the bytes                                      -
ZLIB     zlib stream (RFC 1950: header + deflate)       stdlib ``zlib``
LZ4      raw LZ4 *block*, no frame, no size prefix      ``lz4`` (``lz4.block``)
ZSTD     zstd frame (level 3, content size included)    ``zstandard``
SNAPPY   raw snappy block (not the framing format)      ``cramjam`` (or ``python-snappy``)
=======  =============================================  ============================

The uncompressed size travels in ``MessageMetadata.uncompressed_size``; raw LZ4 blocks cannot be decoded
without it, and every codec's output is checked against it. The optional packages are imported on first
use, so a process that never meets a codec does not need its package.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from types import ModuleType

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.checksum import Buffer
from magnetar.protocol.errors import CodecUnavailableError, CompressionError

__all__ = ["UNCOMPRESSED_SIZE_BYTES_MAX", "available", "compress", "decompress"]

NONE, LZ4, ZLIB, ZSTD, SNAPPY = pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY
# Refuse to inflate beyond this (a corrupt or hostile uncompressed_size must not exhaust memory).
UNCOMPRESSED_SIZE_BYTES_MAX = 64 * 1024 * 1024
_ZSTD_LEVEL = 3  # what Pulsar's C++ and Java clients use

_PACKAGES = {LZ4: "lz4", ZSTD: "zstandard", SNAPPY: "cramjam"}
_modules: dict[int, ModuleType] = {}


def _module(codec: int) -> ModuleType:
    module = _modules.get(codec)
    if module is not None:
        return module
    try:
        if codec == LZ4:
            import lz4.block as module
        elif codec == ZSTD:
            import zstandard as module
        else:
            try:
                import cramjam as module
            except ImportError:
                import snappy as module  # python-snappy, which wraps the same raw block format
    except ImportError:
        name = pb.CompressionType.Name(codec)
        raise CodecUnavailableError(
            f"{name} compression needs the Python package {_PACKAGES[codec]!r}: pip install {_PACKAGES[codec]}"
        ) from None
    _modules[codec] = module
    return module


def available(codec: int) -> bool:
    """True when ``codec`` can be used in this process (its package is importable)."""
    if codec in (NONE, ZLIB):
        return True
    try:
        _module(codec)
    except CodecUnavailableError:
        return False
    return True


def _snappy_compress(data: Buffer) -> bytes:
    module = _module(SNAPPY)
    if module.__name__ == "cramjam":
        return bytes(module.snappy.compress_raw(bytes(data)))
    return module.compress(bytes(data))


def _snappy_decompress(data: Buffer) -> bytes:
    module = _module(SNAPPY)
    if module.__name__ == "cramjam":
        return bytes(module.snappy.decompress_raw(bytes(data)))
    return module.uncompress(bytes(data))


_COMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    NONE: bytes,
    ZLIB: zlib.compress,
    LZ4: lambda data: _module(LZ4).compress(data, store_size=False),
    ZSTD: lambda data: _module(ZSTD).ZstdCompressor(level=_ZSTD_LEVEL).compress(data),
    SNAPPY: _snappy_compress,
}


def compress(codec: int, data: Buffer) -> bytes:
    """Compresses ``data`` with ``codec`` (a ``CompressionType`` value); the caller records ``len(data)``
    as ``uncompressed_size``.

    Raises:
        CodecUnavailableError: the codec's package is not installed.
        CompressionError: ``codec`` is not a known CompressionType.
    """
    try:
        compressor = _COMPRESSORS[codec]
    except KeyError:
        raise CompressionError(f"unknown compression type {codec}") from None
    return compressor(data)


def _zlib_decompress(data: Buffer, size: int) -> bytes:
    # One byte more than announced is enough to detect a mismatch without inflating a bomb.
    return zlib.decompressobj().decompress(data, size + 1)


def _lz4_decompress(data: Buffer, size: int) -> bytes:
    return _module(LZ4).decompress(data, uncompressed_size=size)


def _zstd_decompress(data: Buffer, size: int) -> bytes:
    zstandard = _module(ZSTD)
    # A frame's own content size decides the allocation: check it before trusting it.
    declared = zstandard.frame_content_size(data)
    if declared not in (-1, size):
        raise CompressionError(f"ZSTD frame declares {declared} bytes, metadata announces {size}")
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)


def _snappy_decompress_checked(data: Buffer, size: int) -> bytes:
    # A raw snappy block starts with its uncompressed length as a varint: check it before allocating.
    declared, shift = 0, 0
    for i in range(min(len(data), 5)):
        declared |= (data[i] & 0x7F) << shift
        shift += 7
        if not data[i] & 0x80:
            break
    else:
        raise CompressionError("SNAPPY block without a valid length preamble")
    if declared != size:
        raise CompressionError(f"SNAPPY block declares {declared} bytes, metadata announces {size}")
    return _snappy_decompress(data)


_DECOMPRESSORS: dict[int, Callable[[Buffer, int], bytes]] = {
    NONE: lambda data, size: bytes(data),
    ZLIB: _zlib_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
    SNAPPY: _snappy_decompress_checked,
}


def decompress(
    codec: int,
    data: Buffer,
    uncompressed_size: int,
    *,
    uncompressed_size_bytes_max: int = UNCOMPRESSED_SIZE_BYTES_MAX,
) -> bytes:
    """Decompresses ``data``, which must inflate to exactly ``uncompressed_size`` bytes.

    Raises:
        CodecUnavailableError: the codec's package is not installed.
        CompressionError: unknown codec, corrupt data, a size mismatch, or a size above the limit.
    """
    try:
        decompressor = _DECOMPRESSORS[codec]
    except KeyError:
        raise CompressionError(f"unknown compression type {codec}") from None
    if not 0 <= uncompressed_size <= uncompressed_size_bytes_max:
        raise CompressionError(
            f"uncompressed size {uncompressed_size} is outside 0..{uncompressed_size_bytes_max} bytes"
        )
    name = pb.CompressionType.Name(codec)
    try:
        out = decompressor(data, uncompressed_size)
    except CompressionError:
        raise
    except Exception as exc:  # noqa: BLE001 - each codec package raises its own error types
        raise CompressionError(f"corrupt {name} payload of {len(data)} bytes: {exc}") from None
    if len(out) != uncompressed_size:
        raise CompressionError(
            f"{name} payload inflated to {len(out)}{'+' if len(out) > uncompressed_size else ''} bytes, "
            f"metadata announces {uncompressed_size}"
        )
    return out
