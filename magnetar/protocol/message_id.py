"""Message ids: where a message sits in a topic.

``(ledger_id, entry_id)`` names the entry; ``batch_index`` the message inside a batched entry (-1 when the
entry holds one message); ``partition`` the partition of a partitioned topic (-1 otherwise). Ids order as
Pulsar orders them: by ledger, entry, partition, then batch index. ``batch_size`` is carried along (clients
serialize it) but is not part of identity or order.

On the wire ledger and entry ids are uint64, but clients use signed values: the *earliest* id is
``(-1, -1)`` (sent as 2^64 - 1) and the *latest* ``(2^63 - 1, 2^63 - 1)``. This module maps between the
two, so :meth:`MessageId.serialize` produces the same bytes as pulsar-client's ``MessageId.serialize()``
(a serialized ``MessageIdData`` with only the non-default fields set), and :meth:`MessageId.deserialize`
reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.errors import InvalidMessageIdError

__all__ = ["MessageId"]

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def _to_signed(value: int) -> int:
    return value - _U64 if value > _I64_MAX else value


@dataclass(frozen=True, order=True, slots=True)
class MessageId:
    """An ordered, hashable message id (see the module docstring)."""

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = field(default=0, compare=False)

    EARLIEST: ClassVar[MessageId]
    LATEST: ClassVar[MessageId]

    def __str__(self) -> str:
        text = f"{self.ledger_id}:{self.entry_id}:{self.partition}"
        return f"{text}:{self.batch_index}" if self.batch_index >= 0 else text

    @property
    def is_batched(self) -> bool:
        """True when this id names one message inside a batched entry."""
        return self.batch_index >= 0

    def entry(self) -> MessageId:
        """The id of the whole entry (batch index dropped), as cursors and acknowledgements of entries use it."""
        if self.batch_index == -1 and self.batch_size == 0:
            return self
        return MessageId(self.ledger_id, self.entry_id, self.partition)

    def to_proto(self, message: pb.MessageIdData | None = None) -> pb.MessageIdData:
        """Fills ``message`` (or a new ``MessageIdData``), setting only non-default fields."""
        data = pb.MessageIdData() if message is None else message
        data.ledgerId = self.ledger_id % _U64
        data.entryId = self.entry_id % _U64
        if self.partition != -1:
            data.partition = self.partition
        if self.batch_index != -1:
            data.batch_index = self.batch_index
        if self.batch_size:
            data.batch_size = self.batch_size
        return data

    @classmethod
    def from_proto(cls, data: pb.MessageIdData) -> MessageId:
        """Reads a ``MessageIdData`` (absent partition and batch index mean -1)."""
        return cls(
            _to_signed(data.ledgerId),
            _to_signed(data.entryId),
            data.partition,
            data.batch_index,
            data.batch_size,
        )

    def serialize(self) -> bytes:
        """Bytes equal to pulsar-client's ``MessageId.serialize()`` for the same id."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        """Reads bytes from :meth:`serialize` or pulsar-client's ``MessageId.serialize()``.

        Raises:
            InvalidMessageIdError: the bytes are not a serialized ``MessageIdData``.
        """
        try:
            message = pb.MessageIdData.FromString(data)
        except (DecodeError, TypeError) as exc:
            raise InvalidMessageIdError(f"not a serialized message id ({len(data)} bytes): {exc}") from None
        if not message.IsInitialized():
            raise InvalidMessageIdError(f"serialized message id lacks {', '.join(message.FindInitializationErrors())}")
        return cls.from_proto(message)


MessageId.EARLIEST = MessageId(-1, -1)
MessageId.LATEST = MessageId(_I64_MAX, _I64_MAX)
