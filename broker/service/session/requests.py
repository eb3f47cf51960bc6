"""Protocol commands turned into the plain values topics are asked with (``topics/model.py``).

The one place where a ``CommandSubscribe``, ``CommandAck`` or ``MessageIdData`` becomes topic vocabulary:
unsigned wire ids become signed ones (``-1`` is the earliest; ``2^63 - 1`` the latest), optional fields
become None, repeated key-values become mappings. Pure.
"""

from __future__ import annotations

from typing import Optional, Sequence

from broker.managed_ledger.api import InitialPosition, Position
from magnetar.protocol import pb

from ..topics.model import AckedId, KeySharedMode, KeySharedSpec, StartMessageId, SubscribeRequest, SubType

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def signed(value: int) -> int:
    """A uint64 wire id as the signed id clients mean (2^64 - 1 is -1)."""
    return value - _U64 if value > _I64_MAX else value


def position_of(mid: pb.MessageIdData) -> Position:
    return Position(signed(mid.ledgerId), signed(mid.entryId))


def acked_ids(ids: Sequence[pb.MessageIdData]) -> list[AckedId]:
    return [AckedId(Position(signed(m.ledgerId), signed(m.entryId)), tuple(m.ack_set)) for m in ids]


def key_shared_spec(meta: Optional[pb.KeySharedMeta]) -> Optional[KeySharedSpec]:
    if meta is None:
        return None
    return KeySharedSpec(mode=KeySharedMode(meta.keySharedMode),
                         hash_ranges=tuple((r.start, r.end) for r in meta.hashRanges),
                         allow_out_of_order=bool(meta.allowOutOfOrderDelivery))


def subscribe_request(cmd: pb.CommandSubscribe, consumer_name: str) -> SubscribeRequest:
    start = None
    if cmd.HasField("start_message_id"):
        mid = cmd.start_message_id
        start = StartMessageId(signed(mid.ledgerId), signed(mid.entryId),
                               mid.batch_index if mid.HasField("batch_index") else -1)
    return SubscribeRequest(
        subscription=cmd.subscription,
        sub_type=SubType(cmd.subType),
        consumer_id=cmd.consumer_id,
        consumer_name=consumer_name,
        durable=cmd.durable,
        initial_position=(InitialPosition.EARLIEST if cmd.initialPosition == pb.CommandSubscribe.Earliest
                          else InitialPosition.LATEST),
        start_message_id=start,
        start_message_rollback_duration_s=cmd.start_message_rollback_duration_sec,
        read_compacted=bool(cmd.read_compacted),
        replicate_subscription_state=(cmd.replicate_subscription_state
                                      if cmd.HasField("replicate_subscription_state") else None),
        priority_level=cmd.priority_level,
        key_shared=key_shared_spec(cmd.keySharedMeta if cmd.HasField("keySharedMeta") else None),
        consumer_epoch=cmd.consumer_epoch if cmd.HasField("consumer_epoch") else None,
        metadata={kv.key: kv.value for kv in cmd.metadata},
    )
