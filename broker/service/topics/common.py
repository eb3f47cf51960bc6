"""What persistent (``topic.py``) and non-persistent (``nonpersistent/topic.py``) topics share: their state,
background tasks, the "still serving" check, producer admission (``producer_access.py``), publish metering and
the per-window tick of their meters. Each topic class keeps what differs (storage, dispatch, stats shape)."""

from __future__ import annotations

import asyncio
import enum
from typing import TYPE_CHECKING

from ..errors import ServiceNotReadyError, topic_not_ready
from ..tasks import spawn
from .producer_access import ProducerAccess

if TYPE_CHECKING:
    from .api import TopicProducer as Producer


class TopicState(enum.Enum):
    ACTIVE = "active"
    CLOSING = "closing"
    CLOSED = "closed"
    DELETED = "deleted"


class TopicCommon(ProducerAccess):
    """A mixin over ``name``, ``state``, ``_tasks``, ``producers``, ``_waiting_exclusive``, ``subscriptions``,
    ``msg_in``, ``bytes_in`` and ``rate_limits``."""

    def spawn(self, coro, name: str) -> asyncio.Task:
        """Runs ``coro`` in the background, kept referenced until it ends."""
        return spawn(self._tasks, coro, name)

    @property
    def serving(self) -> bool:
        """Loaded and active: not closing, closed or deleted."""
        return self.state is TopicState.ACTIVE

    def check_active(self) -> None:
        if self.state is not TopicState.ACTIVE:
            raise topic_not_ready(self.name, self.state.value)

    def _accepting_producers(self) -> bool:
        return self.state is TopicState.ACTIVE

    def has_clients(self) -> bool:
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    def _disconnect_producers(self) -> None:
        """The first step of closing: the publish rate limit stops, producers are told the topic closed (their
        clients reconnect and look it up again) and producers waiting for exclusive access are refused."""
        self.rate_limits.close()
        for producer in list(self.producers.values()):
            producer.notify_closed()
        self.producers.clear()
        while self._waiting_exclusive:
            _producer, fut = self._waiting_exclusive.popleft()
            if not fut.done():
                fut.set_exception(ServiceNotReadyError(f"topic {self.name} is closing"))

    def _count_published(self, producer: Producer, messages: int, size: int) -> None:
        """Meters one published entry on the producer and the topic, and charges the publish rate limit."""
        producer.msg_in.record(messages)
        producer.bytes_in.record(size)
        self.msg_in.record(messages)
        self.bytes_in.record(size)
        self.rate_limits.on_published(messages, size)

    def _tick_traffic(self) -> None:
        """Closes the rate window of the topic's, its producers' and its subscriptions' meters."""
        self.msg_in.tick()
        self.bytes_in.tick()
        self.rate_limits.tick()
        for p in self.producers.values():
            p.tick()
        for s in self.subscriptions.values():
            s.tick()
