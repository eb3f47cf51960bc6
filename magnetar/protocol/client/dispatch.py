"""Where a connection hands each frame it reads: the half of :class:`~.connection.Connection` that routes.

A response (SUCCESS, ERROR, PRODUCER_SUCCESS, LOOKUP_RESPONSE...) completes the future of the request with
its ``request_id``; SEND_RECEIPT, SEND_ERROR and CLOSE_PRODUCER go to the producer registered under the
``producer_id``; MESSAGE, CLOSE_CONSUMER, REACHED_END_OF_TOPIC and ACTIVE_CONSUMER_CHANGE to the consumer
under the ``consumer_id``; WATCH_TOPIC_UPDATE to the topic-list watcher under the ``watcher_id``; PING is
answered with PONG and AUTH_CHALLENGE with fresh credentials. A frame for an id nobody registers (any more) is
dropped: it crossed a close.

:class:`ProducerHandler`, :class:`ConsumerHandler` and :class:`TopicListWatchHandler` are what registered
producers, consumers and topic-list watchers implement. Every call happens on the event loop and never awaits.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from magnetar.protocol import Frame, encode_command, pb, wrap

if TYPE_CHECKING:
    from .connection import Connection
    from .urls import ServiceUrl

__all__ = ["ConsumerHandler", "FrameDispatcher", "ProducerHandler", "TopicListWatchHandler"]

log = logging.getLogger("magnetar.protocol.client.connection")  # these lines are about a connection

T = pb.BaseCommand

_RESPONSE_TYPES = frozenset(
    (
        T.SUCCESS,
        T.ERROR,
        T.PRODUCER_SUCCESS,
        T.LOOKUP_RESPONSE,
        T.PARTITIONED_METADATA_RESPONSE,
        T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.CONSUMER_STATS_RESPONSE,
        T.ACK_RESPONSE,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        T.GET_SCHEMA_RESPONSE,
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
        T.WATCH_TOPIC_LIST_SUCCESS,
    )
)
_RESPONSE_FIELD = {
    T.SUCCESS: "success",
    T.ERROR: "error",
    T.PRODUCER_SUCCESS: "producer_success",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.ACK_RESPONSE: "ackResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
    T.WATCH_TOPIC_LIST_SUCCESS: "watchTopicListSuccess",
}


class ProducerHandler(Protocol):
    """What a connection calls on a registered producer (all on the event loop, never awaiting)."""

    def _handle_receipt(self, conn: Connection, receipt: pb.CommandSendReceipt) -> None: ...
    def _handle_send_error(self, conn: Connection, error: pb.CommandSendError) -> None: ...
    def _handle_broker_close(self, conn: Connection, assigned_url: str | None) -> None: ...
    def _handle_connection_closed(self, conn: Connection, exc: BaseException | None) -> None: ...


class TopicListWatchHandler(Protocol):
    """What a connection calls on a registered topic-list watcher (on the event loop, never awaiting)."""

    def _handle_topic_list_update(self, conn: Connection, update: pb.CommandWatchTopicUpdate) -> None: ...
    def _handle_connection_closed(self, conn: Connection, exc: BaseException | None) -> None: ...


class ConsumerHandler(Protocol):
    """What a connection calls on a registered consumer (all on the event loop, never awaiting)."""

    def _handle_message(self, conn: Connection, frame: Frame) -> None: ...
    def _handle_broker_close(self, conn: Connection, assigned_url: str | None) -> None: ...
    def _handle_end_of_topic(self, conn: Connection) -> None: ...
    def _handle_active_consumer_change(self, conn: Connection, is_active: bool) -> None: ...
    def _handle_connection_closed(self, conn: Connection, exc: BaseException | None) -> None: ...


class FrameDispatcher:
    """Routes one frame read by a connection (see the module docstring); :class:`~.connection.Connection`
    inherits it, supplying the registries below, ``write()`` and ``_auth_response()``."""

    url: ServiceUrl
    peer: str
    _requests: dict[int, asyncio.Future[pb.BaseCommand]]
    _producers: dict[int, ProducerHandler]
    _consumers: dict[int, ConsumerHandler]
    _topic_list_watchers: dict[int, TopicListWatchHandler]

    if TYPE_CHECKING:
        def write(self, *buffers: bytes) -> None: ...
        def _auth_response(self) -> pb.BaseCommand: ...

    def _dispatch(self, frame: Frame) -> None:
        cmd = frame.command
        t = cmd.type
        if t == T.MESSAGE:
            consumer = self._consumers.get(cmd.message.consumer_id)
            if consumer is not None:
                consumer._handle_message(self, frame)
            else:
                log.debug("[%s] MESSAGE for unknown consumer %d", self.peer, cmd.message.consumer_id)
        elif t == T.SEND_RECEIPT:
            producer = self._producers.get(cmd.send_receipt.producer_id)
            if producer is not None:
                producer._handle_receipt(self, cmd.send_receipt)
        elif t == T.SEND_ERROR:
            producer = self._producers.get(cmd.send_error.producer_id)
            if producer is not None:
                producer._handle_send_error(self, cmd.send_error)
            else:  # e.g. sends that crossed a CLOSE_PRODUCER: re-sent after reconnection
                log.debug("[%s] SEND_ERROR for unknown producer %d: %s", self.peer, cmd.send_error.producer_id,
                          cmd.send_error.message)
        elif t in _RESPONSE_TYPES:
            body = getattr(cmd, _RESPONSE_FIELD[t])
            if t == T.PRODUCER_SUCCESS and not body.producer_ready:
                log.info("[%s] producer %s waits for exclusive access", self.peer, body.producer_name)
                return
            fut = self._requests.get(body.request_id)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            else:
                log.debug("[%s] %s for unknown request %d", self.peer, T.Type.Name(t), body.request_id)
        elif t == T.PING:
            self.write(encode_command(wrap(pb.CommandPong())))
        elif t == T.PONG:
            pass
        elif t == T.CLOSE_PRODUCER:
            body = cmd.close_producer
            producer = self._producers.pop(body.producer_id, None)
            if producer is not None:
                producer._handle_broker_close(self, self._assigned(body))
        elif t == T.CLOSE_CONSUMER:
            body = cmd.close_consumer
            consumer = self._consumers.pop(body.consumer_id, None)
            if consumer is not None:
                consumer._handle_broker_close(self, self._assigned(body))
        elif t == T.TOPIC_MIGRATED:
            body = cmd.topicMigrated
            url = (body.brokerServiceUrlTls if self.url.tls else body.brokerServiceUrl) or None
            if body.resource_type == pb.CommandTopicMigrated.Producer:
                producer = self._producers.pop(body.resource_id, None)
                if producer is not None:
                    producer._handle_broker_close(self, url)
            else:
                consumer = self._consumers.pop(body.resource_id, None)
                if consumer is not None:
                    consumer._handle_broker_close(self, url)
        elif t == T.REACHED_END_OF_TOPIC:
            consumer = self._consumers.get(cmd.reachedEndOfTopic.consumer_id)
            if consumer is not None:
                consumer._handle_end_of_topic(self)
        elif t == T.ACTIVE_CONSUMER_CHANGE:
            body = cmd.active_consumer_change
            consumer = self._consumers.get(body.consumer_id)
            if consumer is not None:
                consumer._handle_active_consumer_change(self, body.is_active)
        elif t == T.WATCH_TOPIC_UPDATE:
            watcher = self._topic_list_watchers.get(cmd.watchTopicUpdate.watcher_id)
            if watcher is not None:
                watcher._handle_topic_list_update(self, cmd.watchTopicUpdate)
        elif t == T.AUTH_CHALLENGE:
            self.write(encode_command(self._auth_response()))
        else:
            log.warning("[%s] ignoring unexpected %s from the broker", self.peer, T.Type.Name(t))

    def _assigned(self, body: pb.CommandCloseProducer | pb.CommandCloseConsumer) -> str | None:
        url = body.assignedBrokerServiceUrlTls if self.url.tls else body.assignedBrokerServiceUrl
        return url or None
