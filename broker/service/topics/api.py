"""What topic code needs from the session room, as small Protocols the session implements.

Topics, subscriptions and dispatchers never import a connection or a protocol command: a consumer reaches its
client through a :class:`ConsumerSink`, and a producer's SENDs are answered through the :class:`TopicProducer`
it is (a publish tracker: the topic hands it each SEND's storage future and the producer answers receipts in
order). ``session.connection.Connection`` is the sink; ``session.producer.Producer`` the producer. Unit tests
drive topics with fakes of both.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence

from broker.managed_ledger.api import Entry, Position

if TYPE_CHECKING:
    from ..policies.subjects import ReadPauser
    from ..stats import RateMeter
    from .consumer import Consumer
    from .model import AccessMode


class ConsumerSink(Protocol):
    """The client end of a consumer: the connection it subscribed on."""

    remote_address: str
    client_version: str

    @property
    def closed(self) -> bool: ...

    def send_messages(self, consumer: "Consumer", items: Sequence[tuple[Entry, int, Sequence[int]]]) -> None:
        """One MESSAGE per ``(entry, redelivery_count, ack_set_words)``, the stored entry sent as it is."""

    def write_blocked(self) -> bool:
        """Too much is buffered for the client: dispatchers wait for :meth:`drain` before sending more."""

    async def drain(self) -> None: ...

    def notify_active(self, consumer: "Consumer", active: bool) -> None:
        """ACTIVE_CONSUMER_CHANGE (Failover / Exclusive)."""

    def notify_end_of_topic(self, consumer: "Consumer") -> bool:
        """REACHED_END_OF_TOPIC, when the client handles it; returns whether it was sent."""

    def notify_consumer_closed(self, consumer: "Consumer") -> None:
        """The broker closed the consumer (CLOSE_CONSUMER): the client reconnects after a fresh lookup."""

    def forget_consumer(self, consumer_id: int, consumer: "Consumer") -> None:
        """The consumer is gone (unsubscribed): commands naming its id are refused from now on."""


class TopicProducer(Protocol):
    """A producer as its topic sees it: who it is, its access, its meters, and where receipts go."""

    producer_id: int
    name: str
    access_mode: "AccessMode"
    epoch: int
    topic_epoch: Optional[int]
    user_provided_name: bool
    is_replicator: bool
    origin_cluster: str
    closed: bool
    schema_version: bytes
    metadata: Mapping[str, str]
    msg_in: "RateMeter"
    bytes_in: "RateMeter"
    connection: "ReadPauser"

    @property
    def exclusive(self) -> bool: ...

    def track(self, sequence_id: int, highest_sequence_id: Optional[int],
              future: "asyncio.Future[Position]", *, started: Optional[float] = None) -> None:
        """Registers a SEND whose receipt (or error) follows ``future``; receipts leave in SEND order.
        ``started`` (``time.perf_counter()``): when the SEND arrived (default: now)."""

    def expect(self, sequence_id: int, highest_sequence_id: Optional[int], *,
               started: Optional[float] = None) -> Callable[["asyncio.Future[Position]"], None]:
        """Registers a SEND as :meth:`track` does, before its entry is handed to storage; returns what storage
        calls with the entry's future once it is done (the managed ledger's ``on_done``)."""

    def notify_closed(self) -> None:
        """The broker closed the producer (CLOSE_PRODUCER): the client reconnects after a fresh lookup."""

    def tick(self) -> None: ...

    def stats(self) -> Any: ...
