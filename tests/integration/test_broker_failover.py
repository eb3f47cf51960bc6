"""A broker crash and a takeover on real storage (ZooKeeper + 3 bookie processes): what was acknowledged
before the last cursor persist stays acknowledged, and deduplication state survives (snapshot in the
``pulsar.dedup`` cursor's properties plus a replay of the entries after it)."""

from __future__ import annotations

import pulsar
import pytest

from broker.service import ServiceConfig
from config_store import Policies
from tests.kit.broker_thread import BrokerThread, make_client, real_storage, unique_topic
from tests.kit.wait import wait_for

RECEIVE_MS = 10_000


def storage_kwargs(tmp_path, zk_connect, *, start: bool):
    kwargs = real_storage(tmp_path, zk_connect, start=start)
    kwargs.pop("held")
    return kwargs.pop("bookies"), kwargs


def test_takeover_after_a_crash_keeps_acks_and_dedup_state(tmp_path, zk_connect):
    config = ServiceConfig(dedup_snapshot_interval_entries=5)
    policies = {"public/default": Policies(deduplication_enabled=True)}
    bookies, first = storage_kwargs(tmp_path, zk_connect, start=True)
    a = BrokerThread(config=config, policies=policies, **first).start()
    client_a = make_client(a.url, operation_timeout_seconds=2)  # its close() meets a dead broker
    topic = unique_topic("failover")
    try:
        consumer = client_a.subscribe(topic, "s")
        producer = client_a.create_producer(topic, producer_name="fo")
        for i in range(23):
            producer.send(f"m{i}".encode())
        for _ in range(10):
            consumer.acknowledge(consumer.receive(RECEIVE_MS))
        sub = a.call(lambda: a.service.topics()[topic].subscriptions["s"])
        wait_for(lambda: a.call(lambda: sub.cursor.backlog_entries() == 13 and not sub.cursor.dirty), 10,
                 what="the acknowledgements persisted")
        a.crash()  # the last dedup snapshot covers 20 entries: the last 3 must come back from the replay

        _, second = storage_kwargs(tmp_path, zk_connect, start=False)
        b = BrokerThread(config=config, policies=policies, **second).start()
        client_b = make_client(b.url)
        try:
            p2 = client_b.create_producer(topic, producer_name="fo")
            assert p2.last_sequence_id() == 22
            p2.send(b"duplicate of m20", sequence_id=20)
            p2.send(b"m23", sequence_id=23)
            c2 = client_b.subscribe(topic, "s")
            got = [c2.receive(RECEIVE_MS).data() for _ in range(14)]
            assert got == [f"m{i}".encode() for i in range(10, 24)]
            with pytest.raises(pulsar.Timeout):
                c2.receive(500)
        finally:
            client_b.close()
            b.stop()
    finally:
        try:
            client_a.close()
        except Exception:
            pass
        a.stop()
        for bk in bookies:
            bk.process.cleanup()
