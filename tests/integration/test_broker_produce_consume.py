"""pulsar-client 3.13 against the binary-protocol service: publishing, subscription types, acknowledgements.

The broker runs in its own loop thread (``tests/kit/brokers.py``) on the in-memory managed ledger; the same
scenarios run on real bookies in ``test_broker_real_storage.py``.
"""

from __future__ import annotations

import threading

import pulsar
import pytest

from broker.service import ServiceConfig
from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

RECEIVE_MS = 5000


def receive_all(consumer, n, *, ack=True):
    out = []
    for _ in range(n):
        msg = consumer.receive(RECEIVE_MS)
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return out


def backlog(broker, topic, sub):
    return broker.stats(topic)["subscriptions"][sub]["msgBacklog"]


def test_round_trip_unbatched(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    ids = [producer.send(f"m-{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}") for i in range(50)]
    assert ids == sorted(ids)
    msgs = receive_all(consumer, 50)
    assert [m.data() for m in msgs] == [f"m-{i}".encode() for i in range(50)]
    assert [m.properties()["i"] for m in msgs] == [str(i) for i in range(50)]
    assert msgs[7].partition_key() == "k7"
    assert [m.message_id() for m in msgs] == ids
    wait_for(lambda: backlog(broker, topic, "s") == 0, 10, what="acks reach the cursor")


@pytest.mark.parametrize("compression", [pulsar.CompressionType.NONE, pulsar.CompressionType.LZ4,
                                         pulsar.CompressionType.ZSTD, pulsar.CompressionType.ZLib,
                                         pulsar.CompressionType.SNAPPY])
def test_round_trip_batched_and_compressed(broker, client, compression):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                                      batching_max_publish_delay_ms=50, compression_type=compression)
    done = threading.Event()
    results = []

    def cb(res, msg_id):
        results.append(res)
        if len(results) == 500:
            done.set()

    for i in range(500):
        producer.send_async((f"payload-{i}-" + "x" * 200).encode(), cb)
    producer.flush()
    assert done.wait(10) and all(r == pulsar.Result.Ok for r in results)
    msgs = receive_all(consumer, 500)
    assert [m.data() for m in msgs] == [(f"payload-{i}-" + "x" * 200).encode() for i in range(500)]
    assert any(m.message_id().batch_index() > 0 for m in msgs)
    stats = broker.stats(topic)
    assert stats["msgInCounter"] == 500
    assert stats["publishers"][0]["producerName"] == producer.producer_name()


@pytest.mark.parametrize("broker", [{"config": ServiceConfig(max_message_size_bytes=64 * 1024)}], indirect=True)
def test_large_messages_are_chunked_by_the_client(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = bytes(range(256)) * 1024  # 256 KiB: 5 chunks of 64 KiB
    producer.send(big)
    producer.send(b"small")
    msg = consumer.receive(RECEIVE_MS)
    assert msg.data() == big
    consumer.acknowledge(msg)
    assert consumer.receive(RECEIVE_MS).data() == b"small"
    assert broker.stats(topic)["msgInCounter"] >= 5


def test_exclusive_refuses_a_second_consumer(broker, client):
    topic = unique_topic()
    first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    first.close()
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)  # type may change once empty


def test_failover_active_by_priority_then_name_and_failover_on_close(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    b = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b-consumer",
                     receiver_queue_size=10)
    a = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a-consumer",
                     receiver_queue_size=10)
    wait_for(lambda: broker.stats(topic)["subscriptions"]["s"]["activeConsumerName"] == "a-consumer", 10,
             what="a-consumer (first by name) active")
    producer = c1.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    got = [a.receive(RECEIVE_MS) for _ in range(5)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    for m in got[:3]:
        a.acknowledge(m)
    with pytest.raises(pulsar.Timeout):
        b.receive(300)
    a.close()  # two delivered-but-unacked messages and the rest go to b, in order
    wait_for(lambda: broker.stats(topic)["subscriptions"]["s"]["activeConsumerName"] == "b-consumer", 10,
             what="failover to b")
    rest = receive_all(b, 17)
    assert [m.data() for m in rest] == [f"m{i}".encode() for i in range(3, 20)]


def test_shared_round_robin_and_cumulative_ack_refused(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    s1 = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    s2 = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    producer = c1.create_producer(topic)
    for i in range(40):
        producer.send(f"m{i}".encode())
    seen = {}

    def drain(consumer, tag):
        while True:
            try:
                m = consumer.receive(500)
            except pulsar.Timeout:
                return
            seen[m.data()] = tag
            consumer.acknowledge(m)

    t = threading.Thread(target=drain, args=(s2, 2))
    t.start()
    drain(s1, 1)
    t.join()
    assert len(seen) == 40
    assert set(seen.values()) == {1, 2}
    s2.close()
    producer.send(b"x")
    m = s1.receive(RECEIVE_MS)
    with pytest.raises(pulsar.CumulativeAcknowledgementNotAllowedError):
        s1.acknowledge_cumulative(m)


def test_key_shared_keeps_keys_on_one_consumer_in_order(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    k1 = c1.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=50)
    k2 = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=50)
    producer = c1.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(20)]
    for i in range(200):
        producer.send(f"{i}".encode(), partition_key=keys[i % 20])
    received: dict[str, list[tuple[int, int]]] = {}
    lock = threading.Lock()

    def drain(consumer, tag):
        while True:
            try:
                m = consumer.receive(700)
            except pulsar.Timeout:
                return
            with lock:
                received.setdefault(m.partition_key(), []).append((tag, int(m.data())))
            consumer.acknowledge(m)

    t = threading.Thread(target=drain, args=(k2, 2))
    t.start()
    drain(k1, 1)
    t.join()
    assert sum(len(v) for v in received.values()) == 200
    owners = {k: {tag for tag, _ in v} for k, v in received.items()}
    assert all(len(tags) == 1 for tags in owners.values()), owners
    assert {t for tags in owners.values() for t in tags} == {1, 2}
    for k, v in received.items():
        values = [i for _, i in v]
        assert values == sorted(values), k


def test_individual_and_cumulative_acks_move_the_backlog(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    msgs = receive_all(consumer, 10, ack=False)
    consumer.acknowledge(msgs[2])
    consumer.acknowledge(msgs[5])
    wait_for(lambda: backlog(broker, topic, "s") == 8, 10, what="two individual acks")
    consumer.acknowledge_cumulative(msgs[6])
    wait_for(lambda: backlog(broker, topic, "s") == 3, 10, what="cumulative ack to m6")
    consumer.acknowledge_cumulative(msgs[9])
    wait_for(lambda: backlog(broker, topic, "s") == 0, 10, what="cumulative ack to the end")


def test_batch_index_acks_redeliver_only_unacked_members(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=1000)
    for i in range(10):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    msgs = receive_all(consumer, 10, ack=False)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) == 1
    for m in msgs[:6]:
        consumer.acknowledge(m)
    topic_obj = broker.topic(topic)
    wait_for(lambda: broker.call(lambda: len(topic_obj.subscriptions["s"].batch_acks)) == 1, 10,
             what="batch ack state recorded")
    consumer.redeliver_unacknowledged_messages()
    again = receive_all(consumer, 4)
    assert [m.data() for m in again] == [f"m{i}".encode() for i in range(6, 10)]
    wait_for(lambda: backlog(broker, topic, "s") == 0, 10, what="batch fully acked")
