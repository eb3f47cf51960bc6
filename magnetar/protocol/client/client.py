"""The client: a connection pool, lookups, and the producers and consumers created through it."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import ssl
import time
from collections.abc import Mapping

from magnetar.protocol import MessageId
from magnetar.topic_name import TopicName

from .auth import Auth
from .backoff import Backoff
from .commands import CLIENT_VERSION
from .consumer import Consumer, InitialPosition, SubscriptionType
from .errors import AlreadyClosedError, ClientError, NotAllowedError
from .lookup import ConnectionPool, LookupResult, LookupService
from .producer import AccessMode, Producer
from .urls import parse_service_url

__all__ = ["Client"]

log = logging.getLogger(__name__)


class Client:
    """Magnetar's asyncio client of Pulsar's binary protocol.

    ::

        async with Client("pulsar://localhost:6650") as client:
            producer = await client.create_producer("persistent://public/default/t")
            msg_id = await producer.send_and_wait(b"hello")
            consumer = await client.subscribe("persistent://public/default/t", "sub",
                                              initial_position=InitialPosition.EARLIEST)
            msg = await consumer.receive()
            consumer.ack(msg)

    Args:
        service_url: ``pulsar://host:port[,host:port]`` or ``pulsar+ssl://...`` (a broker or a proxy).
        ssl_context: TLS settings (CA, client certificate for mTLS) for ``pulsar+ssl://``.
        auth: credentials (``Auth.token(jwt)``, ``Auth.tls()``).
        operation_timeout_s: per request, and how long creating a producer/consumer keeps retrying.
        connect_timeout_s: TCP/TLS connect plus the CONNECT handshake.
        keep_alive_interval_s: PING after this long without traffic.
        max_lookup_redirects: most Redirect answers followed per lookup.
        listener_name: advertised listener asked for in lookups ("" = the broker's default).
        backoff_initial_s, backoff_max_s: reconnection delays of producers and consumers.
    """

    def __init__(
        self,
        service_url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        auth: Auth | None = None,
        operation_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        keep_alive_interval_s: float = 30.0,
        max_lookup_redirects: int = 20,
        listener_name: str = "",
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 30.0,
        client_version: str = CLIENT_VERSION,
    ) -> None:
        self.service_url = parse_service_url(service_url)
        self.operation_timeout_s = operation_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.pool = ConnectionPool(
            ssl_context=ssl_context,
            auth=auth,
            connect_timeout_s=connect_timeout_s,
            operation_timeout_s=operation_timeout_s,
            keep_alive_interval_s=keep_alive_interval_s,
            client_version=client_version,
        )
        self.lookup_service = LookupService(
            self.pool, self.service_url, max_redirects=max_lookup_redirects, listener_name=listener_name
        )
        self._producer_ids = itertools.count(0)
        self._consumer_ids = itertools.count(0)
        self._producers: set[Producer] = set()
        self._consumers: set[Consumer] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<Client {self.service_url} producers={len(self._producers)} consumers={len(self._consumers)}>"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosedError("the client is closed")

    def _backoff(self) -> Backoff:
        return Backoff(initial_s=self.backoff_initial_s, max_s=max(self.backoff_max_s, self.backoff_initial_s))

    # -- lookups -------------------------------------------------------------------------------------------

    async def lookup(self, topic: str) -> LookupResult:
        """Which broker serves ``topic`` (and through which address)."""
        self._check_open()
        return await self.lookup_service.lookup(str(TopicName.parse(topic)))

    async def get_partitions(self, topic: str) -> int:
        """The number of partitions of ``topic`` (0 when it is not partitioned).

        Retriable failures (no broker reachable yet...) are retried with backoff for ``operation_timeout_s``.
        """
        self._check_open()
        name = str(TopicName.parse(topic))
        backoff = self._backoff()
        deadline = time.monotonic() + self.operation_timeout_s
        while True:
            try:
                return await self.lookup_service.partitioned_metadata(name)
            except ClientError as exc:
                delay = backoff.next_delay_s()
                if not exc.retriable or self._closed or time.monotonic() + delay > deadline:
                    raise
                log.info("partitioned metadata of %s: %s; retrying in %.2f s", name, exc, delay)
                await asyncio.sleep(delay)

    async def get_partitioned_topic_names(self, topic: str) -> list[str]:
        """The partitions' names, or ``[topic]`` when it is not partitioned."""
        name = TopicName.parse(topic)
        count = 0 if name.is_partition else await self.get_partitions(str(name))
        return [name.partition_name(i) for i in range(count)] if count else [str(name)]

    # -- producers and consumers ---------------------------------------------------------------------------

    async def create_producer(
        self,
        topic: str,
        *,
        producer_name: str | None = None,
        access_mode: AccessMode = AccessMode.SHARED,
        max_pending_sends: int = 1000,
        send_timeout_s: float = 30.0,
        properties: Mapping[str, str] | None = None,
        initial_sequence_id: int | None = None,
    ) -> Producer:
        """Creates a producer on ``topic`` (a non-partitioned topic or one partition).

        As pulsar-client does, it asks for the partitioned metadata first: a partitioned topic gets a
        producer per partition (``get_partitioned_topic_names``), which this client leaves to the caller.

        Raises:
            NotAllowedError: ``topic`` is a partitioned topic.
            ServerError: the broker refused (see ``Producer.start``).
        """
        self._check_open()
        name = TopicName.parse(topic)
        if not name.is_partition:
            partitions = await self.get_partitions(str(name))
            if partitions:
                raise NotAllowedError(
                    f"{name} has {partitions} partitions: create one producer per partition "
                    f"({name.partition_name(0)} ...)"
                )
        producer = Producer(
            self.lookup_service,
            str(name),
            next(self._producer_ids),
            producer_name=producer_name,
            access_mode=access_mode,
            max_pending_sends=max_pending_sends,
            send_timeout_s=send_timeout_s,
            operation_timeout_s=self.operation_timeout_s,
            properties=properties,
            initial_sequence_id=initial_sequence_id,
            backoff=self._backoff(),
        )
        self._producers.add(producer)
        producer.on_close(self._producers.discard)  # type: ignore[arg-type]
        try:
            await producer.start()
        except BaseException:
            self._producers.discard(producer)
            raise
        return producer

    async def subscribe(
        self,
        topic: str,
        subscription: str,
        *,
        subscription_type: SubscriptionType = SubscriptionType.EXCLUSIVE,
        initial_position: InitialPosition = InitialPosition.LATEST,
        consumer_name: str | None = None,
        receiver_queue_size: int = 1000,
        replicate_subscription_state: bool = False,
        read_compacted: bool = False,
        priority_level: int | None = None,
        properties: Mapping[str, str] | None = None,
        ack_group_time_s: float = 0.1,
        durable: bool = True,
        start_message_id: MessageId | None = None,
        whole_entries: bool = False,
    ) -> Consumer:
        """Subscribes to ``topic`` (a non-partitioned topic or one partition); ``whole_entries``: see
        :class:`Consumer`.

        Raises:
            NotAllowedError: ``topic`` is a partitioned topic (subscribe to each partition).
            ServerError: the broker refused (``ConsumerBusyError``: an Exclusive subscription is taken...).
        """
        self._check_open()
        name = TopicName.parse(topic)
        if not name.is_partition:
            partitions = await self.get_partitions(str(name))
            if partitions:
                raise NotAllowedError(
                    f"{name} has {partitions} partitions: subscribe to each partition ({name.partition_name(0)} ...)"
                )
        consumer = Consumer(
            self.lookup_service,
            str(name),
            subscription,
            next(self._consumer_ids),
            subscription_type=subscription_type,
            initial_position=initial_position,
            consumer_name=consumer_name,
            receiver_queue_size=receiver_queue_size,
            durable=durable,
            start_message_id=start_message_id,
            replicate_subscription_state=replicate_subscription_state,
            read_compacted=read_compacted,
            priority_level=priority_level,
            properties=properties,
            ack_group_time_s=ack_group_time_s,
            whole_entries=whole_entries,
            operation_timeout_s=self.operation_timeout_s,
            backoff=self._backoff(),
        )
        self._consumers.add(consumer)
        consumer.on_close(self._consumers.discard)  # type: ignore[arg-type]
        try:
            await consumer.start()
        except BaseException:
            self._consumers.discard(consumer)
            raise
        return consumer

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = MessageId.EARLIEST,
        *,
        receiver_queue_size: int = 1000,
        subscription: str | None = None,
    ) -> Consumer:
        """A reader: a non-durable Exclusive subscription starting after ``start_message_id``
        (``MessageId.EARLIEST``: from the first message; ``MessageId.LATEST``: only new ones)."""
        return await self.subscribe(
            topic,
            subscription or f"reader-{os.urandom(5).hex()}",
            subscription_type=SubscriptionType.EXCLUSIVE,
            initial_position=InitialPosition.EARLIEST if start_message_id == MessageId.EARLIEST else InitialPosition.LATEST,
            receiver_queue_size=receiver_queue_size,
            durable=False,
            start_message_id=start_message_id,
        )

    async def close(self) -> None:
        """Closes every producer and consumer, then every connection (idempotent)."""
        if self._closed:
            return
        self._closed = True
        handlers = [*self._producers, *self._consumers]
        self._producers.clear()
        self._consumers.clear()
        results = await asyncio.gather(*(h.close() for h in handlers), return_exceptions=True)
        for handler, result in zip(handlers, results):
            if isinstance(result, BaseException):
                log.warning("closing %r failed: %r", handler, result)
        await self.pool.close()
