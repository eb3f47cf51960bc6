"""CRC32C (Castagnoli) as Pulsar uses it: over ``[metadata_size][metadata][payload]`` of an entry.

A thin layer over the ``crc32c`` package (hardware-accelerated where the CPU allows), so the rest of the
codec names one function and can feed it ``bytes`` or ``memoryview`` slices without copying.
"""

from __future__ import annotations

import crc32c as _crc32c

Buffer = bytes | bytearray | memoryview


def crc32c(data: Buffer, value: int = 0) -> int:
    """Returns the CRC32C of ``data``, continuing from ``value`` (the CRC of the bytes before it)."""
    return _crc32c.crc32c(data, value)


def crc32c_parts(*parts: Buffer) -> int:
    """Returns the CRC32C of the concatenation of ``parts`` without concatenating them."""
    value = 0
    for part in parts:
        value = _crc32c.crc32c(part, value)
    return value
