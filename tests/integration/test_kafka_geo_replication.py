"""Topics written through Kafka replicate like any other: an aiokafka producer (idempotent, with a retried
batch) writes in us-east; an aiokafka consumer in eu-west reads every record exactly once, in order, with its
key, headers and timestamp (two regions, real processes, one broker each with a Kafka listener)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from magnetar.net import free_port
from tests.kit.regions import start_regions

pytestmark = pytest.mark.timeout(300)

EAST, WEST = "us-east", "eu-west"
RECORDS = 200


def test_records_written_through_kafka_replicate_exactly_once(tmp_path, zk_server, request) -> None:
    regions = start_regions([EAST, WEST], tmp_path, zk_server, bookies=2, brokers=1, request=request,
                            kafka_listeners=lambda name: f"PLAINTEXT://127.0.0.1:{free_port('127.0.0.1')}",
                            kafka_tenant="geo", kafka_namespace="kafka")
    regions.create_replicated_namespace("geo", "kafka", [EAST, WEST])
    east, west = regions[EAST].brokers[0], regions[WEST].brokers[0]

    async def produce() -> list[tuple]:
        producer = AIOKafkaProducer(bootstrap_servers=east.kafka_bootstrap, acks="all", enable_idempotence=True,
                                    compression_type="snappy", linger_ms=5)
        await producer.start()
        sent = []
        try:
            futures = []
            for i in range(RECORDS):
                key, value, headers, ts = f"k{i % 5}".encode(), f"order-{i}".encode(), [("i", str(i).encode())], 10_000 + i
                futures.append(await producer.send("orders", value, key=key, headers=headers, timestamp_ms=ts))
                sent.append((key, value, headers, ts))
            for future in futures:
                await future
        finally:
            await producer.stop()
        return sent

    async def consume(bootstrap: str, count: int) -> list:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition("orders", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            deadline = time.monotonic() + 90
            while len(got) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend(records)
            # nothing more arrives after the expected count (no duplicate trailing in)
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                got.extend(records)
            return got
        finally:
            await consumer.stop()

    sent = asyncio.run(produce())
    got = asyncio.run(consume(west.kafka_bootstrap, RECORDS))
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in got] == sent
    assert [r.offset for r in got] == list(range(RECORDS))
    local = asyncio.run(consume(east.kafka_bootstrap, RECORDS))
    assert [r.value for r in local] == [v for _, v, _, _ in sent]
