"""SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, SEEK, UNSUBSCRIBE, CLOSE_CONSUMER,
GET_LAST_MESSAGE_ID and CONSUMER_STATS.

FLOW, ACK and REDELIVER run inline (they only touch memory; cursor updates are queued to the
subscription's ack worker). The others run as tasks.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from magnetar.protocol import pb

from ..errors import ConsumerNotFoundError, NotAllowedError, ServiceNotReadyError, TopicNotFoundError, parse_topic
from .auth import authorize_consume
from .schema_commands import check_subscribe_schema
from .requests import acked_ids, position_of, signed, subscribe_request

if TYPE_CHECKING:
    from magnetar.protocol import Frame

    from .connection import Connection
    from ..topics.consumer import Consumer

log = logging.getLogger("broker.service.session.commands")


def _consumer(conn: "Connection", consumer_id: int) -> "Consumer":
    consumer = conn.consumers.get(consumer_id)
    if consumer is None:
        raise ConsumerNotFoundError(f"consumer {consumer_id} is not connected on this connection")
    return consumer


async def handle_subscribe(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.subscribe
    cid = cmd.consumer_id
    existing = conn.consumers.get(cid)
    if existing is not None:
        if existing.subscription.topic.name == str(parse_topic(cmd.topic)) and \
                existing.subscription.name == cmd.subscription:
            conn.send_command(pb.CommandSuccess(request_id=cmd.request_id))
            return
        raise NotAllowedError(f"consumer id {cid} is already used on this connection")
    if cid in conn.pending_consumers:
        raise ServiceNotReadyError(f"consumer {cid} is already being created")
    task = asyncio.current_task()
    conn.pending_consumers[cid] = task
    consumer = None
    try:
        topic_name = parse_topic(cmd.topic)
        await authorize_consume(conn, topic_name, cmd.subscription)  # refused before anything is loaded or created
        topic = await conn.service.get_topic(str(topic_name), create=cmd.force_topic_creation)
        if topic is None:
            raise TopicNotFoundError(f"topic {topic_name} does not exist")
        name = cmd.consumer_name if cmd.HasField("consumer_name") and cmd.consumer_name else uuid.uuid4().hex[:10]
        await check_subscribe_schema(conn, topic, cmd)  # refused if incompatible with the topic's schema
        consumer = await topic.subscribe(subscribe_request(cmd, name), conn)
        if conn.closed:
            consumer.subscription.remove_consumer(consumer)
            return
        conn.consumers[cid] = consumer
        conn.send_command(pb.CommandSuccess(request_id=cmd.request_id))
        log.info("[%s][%s] consumer %s subscribed (%s, %s)", topic.name, cmd.subscription, name,
                 pb.CommandSubscribe.SubType.Name(cmd.subType), conn.remote_address)
    except BaseException:
        if consumer is not None and conn.consumers.get(cid) is not consumer:
            consumer.subscription.remove_consumer(consumer)
        raise
    finally:
        if conn.pending_consumers.get(cid) is task:
            del conn.pending_consumers[cid]


def handle_flow(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.flow
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        log.debug("%s: FLOW for unknown consumer %d", conn.remote_address, cmd.consumer_id)
        return
    consumer.flow(cmd.messagePermits)
    dispatcher = consumer.subscription.dispatcher
    if dispatcher is not None:
        dispatcher.consumer_flow(consumer)


def handle_ack(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.ack
    consumer = _consumer(conn, cmd.consumer_id)
    if cmd.txnid_most_bits or cmd.txnid_least_bits:
        raise NotAllowedError("transactional acknowledgements are not supported by this broker")
    fut = consumer.subscription.acknowledge(consumer, acked_ids(cmd.message_id),
                                            cumulative=cmd.ack_type == pb.CommandAck.Cumulative)
    if cmd.HasField("request_id"):
        conn.spawn(_ack_response(conn, cmd, fut), f"ACK_RESPONSE {conn.remote_address}")


async def _ack_response(conn: "Connection", cmd: pb.CommandAck, fut) -> None:
    if fut is not None:
        await fut
    conn.send_command(pb.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=cmd.request_id))


def handle_redeliver(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.redeliverUnacknowledgedMessages
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        return
    if cmd.HasField("consumer_epoch"):
        consumer.consumer_epoch = cmd.consumer_epoch
    consumer.subscription.redeliver(consumer, [position_of(m) for m in cmd.message_ids] or None)


async def handle_seek(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.seek
    consumer = _consumer(conn, cmd.consumer_id)
    sub = consumer.subscription
    topic = sub.topic
    if cmd.HasField("message_id"):
        position = topic.seek_position(signed(cmd.message_id.ledgerId), signed(cmd.message_id.entryId))
    elif cmd.HasField("message_publish_time"):
        position = await topic.find_position(cmd.message_publish_time)
    else:
        raise NotAllowedError("SEEK needs a message id or a publish time")
    log.info("[%s][%s] seek to %s", topic.name, sub.name, position)
    await sub.reset(position)
    conn.send_command(pb.CommandSuccess(request_id=cmd.request_id))


async def handle_unsubscribe(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.unsubscribe
    consumer = _consumer(conn, cmd.consumer_id)
    await consumer.subscription.topic.unsubscribe(consumer)
    conn.send_command(pb.CommandSuccess(request_id=cmd.request_id))


async def handle_close_consumer(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.close_consumer
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        pending = conn.pending_consumers.get(cmd.consumer_id)
        if pending is not None:
            pending.cancel()
    else:
        conn.forget_consumer(cmd.consumer_id, consumer)
        consumer.subscription.remove_consumer(consumer)
    conn.send_command(pb.CommandSuccess(request_id=cmd.request_id))


async def handle_get_last_message_id(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.getLastMessageId
    consumer = _consumer(conn, cmd.consumer_id)
    sub = consumer.subscription
    compaction = getattr(sub.topic, "compaction", None)
    last = await compaction.last_message_id() if consumer.read_compacted and compaction is not None else None
    if last is None:
        last = await sub.topic.last_message_id()
    response = pb.CommandGetLastMessageIdResponse(request_id=cmd.request_id)
    last.to_proto(response.last_message_id)
    md = sub.cursor.mark_delete_position
    response.consumer_mark_delete_position.ledgerId = md.ledger_id % (1 << 64)
    response.consumer_mark_delete_position.entryId = md.entry_id % (1 << 64)
    conn.send_command(response)


def handle_consumer_stats(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.consumerStats
    consumer = _consumer(conn, cmd.consumer_id)
    s = consumer.stats()
    sub = consumer.subscription
    conn.send_command(pb.CommandConsumerStatsResponse(
        request_id=cmd.request_id, msgRateOut=s.msg_rate_out, msgThroughputOut=s.msg_throughput_out,
        msgRateRedeliver=s.msg_rate_redeliver, consumerName=consumer.name,
        availablePermits=max(0, consumer.permits), unackedMessages=max(0, consumer.unacked_messages),
        blockedConsumerOnUnackedMsgs=consumer.blocked, address=conn.remote_address,
        connectedSince=consumer.connected_since, type=sub.type_name(),
        msgRateExpired=sub.msg_expired.rate(), msgBacklog=sub.cursor.backlog_entries(),
        messageAckRate=s.message_ack_rate))
