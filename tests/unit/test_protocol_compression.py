"""Compression codecs round trip and refuse corrupt or mis-sized input with CompressionError."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import CodecUnavailableError, CompressionError, compression, pb

CODECS = [pb.NONE, pb.ZLIB, pb.LZ4, pb.ZSTD, pb.SNAPPY]
PACKAGES = {pb.LZ4: "lz4", pb.ZSTD: "zstandard", pb.SNAPPY: "cramjam"}


def require(codec: int) -> None:
    # The codec packages are pinned dependencies: a missing one is an installation bug, not a skip.
    assert compression.available(codec), (
        f"{pb.CompressionType.Name(codec)} needs the {PACKAGES[codec]!r} package (a pinned dependency)"
    )


payloads = st.one_of(st.binary(max_size=5000), st.binary(max_size=50).map(lambda b: b * 100))


@pytest.mark.parametrize("codec", CODECS, ids=pb.CompressionType.Name)
@given(data=payloads)
def test_round_trip(codec, data):
    require(codec)
    compressed = compression.compress(codec, data)
    assert compression.decompress(codec, compressed, len(data)) == data


@pytest.mark.parametrize("codec", [pb.ZLIB, pb.LZ4, pb.ZSTD, pb.SNAPPY], ids=pb.CompressionType.Name)
def test_wrong_size_and_corruption_are_compression_errors(codec):
    require(codec)
    data = b"magnetar " * 200
    compressed = compression.compress(codec, data)
    for size in (len(data) - 1, len(data) + 1):
        with pytest.raises(CompressionError):
            compression.decompress(codec, compressed, size)
    with pytest.raises(CompressionError):
        compression.decompress(codec, b"\xff" * 40, len(data))


@pytest.mark.parametrize("codec", [pb.ZLIB, pb.LZ4, pb.ZSTD, pb.SNAPPY], ids=pb.CompressionType.Name)
@given(garbage=st.binary(max_size=200), size=st.integers(0, 4096))
def test_garbage_only_raises_compression_error(codec, garbage, size):
    require(codec)
    try:
        compression.decompress(codec, garbage, size)
    except CompressionError:
        pass


def test_formats_are_the_ones_pulsar_uses() -> None:
    data = b"pulsar " * 50
    assert zlib.decompress(compression.compress(pb.ZLIB, data)) == data  # zlib stream with header
    if compression.available(pb.LZ4):
        import lz4.block

        # a raw block: no size prefix, so it needs the size from the metadata
        assert lz4.block.decompress(compression.compress(pb.LZ4, data), uncompressed_size=len(data)) == data
    if compression.available(pb.ZSTD):
        import zstandard

        frame = compression.compress(pb.ZSTD, data)
        assert zstandard.frame_content_size(frame) == len(data)
    if compression.available(pb.SNAPPY):
        short = data[:100]
        assert compression.compress(pb.SNAPPY, short)[0] == len(short)  # raw block: varint length first


def test_limits_and_unknown_codecs() -> None:
    with pytest.raises(CompressionError, match="outside"):
        compression.decompress(pb.ZLIB, zlib.compress(b"x"), 100, uncompressed_size_bytes_max=10)
    with pytest.raises(CompressionError, match="unknown compression type 9"):
        compression.compress(9, b"x")
    with pytest.raises(CompressionError, match="unknown compression type 9"):
        compression.decompress(9, b"x", 1)


def test_missing_package_names_what_to_install(monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_lz4(name, *args, **kwargs):
        if name.startswith("lz4"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(compression, "_modules", {})
    monkeypatch.setattr(builtins, "__import__", no_lz4)
    assert not compression.available(pb.LZ4)
    with pytest.raises(CodecUnavailableError, match="pip install lz4"):
        compression.compress(pb.LZ4, b"x")
