"""Broker entry metadata on a broker process with real bookies, seen by the official pulsar-client and by
Magnetar's own client (which, unlike pulsar-client's Python API, shows the section it receives): stripped by
default, sent when ``exposing_broker_entry_metadata_to_client_enabled``; indexes continuous over ledger
rollovers, batches and a broker crash and restart."""

from __future__ import annotations

import asyncio
import time
import uuid

import pulsar
import pytest

from magnetar.protocol.client import Client, InitialPosition
from tests.kit.brokers import start_brokers

pytestmark = pytest.mark.timeout(240)

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
RECEIVE_MS = 10_000


def produce_mixed(client: pulsar.Client, topic: str, tag: str) -> list[bytes]:
    """7 unbatched, 3 batches of 10, 3 unbatched: 40 messages in 13 entries."""
    sent: list[bytes] = []
    plain = client.create_producer(topic, batching_enabled=False)
    for i in range(7):
        sent.append(f"{tag}-plain-{i}".encode())
        plain.send(sent[-1])
    batching = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=60_000)
    for i in range(30):
        sent.append(f"{tag}-batch-{i}".encode())
        batching.send_async(sent[-1], None)
        if i % 10 == 9:
            batching.flush()
    for i in range(3):
        sent.append(f"{tag}-late-{i}".encode())
        plain.send(sent[-1])
    plain.close()
    batching.close()
    return sent


def consume_all(client: pulsar.Client, topic: str, n: int) -> list[bytes]:
    consumer = client.subscribe(topic, "p", initial_position=pulsar.InitialPosition.Earliest)
    got = []
    for _ in range(n):
        msg = consumer.receive(RECEIVE_MS)
        got.append(msg.data())
        consumer.acknowledge(msg)
    consumer.close()
    return got


async def read_with_magnetar_client(url: str, topic: str, n: int) -> list:
    """The first ``n`` messages of subscription ``m`` (never acknowledged: it holds the data for readers)."""
    async with Client(url, operation_timeout_s=15) as ours:  # its CONNECT sets supports_broker_entry_metadata
        consumer = await ours.subscribe(topic, "m", initial_position=InitialPosition.EARLIEST)
        got = [await consumer.receive(timeout_s=10) for _ in range(n)]
        await consumer.close()
        return got


def subscribe_first(client: pulsar.Client, topic: str) -> None:
    """Subscriptions ``p`` and ``m`` before anything is produced (without one, retention 0 trims at once)."""
    for name in ("p", "m"):
        client.subscribe(topic, name, initial_position=pulsar.InitialPosition.Earliest).close()


def test_exposed_indexes_continue_over_rollovers_and_a_broker_crash(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect, exposing_broker_entry_metadata_to_client_enabled=True,
                         managed_ledger_max_entries_per_ledger=4)
    topic = f"persistent://public/default/bem-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(b.pulsar_url, logger=QUIET, operation_timeout_seconds=15)
    try:
        subscribe_first(client, topic)
        started_ms = int(time.time() * 1000)
        sent = produce_mixed(client, topic, "a")
        assert consume_all(client, topic, 40) == sent  # pulsar-client skips the section it was sent
        got = asyncio.run(read_with_magnetar_client(b.pulsar_url, topic, 40))
        assert [m.payload for m in got] == sent
        assert [m.index for m in got] == list(range(40))
        stamps = [m.broker_publish_time_ms for m in got]
        assert started_ms <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= int(time.time() * 1000)
        assert all(m.broker_publish_time_ms >= m.publish_time_ms for m in got)
    finally:
        client.close()
    b.restart(kill=True)  # a crash: the index is recovered from the last stored entry
    client = pulsar.Client(b.pulsar_url, logger=QUIET, operation_timeout_seconds=15)
    try:
        sent += produce_mixed(client, topic, "b")
        assert consume_all(client, topic, 40) == sent[40:]
        got = asyncio.run(read_with_magnetar_client(b.pulsar_url, topic, 80))
        assert [m.payload for m in got] == sent
        assert [m.index for m in got] == list(range(80))
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(RECEIVE_MS).data() for _ in range(80)] == sent
        reader.close()
    finally:
        client.close()


def test_stripped_by_default(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect, managed_ledger_max_entries_per_ledger=4)
    topic = f"persistent://public/default/bem-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(b.pulsar_url, logger=QUIET, operation_timeout_seconds=15)
    try:
        subscribe_first(client, topic)
        sent = produce_mixed(client, topic, "a")
        assert consume_all(client, topic, 40) == sent
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        first = [reader.read_next(RECEIVE_MS) for _ in range(40)]
        assert [m.data() for m in first] == sent
        reader.seek(first[20].message_id())  # seek into a batch: a reader goes on after that message
        assert reader.read_next(RECEIVE_MS).data() == sent[21]
        reader.close()
        got = asyncio.run(read_with_magnetar_client(b.pulsar_url, topic, 40))
        assert [m.payload for m in got] == sent
        assert all(m.broker_entry_metadata is None and m.index is None for m in got)
    finally:
        client.close()
