"""Kafka consumer groups across real broker processes (ZooKeeper, bookies), aiokafka's client as the client:
FindCoordinator names the broker owning the group's coordination topic, the other broker answers
NOT_COORDINATOR, and committed offsets survive the SIGKILL of the coordinator (the survivor takes the
coordination topic over and answers with every acknowledged commit)."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from aiokafka import AIOKafkaClient
from aiokafka.client import ConnectionGroup
from aiokafka.protocol.commit import OffsetCommitRequest, OffsetFetchRequest
from aiokafka.protocol.group import JoinGroupRequest, SyncGroupRequest

from broker.kafka.cluster import node_id_of
from broker.kafka.groups import errors as E
from broker.kafka.groups.placement import DEFAULT_OFFSETS_PARTITIONS, OFFSETS_TOPIC, coordination_partition
from tests.kit.brokers import start_brokers
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

GROUP = "billing"
GROUPS = [GROUP] + [f"audit-{i}" for i in range(7)]
OFFSETS = [("orders", [(0, 1234, "checkpoint ✓"), (1, 0, "")]), ("audit", [(0, 9, "x" * 40)])]


@pytest.fixture
def kafka_brokers(tmp_path, zk_connect, bookie_factory):
    bookie_factory(2)
    return start_brokers(2, tmp_path, zk_connect, kafka=True)


def owner_http_url(broker, topic: str) -> str:
    url = f"{broker.http_url}/lookup/v2/topic/persistent/public/default/{topic}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())["httpUrl"]


def offsets_topic_of(group: str) -> str:
    return f"{OFFSETS_TOPIC}-partition-{coordination_partition(group, DEFAULT_OFFSETS_PARTITIONS)}"


async def with_client(bootstrap: str, fn):
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    await client.bootstrap()
    try:
        return await fn(client)
    finally:
        await client.close()


def test_coordinator_is_the_owner_and_offsets_survive_its_sigkill(kafka_brokers):
    first, second = kafka_brokers
    by_node = {node_id_of(b.broker_id): b for b in kafka_brokers}

    async def join_commit_fetch(client, group: str):
        coordinator = await client.coordinator_lookup(0, group)
        send = lambda request: client.send(coordinator, request, group=ConnectionGroup.COORDINATION)  # noqa: E731
        join = await send(JoinGroupRequest(group, 10_000, 30_000, "", "", "consumer", [("range", b"meta")]))
        assert join.error_code == E.NONE and join.leader_id == join.member_id, (group, join)
        sync = await send(SyncGroupRequest(group, join.generation_id, join.member_id, "",
                                           [(join.member_id, b"assigned")]))
        assert (sync.error_code, sync.member_assignment) == (E.NONE, b"assigned")
        commit = await send(OffsetCommitRequest(group, join.generation_id, join.member_id, -1, OFFSETS))
        assert all(code == E.NONE for _, ps in commit.topics for _, code in ps), commit
        fetched = await send(OffsetFetchRequest(group, [("orders", [0, 1]), ("audit", [0])]))
        other = next(n for n in by_node if n != coordinator)
        stray = await client.send(other, OffsetFetchRequest(group, [("orders", [0])]))
        return coordinator, fetched, stray

    async def every_group(client):
        # Several groups, so that some coordination topics are unowned when looked up and assigned to the
        # broker that did not answer FindCoordinator (it acquires them on the group's first request).
        return {group: await join_commit_fetch(client, group) for group in GROUPS}

    answers = asyncio.run(with_client(first.kafka_bootstrap, every_group))
    assert {coordinator for coordinator, _, _ in answers.values()} == set(by_node), "both brokers coordinate"
    coordinator = answers[GROUP][0]
    expected = [("orders", [(0, 1234, "checkpoint ✓", 0), (1, 0, "", 0)]), ("audit", [(0, 9, "x" * 40, 0)])]
    for group, (node, fetched, stray) in answers.items():
        assert by_node[node].http_url == owner_http_url(first, offsets_topic_of(group))
        assert sorted(fetched.topics) == sorted(expected)
        assert stray.error_code == E.NOT_COORDINATOR

    victim = by_node[coordinator]
    survivor = second if victim is first else first
    victim.kill()  # SIGKILL: nothing flushed on the way out; the acknowledged commits are in ZooKeeper already

    async def fetch_from_new_coordinator(client):
        new_coordinator = await client.coordinator_lookup(0, GROUP)
        response = await client.send(new_coordinator, OffsetFetchRequest(GROUP, None),
                                     group=ConnectionGroup.COORDINATION)
        return new_coordinator, response

    def taken_over():
        try:
            node, response = asyncio.run(with_client(survivor.kafka_bootstrap, fetch_from_new_coordinator))
        except Exception:  # no coordinator until the victim's ZooKeeper session ends (COORDINATOR_NOT_AVAILABLE)
            return None
        return (node, response) if node == node_id_of(survivor.broker_id) and response.error_code == E.NONE else None

    node, response = wait_for(taken_over, 60, interval_s=0.5, what="the survivor coordinating the group")
    assert sorted((t, sorted(ps)) for t, ps in response.topics) == sorted((t, sorted(ps)) for t, ps in expected)
