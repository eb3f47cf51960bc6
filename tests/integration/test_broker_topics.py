"""Topic-level behaviour through pulsar-client and the facade: patterns, partitions, unload, delete, stats and
the admin operations on subscriptions (create, reset, skip, expire, delete, TTL)."""

from __future__ import annotations

import re
import time

import prometheus_client
import pulsar
import pytest

from broker.managed_ledger.api import Position
from broker.service import BrokerService, ConsumerBusyError, SubscriptionAlreadyExistsError, TopicBusyError
from config_store import Policies
from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

RECEIVE_MS = 5000


def test_pattern_subscription_reads_every_matching_topic(broker, client):
    prefix = f"pat{time.monotonic_ns() % 100000}"
    topics = [f"persistent://public/default/{prefix}-{i}" for i in range(3)]
    for t in topics:
        client.create_producer(t).send(t.encode())
    client.create_producer(f"persistent://public/default/other-{prefix}").send(b"not me")
    consumer = client.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "s",
                                initial_position=pulsar.InitialPosition.Earliest)
    got = sorted(consumer.receive(RECEIVE_MS).data() for _ in range(3))
    assert got == sorted(t.encode() for t in topics)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    # Topics created later are found by the client's next GET_TOPICS_OF_NAMESPACE poll; the Python wrapper
    # ignores pattern_auto_discovery_period (the poll stays at 60 s): test_pattern_consumers.py makes it poll
    # every second.
    names = broker.run(broker.service.topics_of_namespace, "public", "default")
    assert set(topics) <= set(names)


def test_partitioned_topic_round_trip(broker, client):
    broker.run(broker.config_store.create_partitioned_topic, "public", "default", "persistent", "parts", 3)
    topic = "persistent://public/default/parts"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    for i in range(30):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    sent = {}
    for i in range(30, 36):
        sent[f"m{i}".encode()] = producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    msgs = [consumer.receive(RECEIVE_MS) for _ in range(36)]
    assert sorted(int(m.data()[1:]) for m in msgs) == list(range(36))
    # regression: a received message's id names its partition (it used to arrive as -1), as the send
    # receipt's does, so the ids compare equal and serialize alike
    for m in msgs:
        assert m.message_id().partition() == int(m.topic_name().rsplit("-", 1)[1])
        if m.data() in sent:
            assert m.message_id() == sent[m.data()]
            assert m.message_id().serialize() == sent[m.data()].serialize()
    loaded = broker.call(lambda: sorted(n for n in broker.service.topics() if "parts" in n))
    assert loaded == [f"{topic}-partition-{i}" for i in range(3)]
    names = broker.run(broker.service.topics_of_namespace, "public", "default")
    assert {f"{topic}-partition-{i}" for i in range(3)} <= set(names)


@pytest.mark.parametrize("mode", ["round_robin", "single", "custom"])
def test_partitioned_topic_routing_modes(broker, client, mode):
    """Each of pulsar-client's routing modes lands messages where it says, and nothing is lost."""
    name = f"routed-{mode}-{time.monotonic_ns() % 100000}"
    broker.run(broker.config_store.create_partitioned_topic, "public", "default", "persistent", name, 3)
    topic = f"persistent://public/default/{name}"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    options = {"batching_enabled": False}
    if mode == "round_robin":
        options["message_routing_mode"] = pulsar.PartitionsRoutingMode.RoundRobinDistribution
    elif mode == "single":
        options["message_routing_mode"] = pulsar.PartitionsRoutingMode.UseSinglePartition
    else:
        options["message_router"] = lambda msg, num_partitions: int(msg.properties()["to"]) % num_partitions
    producer = client.create_producer(topic, **options)
    for i in range(30):
        producer.send(f"m{i}".encode(), properties={"to": str(i % 2)})
    partition_of: dict[int, str] = {}
    for _ in range(30):
        msg = consumer.receive(RECEIVE_MS)
        partition_of[int(msg.data()[1:])] = msg.topic_name().rsplit("-partition-", 1)[1]
        consumer.acknowledge(msg)
    assert sorted(partition_of) == list(range(30))
    used = set(partition_of.values())
    if mode == "round_robin":
        assert used == {"0", "1", "2"}
    elif mode == "single":
        assert len(used) == 1
    else:
        assert all(partition_of[i] == str(i % 2) for i in range(30))


def test_unload_moves_clients_without_losing_messages(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    first = [consumer.receive(RECEIVE_MS) for _ in range(5)]
    consumer.acknowledge_cumulative(first[2])
    assert broker.run(broker.service.unload_topic, topic) is True
    assert broker.run(broker.service.unload_topic, topic) is False
    for i in range(5, 10):
        producer.send(f"m{i}".encode())  # the client reconnected by itself
    seen = []
    while len(seen) < 7:
        m = consumer.receive(RECEIVE_MS)
        if m.data() not in seen:
            seen.append(m.data())
        consumer.acknowledge(m)
    assert seen == [f"m{i}".encode() for i in range(3, 10)]


def test_delete_topic_refused_with_clients_unless_forced(broker, client):
    topic = unique_topic()
    producer = client.create_producer(topic)
    producer.send(b"x")
    with pytest.raises(TopicBusyError):
        broker.run(broker.service.delete_topic, topic)
    broker.run(broker.service.delete_topic, topic, force=True)
    assert broker.run(broker.service.get_topic, topic, create=False) is None


def test_admin_subscription_operations(broker, client):
    topic = unique_topic()
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(10)]
    t = broker.run(broker.service.get_topic, topic)
    broker.run(t.create_subscription, "admin-sub", "earliest")
    with pytest.raises(SubscriptionAlreadyExistsError):
        broker.run(t.create_subscription, "admin-sub")
    stats = broker.stats(topic)["subscriptions"]["admin-sub"]
    assert stats["msgBacklog"] == 10 and stats["type"] == "None" and stats["isDurable"]
    assert broker.run(t.skip, "admin-sub", 3) == 3
    assert broker.stats(topic)["subscriptions"]["admin-sub"]["msgBacklog"] == 7
    broker.run(t.reset_cursor, "admin-sub", position=Position(ids[1].ledger_id(), ids[1].entry_id()))
    assert broker.stats(topic)["subscriptions"]["admin-sub"]["msgBacklog"] == 9
    consumer = client.subscribe(topic, "admin-sub")
    assert consumer.receive(RECEIVE_MS).data() == b"m1"
    with pytest.raises(ConsumerBusyError):
        broker.run(t.delete_subscription, "admin-sub")
    assert broker.run(t.expire, "admin-sub", 0) == 9
    assert broker.stats(topic)["subscriptions"]["admin-sub"]["msgBacklog"] == 0
    consumer.close()
    broker.run(t.delete_subscription, "admin-sub")
    assert "admin-sub" not in broker.stats(topic)["subscriptions"]


def test_unsubscribe_removes_the_subscription(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "gone", consumer_type=pulsar.ConsumerType.Shared)
    client.create_producer(topic).send(b"x")
    consumer.unsubscribe()
    assert "gone" not in broker.stats(topic)["subscriptions"]


@pytest.mark.parametrize("broker", [{"policies": {"public/default": Policies(message_ttl_in_seconds=1)}}],
                         indirect=True)
def test_message_ttl_expires_the_backlog(broker, client):
    topic = unique_topic()
    client.subscribe(topic, "idle").close()
    client.create_producer(topic).send(b"old")
    # the backlog drops when the cursor moves, the counter once the move is persisted: wait for both
    wait_for(lambda: (lambda s: (s["msgBacklog"], s["totalMsgExpired"]))(
        broker.stats(topic)["subscriptions"]["idle"]) == (0, 1), 15, what="TTL expiry of the backlog")


def test_stats_and_internal_stats_have_pulsar_fields(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", consumer_name="stats-consumer")
    producer = client.create_producer(topic, producer_name="stats-producer")
    for i in range(20):
        producer.send(b"x" * 100)
    for _ in range(20):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    stats = broker.stats(topic)
    for key in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "averageMsgSize", "storageSize",
                "backlogSize", "publishers", "subscriptions", "msgInCounter", "bytesInCounter"):
        assert key in stats, key
    assert stats["msgInCounter"] == 20 and stats["averageMsgSize"] > 100
    assert stats["publishers"][0]["producerName"] == "stats-producer"
    sub = stats["subscriptions"]["s"]
    for key in ("msgRateOut", "msgBacklog", "type", "consumers", "unackedMessages", "msgRateRedeliver"):
        assert key in sub, key
    assert sub["consumers"][0]["consumerName"] == "stats-consumer" and sub["msgOutCounter"] == 20
    internal = broker.call(lambda: broker.service.topics()[topic].internal_stats())
    assert internal["numberOfEntries"] == 20 and "s" in internal["cursors"]
    assert "markDeletePosition" in internal["cursors"]["s"]


def test_metrics_use_pulsar_names(broker, client):
    registry = prometheus_client.CollectorRegistry()
    topic = unique_topic()
    client.create_producer(topic).send(b"x")
    client.subscribe(topic, "s")

    def collect():
        from broker.service.metrics import ServiceCollector
        registry.register(ServiceCollector(broker.service))
        return prometheus_client.generate_latest(registry).decode()
    text = broker.call(collect)
    assert f'pulsar_in_messages_total{{cluster="test",namespace="public/default",topic="{topic}"}} 1.0' in text
    assert "pulsar_subscription_back_log" in text and "pulsar_storage_size" in text
    labels = f'{{cluster="test",namespace="public/default",topic="{topic}"}}'
    # One stored entry: counted once over Pulsar's latency ranges, and in the broker-wide histogram.
    ranges = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(("pulsar_storage_write_latency_le_", "pulsar_storage_write_latency_overflow"))
              and labels in line]
    assert len(ranges) == 10 and sum(ranges) == 1.0
    assert f"pulsar_storage_write_latency_count{labels} 1.0" in text
    assert 'magnetar_broker_publish_latency_seconds_bucket{le="+Inf"}' in text
    active = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith('pulsar_active_connections{cluster="test"}')]
    created = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('pulsar_connection_created_total_count{cluster="test"}')]
    assert active and active[0] >= 1 and created and created[0] >= active[0]


def test_missing_namespace_is_topic_not_found(broker, client):
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://ghost/ns/t")


def test_service_facade_lifecycle_is_idempotent(broker):
    async def scenario():
        svc = BrokerService(config=broker.service.config, ml_factory=broker.ml_factory,
                            configuration_store=broker.config_store, ownership=broker.ownership, cluster_name="x",
                            registry=prometheus_client.CollectorRegistry())
        await svc.start()
        await svc.start()
        assert svc.port > 0
        await svc.close()
        await svc.close()
    broker.run(scenario)


class _MovesWhileLoading:
    """The broker's ownership, except that the bundle is gone after the first check (a split or an unload
    that lands while the topic's managed ledger is being opened)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.checks = 0

    async def lookup(self, topic, **kwargs):
        return await self.inner.lookup(topic, **kwargs)

    async def is_owned_by_me(self, topic: str) -> bool:
        self.checks += 1
        return self.checks == 1


@pytest.mark.parametrize("kind", ["persistent", "non-persistent"])
def test_a_topic_whose_bundle_moved_while_it_loaded_is_not_served(broker, kind):
    # regression: a topic loading while its bundle was split was registered after the split had unloaded the
    # bundle's topics; the broker kept serving it while the new owner served it too (consumers on one copy,
    # producers on the other: acknowledged messages never delivered)
    from broker.service import ServiceNotReadyError

    async def scenario():
        ownership = _MovesWhileLoading(broker.ownership)
        svc = BrokerService(config=broker.service.config, ml_factory=broker.ml_factory,
                            configuration_store=broker.config_store, ownership=ownership, cluster_name="x",
                            registry=prometheus_client.CollectorRegistry())
        name = f"{kind}://public/default/moved-{time.monotonic_ns()}"
        try:
            with pytest.raises(ServiceNotReadyError, match="moved while it was being loaded"):
                await svc.get_topic(name, create=True)
            assert ownership.checks == 2 and name not in svc.topics()
        finally:
            await svc.close()
    broker.run(scenario)
