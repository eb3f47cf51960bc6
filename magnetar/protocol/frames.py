"""Frames of Pulsar's binary protocol, encoded and decoded without I/O.

Theory of operation
-------------------

A connection is a stream of frames in both directions. Every frame starts with two big-endian u32s::

    simple command   [total_size][command_size][BaseCommand]
    payload command  [total_size][command_size][BaseCommand][entry]

where ``total_size`` counts every byte after itself (so a simple frame has ``total_size = 4 +
command_size``). Only SEND (client to broker) and MESSAGE (broker to client) carry an entry, and they always
do; any other command followed by extra bytes is a protocol error. The *entry* is::

    [0x0e02][bem_size u32][BrokerEntryMetadata]            optional, added by a broker
    [0x0e01][crc32c u32]                                   magic and checksum
    [metadata_size u32][MessageMetadata][payload]          covered by the checksum

The checksum is CRC32C over everything from ``metadata_size`` to the end of the frame. Clients since
protocol v6 always send it, so by default a missing ``0x0e01`` is a ``ProtocolError``; a decoder built
with ``require_checksum=False`` accepts an entry that starts directly at ``metadata_size``.

**Decoding.** :class:`FrameDecoder` is fed whatever bytes the transport read, in chunks of any size, and
returns the frames completed so far. It keeps at most one incomplete frame buffered. It looks at a
frame only once all of it has arrived (the first four bytes say how long it is, and a frame announcing
more than ``frame_size_bytes_max`` is rejected at once, before it is buffered). Complete frames are
then sliced from one immutable ``bytes`` object through a ``memoryview``. A 128 KiB batched SEND costs
the same handful of Python operations as a PING: a length check, two protobuf parses in C, one CRC32C
in C, two slices. Bytes are copied once on the way in (only when a frame spans several chunks) and once
on the way out (``payload`` and ``entry`` are separate ``bytes`` objects, so nothing keeps the receive
buffer alive).

**Errors.** Bad framing, an undecodable or incomplete protobuf, a missing magic or a command without
the sub-message its ``type`` names raises :class:`~magnetar.protocol.errors.ProtocolError`, which
carries the frames decoded before it (``err.frames``). After that the decoder refuses further input,
because the stream can no longer be trusted to be aligned on frame boundaries. A checksum mismatch is
*not* an error: the frame is returned with ``checksum_ok=False``, so the broker can answer SEND_ERROR
ChecksumError and keep the connection, as Pulsar does. Because the bytes are corrupt, ``metadata``
and ``payload`` may then be None.

**Splicing.** A broker stores the entry of a SEND byte for byte (``Frame.entry``: from the ``0x0e01``
magic to the end, checksum included, so it is verified end to end). It may prefix its own broker entry
metadata (:func:`add_broker_entry_metadata`). It later sends the same bytes to consumers behind a new
CommandMessage header (:func:`encode_message_frame_from_entry`, or :func:`encode_message_frame_header`
with a vectored write). Metadata is never re-encoded and payloads are never re-checksummed on the
dispatch path.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, TypeVar

from google.protobuf.message import DecodeError, Message

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.checksum import Buffer, crc32c
from magnetar.protocol.errors import ChecksumError, FrameTooLargeError, ProtocolError

__all__ = [
    "FRAME_SIZE_BYTES_MAX_DEFAULT",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "Entry",
    "Frame",
    "FrameDecoder",
    "add_broker_entry_metadata",
    "command_body",
    "encode_command",
    "encode_entry",
    "encode_message_frame_from_entry",
    "encode_message_frame_header",
    "encode_payload_command",
    "parse_entry",
    "split_broker_entry_metadata",
    "wrap",
]

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
# Pulsar's default maxMessageSize (5 MiB) plus the padding it allows for the command and metadata.
FRAME_SIZE_BYTES_MAX_DEFAULT = 5 * 1024 * 1024 + 10 * 1024

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")
_MAGIC_U32 = struct.Struct(">HI")

BaseCommand = pb.BaseCommand
_PAYLOAD_TYPES = frozenset((BaseCommand.SEND, BaseCommand.MESSAGE))
# In BaseCommand the field carrying a command has the same number as the command's Type value.
_FIELD_BY_TYPE: dict[int, str] = {f.number: f.name for f in BaseCommand.DESCRIPTOR.fields if f.name != "type"}
_TYPE_BY_MESSAGE: dict[str, tuple[int, str]] = {
    f.message_type.full_name: (f.number, f.name) for f in BaseCommand.DESCRIPTOR.fields if f.name != "type"
}


class Frame(NamedTuple):
    """One decoded frame.

    Attributes:
        command: the BaseCommand; its sub-message named by ``type`` is guaranteed present.
        metadata: the MessageMetadata of a SEND/MESSAGE (None for other commands, and possibly None
            when ``checksum_ok`` is False).
        payload: the bytes after the metadata (batched and/or compressed as the metadata says).
        checksum_ok: False when the entry's CRC32C does not match (only ever False for SEND/MESSAGE).
        broker_entry_metadata: present when the entry carried the 0x0e02 section.
        entry: the entry as a broker stores it: from the 0x0e01 magic to the end of the frame,
            without any broker entry metadata (None for commands without payload).
    """

    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    payload: bytes | None = None
    checksum_ok: bool = True
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None
    entry: bytes | None = None


class Entry(NamedTuple):
    """A parsed stored entry (see :func:`parse_entry`)."""

    metadata: pb.MessageMetadata
    payload: bytes
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None


# --------------------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------------------


def wrap(inner: Message) -> pb.BaseCommand:
    """Returns a BaseCommand carrying ``inner`` (e.g. a ``CommandPing``) with ``type`` set to match."""
    try:
        type_, field = _TYPE_BY_MESSAGE[inner.DESCRIPTOR.full_name]
    except (KeyError, AttributeError):
        raise TypeError(f"{type(inner).__name__} is not a command BaseCommand can carry") from None
    cmd = BaseCommand(type=type_)
    getattr(cmd, field).CopyFrom(inner)
    return cmd


def command_body(cmd: pb.BaseCommand) -> Message:
    """Returns the sub-message named by ``cmd.type`` (``cmd.send`` for SEND, ...)."""
    return getattr(cmd, _FIELD_BY_TYPE[cmd.type])


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """Encodes a simple (payload-less) command frame.

    Raises:
        google.protobuf.message.EncodeError: a required field is unset (a bug in the caller).
    """
    body = cmd.SerializeToString()
    return _U32_PAIR.pack(len(body) + 4, len(body)) + body


def _broker_entry_metadata_section(bem: pb.BrokerEntryMetadata) -> bytes:
    data = bem.SerializeToString()
    return _MAGIC_U32.pack(MAGIC_BROKER_ENTRY_METADATA, len(data)) + data


def _entry_parts(metadata: pb.MessageMetadata, payload: Buffer) -> list[Buffer]:
    md = metadata.SerializeToString()
    md_size = _U32.pack(len(md))
    crc = crc32c(payload, crc32c(md, crc32c(md_size)))
    return [_MAGIC_U32.pack(MAGIC_CRC32C, crc), md_size, md, payload]


def encode_entry(
    metadata: pb.MessageMetadata,
    payload: Buffer,
    *,
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
) -> bytes:
    """Encodes an entry: ``[0x0e02 section][0x0e01][crc32c][metadata_size][metadata][payload]``.

    This is what a broker stores for entries it writes itself (markers, replicated copies); entries from
    a SEND are stored as received (``Frame.entry``).
    """
    parts = _entry_parts(metadata, payload)
    if broker_entry_metadata is not None:
        parts.insert(0, _broker_entry_metadata_section(broker_entry_metadata))
    return b"".join(parts)


def encode_payload_command(
    cmd: pb.BaseCommand,
    metadata: pb.MessageMetadata,
    payload: Buffer,
    *,
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
) -> bytes:
    """Encodes a SEND or MESSAGE frame, computing the checksum."""
    body = cmd.SerializeToString()
    parts = _entry_parts(metadata, payload)
    if broker_entry_metadata is not None:
        parts.insert(0, _broker_entry_metadata_section(broker_entry_metadata))
    size = 4 + len(body) + sum(len(p) for p in parts)
    return b"".join([_U32_PAIR.pack(size, len(body)), body, *parts])


def encode_message_frame_header(cmd: pb.BaseCommand, entry_size_bytes: int) -> bytes:
    """Encodes ``[total_size][command_size][cmd]`` for a frame whose entry (``entry_size_bytes`` long) follows.

    For vectored writes: ``transport.writelines([header, entry])`` sends a MESSAGE without copying the entry.
    """
    body = cmd.SerializeToString()
    return _U32_PAIR.pack(4 + len(body) + entry_size_bytes, len(body)) + body


def encode_message_frame_from_entry(
    cmd: pb.BaseCommand, entry: Buffer, *, strip_broker_entry_metadata: bool = False
) -> bytes:
    """Encodes a MESSAGE frame around a stored entry, sending the entry's bytes as they are.

    Args:
        cmd: the BaseCommand (type MESSAGE) to put in front.
        entry: a stored entry, with or without a broker-entry-metadata section.
        strip_broker_entry_metadata: drop that section, for consumers whose CONNECT did not set
            ``supports_broker_entry_metadata``.
    """
    if strip_broker_entry_metadata:
        entry = _skip_broker_entry_metadata(entry)
    return encode_message_frame_header(cmd, len(entry)) + entry


def add_broker_entry_metadata(entry: Buffer, broker_entry_metadata: pb.BrokerEntryMetadata) -> bytes:
    """Returns ``entry`` prefixed with a broker-entry-metadata section (replacing any it already had)."""
    return _broker_entry_metadata_section(broker_entry_metadata) + _skip_broker_entry_metadata(entry)


def _skip_broker_entry_metadata(entry: Buffer) -> Buffer:
    if len(entry) >= 6 and _U16.unpack_from(entry, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        start = 6 + _U32.unpack_from(entry, 2)[0]
        if start > len(entry):
            raise ProtocolError(f"broker entry metadata of {start - 6} bytes overruns a {len(entry)}-byte entry")
        return memoryview(entry)[start:]
    return entry


def split_broker_entry_metadata(entry: bytes) -> tuple[pb.BrokerEntryMetadata | None, bytes]:
    """Splits a stored entry into its broker entry metadata (None if absent) and the rest."""
    bem, start = _decode_broker_entry_metadata(entry, memoryview(entry), 0, len(entry))
    return bem, entry[start:] if start else entry


# --------------------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------------------


_M = TypeVar("_M", bound=Message)


def _parse(cls: type[_M], view: memoryview, what: str) -> _M:
    try:
        msg = cls.FromString(view)
    except DecodeError as exc:
        raise ProtocolError(f"undecodable {what} ({len(view)} bytes): {exc}") from None
    if not msg.IsInitialized():
        missing = ", ".join(msg.FindInitializationErrors())
        raise ProtocolError(f"{what} lacks required fields: {missing}")
    return msg


def _decode_broker_entry_metadata(
    data: bytes, view: memoryview, pos: int, end: int
) -> tuple[pb.BrokerEntryMetadata | None, int]:
    if end - pos < 2 or _U16.unpack_from(data, pos)[0] != MAGIC_BROKER_ENTRY_METADATA:
        return None, pos
    if end - pos < 6:
        raise ProtocolError("broker entry metadata section truncated before its size")
    size = _U32.unpack_from(data, pos + 2)[0]
    start = pos + 6
    if start + size > end:
        raise ProtocolError(f"broker entry metadata of {size} bytes overruns the {end - pos} bytes left")
    return _parse(pb.BrokerEntryMetadata, view[start : start + size], "broker entry metadata"), start + size


def _decode_entry(
    data: bytes, view: memoryview, pos: int, end: int, require_checksum: bool
) -> tuple[pb.BrokerEntryMetadata | None, pb.MessageMetadata | None, bytes | None, bool, bytes]:
    """Decodes ``data[pos:end]`` as an entry; returns (bem, metadata, payload, checksum_ok, entry)."""
    bem, pos = _decode_broker_entry_metadata(data, view, pos, end)
    entry_start = pos
    checksum_ok = True
    magic = _U16.unpack_from(data, pos)[0] if end - pos >= 2 else None
    if magic == MAGIC_CRC32C:
        if end - pos < 6:
            raise ProtocolError("entry truncated inside its checksum")
        stored = _U32.unpack_from(data, pos + 2)[0]
        pos += 6
        checksum_ok = crc32c(view[pos:end]) == stored
    elif require_checksum:
        found = "nothing" if magic is None else f"0x{magic:04x}"
        raise ProtocolError(f"bad magic: expected 0x{MAGIC_CRC32C:04x} (checksum) before the metadata, found {found}")
    entry = data[entry_start:end]
    try:
        if end - pos < 4:
            raise ProtocolError(f"entry truncated: {end - pos} bytes left where the metadata size belongs")
        md_size = _U32.unpack_from(data, pos)[0]
        md_start = pos + 4
        md_end = md_start + md_size
        if md_end > end:
            raise ProtocolError(f"message metadata of {md_size} bytes overruns the {end - md_start} bytes left")
        metadata = _parse(pb.MessageMetadata, view[md_start:md_end], "message metadata")
    except ProtocolError:
        if checksum_ok:
            raise
        return bem, None, None, False, entry  # corrupt bytes: reported through checksum_ok only
    return bem, metadata, data[md_end:end], checksum_ok, entry


def _decode_frame(data: bytes, view: memoryview, start: int, end: int, require_checksum: bool) -> Frame:
    """Decodes the frame whose bytes after ``total_size`` are ``data[start:end]``."""
    if end - start < 4:
        raise ProtocolError(f"frame of {end - start} bytes is too short to hold a command size")
    cmd_size = _U32.unpack_from(data, start)[0]
    cmd_end = start + 4 + cmd_size
    if cmd_end > end:
        raise ProtocolError(f"command size {cmd_size} exceeds the frame's {end - start - 4} bytes")
    cmd = _parse(BaseCommand, view[start + 4 : cmd_end], "command")
    field = _FIELD_BY_TYPE.get(cmd.type)
    if field is None or not cmd.HasField(field):
        raise ProtocolError(f"{_type_name(cmd.type)} command without its {field or 'body'} field")
    if cmd.type in _PAYLOAD_TYPES:
        if cmd_end == end:
            raise ProtocolError(f"{_type_name(cmd.type)} frame without metadata and payload")
        bem, metadata, payload, checksum_ok, entry = _decode_entry(data, view, cmd_end, end, require_checksum)
        return Frame(cmd, metadata, payload, checksum_ok, bem, entry)
    if cmd_end != end:
        raise ProtocolError(f"{end - cmd_end} unexpected bytes after a {_type_name(cmd.type)} command")
    return Frame(cmd)


def _type_name(command_type: int) -> str:
    """A command type's name, for error messages only (the enum lookup costs more than the decode)."""
    try:
        return BaseCommand.Type.Name(command_type)
    except ValueError:
        return f"command type {command_type}"


def parse_entry(entry: bytes, *, require_checksum: bool = True) -> Entry:
    """Parses a stored entry (as :func:`encode_entry` or ``Frame.entry`` made it).

    Raises:
        ChecksumError: the CRC32C does not match.
        ProtocolError: the bytes are not an entry.
    """
    view = memoryview(entry)
    bem, metadata, payload, checksum_ok, _ = _decode_entry(entry, view, 0, len(entry), require_checksum)
    if not checksum_ok:
        raise ChecksumError(f"entry of {len(entry)} bytes fails its CRC32C check")
    assert metadata is not None and payload is not None
    return Entry(metadata, payload, bem)


class FrameDecoder:
    """Turns a byte stream into :class:`Frame` objects; see the module docstring.

    Args:
        frame_size_bytes_max: largest accepted frame, counting its 4-byte size prefix (Pulsar's
            maxMessageSize plus 10 KiB of framing overhead by default).
        require_checksum: refuse SEND/MESSAGE entries without the 0x0e01 magic and checksum.
    """

    def __init__(
        self, *, frame_size_bytes_max: int = FRAME_SIZE_BYTES_MAX_DEFAULT, require_checksum: bool = True
    ) -> None:
        self.frame_size_bytes_max = frame_size_bytes_max
        self.require_checksum = require_checksum
        self._pending = bytearray()
        self._failed: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for a frame that has not fully arrived yet."""
        return len(self._pending)

    def feed(self, data: Buffer) -> list[Frame]:
        """Consumes ``data`` and returns every frame it completes, in order.

        Raises:
            ProtocolError: the stream is malformed (``err.frames`` holds the frames decoded before the
                bad one); the decoder then refuses any further input.
        """
        if self._failed is not None:
            raise ProtocolError(f"decoder stopped by an earlier protocol error: {self._failed}")
        pending = self._pending
        if pending:
            pending += data
            # Only materialize the buffer once a whole frame is there: copying it on every chunk of a
            # large frame would be quadratic.
            if not self._complete_frame_buffered():
                return []
            data = bytes(pending)
            pending.clear()
        elif not isinstance(data, bytes):
            data = bytes(data)
        frames: list[Frame] = []
        try:
            self._decode_all(data, frames)
        except ProtocolError as exc:
            exc.frames = tuple(frames)
            self._failed = exc
            self._pending = bytearray()
            raise
        return frames

    def _check_size(self, total_size: int) -> None:
        if total_size + 4 > self.frame_size_bytes_max:
            raise FrameTooLargeError(
                f"frame of {total_size + 4} bytes exceeds the maximum of {self.frame_size_bytes_max} bytes"
            )

    def _complete_frame_buffered(self) -> bool:
        pending = self._pending
        if len(pending) < 4:
            return False
        total_size = _U32.unpack_from(pending, 0)[0]
        try:
            self._check_size(total_size)
        except FrameTooLargeError as exc:
            self._failed = exc
            self._pending = bytearray()
            raise
        return len(pending) >= 4 + total_size

    def _decode_all(self, data: bytes, frames: list[Frame]) -> None:
        view = memoryview(data)
        size = len(data)
        pos = 0
        require_checksum = self.require_checksum
        while size - pos >= 4:
            total_size = _U32.unpack_from(data, pos)[0]
            self._check_size(total_size)
            end = pos + 4 + total_size
            if end > size:
                break
            frames.append(_decode_frame(data, view, pos + 4, end, require_checksum))
            pos = end
        if pos < size:
            self._pending += view[pos:]
