"""The receiving side of geo-replication, against the real binary-protocol service (in-memory and
bookie-backed managed ledgers): a replicator producer (``pulsar.repl.<origin>``) sending origin entries.

* each origin position is stored once, however often it is sent (a replicator restart, a failover);
* the state survives the topic being loaded again (learned from the stored entries' source position);
* the replicator's copy keeps the origin's metadata and is delivered to pulsar-client as sent;
* markers are accepted from a replicator only, and never delivered to applications.
"""

from __future__ import annotations

import pulsar

from magnetar.protocol import pb
from magnetar.protocol.client import BatchBuilder, Client, ServerError
from replicator.replicator import producer_name, replicated_metadata
from broker.managed_ledger.api import Position
from broker.service.topics.dedup import origin_sequence_id
from tests.kit.broker_thread import broker, client, make_client, new_client, storage, unique_topic  # noqa: F401 (fixtures)

RECEIVE_MS = 5000


def asyncio_client(url: str) -> Client:
    return Client(url, operation_timeout_s=10, backoff_initial_s=0.05, backoff_max_s=0.5)


def origin_entry(i: int) -> tuple[pb.MessageMetadata, bytes]:
    """What a replicator sends for origin entry (7, i): a single message by producer "app-1", sequence i."""
    md = pb.MessageMetadata(producer_name="app-1", sequence_id=i, publish_time=1_700_000_000_000 + i)
    md.partition_key = f"k{i}"
    return replicated_metadata(md, "us-east", Position(7, i)), f"payload-{i}".encode()


async def send_origin(producer, i: int):
    md, payload = origin_entry(i)
    return await producer.send_entry(md, payload, sequence_id=origin_sequence_id(7, i), source_position=(7, i))


def drain(consumer) -> list:
    out = []
    while True:
        try:
            m = consumer.receive(1000)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(m)
        out.append(m)


async def test_replicated_entries_are_stored_once_per_origin_position(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    async with asyncio_client(broker.url) as ours:
        producer = await ours.create_producer(topic, producer_name=producer_name("us-east"), send_timeout_s=0)
        first = [await (await send_origin(producer, i)) for i in range(10)]
        await producer.close()
        # a restarted replicator re-sends from its cursor's mark-delete: 5..14, half of them already stored
        again = await ours.create_producer(topic, producer_name=producer_name("us-east"), send_timeout_s=0)
        assert again.broker_last_sequence_id == origin_sequence_id(7, 9)
        repeated = [await (await send_origin(again, i)) for i in range(5, 15)]
    assert repeated[:5] == first[5:]  # duplicates are answered with the original positions
    msgs = drain(consumer)
    assert [m.data() for m in msgs] == [f"payload-{i}".encode() for i in range(15)]
    assert all(m.partition_key() == f"k{i}" for i, m in enumerate(msgs))
    assert msgs[3].properties()["__magnetar.repl.source_position"] == "7:3"
    stats = broker.stats(topic)
    assert stats["replication"]["us-east"]["msgInCounter"] == 15
    assert stats["deduplicationStatus"] == "Disabled"  # the namespace policy is untouched


async def test_origin_positions_survive_a_reload_of_the_topic(broker):
    topic = unique_topic()
    async with asyncio_client(broker.url) as ours:
        producer = await ours.create_producer(topic, producer_name=producer_name("us-east"), send_timeout_s=0)
        for i in range(20):
            await (await send_origin(producer, i))
        await producer.close()
    broker.restart_service()  # the topic loads again: the state comes from the stored entries
    client = make_client(broker.url)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        async with asyncio_client(broker.url) as ours:
            producer = await ours.create_producer(topic, producer_name=producer_name("us-east"), send_timeout_s=0)
            assert producer.broker_last_sequence_id == origin_sequence_id(7, 19)
            for i in range(15, 25):
                await (await send_origin(producer, i))
        assert [m.data() for m in drain(consumer)] == [f"payload-{i}".encode() for i in range(25)]
    finally:
        client.close()


async def test_a_replicated_batch_arrives_as_the_origin_batch(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    builder = BatchBuilder(max_messages=5)
    for i in range(5):
        builder.add(f"b{i}".encode(), sequence_id=100 + i, properties={"i": str(i)})
    batch = builder.build(producer_name="app-2", sequence_id=100)
    md = replicated_metadata(batch.metadata, "eu-west", Position(3, 0))
    async with asyncio_client(broker.url) as ours:
        producer = await ours.create_producer(topic, producer_name=producer_name("eu-west"), send_timeout_s=0)
        for _ in range(2):  # sent twice, stored once
            await (await producer.send_entry(md, batch.payload, num_messages=5,
                                             sequence_id=origin_sequence_id(3, 0), source_position=(3, 0)))
    msgs = drain(consumer)
    assert [m.data() for m in msgs] == [f"b{i}".encode() for i in range(5)]
    assert [m.properties() for m in msgs] == [{"i": str(i)} for i in range(5)]
    assert {m.message_id().ledger_id() for m in msgs} == {msgs[0].message_id().ledger_id()}


async def test_markers_only_from_replicators_and_never_delivered(broker, client):
    topic = unique_topic()
    consumer = client.subscribe(topic, "s")
    marker_md = pb.MessageMetadata(producer_name="pulsar.marker", sequence_id=0, publish_time=1, marker_type=10)
    payload = pb.ReplicatedSubscriptionsSnapshotRequest(snapshot_id="x", source_cluster="us-east").SerializeToString()
    async with asyncio_client(broker.url) as ours:
        plain = await ours.create_producer(topic, send_timeout_s=5)
        refused = await plain.send_entry(marker_md, payload, marker=True)
        try:
            await refused
            raise AssertionError("a marker from an application was accepted")
        except ServerError as exc:
            assert exc.code == pb.NotAllowedError
        repl = await ours.create_producer(topic, producer_name=producer_name("us-east"), send_timeout_s=0)
        await (await repl.send_entry(replicated_metadata(marker_md, "us-east", Position(7, 0)), payload,
                                     sequence_id=origin_sequence_id(7, 0), marker=True, source_position=(7, 0)))
        await (await send_origin(repl, 1))
    msgs = drain(consumer)
    assert [m.data() for m in msgs] == [b"payload-1"]


async def test_trailing_markers_are_not_the_last_message(broker, client):
    """Regression: GET_LAST_MESSAGE_ID answered the last entry even when it was a marker, so a reader looping on
    ``has_message_available()`` waited for a message that is never delivered (apache/pulsar#22572)."""
    topic = unique_topic()
    snapshot = pb.ReplicatedSubscriptionsSnapshotRequest(snapshot_id="x", source_cluster="us-east").SerializeToString()

    def marker(i: int) -> pb.MessageMetadata:
        md = pb.MessageMetadata(producer_name="pulsar.marker", sequence_id=0, publish_time=1, marker_type=10)
        return replicated_metadata(md, "us-east", Position(7, i))

    async with asyncio_client(broker.url) as ours:
        repl = await ours.create_producer(topic, producer_name=producer_name("us-east"), send_timeout_s=0)
        empty = client.create_reader(topic, pulsar.MessageId.earliest)
        await (await repl.send_entry(marker(0), snapshot, sequence_id=origin_sequence_id(7, 0), marker=True,
                                     source_position=(7, 0)))
        assert not empty.has_message_available()  # only a marker: nothing to read
        data_id = await (await send_origin(repl, 1))
        for i in (2, 3):
            await (await repl.send_entry(marker(i), snapshot, sequence_id=origin_sequence_id(7, i), marker=True,
                                         source_position=(7, i)))
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(RECEIVE_MS).data())
    assert got == [b"payload-1"]
    last = client.subscribe(topic, "s").get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (data_id.ledger_id, data_id.entry_id)
