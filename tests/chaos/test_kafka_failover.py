"""The broker owning a topic is SIGKILLed while an aiokafka producer writes to it with acks=all (and
idempotence, so its retries after a lost answer add nothing): the survivor takes the topic over, the producer
carries on through it, and every acknowledged record is consumed exactly once, in order. The kill point is
random (seeded; the seed is printed)."""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.request

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.kit.brokers import start_brokers

pytestmark = pytest.mark.timeout(300)

RECORDS = 300


def owner_http(broker, topic: str) -> str:
    url = f"{broker.http_url}/lookup/v2/topic/persistent/public/default/{topic}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())["httpUrl"]


def test_owner_killed_during_acks_all_production_loses_no_acknowledged_record(tmp_path, zk_connect,
                                                                               bookie_factory) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    bookie_factory(2)
    brokers = start_brokers(2, tmp_path, zk_connect, kafka=True)
    servers = ",".join(b.kafka_bootstrap for b in brokers)
    kill_after = rng.randrange(RECORDS // 5, RECORDS // 2)

    async def produce() -> list[tuple[int, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=servers, acks="all", enable_idempotence=True,
                                    request_timeout_ms=15_000, retry_backoff_ms=200, linger_ms=2)
        await producer.start()
        acknowledged: list[tuple[int, bytes]] = []
        victim = None
        try:
            for i in range(RECORDS):
                value = f"record-{i}".encode()
                if i == kill_after:
                    owner = owner_http(brokers[0], "durable-partition-0")
                    victim = next(b for b in brokers if b.http_url == owner)
                    victim.kill()
                meta = await producer.send_and_wait("durable", value, key=str(i % 7).encode())
                acknowledged.append((meta.offset, value))
        finally:
            await producer.stop()
        assert victim is not None
        return acknowledged

    acknowledged = asyncio.run(asyncio.wait_for(produce(), 240))
    assert len(acknowledged) == RECORDS
    survivor = next(b for b in brokers if b.process.alive)

    async def consume() -> list:
        consumer = AIOKafkaConsumer(bootstrap_servers=survivor.kafka_bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition("durable", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            deadline = time.monotonic() + 60
            end = (await consumer.end_offsets([tp]))[tp]
            while (not got or got[-1].offset < end - 1) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend(records)
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(consume())
    values = [r.value for r in got]
    assert len(values) == len(set(values)), "a record was stored twice"
    assert values == [v for _, v in sorted(acknowledged)], "acknowledged records missing or out of order"
    assert [r.offset for r in got] == [o for o, _ in sorted(acknowledged)]
