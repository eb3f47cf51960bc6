"""PRODUCER, SEND and CLOSE_PRODUCER.

SEND is the hot path: it runs inline in the read loop (no task), checks the frame, and hands the entry
as received (``Frame.entry``: magic, checksum, metadata and payload, byte for byte) to the topic, which
appends it with ``add_entry_nowait``. One SEND is one entry; its receipt is written by the producer once
the entry is durable, in SEND order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from magnetar.protocol import pb

from ..policies.delayed_delivery import check_send as check_delivery_delay
from ..errors import ChecksumMismatchError, MessageTooLargeError, NotAllowedError, ServiceNotReadyError, parse_topic
from .auth import authorize_produce, authorize_replicator_name
from .producer import Producer
from .schema_commands import producer_schema_version

if TYPE_CHECKING:
    from magnetar.protocol import Frame

    from .connection import Connection

log = logging.getLogger("broker.service.session.commands")

_CLOSE_DRAIN_TIMEOUT_S = 30.0


async def handle_producer(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.producer
    pid = cmd.producer_id
    existing = conn.producers.get(pid)
    if existing is not None:
        if existing.topic.name == str(parse_topic(cmd.topic)):
            _send_success(conn, cmd, existing)  # a retried PRODUCER for a producer already created
            return
        raise NotAllowedError(f"producer id {pid} is already used on this connection for {existing.topic.name}")
    if pid in conn.pending_producers:
        raise ServiceNotReadyError(f"producer {pid} is already being created")
    task = asyncio.current_task()
    conn.pending_producers[pid] = task
    producer = None
    try:
        topic_name = parse_topic(cmd.topic)
        if cmd.txn_enabled:
            raise NotAllowedError("transactions are not supported by this broker")
        await authorize_produce(conn, topic_name)  # refused before anything is loaded or created
        topic = await conn.service.get_topic(str(topic_name), create=True)
        if cmd.HasField("initial_subscription_name") and cmd.initial_subscription_name:
            # e.g. a dead-letter producer: its subscription must exist before the first message lands
            await topic.ensure_subscription(cmd.initial_subscription_name)
        given = cmd.producer_name if cmd.HasField("producer_name") else ""
        name = given or conn.service.generate_producer_name()
        authorize_replicator_name(conn, name)  # a replicator's name is trusted by role
        await topic.backlog_quota.check_producer(name)  # over a hold / exception quota: refused at once
        schema_version = await producer_schema_version(conn, topic, cmd, name)  # refused if incompatible
        user_provided = cmd.user_provided_producer_name if cmd.HasField("user_provided_producer_name") else bool(given)
        producer = Producer(topic, conn, pid, name, access_mode=cmd.producer_access_mode, epoch=cmd.epoch,
                            user_provided_name=user_provided and bool(given),
                            metadata={kv.key: kv.value for kv in cmd.metadata},
                            topic_epoch=cmd.topic_epoch if cmd.HasField("topic_epoch") else None)
        producer.schema_version = schema_version
        wait = await topic.add_producer(producer)
        if wait is not None:
            log.info("[%s] producer %s queued for exclusive access", topic.name, name)
            conn.send_command(pb.CommandProducerSuccess(request_id=cmd.request_id, producer_name=name,
                                                        producer_ready=False))
            await wait
        if conn.closed:
            topic.remove_producer(producer)
            return
        conn.producers[pid] = producer
        _send_success(conn, cmd, producer)
        log.info("[%s] producer %s created (%s, %s)", topic.name, name,
                 producer.access_mode.name, conn.remote_address)
    except BaseException:
        if producer is not None and conn.producers.get(pid) is not producer:
            producer.closed = True
            producer.topic.remove_producer(producer)
        raise
    finally:
        if conn.pending_producers.get(pid) is task:
            del conn.pending_producers[pid]


def _send_success(conn: "Connection", cmd: pb.CommandProducer, producer: Producer) -> None:
    success = pb.CommandProducerSuccess(request_id=cmd.request_id, producer_name=producer.name,
                                        last_sequence_id=producer.topic.last_sequence_id(producer.name),
                                        producer_ready=True)
    if producer.exclusive and producer.topic_epoch is not None:
        success.topic_epoch = producer.topic_epoch
    success.schema_version = producer.schema_version  # empty: no schema (Pulsar's SchemaVersion.Empty)
    conn.send_command(success)


def handle_send(conn: "Connection", frame: "Frame") -> None:
    received = time.perf_counter()  # the publish latency starts here (pulsar_broker_publish_latency)
    send = frame.command.send
    producer = conn.producers.get(send.producer_id)
    if producer is None or producer.closed:
        raise ServiceNotReadyError(f"producer {send.producer_id} is not ready on this connection")
    if not frame.checksum_ok:
        raise ChecksumMismatchError(f"checksum mismatch on message {send.sequence_id}: nothing stored")
    payload_size = len(frame.payload) if frame.payload is not None else 0
    if payload_size > conn.config.max_message_size_bytes:
        raise MessageTooLargeError(f"message of {payload_size} bytes exceeds the maximum of "
                                   f"{conn.config.max_message_size_bytes} bytes")
    if (send.marker and not producer.is_replicator) or send.txnid_most_bits or send.txnid_least_bits:
        raise NotAllowedError("markers and transactional messages cannot be published by clients")
    md = frame.metadata
    check_delivery_delay(producer.topic, md)
    producer.topic.publish(producer, frame.entry, sequence_id=send.sequence_id,
                           highest_sequence_id=send.highest_sequence_id if send.HasField("highest_sequence_id") else None,
                           num_messages=send.num_messages, marker=send.marker, received_s=received,
                           entry_messages=md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1)


async def handle_close_producer(conn: "Connection", frame: "Frame") -> None:
    cmd = frame.command.close_producer
    producer = conn.producers.get(cmd.producer_id)
    if producer is None:
        pending = conn.pending_producers.get(cmd.producer_id)
        if pending is not None and pending is not asyncio.current_task():
            pending.cancel()
    else:
        await producer.wait_drained(_CLOSE_DRAIN_TIMEOUT_S)
        producer.closed = True
        conn.forget_producer(cmd.producer_id, producer)
        producer.topic.remove_producer(producer)
        log.info("[%s] producer %s closed by the client", producer.topic.name, producer.name)
    conn.send_command(pb.CommandSuccess(request_id=cmd.request_id))
