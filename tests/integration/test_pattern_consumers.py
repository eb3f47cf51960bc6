"""Pattern consumers of the real pulsar-client find topics created after they subscribed, partitioned ones too,
and outlive a deleted topic; GET_TOPICS_OF_NAMESPACE answers with Pulsar's filter, hash and ``changed``.

pulsar-client's C++ core polls GET_TOPICS_OF_NAMESPACE (it has no topic-list watcher) every
``pattern_auto_discovery_period`` seconds, a setting its Python wrapper drops (``tests/kit/pattern_discovery.py``).
"""

from __future__ import annotations

import re
import time

import pulsar
import pytest

from broker.service.session.topic_list import topics_hash
from magnetar.protocol import pb
from magnetar.protocol.client import Connection
from magnetar.protocol.client.errors import InvalidTopicNameError
from tests.kit.broker_thread import broker, client, new_client, storage  # noqa: F401 (fixtures)
from tests.kit.pattern_discovery import honour_discovery_period

NS = "persistent://public/default"
RECEIVE_MS = 5000
DISCOVERY_PERIOD_S = 1
DISCOVERED_WITHIN_MS = 15_000  # the period, a subscription, and a slow shared machine


def unique_prefix(kind: str) -> str:
    return f"{kind}{time.monotonic_ns() % 10_000_000}"


@pytest.fixture
def polling_every_second():
    with honour_discovery_period(DISCOVERY_PERIOD_S):
        yield


def receive_all(consumer, n: int, timeout_ms: int) -> list:
    deadline = time.monotonic() + timeout_ms / 1000
    got = []
    while len(got) < n:
        left_ms = int((deadline - time.monotonic()) * 1000)
        assert left_ms > 0, f"received {len(got)} of {n}: {[m.data() for m in got]}"
        msg = consumer.receive(left_ms)
        consumer.acknowledge(msg)
        got.append(msg)
    return got


def test_topics_created_after_subscribing_are_received_within_the_discovery_period(broker, client,
                                                                                    polling_every_second):
    prefix = unique_prefix("late")
    first = f"{NS}/{prefix}-a"
    client.create_producer(first).send(b"early")
    consumer = client.subscribe(re.compile(f"{NS}/{prefix}-.*"), "s", pattern_auto_discovery_period=DISCOVERY_PERIOD_S,
                                initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(consumer, 1, RECEIVE_MS)] == [b"early"]

    later = f"{NS}/{prefix}-b"
    client.create_producer(later).send(b"late")
    client.create_producer(f"{NS}/not-{prefix}").send(b"not matched")
    (msg,) = receive_all(consumer, 1, DISCOVERED_WITHIN_MS)
    assert (msg.data(), msg.topic_name()) == (b"late", later)

    # A partitioned topic created now: the client lists its partitions under the partitioned name, subscribes to
    # that and so to every partition.
    broker.run(broker.config_store.create_partitioned_topic, "public", "default", "persistent", f"{prefix}-p", 3)
    producer = client.create_producer(f"{NS}/{prefix}-p", batching_enabled=False,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    for i in range(6):
        producer.send(f"p{i}".encode())
    got = receive_all(consumer, 6, DISCOVERED_WITHIN_MS)
    assert sorted(m.data() for m in got) == [f"p{i}".encode() for i in range(6)]
    assert {m.topic_name() for m in got} == {f"{NS}/{prefix}-p-partition-{i}" for i in range(3)}
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)  # the unmatched topic never reaches it


def test_a_deleted_topic_leaves_the_pattern_consumer_working(broker, client, polling_every_second):
    prefix = unique_prefix("gone")
    keep, doomed = f"{NS}/{prefix}-keep", f"{NS}/{prefix}-doomed"
    keeper = client.create_producer(keep)
    keeper.send(b"k0")
    client.create_producer(doomed).send(b"d0")
    consumer = client.subscribe(re.compile(f"{NS}/{prefix}-.*"), "s", pattern_auto_discovery_period=DISCOVERY_PERIOD_S,
                                initial_position=pulsar.InitialPosition.Earliest)
    assert sorted(m.data() for m in receive_all(consumer, 2, RECEIVE_MS)) == [b"d0", b"k0"]

    broker.run(broker.service.delete_topic, doomed, force=True)
    # The broker closes the consumer of the deleted topic; pulsar-client resubscribes, which (as in Pulsar with
    # automatic topic creation on) creates an empty topic of that name: its old data never comes back.
    for i in range(1, 4):
        keeper.send(f"k{i}".encode())
    assert [m.data() for m in receive_all(consumer, 3, DISCOVERED_WITHIN_MS)] == [b"k1", b"k2", b"k3"]
    client.create_producer(f"{NS}/{prefix}-new").send(b"n0")
    (msg,) = receive_all(consumer, 1, DISCOVERED_WITHIN_MS)  # discovery still runs
    assert msg.data() == b"n0"
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    consumer.close()


async def test_topic_lists_carry_pulsars_filter_hash_and_changed_flag(broker):
    prefix = unique_prefix("ls")
    for name in (f"{prefix}-a", f"other-{prefix}"):
        broker.run(broker.service.get_topic, f"{NS}/{name}")
    broker.run(broker.config_store.create_partitioned_topic, "public", "default", "persistent", f"{prefix}-p", 2)
    mine = [f"{NS}/{prefix}-a", f"{NS}/{prefix}-p-partition-0", f"{NS}/{prefix}-p-partition-1"]
    conn = await Connection(broker.url).start()
    try:
        async def ask(**fields) -> pb.CommandGetTopicsOfNamespaceResponse:
            response = await conn.request(pb.CommandGetTopicsOfNamespace(namespace="public/default", **fields))
            return response.getTopicsOfNamespaceResponse

        # the pattern is matched against the partitioned topic's name, as a whole
        first = await ask(topics_pattern=f"{NS}/{prefix}-[a-z]")
        assert (first.filtered, first.changed, sorted(first.topics)) == (True, True, mine)
        assert first.topics_hash == topics_hash(mine)
        same = await ask(topics_pattern=f"{NS}/{prefix}-[a-z]", topics_hash=first.topics_hash)
        assert (same.changed, list(same.topics), same.topics_hash) == (False, [], first.topics_hash)
        broker.run(broker.service.get_topic, f"{NS}/{prefix}-c")
        grown = await ask(topics_pattern=f"{NS}/{prefix}-[a-z]", topics_hash=first.topics_hash)
        assert grown.changed and sorted(grown.topics) == sorted([*mine, f"{NS}/{prefix}-c"])

        everything = await ask()  # no pattern: unfiltered, hashed all the same
        assert not everything.filtered and f"{NS}/other-{prefix}" in everything.topics
        assert everything.topics_hash == topics_hash(everything.topics)
        risky = await ask(topics_pattern=f"{NS}/({prefix}-a+)+")  # not evaluated here: the client filters
        assert not risky.filtered and sorted(risky.topics) == sorted(everything.topics)

        with pytest.raises(InvalidTopicNameError, match="invalid namespace"):
            await conn.request(pb.CommandGetTopicsOfNamespace(namespace="public"))
    finally:
        await conn.close()
