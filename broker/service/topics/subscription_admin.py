"""A persistent topic's subscriptions as the admin API and policies handle them: create, ensure, delete, seek
(reset by position or time), skip, expire, message TTL, and the replicated-subscription updates another
cluster sends. Consumers attaching through SUBSCRIBE are ``topic.py``'s.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Optional, Union

from broker.managed_ledger.api import InitialPosition, Position

from ..errors import NotAllowedError, SubscriptionAlreadyExistsError
from ..tasks import shielded
from . import dedup as dedup_mod
from .common import TopicState
from .compaction.logic import COMPACTION_CURSOR
from .entries import publish_time_of
from .model import LATEST_ID
from .replication import is_replication_cursor
from .subscription import REPLICATED_PROPERTY, Subscription, ensure_found

if TYPE_CHECKING:
    from .consumer import Consumer

log = logging.getLogger("broker.service.topics.topic")

RESERVED_SUBSCRIPTIONS = frozenset({dedup_mod.CURSOR_NAME, COMPACTION_CURSOR})


def is_reserved_subscription(name: str) -> bool:
    """Cursors the broker keeps for itself (deduplication snapshots, one per replication target)."""
    return name in RESERVED_SUBSCRIPTIONS or is_replication_cursor(name)


class TopicSubscriptions:
    """Mixed into ``Topic``: reads its ``ml``, ``subscriptions``, ``policies``, ``state`` and subscription locks."""

    def _subscription(self, name: str) -> Subscription:
        return ensure_found(self.subscriptions.get(name), name, self.name)

    async def create_subscription(self, name: str, position: Union[Position, str] = "latest") -> Subscription:
        """Admin: creates a durable subscription at ``position`` ("earliest", "latest" or a Position)."""
        self.check_active()
        if not name or is_reserved_subscription(name):
            raise NotAllowedError(f"subscription name {name!r} is reserved or empty")
        async with self._lock_for(name):
            if name in self.subscriptions:
                raise SubscriptionAlreadyExistsError(f"subscription {name!r} already exists on {self.name}")
            initial = InitialPosition.EARLIEST if position == "earliest" else InitialPosition.LATEST
            cursor = await shielded(self.ml.open_cursor(name, initial_position=initial))
            sub = Subscription(self, name, cursor, durable=True)
            self.subscriptions[name] = sub
            if isinstance(position, tuple):
                await sub.reset(Position(*position))
            return sub

    async def ensure_subscription(self, name: str) -> Subscription:
        """The durable subscription ``name``, created at the earliest position if missing (a producer's
        ``initial_subscription_name``, as Pulsar does)."""
        sub = self.subscriptions.get(name)
        if sub is not None and not sub.closed:
            return sub
        try:
            return await self.create_subscription(name, "earliest")
        except SubscriptionAlreadyExistsError:
            return self.subscriptions[name]

    async def apply_replicated_subscription_update(self, name: str, position: Position) -> None:
        """Another cluster's replicated subscription ``name`` passed a snapshot whose position here is
        ``position``: the local subscription (created, replicated, when missing) moves up to it, never back."""
        if self.state is not TopicState.ACTIVE or is_reserved_subscription(name) or not name:
            return
        sub = self.subscriptions.get(name)
        if sub is None:
            async with self._lock_for(name):
                sub = self.subscriptions.get(name)
                if sub is None:
                    cursor = await shielded(self.ml.open_cursor(name, initial_position=InitialPosition.EARLIEST))
                    sub = Subscription(self, name, cursor, durable=True)
                    self.subscriptions[name] = sub
                    await sub.set_replicated(True)  # stored with the cursor
                    log.info("[%s] replicated subscription %s created by another cluster", self.name, name)
        if not sub.durable or sub.closed:
            return
        if position > self.ml.last_confirmed_position:
            position = self.ml.last_confirmed_position
        await sub.mark_delete_up_to(position)

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        await self._subscription(name).delete(force=force)

    async def unsubscribe(self, consumer: Consumer) -> None:
        await consumer.subscription.delete(requester=consumer)

    async def find_position(self, timestamp_ms: int) -> Position:
        return await self.ml.find_position_by_publish_time(timestamp_ms, publish_time_of)

    def seek_position(self, ledger_id: int, entry_id: int) -> Position:
        """The cursor position a seek to message id (ledger, entry) resets to."""
        if ledger_id < 0:
            return self.ml.first_position()
        if ledger_id == LATEST_ID:
            return self.ml.next_position(self.ml.last_confirmed_position)
        return Position(ledger_id, max(entry_id, 0))

    async def reset_cursor(self, sub_name: str, *, position: Optional[Position] = None,
                           timestamp_ms: Optional[int] = None) -> None:
        sub = self._subscription(sub_name)
        if position is None:
            if timestamp_ms is None:
                raise NotAllowedError("reset_cursor needs a position or a timestamp")
            position = await self.find_position(timestamp_ms)
        await sub.reset(position)

    async def skip(self, sub_name: str, n: int) -> int:
        """Acknowledges the next ``n`` unacknowledged entries; returns how many were skipped."""
        sub = self._subscription(sub_name)
        await sub.drain_acks()
        reader = self.ml.new_non_durable_cursor(sub.cursor.mark_delete_position, name=f"{sub_name}.skip")
        skipped = 0
        target: Optional[Position] = None
        while skipped < n:
            entries = await reader.read_entries(min(500, n - skipped + 100))
            if not entries:
                break
            for e in entries:
                if sub.is_acked(e.position):
                    continue
                skipped += 1
                target = e.position
                if skipped >= n:
                    break
        if target is not None:
            await sub.mark_delete_up_to(target)
        return skipped

    async def expire(self, sub_name: str, seconds: float) -> int:
        """Acknowledges every entry published more than ``seconds`` ago; returns entries expired."""
        sub = self._subscription(sub_name)
        return await self._expire(sub, seconds)

    async def _expire(self, sub: Subscription, seconds: float) -> int:
        cutoff = int(time.time() * 1000 - seconds * 1000)
        first_kept = await self.find_position(cutoff)
        lac = self.ml.last_confirmed_position
        target = lac if first_kept > lac else Position(first_kept.ledger_id, first_kept.entry_id - 1)
        if target <= sub.cursor.mark_delete_position:
            return 0
        before = sub.cursor.backlog_entries()
        await sub.mark_delete_up_to(target)
        expired = max(0, before - sub.cursor.backlog_entries())
        sub.msg_expired.record(expired)
        sub.last_expire_ms = int(time.time() * 1000)
        return expired

    async def check_message_ttl(self) -> None:
        ttl = self.policies.message_ttl_in_seconds if self.policies else None
        if not ttl or ttl <= 0 or self.state is not TopicState.ACTIVE:
            return
        for sub in list(self.subscriptions.values()):
            if sub.durable and not sub.closed:
                try:
                    await self._expire(sub, ttl)
                except Exception as exc:
                    log.warning("[%s][%s] TTL expiry failed: %s", self.name, sub.name, exc)
