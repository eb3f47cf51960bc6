"""A consumer group of aiokafka consumers on two real broker processes (ZooKeeper, bookies): three members share
six partitions (served by both brokers) as they join and leave, each partition owned by exactly one member, and
committed offsets let a new consumer of the group resume after both brokers restart."""

from __future__ import annotations

import asyncio

import pytest

from tests.kit.brokers import start_brokers
from tests.kit.wait import wait_for_async

pytestmark = pytest.mark.timeout(300)

TOPIC, GROUP, PARTITIONS = "events", "workers", 6


@pytest.fixture
def kafka_brokers(tmp_path, zk_connect, bookie_factory):
    bookie_factory(2)
    return start_brokers(2, tmp_path, zk_connect, kafka=True)


class Member:
    """One AIOKafkaConsumer of the group, consuming in a task and committing what it got."""

    def __init__(self, bootstrap: str, name: str) -> None:
        from aiokafka import AIOKafkaConsumer

        self.name = name
        self.consumer = AIOKafkaConsumer(
            TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, client_id=name, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6_000, heartbeat_interval_ms=300,
            max_poll_interval_ms=20_000, metadata_max_age_ms=2_000, request_timeout_ms=20_000)
        self.values: list[bytes] = []
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=200)
            for records in batches.values():
                self.values.extend(r.value for r in records)
            if batches:
                await self.consumer.commit()

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.stop()  # commits nothing more (auto commit off) and leaves the group


async def wait_until(predicate, timeout_s: float, what: str):
    await wait_for_async(predicate, timeout_s, interval_s=0.05, what=what)


def owned_exactly_once(members: list[Member]) -> bool:
    assignments = [m.assignment() for m in members]
    union = set().union(*assignments)
    return all(assignments) and union == set(range(PARTITIONS)) and sum(map(len, assignments)) == PARTITIONS


async def produce(bootstrap: str, values: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i, value in enumerate(values):
            await producer.send_and_wait(TOPIC, value, partition=i % PARTITIONS)
    finally:
        await producer.stop()


def test_three_members_share_partitions_and_offsets_resume_after_restart(kafka_brokers):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    bootstrap = ",".join(b.kafka_bootstrap for b in kafka_brokers)
    first_batch = [f"a{i}".encode() for i in range(60)]

    async def before_restart() -> set[bytes]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        finally:
            await admin.close()
        await produce(bootstrap, first_batch)
        members = [Member(bootstrap, f"m{i}") for i in range(3)]
        try:
            await members[0].start()
            await wait_until(lambda: members[0].assignment() == set(range(PARTITIONS)), 60, "m0 owning everything")
            await members[1].start()
            await wait_until(lambda: owned_exactly_once(members[:2]), 60, "m0 and m1 sharing the partitions")
            await members[2].start()
            await wait_until(lambda: owned_exactly_once(members), 60, "three members sharing the partitions")
            assert all(len(m.assignment()) == 2 for m in members)
            await members[1].stop()  # leaves: its partitions go to the others
            await wait_until(lambda: owned_exactly_once([members[0], members[2]]), 60, "m0 and m2 after m1 left")
            await wait_until(lambda: set(first_batch) <= {v for m in members for v in m.values}, 60,
                             "every record consumed")
            return {v for m in members for v in m.values}
        finally:
            for m in members:
                await m.stop()

    consumed = asyncio.run(before_restart())
    assert consumed == set(first_batch)

    for broker in kafka_brokers:  # new broker processes (the coordinator among them): membership gone
        broker.restart()
    second_batch = [f"b{i}".encode() for i in range(12)]

    async def after_restart() -> list[bytes]:
        await produce(bootstrap, second_batch)
        member = Member(bootstrap, "late")
        try:
            await member.start()
            await wait_until(lambda: len(member.values) >= len(second_batch), 60, "the new records")
            return list(member.values)
        finally:
            await member.stop()

    resumed = asyncio.run(after_restart())
    assert sorted(resumed) == sorted(second_batch), "the group resumed from its committed offsets"
