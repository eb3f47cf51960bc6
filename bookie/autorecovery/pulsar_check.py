"""Pulsar's own end-to-end checksum inside a stored entry (pure).

A broker stores an entry as its producer sent it (``magnetar.protocol.frames``)::

    [0x0e02][bem_size u32][BrokerEntryMetadata]     optional, added by a broker
    [0x0e01][crc32c u32][metadata_size u32][MessageMetadata][payload]

with the CRC32C over everything after the checksum. The bookie's own record CRC is computed when the bookie
stores the entry; this one was computed by the producer, so it also catches bytes that went bad before the
bookie's CRC covered them. Entries that do not start with the magic (ledgers written by other clients, or a
producer that sent no checksum) are not Pulsar-checked: the answer is None.
"""

from __future__ import annotations

import struct
from typing import Optional

from magnetar.protocol.checksum import crc32c
from magnetar.protocol.frames import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def pulsar_entry_intact(entry: bytes) -> Optional[bool]:
    """True/False: the entry carries Pulsar's checksum and it matches / does not; None: no checksum to check."""
    view = memoryview(entry)
    start = 0
    if len(view) >= 6 and _U16.unpack_from(view, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        start = 6 + _U32.unpack_from(view, 2)[0]
    if len(view) < start + 10 or _U16.unpack_from(view, start)[0] != MAGIC_CRC32C:
        return None
    stored = _U32.unpack_from(view, start + 2)[0]
    return crc32c(view[start + 6:]) == stored
