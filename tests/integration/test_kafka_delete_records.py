"""DeleteRecords (API key 21) against a real broker (ZooKeeper, bookies, a broker process with a Kafka
listener), driven by aiokafka's ``AIOKafkaAdminClient.delete_records`` and its raw request.

What must hold: records below the offset are no longer fetched (a consumer from the beginning, or one
seeking below it, starts at it), ListOffsets earliest (and by time) moves to it, the low watermark survives the broker
being killed and started again (the topic opened anew), offset -1 means the high watermark, and bad
partitions, topics or offsets get their error code and change nothing.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.protocol.admin import DeleteRecordsRequest

from broker.kafka.codec import ErrorCode
from tests.kit.brokers import start_brokers
from tests.kit.wait import wait_for_async

pytestmark = pytest.mark.timeout(300)

TOPIC = "ledger-lines"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
def kafka_broker(tmp_path, zk_connect, bookie_factory):
    bookie_factory(2)
    return start_brokers(1, tmp_path, zk_connect, kafka=True)[0]


async def _produce(servers: str, values: list[bytes]) -> list[int]:
    producer = AIOKafkaProducer(bootstrap_servers=servers, acks="all")
    await producer.start()
    try:
        return [(await producer.send_and_wait(TOPIC, v, partition=0)).offset for v in values]
    finally:
        await producer.stop()


async def _read(servers: str, count: int, *, seek: int | None = None, timeout_s: float = 30) -> list:
    """(offset, value) of the first ``count`` records from the beginning (or from ``seek``)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TP])
        if seek is None:
            await consumer.seek_to_beginning(TP)
        else:
            consumer.seek(TP, seek)
        got: list = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend((r.offset, r.value) for r in records)
        return got[:count]
    finally:
        await consumer.stop()


async def _earliest(servers: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    await consumer.start()
    try:
        return (await consumer.beginning_offsets([TP]))[TP]
    finally:
        await consumer.stop()


async def _offset_for_time(servers: str, timestamp_ms: int) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    await consumer.start()
    try:
        return (await consumer.offsets_for_times({TP: timestamp_ms}))[TP].offset
    finally:
        await consumer.stop()


async def _admin(servers: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    return admin


async def _raw(admin: AIOKafkaAdminClient, topics: list) -> list:
    """The (topic, partition, low watermark, error) answers of a raw DeleteRecords request."""
    node = next(iter(admin._client.cluster.brokers())).nodeId
    response = await admin._client.send(node, DeleteRecordsRequest(topics, 10_000))
    return sorted((t[0], p[0], p[1], p[2]) for t in response.topics for p in t[1])


def test_delete_records_moves_the_low_watermark_durably(kafka_broker) -> None:
    servers = kafka_broker.kafka_bootstrap
    values = [f"v{i}".encode() for i in range(10)]

    async def before_restart() -> None:
        assert await _produce(servers, values) == list(range(10))
        admin = await _admin(servers)
        try:
            assert await admin.delete_records({TP: RecordsToDelete(4)}) == {TP: 4}
            # bad partition, missing topic, offset above the high watermark or below -1: errors, no change;
            # an offset below the low watermark: no error, nothing moves
            assert await _raw(admin, [(TOPIC, [(0, 11), (7, 6), (0, -5)]), ("no-such-topic", [(0, 1)])]) == [
                (TOPIC, 0, 4, ErrorCode.OFFSET_OUT_OF_RANGE), (TOPIC, 0, 4, ErrorCode.OFFSET_OUT_OF_RANGE),
                (TOPIC, 7, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                ("no-such-topic", 0, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
            assert await _raw(admin, [(TOPIC, [(0, 2)])]) == [(TOPIC, 0, 4, ErrorCode.NONE)]
            with pytest.raises(OffsetOutOfRangeError):
                await admin.delete_records({TP: RecordsToDelete(11)})
            assert "no-such-topic" not in await admin.list_topics()
        finally:
            await admin.close()
        assert await _earliest(servers) == 4
        assert await _offset_for_time(servers, 0) == 4  # by time: never below the low watermark
        assert await _read(servers, 6) == [(i, values[i]) for i in range(4, 10)]
        # a consumer positioned below the low watermark gets OFFSET_OUT_OF_RANGE and resets to it
        assert (await _read(servers, 1, seek=1)) == [(4, b"v4")]

    asyncio.run(before_restart())

    kafka_broker.restart()  # SIGKILL and start again on the same storage: the topic is opened anew

    async def after_restart() -> None:
        await wait_for_async(lambda: _earliest_or_none(servers), 60)
        assert await _earliest(servers) == 4
        assert await _read(servers, 6) == [(i, values[i]) for i in range(4, 10)]
        admin = await _admin(servers)
        try:
            assert await admin.delete_records({TP: RecordsToDelete(-1)}) == {TP: 10}  # the high watermark
        finally:
            await admin.close()
        assert await _produce(servers, [b"after"]) == [10]
        assert await _read(servers, 1) == [(10, b"after")]
        assert await _earliest(servers) == 10

    asyncio.run(after_restart())


async def _earliest_or_none(servers: str):
    try:
        return await _earliest(servers) is not None
    except Exception:
        return False
