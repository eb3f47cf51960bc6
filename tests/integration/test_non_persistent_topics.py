"""Non-persistent topics (``non-persistent://``) with pulsar-client 3.13: nothing stored, messages relayed to the
consumers connected at publish time, drops counted per subscription.

Most tests drive an in-process broker (``tests/kit/broker_thread.py``: storage plays no part here, so only the
in-memory managed ledger is used); the admin REST API and ``/metrics`` are checked on a real broker process.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.service import ServiceConfig
from magnetar.protocol import pb
from tests.kit.broker_thread import BrokerThread
from tests.kit.brokers import start_brokers
from tests.kit.wait import wait_for

RECEIVE_MS = 5000
Mode = pb.CommandGetTopicsOfNamespace


def np_topic(prefix: str = "np") -> str:
    return f"non-persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def broker():
    b = BrokerThread(config=ServiceConfig(stats_update_interval_s=0.5)).start()
    yield b
    b.stop()


@pytest.fixture
def new_client(broker):
    clients = []

    def factory(url: str | None = None):
        c = pulsar.Client(url or broker.url, operation_timeout_seconds=15,
                          logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        clients.append(c)
        return c

    yield factory
    for c in clients:
        c.close()


@pytest.fixture
def client(new_client):
    return new_client()


def receive(consumer, n):
    return [consumer.receive(RECEIVE_MS) for _ in range(n)]


def nothing_more(consumer, timeout_ms=300):
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_ms)


def sub_stats(broker, topic, sub):
    return broker.stats(topic)["subscriptions"][sub]


# ------------------------------------------------------------------------------------------ publish and receive


@pytest.mark.parametrize("batching", [False, True])
def test_exclusive_round_trip_with_pulsars_message_ids(broker, client, batching):
    topic = np_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=10)
    done = threading.Event()
    receipts = []

    def sent(result, msg_id):
        receipts.append((result, msg_id))
        if len(receipts) == 100:
            done.set()

    for i in range(100):
        producer.send_async(f"m{i}".encode(), sent, properties={"i": str(i)})
    producer.flush()
    assert done.wait(10)
    assert all(r == pulsar.Result.Ok for r, _ in receipts)
    # Pulsar answers every non-persistent SEND with ledger 0, entry 0 (nothing is stored)
    assert {(m.ledger_id(), m.entry_id()) for _, m in receipts} == {(0, 0)}
    msgs = receive(consumer, 100)  # equal ids: the client must not take them for duplicates
    assert [m.data() for m in msgs] == [f"m{i}".encode() for i in range(100)]
    assert [m.properties()["i"] for m in msgs] == [str(i) for i in range(100)]
    assert {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs} == {(0, 0)}
    if batching:
        assert any(m.message_id().batch_index() > 0 for m in msgs)
    for m in msgs:
        consumer.acknowledge(m)  # accepted (pulsar-client does not even send it here)
    nothing_more(consumer)
    stats = broker.stats(topic)
    assert stats["msgInCounter"] == 100 and stats["msgOutCounter"] == 100
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0


def test_messages_published_before_a_consumer_subscribes_are_not_kept(broker, client):
    topic = np_topic()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"early-{i}".encode())
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    for i in range(3):
        producer.send(f"late-{i}".encode())
    assert [m.data() for m in receive(consumer, 3)] == [f"late-{i}".encode() for i in range(3)]
    nothing_more(consumer)
    assert broker.stats(topic)["msgInCounter"] == 8


def test_shared_consumers_split_the_messages(broker, new_client):
    topic = np_topic()
    c1, c2 = new_client(), new_client()
    s1 = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    s2 = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = c1.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"m{i}".encode())
    got: dict[str, list[bytes]] = {"1": [], "2": []}
    for tag, consumer in (("1", s1), ("2", s2)):
        while True:
            try:
                got[tag].append(consumer.receive(500).data())
            except pulsar.Timeout:
                break
    assert got["1"] and got["2"]
    assert sorted(got["1"] + got["2"]) == sorted(f"m{i}".encode() for i in range(40))
    assert sub_stats(broker, topic, "s")["type"] == "Shared"


def test_failover_delivers_to_the_active_consumer_only(broker, new_client):
    topic = np_topic()
    c1, c2 = new_client(), new_client()
    b = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b-consumer")
    a = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a-consumer")
    wait_for(lambda: sub_stats(broker, topic, "s")["activeConsumerName"] == "a-consumer", 10,
             what="a-consumer (first by name) active")
    producer = c1.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in receive(a, 10)] == [f"m{i}".encode() for i in range(10)]
    nothing_more(b)
    a.close()
    wait_for(lambda: sub_stats(broker, topic, "s")["activeConsumerName"] == "b-consumer", 10,
             what="failover to b")
    for i in range(10, 15):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in receive(b, 5)] == [f"m{i}".encode() for i in range(10, 15)]


def test_key_shared_keeps_each_key_on_one_consumer(broker, new_client):
    topic = np_topic()
    c1, c2 = new_client(), new_client()
    k1 = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared)
    k2 = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = c1.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(20)]
    for round_ in range(5):
        for k in keys:
            producer.send(f"{k}:{round_}".encode(), partition_key=k)
    owner: dict[str, str] = {}
    order: dict[str, list[int]] = {}
    count = 0
    for tag, consumer in (("1", k1), ("2", k2)):
        while True:
            try:
                msg = consumer.receive(500)
            except pulsar.Timeout:
                break
            key, round_ = msg.data().decode().split(":")
            assert owner.setdefault(key, tag) == tag, f"{key} went to both consumers"
            order.setdefault(key, []).append(int(round_))
            count += 1
    assert count == 100
    assert set(owner.values()) == {"1", "2"}
    assert all(rounds == list(range(5)) for rounds in order.values())
    assert sub_stats(broker, topic, "s")["keySharedMode"] == "AUTO_SPLIT"


def test_a_reader_gets_what_is_published_after_it_starts(broker, client):
    topic = np_topic()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()  # nothing is stored
    for i in range(3):
        producer.send(f"after-{i}".encode())
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(3)] == [f"after-{i}".encode() for i in range(3)]
    reader.close()
    wait_for(lambda: not broker.stats(topic)["subscriptions"], 10, what="the reader's subscription removed")


def test_partitioned_non_persistent_topic(broker, client):
    name = f"np-parts-{uuid.uuid4().hex[:6]}"
    broker.run(broker.config_store.create_partitioned_topic, "public", "default", "non-persistent", name, 3)
    topic = f"non-persistent://public/default/{name}"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    msgs = receive(consumer, 30)
    assert sorted(int(m.data()[1:]) for m in msgs) == list(range(30))
    for m in msgs:
        assert m.message_id().partition() == int(m.topic_name().rsplit("-", 1)[1])
    partitions = [f"{topic}-partition-{i}" for i in range(3)]
    loaded = broker.call(lambda: sorted(n for n in broker.service.topics() if name in n))
    assert loaded == partitions
    assert set(partitions) <= set(broker.run(broker.service.topics_of_namespace, "public", "default",
                                             Mode.NON_PERSISTENT))


def test_pattern_consumer_finds_non_persistent_topics(broker, client):
    prefix = f"nppat{uuid.uuid4().hex[:6]}"
    topics = [f"non-persistent://public/default/{prefix}-{i}" for i in range(2)]
    producers = [client.create_producer(t, batching_enabled=False) for t in topics]
    client.create_producer(f"persistent://public/default/{prefix}-0").send(b"persistent, not listed")
    persistent_only = broker.run(broker.service.topics_of_namespace, "public", "default", Mode.PERSISTENT)
    assert not set(topics) & set(persistent_only)
    everything = broker.run(broker.service.topics_of_namespace, "public", "default", Mode.ALL)
    assert set(topics) | {f"persistent://public/default/{prefix}-0"} <= set(everything)
    consumer = client.subscribe(re.compile(f"non-persistent://public/default/{prefix}-.*"), "s",
                                regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly)
    for t, p in zip(topics, producers):
        p.send(t.encode())
    assert sorted(consumer.receive(RECEIVE_MS).data() for _ in topics) == sorted(t.encode() for t in topics)


# ------------------------------------------------------------------------------------------ flow control, drops


def test_a_consumer_without_permits_costs_drops_not_memory(broker, new_client):
    topic = np_topic()
    c1, c2 = new_client(), new_client()
    slow = c1.subscribe(topic, "slow", receiver_queue_size=10)  # never receives until the end
    fast = c2.subscribe(topic, "fast", receiver_queue_size=1000)
    producer = c1.create_producer(topic, batching_enabled=False)
    for i in range(300):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    fast_got = [m.data() for m in receive(fast, 300)]
    assert fast_got == [f"m{i}".encode() for i in range(300)]
    wait_for(lambda: sub_stats(broker, topic, "slow")["msgDropRate"] > 0, 10, what="drops counted")
    stats = broker.stats(topic)
    slow_stats = stats["subscriptions"]["slow"]
    assert slow_stats["msgOutCounter"] <= 10  # what its permits allowed: the rest was dropped, not queued
    assert slow_stats["msgBacklog"] == 0 and slow_stats["unackedMessages"] == 0
    assert stats["subscriptions"]["fast"]["msgDropRate"] == 0
    got = receive(slow, slow_stats["msgOutCounter"])
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(len(got))]
    producer.send(b"after")  # permits came back as the client's queue drained
    wait_for(lambda: sub_stats(broker, topic, "slow")["consumers"][0]["availablePermits"] > 0, 10,
             what="permits back")


def test_ack_nack_redeliver_and_seek_are_accepted_and_change_nothing(broker, client):
    topic = np_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=50)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"one")
    msg = consumer.receive(RECEIVE_MS)
    consumer.negative_acknowledge(msg)
    consumer.redeliver_unacknowledged_messages()
    consumer.seek(pulsar.MessageId.earliest)
    producer.send(b"two")
    assert consumer.receive(RECEIVE_MS).data() == b"two"  # nothing was kept to redeliver
    consumer.acknowledge(msg)
    nothing_more(consumer)


def test_unload_makes_clients_reconnect_and_continue(broker, client):
    topic = np_topic()
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    assert consumer.receive(RECEIVE_MS).data() == b"before"
    first = broker.topic(topic)
    assert broker.run(broker.service.unload_topic, topic)

    def reattached():  # runs on the broker loop
        loaded = broker.service.topics().get(topic)
        return loaded is not None and loaded is not first and loaded.has_clients() \
            and loaded.subscriptions.get("s") is not None and loaded.subscriptions["s"].consumers \
            and loaded.producers

    wait_for(lambda: broker.call(reattached), 20, what="producer and consumer back on a fresh topic")
    producer.send(b"after")
    assert consumer.receive(RECEIVE_MS).data() == b"after"


def test_delete_is_refused_while_clients_are_connected(broker, client):
    from broker.service import TopicBusyError

    topic = np_topic()
    producer = client.create_producer(topic)
    with pytest.raises(TopicBusyError):
        broker.run(broker.service.delete_topic, topic)
    broker.run(broker.service.delete_topic, topic, force=True)
    assert broker.topic(topic) is None
    producer.send(b"the producer reconnects to a new topic")


def test_an_inactive_topic_unloads_itself(broker, client, monkeypatch):
    from broker.service.topics.nonpersistent import topic as nonpersistent_topic

    monkeypatch.setattr(nonpersistent_topic, "INACTIVE_UNLOAD_S", 0.5)
    topic = np_topic()
    producer = client.create_producer(topic)
    producer.close()
    wait_for(lambda: broker.topic(topic) is None, 10, what="the idle topic unloaded")


# ------------------------------------------------------------------------------------------ admin and metrics


def _http(method: str, url: str) -> tuple[int, object]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            body = r.read()
            return r.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _series(text: str, name: str, topic: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels.get("topic") == topic:
                return s.value
    return None


def test_admin_stats_lists_metrics_unload_and_delete_on_a_broker_process(tmp_path, zk_connect):
    (b,) = start_brokers(1, tmp_path, zk_connect)
    topic = np_topic("np-admin")
    local = topic.rsplit("/", 1)[1]
    base = f"{b.http_url}/admin/v2/non-persistent/public/default"
    c = pulsar.Client(b.pulsar_url, operation_timeout_seconds=15,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = c.subscribe(topic, "s", receiver_queue_size=5)
        producer = c.create_producer(topic, producer_name="np-producer", batching_enabled=False)
        for i in range(50):
            producer.send(f"m{i}".encode())

        def stats():
            status, body = _http("GET", f"{base}/{local}/stats")
            assert status == 200, body
            return body

        body = wait_for(lambda: (s := stats())["msgRateIn"] > 0 and s["subscriptions"]["s"]["msgDropRate"] > 0
                        and s, 20, what="rates and drops in the stats")
        assert body["msgInCounter"] == 50 and body["storageSize"] == 0
        assert body["publishers"][0]["producerName"] == "np-producer"
        assert "msgDropRate" in body and "msgDropRate" in body["publishers"][0]
        sub = body["subscriptions"]["s"]
        assert sub["msgOutCounter"] <= 5 and sub["msgBacklog"] == 0 and len(sub["consumers"]) == 1

        assert _http("GET", base) == (200, [topic])
        ns = f"{b.http_url}/admin/v2/namespaces/public/default/topics"
        assert topic in _http("GET", f"{ns}?mode=NON_PERSISTENT")[1]
        assert topic in _http("GET", f"{ns}?mode=ALL")[1]
        assert topic not in _http("GET", ns)[1]

        text = urllib.request.urlopen(f"{b.http_url}/metrics", timeout=10).read().decode()
        assert _series(text, "pulsar_in_messages_total", topic) == 50
        assert _series(text, "pulsar_rate_in", topic) is not None
        assert _series(text, "pulsar_storage_size", topic) == 0

        assert _http("DELETE", f"{base}/{local}")[0] == 412  # clients connected
        assert _http("PUT", f"{base}/{local}/unload")[0] == 204
        for m in receive(consumer, sub["msgOutCounter"]):  # drain what was delivered before the unload
            assert m.data().startswith(b"m")
        wait_for(lambda: stats()["publishers"] and stats()["subscriptions"].get("s"), 20,
                 what="clients back after the unload")
        producer.send(b"after unload")
        assert consumer.receive(RECEIVE_MS).data() == b"after unload"

        consumer.close()
        producer.close()
        assert _http("DELETE", f"{base}/{local}")[0] == 204
        assert _http("GET", f"{base}/{local}/stats")[0] == 404
    finally:
        c.close()
