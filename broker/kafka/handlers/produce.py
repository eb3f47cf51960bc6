"""Produce (0) v3..v8 and InitProducerId (22) v0.

Each record batch becomes one Pulsar batched entry (``records.py``) published through the topic's normal
path (``Topic.publish``): deduplication, stats, publish-rate accounting and geo-replication apply as to a
pulsar-client SEND. Its Kafka offset is the broker entry index of its first message: ``next_index`` read just
before the append (the append assigns it synchronously, so nothing comes between).

Producer names: a plain Kafka producer publishes as ``<client id>-<unique name>`` per connection, with a
sequence id counting its batches per topic. An idempotent producer (InitProducerId gave it an id) publishes
as ``kafka.idempotent.<producer id>.<epoch>`` with the batch's base sequence and last sequence as sequence
ids; the topic deduplicates such names whatever its policy (``dedup.always_deduplicated``), so a retried batch
(the producer resends after a lost answer) is answered with its original offset and not stored twice.

acks=0 gets no answer (after the entries are handed to storage); acks=1 and acks=-1 (all) are answered once
the entry is durable on the ledger's ack quorum (Pulsar has one kind of acknowledgement); ``timeout`` bounds
the wait (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any, Callable, Optional

from broker.managed_ledger.api import Position
from broker.service.errors import (BrokerServiceError, MessageTooLargeError, PersistenceError,
                                   ProducerBlockedQuotaExceededError, ProducerBlockedQuotaExceededException,
                                   ServiceNotReadyError, TopicTerminatedError)
from broker.service.stats import RateMeter
from broker.service.topics.dedup import KAFKA_IDEMPOTENT_PREFIX
from magnetar.errors import MagnetarError
from magnetar.protocol.frames import split_broker_entry_metadata
from magnetar.topic_name import InvalidTopicNameError

from .. import names
from ..codec import ErrorCode
from ..records import KafkaBatch, RecordsError, batch_to_entry, split_record_batches
from ..structs import as_dict, make
from ..topics import NotLeaderError

log = logging.getLogger("broker.kafka.handlers.produce")


class _Publisher:
    """What ``Topic.publish`` needs of a producer: a name, meters, and ``track`` (given the storage future) or
    ``expect`` (told the stored outcome): either way ``future`` is the entry's position (or its error)."""

    is_replicator = False
    origin_cluster = ""
    __slots__ = ("name", "msg_in", "bytes_in", "future")

    def __init__(self, name: str, meters: tuple[RateMeter, RateMeter]) -> None:
        self.name = name
        self.msg_in, self.bytes_in = meters
        self.future: Optional[asyncio.Future] = None

    def track(self, sequence_id: int, highest_sequence_id: Optional[int], future: asyncio.Future, *,
              started: Optional[float] = None) -> None:
        self.future = future

    def expect(self, sequence_id: int, highest_sequence_id: Optional[int], *,
               started: Optional[float] = None) -> Callable[[asyncio.Future], None]:
        self.future = asyncio.get_running_loop().create_future()
        return self._stored

    def _stored(self, stored: asyncio.Future) -> None:
        future = self.future
        if future.done():
            return
        if stored.cancelled():
            future.cancel()
        elif stored.exception() is not None:
            future.set_exception(stored.exception())
            future.exception()  # retrieved here: a produce that timed out no longer awaits it
        else:
            future.set_result(stored.result())


class _ConnectionProducer:
    """A plain Kafka producer's identity on one connection (kept in the connection's ``state``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sequences: dict[str, int] = {}  # pulsar topic -> next sequence id
        self.checked: set[str] = set()  # topics whose backlog quota was checked for this producer
        self.meters = (RateMeter(), RateMeter())


def error_code_of(exc: BaseException) -> int:
    if isinstance(exc, NotLeaderError | ServiceNotReadyError):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if isinstance(exc, RecordsError):
        return exc.code
    if isinstance(exc, MessageTooLargeError):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, ProducerBlockedQuotaExceededError | ProducerBlockedQuotaExceededException):
        return ErrorCode.POLICY_VIOLATION
    if isinstance(exc, TopicTerminatedError):
        return ErrorCode.POLICY_VIOLATION
    if isinstance(exc, PersistenceError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    if isinstance(exc, TimeoutError):
        return ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.UNKNOWN_SERVER_ERROR


async def produce(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    acks = body["required_acks"]
    timeout_s = max(body["timeout"], 0) / 1000
    transactional = body.get("transactional_id") is not None
    parts = [(t["topic"], p["partition"], p["messages"]) for t in body["topics"] for p in t["partitions"]]
    if acks not in (-1, 0, 1):
        results = [_result(name, index, ErrorCode.INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1")
                   for name, index, _ in parts]
    elif transactional:
        results = [_result(name, index, ErrorCode.INVALID_REQUEST, "transactions are not supported")
                   for name, index, _ in parts]
    else:
        results = await asyncio.gather(*(_produce_partition(server, ctx, name, index, data, acks, timeout_s)
                                         for name, index, data in parts))
    if acks == 0:
        return None
    topics: dict[str, list] = {}
    for name, result in zip((n for n, _, _ in parts), results):
        topics.setdefault(name, []).append(result)
    return make(request.RESPONSE_TYPE, {"topics": [{"topic": n, "partitions": p} for n, p in topics.items()],
                                        "throttle_time_ms": 0})


def _result(name: str, index: int, code: int, message: Optional[str] = None, offset: int = -1,
            log_start: int = -1) -> dict:
    return {"partition": index, "error_code": code, "offset": offset, "timestamp": -1,
            "log_start_offset": log_start, "record_errors": [], "error_message": message}


def _connection_producer(ctx: Any, server: Any) -> _ConnectionProducer:
    conn = ctx.extra.get("connection")
    state = conn.state if conn is not None else server.state
    producer = state.get("producer")
    if producer is None:
        prefix = ctx.client_id or "kafka"
        producer = state["producer"] = _ConnectionProducer(f"{prefix}-{server.service.generate_producer_name()}")
    return producer


async def _produce_partition(server: Any, ctx: Any, name: str, index: int, data: Optional[bytes], acks: int,
                             timeout_s: float) -> dict:
    try:
        topic_name = server.topics.resolve(name)
        if not await server.topics.allowed(ctx, topic_name, "produce"):
            return _result(name, index, ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not produce")
        count = await server.topics.ensure(topic_name, create=True, at_least=index)
        if count is None:
            return _result(name, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
        pulsar_topic = names.partition_topic(topic_name, count, index)
        if pulsar_topic is None:
            return _result(name, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{name} has no partition {index}")
        batches = split_record_batches(data or b"")
        topic = await server.topics.local(pulsar_topic)
        futures, bases = [], []
        for batch in batches:
            base, fut = await _publish(server, ctx, topic, pulsar_topic, batch)
            futures.append(fut)
            bases.append(base)
    except InvalidTopicNameError as exc:
        return _result(name, index, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc))
    except (MagnetarError, NotLeaderError) as exc:
        if not isinstance(exc, NotLeaderError | ServiceNotReadyError | RecordsError):
            log.info("[%s] produce to partition %d refused: %s", name, index, exc)
        return _result(name, index, error_code_of(exc), str(exc) or type(exc).__name__)
    if acks == 0:
        for fut in futures:
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        return _result(name, index, ErrorCode.NONE)
    try:
        async with asyncio.timeout(timeout_s or None):
            positions = await asyncio.gather(*futures)
    except (TimeoutError, BrokerServiceError, MagnetarError) as exc:
        return _result(name, index, error_code_of(exc), str(exc) or type(exc).__name__)
    offset = bases[0]
    if offset is None:  # the first batch was a duplicate: its original offset, read from storage
        offset = await _offset_of(topic, positions[0], len(batches[0].records))
    return _result(name, index, ErrorCode.NONE, offset=offset)


async def _publish(server: Any, ctx: Any, topic: Any, pulsar_topic: str, batch: KafkaBatch
                   ) -> tuple[Optional[int], asyncio.Future]:
    """Hands one batch to the topic: (its base offset, None for a duplicate; the storage future)."""
    if batch.is_transactional:
        raise RecordsError("transactional batches are not supported", code=ErrorCode.INVALID_REQUEST)
    n = len(batch.records)
    if batch.producer_id >= 0:  # idempotent
        name = f"{KAFKA_IDEMPOTENT_PREFIX}{batch.producer_id}.{batch.producer_epoch}"
        sequence_id, meters = batch.base_sequence, (RateMeter(), RateMeter())
        if not topic.dedup.applies_to(name):
            await topic.dedup.track_replicated()  # idempotent names are deduplicated once tracking is on
    else:
        producer = _connection_producer(ctx, server)
        name, meters = producer.name, producer.meters
        sequence_id = producer.sequences.get(pulsar_topic, 0)
        producer.sequences[pulsar_topic] = sequence_id + n
        if pulsar_topic not in producer.checked:
            await topic.backlog_quota.check_producer(name)
            producer.checked.add(pulsar_topic)
    entry = batch_to_entry(batch, producer_name=name, sequence_id=sequence_id)
    if len(entry) > server.config.max_message_size_bytes:
        raise MessageTooLargeError(f"a record batch of {len(entry)} bytes exceeds the maximum of "
                                   f"{server.config.max_message_size_bytes} bytes")
    publisher = _Publisher(name, meters)
    ml = topic.ml
    before = ml.next_index
    topic.publish(publisher, entry, sequence_id=sequence_id, highest_sequence_id=sequence_id + n - 1,
                  num_messages=n, received_s=time.perf_counter())
    assert publisher.future is not None
    return (before if ml.next_index != before else None), publisher.future


async def _offset_of(topic: Any, position: Position, n: int) -> int:
    """The base offset of the stored entry at ``position`` (-1 when unknown: an old duplicate)."""
    if position.ledger_id < 0:
        return -1
    try:
        entry = await topic.ml.read_entry(position)
        bem, _ = split_broker_entry_metadata(entry.data)
    except Exception:
        return -1
    if bem is None or not bem.HasField("index"):
        return -1
    return bem.index - n + 1


async def init_producer_id(server: Any, request: Any, ctx: Any) -> Any:
    body = as_dict(request)
    if body.get("transactional_id") is not None:
        return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                                            "producer_id": -1, "producer_epoch": -1})
    # unique across brokers and restarts without coordination: 62 random bits
    producer_id = secrets.randbits(62)
    return make(request.RESPONSE_TYPE, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                                        "producer_id": producer_id, "producer_epoch": 0})


HANDLERS = {0: (3, 8, produce), 22: (0, 0, init_producer_id)}
