"""The plain values topics are asked with: what a client asked for, without the protocol's classes.

The session room turns each protocol command into these (``session/requests.py``), so topic code never sees
a ``Command*`` message and can be driven by unit tests with plain values. Enum values are Pulsar's wire
numbers (``PulsarApi.proto``: ``CommandSubscribe.SubType``, ``KeySharedMode``, ``ProducerAccessMode``), so a
value read from a command converts with ``SubType(cmd.subType)`` and back with ``int()``. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Optional, Sequence

from broker.managed_ledger.api import InitialPosition, Position


class SubType(enum.IntEnum):
    """A subscription's type (Pulsar's ``CommandSubscribe.SubType``)."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class KeySharedMode(enum.IntEnum):
    AUTO_SPLIT = 0
    STICKY = 1


class AccessMode(enum.IntEnum):
    """A producer's access to its topic (Pulsar's ``ProducerAccessMode``)."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


@dataclass(frozen=True)
class KeySharedSpec:
    """A Key_Shared consumer's wishes: the mode, its hash ranges (STICKY; inclusive bounds) and whether keys
    may be delivered out of order when consumers join."""

    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    hash_ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order: bool = False


LATEST_ID = (1 << 63) - 1  # the ledger and entry id of MessageId.latest, as clients send it (signed)


@dataclass(frozen=True)
class StartMessageId:
    """A reader's start id as the client sent it (signed ledger and entry ids; ``(-1, -1)`` is the earliest,
    ``(2^63 - 1, 2^63 - 1)`` the latest)."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1


@dataclass(frozen=True)
class SubscribeRequest:
    """What SUBSCRIBE asks of a topic (Pulsar's ``CommandSubscribe``, minus the connection's bookkeeping)."""

    subscription: str
    sub_type: SubType
    consumer_id: int
    consumer_name: str
    durable: bool = True
    initial_position: InitialPosition = InitialPosition.LATEST
    start_message_id: Optional[StartMessageId] = None
    start_message_rollback_duration_s: int = 0
    read_compacted: bool = False
    replicate_subscription_state: Optional[bool] = None
    priority_level: int = 0
    key_shared: Optional[KeySharedSpec] = None
    consumer_epoch: Optional[int] = None
    metadata: Mapping[str, str] = field(default_factory=dict)


class AckedId(NamedTuple):
    """One acknowledged message id: its entry and, for a batch-index acknowledgement, the ack set words (Pulsar's
    ``ack_set``: the bits of the batch members still unacknowledged). A tuple: one is made per acknowledged id."""

    position: Position
    ack_set: Sequence[int] = ()
