"""aiokafka producers and consumers against real brokers (ZooKeeper, bookies, two brokers with Kafka
listeners): round trips on a single-partition and a partitioned topic with every compression aiokafka offers,
keys, headers and timestamps preserved; seek_to_beginning/end, offsets_for_times; an idempotent producer's
retried batch stored once; interop with pulsar-client both ways."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pulsar
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.kit.brokers import start_brokers
from tests.kit.wait import wait_for_async

pytestmark = pytest.mark.timeout(300)

COMPRESSIONS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def kafka_brokers(tmp_path, zk_connect, bookie_factory):
    bookie_factory(2)
    return start_brokers(2, tmp_path, zk_connect, kafka=True)


def bootstrap(brokers) -> str:
    return ",".join(b.kafka_bootstrap for b in brokers)


async def consume(servers: str, topic: str, partitions: int, count: int, *, timeout_s: float = 60) -> list:
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        await consumer.seek_to_beginning()
        got = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                got.extend(records)
        return got
    finally:
        await consumer.stop()


def test_round_trip_with_every_compression_keys_headers_and_timestamps(kafka_brokers) -> None:
    servers = bootstrap(kafka_brokers)

    async def scenario() -> None:
        sent = []
        for codec in COMPRESSIONS:
            producer = AIOKafkaProducer(bootstrap_servers=servers, compression_type=codec, acks="all",
                                        linger_ms=5)
            await producer.start()
            try:
                futures = []
                for i in range(20):
                    key = f"key-{i % 4}".encode()
                    value = f"{codec}-{i}".encode() * 10
                    headers = [("codec", str(codec).encode()), ("n", str(i).encode())]
                    ts = 1_700_000_000_000 + len(sent)
                    futures.append(await producer.send("orders", value, key=key, headers=headers, timestamp_ms=ts))
                    sent.append((key, value, headers, ts))
                metas = [await f for f in futures]
                assert all(m.offset >= 0 for m in metas)
            finally:
                await producer.stop()
        got = await consume(servers, "orders", 1, len(sent))
        assert [(r.key, r.value, list(r.headers), r.timestamp) for r in got] == sent
        assert [r.offset for r in got] == list(range(len(sent)))

    asyncio.run(scenario())


def test_partitioned_topic_keys_stay_on_their_partition(kafka_brokers) -> None:
    servers = bootstrap(kafka_brokers)

    async def scenario() -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=servers)
        await admin.start()
        await admin.create_topics([NewTopic("payments", 4, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=servers, compression_type="lz4", acks=1)
        await producer.start()
        placed = {}
        try:
            for i in range(40):
                key = f"customer-{i % 8}".encode()
                meta = await producer.send_and_wait("payments", f"p{i}".encode(), key=key)
                placed.setdefault(key, set()).add(meta.partition)
        finally:
            await producer.stop()
        assert all(len(parts) == 1 for parts in placed.values())
        got = await consume(servers, "payments", 4, 40)
        assert sorted(r.value for r in got) == sorted(f"p{i}".encode() for i in range(40))
        for record in got:
            assert {record.partition} == placed[record.key]

    asyncio.run(scenario())


def test_seek_and_offsets_for_times(kafka_brokers) -> None:
    servers = bootstrap(kafka_brokers)

    async def scenario() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=servers)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("ticks", f"t{i}".encode(), timestamp_ms=1_000_000 + i * 1000)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition("ticks", 0)
            consumer.assign([tp])
            assert (await consumer.beginning_offsets([tp]))[tp] == 0
            assert (await consumer.end_offsets([tp]))[tp] == 10
            found = await consumer.offsets_for_times({tp: 1_004_500})
            assert found[tp].offset == 5 and found[tp].timestamp == 1_005_000
            assert (await consumer.offsets_for_times({tp: 9_999_999}))[tp] is None
            await consumer.seek_to_end(tp)
            assert await consumer.position(tp) == 10
            await consumer.seek_to_beginning(tp)
            first = await consumer.getone()
            assert (first.offset, first.value) == (0, b"t0")
            consumer.seek(tp, 7)
            assert (await consumer.getone()).value == b"t7"
        finally:
            await consumer.stop()

    asyncio.run(scenario())


def test_interop_with_pulsar_client_both_ways(kafka_brokers) -> None:
    servers = bootstrap(kafka_brokers)
    client = pulsar.Client(kafka_brokers[0].pulsar_url)
    try:
        # pulsar-client -> Kafka consumer (batched and not, compressed)
        producer = client.create_producer("persistent://public/default/from-pulsar", batching_enabled=True,
                                          compression_type=pulsar.CompressionType.ZSTD)
        for i in range(10):
            producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i}", properties={"i": str(i)},
                               event_timestamp=5_000 + i)
        producer.flush()
        producer.send(b"last", partition_key="k-last")
        got = asyncio.run(consume(servers, "from-pulsar", 1, 11))
        assert [(r.key, r.value) for r in got] == [(f"k{i}".encode(), f"m{i}".encode()) for i in range(10)] + [
            (b"k-last", b"last")]
        assert [dict(r.headers)["i"] for r in got[:10]] == [str(i).encode() for i in range(10)]
        assert [r.timestamp for r in got[:10]] == [5_000 + i for i in range(10)]
        assert [r.offset for r in got] == list(range(11))

        # Kafka producer -> pulsar-client consumer
        consumer = client.subscribe("persistent://public/default/from-kafka", "s",
                                    initial_position=pulsar.InitialPosition.Earliest)

        async def produce() -> None:
            kafka = AIOKafkaProducer(bootstrap_servers=servers, compression_type="gzip")
            await kafka.start()
            try:
                for i in range(10):
                    await kafka.send("from-kafka", f"v{i}".encode(), key=f"key{i}".encode(), headers=[("h", b"x")],
                                     timestamp_ms=7_000 + i)
                await kafka.flush()
            finally:
                await kafka.stop()

        asyncio.run(produce())
        received = [consumer.receive(timeout_millis=30_000) for _ in range(10)]
        assert [(m.partition_key(), m.data()) for m in received] == [(f"key{i}", f"v{i}".encode()) for i in range(10)]
        assert [m.properties() for m in received] == [{"h": "x"}] * 10
        assert [m.event_timestamp() for m in received] == [7_000 + i for i in range(10)]
    finally:
        client.close()


def test_an_idempotent_producers_retried_batch_is_stored_once(kafka_brokers) -> None:
    """The same batch (producer id, epoch, sequence) sent twice, as a producer retries after a lost answer:
    the second is answered with the first's offset and the topic holds one copy."""
    from aiokafka import AIOKafkaClient
    from aiokafka.protocol.produce import ProduceRequest
    from aiokafka.protocol.transaction import InitProducerIdRequest
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    servers = bootstrap(kafka_brokers)

    async def scenario() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=servers, enable_idempotence=True)
        await producer.start()  # creates the topic's metadata, checks the idempotent path end to end
        try:
            first = await producer.send_and_wait("idem", b"a")
        finally:
            await producer.stop()
        client = AIOKafkaClient(bootstrap_servers=servers)
        await client.bootstrap()
        try:
            await client._maybe_wait_metadata() if hasattr(client, "_maybe_wait_metadata") else None
            await client.force_metadata_update()
            client.add_topic("idem")
            await client.force_metadata_update()
            leader = client.cluster.leader_for_partition(TopicPartition("idem", 0))
            init = await client.send(leader, InitProducerIdRequest(None, 60_000))
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                                producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                                base_sequence=0, batch_size=1 << 20)
            for i in range(3):
                builder.append(i, timestamp=None, key=None, value=f"x{i}".encode(), headers=[])
            data = bytes(builder.build())
            answers = []
            for _ in range(2):
                response = await client.send(leader, ProduceRequest(None, -1, 30_000, [("idem", [(0, data)])]))
                answers.append(response.topics[0][1][0])
        finally:
            await client.close()
        assert [a[1] for a in answers] == [0, 0]  # no error either time
        assert answers[0][2] == answers[1][2] == first.offset + 1  # the duplicate gets the original offset
        got = await consume(servers, "idem", 1, 4, timeout_s=10)
        assert [r.value for r in got] == [b"a", b"x0", b"x1", b"x2"]

    asyncio.run(scenario())


def _fetch_requests(brokers) -> float:
    """Kafka Fetch requests the brokers have taken (``magnetar_broker_kafka_requests_total{api="Fetch"}``)."""
    total = 0.0
    for broker in brokers:
        with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
            for family in text_string_to_metric_families(response.read().decode()):
                total += sum(x.value for x in family.samples
                             if x.name == "magnetar_broker_kafka_requests_total" and x.labels.get("api") == "Fetch")
    return total


def test_fetch_long_poll_waits_for_max_wait_and_wakes_on_a_new_record(kafka_brokers) -> None:
    from aiokafka import AIOKafkaClient
    from aiokafka.protocol.fetch import FetchRequest

    servers = bootstrap(kafka_brokers)

    async def scenario() -> tuple[float, float, list]:
        producer = AIOKafkaProducer(bootstrap_servers=servers)
        await producer.start()
        client = AIOKafkaClient(bootstrap_servers=servers)
        await client.bootstrap()
        try:
            first = await producer.send_and_wait("polled", b"first")
            client.add_topic("polled")
            await client.force_metadata_update()
            leader = client.cluster.leader_for_partition(TopicPartition("polled", 0))

            def request(wait_ms: int):  # noqa: ANN202
                return FetchRequest(wait_ms, 1, 1 << 20, 0, [("polled", [(0, first.offset + 1, 1 << 20)])])

            started = time.monotonic()
            empty = await client.send(leader, request(1500))
            idle_s = time.monotonic() - started
            assert empty.topics[0][1][0][-1] == b""  # nothing new: answered empty after max_wait

            started = time.monotonic()
            fetches = await asyncio.to_thread(_fetch_requests, kafka_brokers)
            poll = asyncio.create_task(client.send(leader, request(20_000)))
            # the record must arrive while the fetch is parked: wait until a broker has taken the request
            await wait_for_async(lambda: asyncio.to_thread(lambda: _fetch_requests(kafka_brokers) > fetches), 10,
                                 interval_s=0.02, what="the long-poll fetch taken by the broker")
            await producer.send_and_wait("polled", b"second")
            answer = await asyncio.wait_for(poll, 15)
            woke_s = time.monotonic() - started
            from aiokafka.record.memory_records import MemoryRecords

            records = MemoryRecords(answer.topics[0][1][0][-1])
            values = []
            while records.has_next():
                values.extend((r.offset, r.value) for r in records.next_batch())
            return idle_s, woke_s, values
        finally:
            await producer.stop()
            await client.close()

    idle_s, woke_s, values = asyncio.run(scenario())
    assert 1.4 <= idle_s < 5
    assert woke_s < 5  # woken by the append, long before the 20 s max wait
    assert values == [(1, b"second")]


def test_acks_zero_and_a_seek_into_the_middle_of_a_batch(kafka_brokers) -> None:
    """acks=0 gets no answer and stores everything; a consumer seeking to an offset inside a stored batch (one
    entry of many records) starts at that record."""
    servers = bootstrap(kafka_brokers)

    async def scenario() -> tuple[list, list]:
        producer = AIOKafkaProducer(bootstrap_servers=servers, acks=0, linger_ms=50)
        await producer.start()
        try:
            for i in range(8):
                await producer.send("batched", f"b{i}".encode())  # one linger window: one batch, one entry
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition("batched", 0)
            consumer.assign([tp])
            deadline = time.monotonic() + 30
            while (await consumer.end_offsets([tp]))[tp] < 8 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # acks=0: nothing tells the producer when the records are stored
            consumer.seek(tp, 5)
            middle = [(r.offset, r.value) for r in (await consumer.getmany(tp, timeout_ms=5000))[tp]]
            await consumer.seek_to_beginning(tp)
            everything = []
            while len(everything) < 8 and time.monotonic() < deadline:
                everything.extend(r.value for r in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []))
            return middle, everything
        finally:
            await consumer.stop()

    middle, everything = asyncio.run(scenario())
    assert everything == [f"b{i}".encode() for i in range(8)]
    assert middle[0] == (5, b"b5") and [o for o, _ in middle] == [5, 6, 7]
