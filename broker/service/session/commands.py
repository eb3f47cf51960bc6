"""The command table: which function serves which ``BaseCommand`` type, and how errors are answered.

Handlers take ``(connection, frame)``. Plain functions run inline in frame order; coroutines run as tasks
(see ``connection.py``). They raise :class:`~.errors.BrokerServiceError` subclasses; :func:`error_response`
turns one into the answer the command expects. This module serves the connection-level commands
(handshake, keep-alive, lookups, topic lists and their watchers, schemas) and refuses transactions; producer
and consumer commands live in ``producer_commands.py`` and ``consumer_commands.py``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Optional

from magnetar.protocol import pb, wrap

from . import auth
from . import consumer_commands as handlers_consumer
from . import producer_commands as handlers_producer
from . import schema_commands as schemas
from .connection import ConnectionState, request_id_of
from ..errors import BrokerServiceError, NotAllowedError, UnsupportedError, map_error, parse_topic
from .topic_list import parse_namespace, topics_hash, try_compile_topics_pattern

if TYPE_CHECKING:
    from magnetar.protocol import Frame

    from .connection import Connection

log = logging.getLogger("broker.service.session.commands")

BaseCommand = pb.BaseCommand
MAX_PROTOCOL_VERSION = 20
ServerError = pb.ServerError


# ------------------------------------------------------------------------------------------ handshake


def handle_connect(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.connect
    if conn.state is not ConnectionState.AWAITING_CONNECT:
        raise NotAllowedError("CONNECT on a connection already connected")
    if cmd.HasField("proxy_to_broker_url"):
        log.info("%s: ignoring proxy_to_broker_url %s (not a proxy)", conn.remote_address, cmd.proxy_to_broker_url)
    if not auth.admit(conn, cmd):  # refused: ERROR written, connection closing
        return
    conn.client_version = cmd.client_version
    conn.protocol_version = min(cmd.protocol_version, MAX_PROTOCOL_VERSION)
    conn.state = ConnectionState.CONNECTED
    connected = pb.CommandConnected(server_version=conn.config.server_version, protocol_version=conn.protocol_version,
                                    max_message_size=conn.config.max_message_size_bytes)
    # A feature is advertised only when served, and only to a client that said it uses it.
    if cmd.feature_flags.supports_topic_watchers and conn.service.topic_list_watch.available:
        conn.supports_topic_watchers = True
        connected.feature_flags.supports_topic_watchers = True
    # Pulsar answers nothing for this flag: a client that set it gets the stored section in MESSAGE frames
    conn.exposes_broker_entry_metadata = bool(cmd.feature_flags.supports_broker_entry_metadata
                                              and conn.config.exposing_broker_entry_metadata_to_client_enabled)
    conn.send_command(connected)


def handle_ping(conn: "Connection", frame: "Frame") -> None:
    conn.send_command(pb.CommandPong())


def handle_pong(conn: "Connection", frame: "Frame") -> None:
    pass  # any received byte already counts as liveness


# ------------------------------------------------------------------------------------------ lookups


async def handle_partitioned_metadata(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.partitionMetadata
    Response = pb.CommandPartitionedTopicMetadataResponse
    try:
        topic = parse_topic(cmd.topic)
        await auth.authorize_lookup(conn, topic)
        partitions = await conn.service.partitions_of(topic)
    except BrokerServiceError as exc:
        conn.send_command(Response(request_id=cmd.request_id, response=Response.Failed,
                                   error=exc.server_error, message=str(exc)))
        return
    # pulsar-client fails unless ``response`` is set, even on success.
    conn.send_command(Response(request_id=cmd.request_id, partitions=partitions, response=Response.Success))


async def handle_lookup(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.lookupTopic
    Response = pb.CommandLookupTopicResponse
    try:
        topic = parse_topic(cmd.topic)
        await auth.authorize_lookup(conn, topic)
        # pulsar-client always sends advertised_listener_name, "" unless given one (the default URLs)
        result = await conn.service.ownership.lookup(str(topic), authoritative=cmd.authoritative,
                                                     listener_name=cmd.advertised_listener_name)
    except Exception as exc:
        err = map_error(exc)
        conn.send_command(Response(request_id=cmd.request_id, response=Response.Failed,
                                   error=err.server_error, message=str(err)))
        return
    response = Response(request_id=cmd.request_id,
                        response=Response.Redirect if result.redirect else Response.Connect,
                        authoritative=result.authoritative)
    if result.broker_service_url:  # a listener may have a pulsar+ssl:// URL only
        response.brokerServiceUrl = result.broker_service_url
    if result.broker_service_url_tls:
        response.brokerServiceUrlTls = result.broker_service_url_tls
    conn.send_command(response)


async def handle_get_topics_of_namespace(conn: "Connection", frame: "Frame") -> None:
    """Pulsar's answer: the namespace's topics in the mode's domains, filtered by ``topics_pattern`` when the broker
    evaluates it (``filtered``), with the hash of what is listed; ``changed = false`` and no topics when the
    client's ``topics_hash`` still holds (``topic_list.py``)."""
    cmd = frame.command.getTopicsOfNamespace
    tenant, namespace = parse_namespace(cmd.namespace)
    await auth.authorize_namespace(conn, tenant, namespace)
    mode = cmd.mode if cmd.HasField("mode") else pb.CommandGetTopicsOfNamespace.PERSISTENT
    topics = await conn.service.topics_of_namespace(tenant, namespace, mode)
    response = pb.CommandGetTopicsOfNamespaceResponse(request_id=cmd.request_id)
    if cmd.HasField("topics_pattern"):
        pattern = try_compile_topics_pattern(cmd.topics_pattern, max_length=conn.config.subscription_pattern_max_length)
        if pattern is not None:  # otherwise unfiltered: the client filters with its own regex engine
            topics = pattern.filter(topics)
            response.filtered = True
    response.topics_hash = topics_hash(topics)
    response.changed = not (cmd.HasField("topics_hash") and cmd.topics_hash == response.topics_hash)
    if response.changed:
        response.topics.extend(topics)
    conn.send_command(response)


async def handle_watch_topic_list(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.watchTopicList
    if not conn.supports_topic_watchers:
        raise UnsupportedError("command WATCH_TOPIC_LIST is not supported on this connection: CONNECT did not "
                               "set FeatureFlags.supports_topic_watchers, or this broker does not serve topic list "
                               "watchers")
    await auth.authorize_namespace(conn, *parse_namespace(cmd.namespace))
    watcher = await conn.service.topic_list_watch.watch(conn, watcher_id=cmd.watcher_id, namespace=cmd.namespace,
                                                        pattern=cmd.topics_pattern)
    # No await from here on: the success leaves before any update of this watcher.
    topics = sorted(watcher.matching)
    current_hash = topics_hash(topics)
    if cmd.HasField("topics_hash") and cmd.topics_hash == current_hash:
        topics = []
    conn.send_command(pb.CommandWatchTopicListSuccess(request_id=cmd.request_id, watcher_id=cmd.watcher_id,
                                                      topic=topics, topics_hash=current_hash))


def handle_watch_topic_list_close(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.watchTopicListClose
    conn.service.topic_list_watch.close_watcher(conn, cmd.watcher_id)  # unknown ids too: closing is idempotent
    conn.send_command(pb.CommandSuccess(request_id=cmd.request_id))


# ------------------------------------------------------------------------------------------ schemas
# GET_SCHEMA and GET_OR_CREATE_SCHEMA are served by schema_commands.py (the schema registry's protocol side).


# ------------------------------------------------------------------------------------------ refusals


def _refuse_txn(conn: "Connection", frame: "Frame") -> None:
    raise NotAllowedError("transactions are not supported by this broker")


def _ignore(conn: "Connection", frame: "Frame") -> None:
    pass


def error_response(cmd: pb.BaseCommand, err: BrokerServiceError) -> Optional[pb.BaseCommand]:
    """The answer a failed command expects, or None when it expects none."""
    t = cmd.type
    if t == BaseCommand.SEND:
        return wrap(pb.CommandSendError(producer_id=cmd.send.producer_id, sequence_id=cmd.send.sequence_id,
                                        error=err.server_error, message=str(err)))
    if t == BaseCommand.ACK:
        if cmd.ack.HasField("request_id"):
            return wrap(pb.CommandAckResponse(consumer_id=cmd.ack.consumer_id, request_id=cmd.ack.request_id,
                                              error=err.server_error, message=str(err)))
        return None
    if t == BaseCommand.GET_SCHEMA:
        return wrap(pb.CommandGetSchemaResponse(request_id=cmd.getSchema.request_id, error_code=err.server_error,
                                                error_message=str(err)))
    if t == BaseCommand.GET_OR_CREATE_SCHEMA:
        return wrap(pb.CommandGetOrCreateSchemaResponse(request_id=cmd.getOrCreateSchema.request_id,
                                                        error_code=err.server_error, error_message=str(err)))
    if t == BaseCommand.CONSUMER_STATS:
        return wrap(pb.CommandConsumerStatsResponse(request_id=cmd.consumerStats.request_id,
                                                    error_code=err.server_error, error_message=str(err)))
    if t == BaseCommand.PARTITIONED_METADATA:
        R = pb.CommandPartitionedTopicMetadataResponse
        return wrap(R(request_id=cmd.partitionMetadata.request_id, response=R.Failed, error=err.server_error,
                      message=str(err)))
    if t == BaseCommand.LOOKUP:
        R = pb.CommandLookupTopicResponse
        return wrap(R(request_id=cmd.lookupTopic.request_id, response=R.Failed, error=err.server_error,
                      message=str(err)))
    if t in _TXN_RESPONSES:
        response_cls, field = _TXN_RESPONSES[t]
        return wrap(response_cls(request_id=getattr(cmd, field).request_id, error=err.server_error, message=str(err)))
    request_id = request_id_of(cmd)
    if request_id is None:
        return None
    return wrap(pb.CommandError(request_id=request_id, error=err.server_error, message=str(err)))


_TXN_RESPONSES = {
    BaseCommand.NEW_TXN: (pb.CommandNewTxnResponse, "newTxn"),
    BaseCommand.ADD_PARTITION_TO_TXN: (pb.CommandAddPartitionToTxnResponse, "addPartitionToTxn"),
    BaseCommand.ADD_SUBSCRIPTION_TO_TXN: (pb.CommandAddSubscriptionToTxnResponse, "addSubscriptionToTxn"),
    BaseCommand.END_TXN: (pb.CommandEndTxnResponse, "endTxn"),
    BaseCommand.END_TXN_ON_PARTITION: (pb.CommandEndTxnOnPartitionResponse, "endTxnOnPartition"),
    BaseCommand.END_TXN_ON_SUBSCRIPTION: (pb.CommandEndTxnOnSubscriptionResponse, "endTxnOnSubscription"),
    BaseCommand.TC_CLIENT_CONNECT_REQUEST: (pb.CommandTcClientConnectResponse, "tcClientConnectRequest"),
}

HANDLERS: dict[int, Callable] = {
    BaseCommand.CONNECT: handle_connect,
    BaseCommand.PING: handle_ping,
    BaseCommand.PONG: handle_pong,
    BaseCommand.AUTH_RESPONSE: auth.handle_auth_response,
    BaseCommand.PARTITIONED_METADATA: handle_partitioned_metadata,
    BaseCommand.LOOKUP: handle_lookup,
    BaseCommand.GET_TOPICS_OF_NAMESPACE: handle_get_topics_of_namespace,
    BaseCommand.WATCH_TOPIC_LIST: handle_watch_topic_list,
    BaseCommand.WATCH_TOPIC_LIST_CLOSE: handle_watch_topic_list_close,
    BaseCommand.GET_SCHEMA: schemas.handle_get_schema,
    BaseCommand.GET_OR_CREATE_SCHEMA: schemas.handle_get_or_create_schema,
    BaseCommand.PRODUCER: handlers_producer.handle_producer,
    BaseCommand.SEND: handlers_producer.handle_send,
    BaseCommand.CLOSE_PRODUCER: handlers_producer.handle_close_producer,
    BaseCommand.SUBSCRIBE: handlers_consumer.handle_subscribe,
    BaseCommand.FLOW: handlers_consumer.handle_flow,
    BaseCommand.ACK: handlers_consumer.handle_ack,
    BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES: handlers_consumer.handle_redeliver,
    BaseCommand.SEEK: handlers_consumer.handle_seek,
    BaseCommand.UNSUBSCRIBE: handlers_consumer.handle_unsubscribe,
    BaseCommand.CLOSE_CONSUMER: handlers_consumer.handle_close_consumer,
    BaseCommand.GET_LAST_MESSAGE_ID: handlers_consumer.handle_get_last_message_id,
    BaseCommand.CONSUMER_STATS: handlers_consumer.handle_consumer_stats,
    **{t: _refuse_txn for t in _TXN_RESPONSES},
}
