"""Magnetar's asyncio protocol client against the real binary-protocol service, and pulsar-client beside it.

The broker runs in its own loop thread (``tests/kit/broker_thread.py``, in-memory managed ledger); the
asyncio client runs on the test's loop. pulsar-client calls block, so they run in a worker thread
(``asyncio.to_thread``) whenever the asyncio client must keep working meanwhile.
"""

from __future__ import annotations

import asyncio

import pulsar
import pytest

from config_store import Policies
from magnetar.protocol import MessageId, pb, split_batch
from magnetar.protocol.client import (
    BatchBuilder,
    Client,
    ConsumerBusyError,
    HandlerState,
    InitialPosition,
    ServerError,
    SubscriptionType,
)
from tests.kit.broker_thread import broker, client, new_client, storage, unique_topic  # noqa: F401 (fixtures)

RECEIVE_MS = 5000
DEDUP = {"policies": {"public/default": Policies(deduplication_enabled=True)}}


def asyncio_client(url: str) -> Client:
    return Client(url, operation_timeout_s=10, backoff_initial_s=0.05, backoff_max_s=0.5)


def pulsar_id(mid: MessageId) -> pulsar.MessageId:
    return pulsar.MessageId.deserialize(mid.serialize())


async def test_messages_from_the_asyncio_client_reach_pulsar_client_unchanged(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    async with asyncio_client(broker.url) as ours:
        producer = await ours.create_producer(topic)
        singles = [await producer.send(bytes([i]) * (i + 1), key=f"k{i}", properties={"i": str(i), "ü": "ß"},
                                       event_time_ms=1_000 + i) for i in range(20)]
        builder = BatchBuilder(max_messages=10)
        first = producer.next_sequence_ids(10)
        for i in range(10):
            builder.add(f"batched-{i}".encode(), sequence_id=first + i, properties={"b": str(i)}, key=f"bk{i}")
        batch = builder.build(producer_name=producer.producer_name, sequence_id=first)
        batch_id = await (await producer.send_entry(batch.metadata, batch.payload, num_messages=10,
                                                    highest_sequence_id=batch.highest_sequence_id))
        single_ids = await asyncio.gather(*singles)
    assert single_ids == sorted(single_ids)
    msgs = [consumer.receive(RECEIVE_MS) for _ in range(30)]
    for m in msgs:
        consumer.acknowledge(m)
    for i, m in enumerate(msgs[:20]):
        assert m.data() == bytes([i]) * (i + 1)
        assert m.properties() == {"i": str(i), "ü": "ß"} and m.partition_key() == f"k{i}"
        assert m.event_timestamp() == 1_000 + i
        assert m.message_id().serialize() == single_ids[i].serialize()
    for i, m in enumerate(msgs[20:]):
        assert m.data() == f"batched-{i}".encode() and m.properties() == {"b": str(i)}
        assert m.partition_key() == f"bk{i}" and m.message_id().batch_index() == i
        assert (m.message_id().ledger_id(), m.message_id().entry_id()) == (batch_id.ledger_id, batch_id.entry_id)


async def test_messages_from_pulsar_client_reach_the_asyncio_client_unchanged(broker, client):
    topic = unique_topic()
    async with asyncio_client(broker.url) as ours:
        consumer = await ours.subscribe(topic, "s", initial_position=InitialPosition.EARLIEST)

        def produce() -> list:
            plain = client.create_producer(topic)
            ids = [plain.send(f"plain-{i}".encode(), properties={"n": str(i)}, partition_key=f"k{i}",
                              event_timestamp=500 + i) for i in range(10)]
            batching = client.create_producer(topic, batching_enabled=True, batching_max_messages=25,
                                              batching_max_publish_delay_ms=100,
                                              compression_type=pulsar.CompressionType.LZ4)
            for i in range(50):
                batching.send_async(f"batched-{i}".encode() * 20, None, properties={"n": str(i)})
            batching.flush()
            return ids

        ids = await asyncio.to_thread(produce)
        got = [await consumer.receive(timeout_s=5) for _ in range(60)]
        for m in got:
            consumer.ack(m)
    for i, m in enumerate(got[:10]):
        assert m.payload == f"plain-{i}".encode() and m.properties == {"n": str(i)} and m.key == f"k{i}"
        assert m.event_time_ms == 500 + i
        assert m.message_id.serialize() == ids[i].serialize()
    for i, m in enumerate(got[10:]):
        assert m.payload == f"batched-{i}".encode() * 20 and m.properties == {"n": str(i)}
        assert m.message_id.is_batched and m.metadata.compression == pb.LZ4
    assert got[10].message_id.batch_size == 25


async def test_receipts_arrive_in_order_for_pipelined_sends(broker):
    topic = unique_topic()
    async with asyncio_client(broker.url) as ours:
        producer = await ours.create_producer(topic, max_pending_sends=200)
        futures = [await producer.send(str(i).encode()) for i in range(3000)]
        order: list[int] = []
        for i, fut in enumerate(futures):
            fut.add_done_callback(lambda _f, i=i: order.append(i))
        ids = await asyncio.gather(*futures)
    assert order == sorted(order) and len(order) == 3000
    assert ids == sorted(ids) and len(set(ids)) == 3000
    assert broker.stats(topic)["msgInCounter"] == 3000


@pytest.mark.parametrize("broker", [DEDUP], indirect=True)
async def test_producer_and_consumer_survive_topic_unload_without_duplicates(broker):
    topic = unique_topic()
    total = 4000
    async with asyncio_client(broker.url) as ours:
        consumer = await ours.subscribe(topic, "s", ack_group_time_s=0.05)
        producer = await ours.create_producer(topic, max_pending_sends=100)
        received: list[bytes] = []

        async def consume() -> None:
            while len(set(received)) < total:
                for m in await consumer.receive_batch(timeout_s=10):
                    received.append(m.payload)
                    consumer.ack(m)

        reader = asyncio.create_task(consume())
        futures = []
        for i in range(total):
            futures.append(await producer.send(f"m-{i}".encode()))
            if i in (1000, 2500):
                await asyncio.to_thread(broker.run, broker.service.unload_topic, topic)
        ids = await asyncio.wait_for(asyncio.gather(*futures), 30)
        await asyncio.wait_for(reader, 30)
        assert producer.reconnections >= 2 and consumer.reconnections >= 2
        assert producer.state is HandlerState.READY and consumer.state is HandlerState.READY
        # What the topic holds: every message exactly once, in order (re-sent duplicates were dropped).
        reader = await ours.create_reader(topic, MessageId.EARLIEST, receiver_queue_size=500)
        stored = [(await reader.receive(timeout_s=10)).payload for _ in range(total)]
        with pytest.raises(TimeoutError):
            await reader.receive(timeout_s=0.5)
    assert stored == [f"m-{i}".encode() for i in range(total)]
    positions = [mid for mid in ids if mid.entry_id >= 0]
    assert len(positions) == len(set(positions))
    # Every message was delivered; a redelivery after a reconnection may repeat some, never reorder a first
    # delivery, and deduplication stored each sequence id once.
    first_seen = list(dict.fromkeys(received))
    assert first_seen == [f"m-{i}".encode() for i in range(total)]


async def test_replicator_style_entries_keep_origin_metadata(broker):
    topic = unique_topic()
    async with asyncio_client(broker.url) as ours:
        producer = await ours.create_producer(topic, producer_name="pulsar.repl.us-east")
        builder = BatchBuilder()
        for i in range(5):
            builder.add(f"r{i}".encode(), sequence_id=100 + i)
        origin = builder.build(producer_name="origin-app", sequence_id=100, publish_time_ms=1_234_567)
        origin.metadata.replicated_from = "us-east"
        await (await producer.send_entry(origin.metadata, origin.payload, num_messages=5,
                                         highest_sequence_id=origin.highest_sequence_id))
        reader = await ours.create_reader(topic, MessageId.EARLIEST)
        got = [await reader.receive(timeout_s=5) for _ in range(5)]
    assert [m.payload for m in got] == [f"r{i}".encode() for i in range(5)]
    assert got[0].metadata == origin.metadata
    assert got[0].replicated_from == "us-east" and got[0].producer_name == "origin-app"
    assert got[0].publish_time_ms == 1_234_567 and [m.sequence_id for m in got] == list(range(100, 105))


async def test_reader_seek_and_last_message_id(broker, client):
    topic = unique_topic()
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(10)]
    async with asyncio_client(broker.url) as ours:
        reader = await ours.create_reader(topic, MessageId.EARLIEST)
        assert [(await reader.receive(timeout_s=5)).payload for _ in range(10)] == [f"m{i}".encode() for i in range(10)]
        last = await reader.get_last_message_id()
        assert last.serialize() == ids[-1].serialize()
        consumer = await ours.subscribe(topic, "s", initial_position=InitialPosition.EARLIEST, ack_group_time_s=0)
        for _ in range(10):
            consumer.ack(await consumer.receive(timeout_s=5))
        target = MessageId.deserialize(ids[4].serialize())
        await consumer.seek(target)
        again = [await consumer.receive(timeout_s=5) for _ in range(6)]
        assert [m.payload for m in again] == [f"m{i}".encode() for i in range(4, 10)]


async def test_shared_subscription_spreads_and_exclusive_is_refused(broker):
    topic = unique_topic()
    async with asyncio_client(broker.url) as ours:
        a = await ours.subscribe(topic, "shared", subscription_type=SubscriptionType.SHARED, receiver_queue_size=10)
        b = await ours.subscribe(topic, "shared", subscription_type=SubscriptionType.SHARED, receiver_queue_size=10)
        await ours.subscribe(topic, "excl")
        with pytest.raises(ConsumerBusyError):
            await ours.subscribe(topic, "excl")
        producer = await ours.create_producer(topic)
        for i in range(200):
            await producer.send(str(i).encode())
        await producer.flush()
        got_a: list[bytes] = []
        got_b: list[bytes] = []

        async def drain(consumer, out) -> None:
            while True:
                batch = await consumer.receive_batch(timeout_s=1)
                if not batch:
                    return
                for m in batch:
                    out.append(m.payload)
                    consumer.ack(m)

        await asyncio.gather(drain(a, got_a), drain(b, got_b))
    assert sorted(got_a + got_b, key=int) == [str(i).encode() for i in range(200)]
    assert got_a and got_b


async def test_refusals_are_typed_and_not_retried(broker):
    async with asyncio_client(broker.url) as ours:
        with pytest.raises(ServerError) as info:
            await ours.create_producer("persistent://no-such-tenant/ns/t")
        assert not info.value.retriable


async def test_whole_entries_count_their_messages_and_return_every_permit(broker):
    # 60 entries of 5 messages through a queue of 10 permits: the broker only keeps sending if the consumer
    # gives back 5 permits per entry it hands over; acking an entry acknowledges all 5 messages.
    topic = unique_topic()
    async with asyncio_client(broker.url) as ours:
        consumer = await ours.subscribe(topic, "s", initial_position=InitialPosition.EARLIEST,
                                        receiver_queue_size=10, whole_entries=True)
        producer = await ours.create_producer(topic)
        ids = []
        for n in range(60):
            builder = BatchBuilder(max_messages=5)
            first = producer.next_sequence_ids(5)
            for i in range(5):
                builder.add(f"{n}-{i}".encode(), sequence_id=first + i)
            batch = builder.build(producer_name=producer.producer_name, sequence_id=first)
            ids.append(await (await producer.send_entry(batch.metadata, batch.payload, num_messages=5,
                                                        highest_sequence_id=batch.highest_sequence_id)))
        got = [await consumer.receive(timeout_s=10) for _ in range(60)]
        assert [m.num_messages for m in got] == [5] * 60
        assert [(m.message_id.ledger_id, m.message_id.entry_id) for m in got] == \
            [(i.ledger_id, i.entry_id) for i in ids]
        assert all(m.message_id.batch_index == -1 for m in got)
        items = split_batch(got[7].payload, got[7].num_messages)  # handed over unsplit: the batch as stored
        assert [bytes(item.payload) for item in items] == [f"7-{i}".encode() for i in range(5)]
        consumer.ack_cumulative(got[-1])
        await consumer.flush_acks()
        await consumer.close()
        again = await ours.subscribe(topic, "s", receiver_queue_size=10)
        await (await producer.send(b"after"))
        # Everything before was acknowledged: the first message that comes is the new one.
        assert (await again.receive(timeout_s=10)).payload == b"after"
