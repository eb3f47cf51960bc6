"""Topic-list watchers (WATCH_TOPIC_LIST), served to clients that announce them, seen through Magnetar's asyncio
client: negotiation in CONNECT/CONNECTED, the initial list and its hash, updates for topics created and deleted
(partitioned ones too), close, cleanup when the connection goes; and across two broker processes, a watcher on
one broker hearing of topics created and deleted on the other, while a pulsar-client pattern consumer polling
the first broker receives from them.

pulsar-client's C++ core (4.2 in pulsar-client 3.13) never announces ``supports_topic_watchers`` and polls
instead; Pulsar's Java client watches.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request

import pulsar
import pytest

from broker.service import ServiceConfig
from broker.service.session.topic_list import topics_hash
from magnetar.protocol import pb
from magnetar.protocol.client import Client, ClientError, Connection, NotAllowedError, TopicListWatch
from magnetar.protocol.client.errors import ServerError
from tests.kit.broker_thread import broker, storage  # noqa: F401 (fixtures)
from tests.kit.brokers import start_brokers
from tests.kit.pattern_discovery import honour_discovery_period
from tests.kit.wait import wait_for_async

NS = "persistent://public/default"
UPDATE_WITHIN_S = 10.0


def unique_prefix(kind: str) -> str:
    return f"{kind}{time.monotonic_ns() % 10_000_000}"


async def create_topic(url: str, topic: str) -> None:
    """Creates ``topic`` as an application does: by producing to it."""
    async with Client(url, operation_timeout_s=30) as client:
        producer = await client.create_producer(topic)
        await (await producer.send(b"x"))
        await producer.close()


async def test_watchers_are_served_and_advertised_only_to_clients_that_announce_them(broker):
    plain = await Connection(broker.url).start()
    watching = await Connection(broker.url, topic_watchers=True).start()
    try:
        assert not plain.broker_supports_topic_watchers and watching.broker_supports_topic_watchers
        with pytest.raises(ServerError, match="not supported on this connection"):
            await plain.request(pb.CommandWatchTopicList(watcher_id=1, namespace="public/default",
                                                         topics_pattern=f"{NS}/.*"))
        with pytest.raises(NotAllowedError, match="did not advertise"):
            await TopicListWatch.start(plain, "public/default", f"{NS}/.*")
        with pytest.raises(ServerError, match="invalid namespace"):
            await TopicListWatch.start(watching, "public", f"{NS}/.*")
        with pytest.raises(ServerError, match="not evaluated by this broker"):
            await TopicListWatch.start(watching, "public/default", f"{NS}/(a+)+")
        assert broker.call(broker.service.topic_list_watch.watcher_count) == 0  # refusals leave nothing
    finally:
        await plain.close()
        await watching.close()


@pytest.mark.parametrize("storage", ["memory"], indirect=True)
@pytest.mark.parametrize("broker", [{"config": ServiceConfig(topic_list_watchers_enabled=False)}], indirect=True)
async def test_a_broker_with_watchers_off_does_not_advertise_them(broker):
    conn = await Connection(broker.url, topic_watchers=True).start()
    try:
        assert not conn.broker_supports_topic_watchers
        with pytest.raises(ServerError, match="not supported on this connection"):
            await conn.request(pb.CommandWatchTopicList(watcher_id=1, namespace="public/default",
                                                        topics_pattern=f"{NS}/.*"))
    finally:
        await conn.close()


async def test_a_watcher_hears_of_topics_created_and_deleted_until_it_is_closed(broker):
    prefix = unique_prefix("w")
    pattern = f"{NS}/{prefix}-.*"
    await create_topic(broker.url, f"{NS}/{prefix}-a")
    conn = await Connection(broker.url, topic_watchers=True).start()
    try:
        watch = await TopicListWatch.start(conn, "public/default", pattern)
        assert watch.topics == {f"{NS}/{prefix}-a"} and watch.topics_hash == topics_hash(watch.topics)

        await create_topic(broker.url, f"{NS}/other-{prefix}")  # not matched: no update
        await create_topic(broker.url, f"{NS}/{prefix}-b")
        update = await watch.next_update(UPDATE_WITHIN_S)
        assert (update.new_topics, update.deleted_topics) == ([f"{NS}/{prefix}-b"], [])
        assert update.topics_hash == topics_hash([f"{NS}/{prefix}-a", f"{NS}/{prefix}-b"])

        broker.run(broker.config_store.create_partitioned_topic, "public", "default", "persistent", f"{prefix}-p", 2)
        update = await watch.next_update(UPDATE_WITHIN_S)
        assert sorted(update.new_topics) == [f"{NS}/{prefix}-p-partition-0", f"{NS}/{prefix}-p-partition-1"]

        await asyncio.to_thread(broker.run, broker.service.delete_topic, f"{NS}/{prefix}-b")
        update = await watch.next_update(UPDATE_WITHIN_S)
        assert (update.new_topics, update.deleted_topics) == ([], [f"{NS}/{prefix}-b"])
        assert watch.topics == {f"{NS}/{prefix}-a", f"{NS}/{prefix}-p-partition-0", f"{NS}/{prefix}-p-partition-1"}
        assert watch.topics_hash == topics_hash(watch.topics)

        # A client re-watching with the hash it holds gets no list back; with a stale one, the whole list.
        again = await TopicListWatch.start(conn, "public/default", pattern, topics_hash=watch.topics_hash)
        assert again.topics == set() and again.topics_hash == watch.topics_hash
        stale = await TopicListWatch.start(conn, "public/default", pattern, topics_hash="00000000")
        assert stale.topics == watch.topics
        assert broker.call(broker.service.topic_list_watch.watcher_count) == 3

        await watch.close()
        await again.close()
        assert broker.call(broker.service.topic_list_watch.watcher_count) == 1
        await create_topic(broker.url, f"{NS}/{prefix}-c")
        update = await stale.next_update(UPDATE_WITHIN_S)  # the open one still hears
        assert update.new_topics == [f"{NS}/{prefix}-c"]
        with pytest.raises(ClientError, match="closed"):
            await watch.next_update(0.1)  # the closed one was told nothing more
    finally:
        await conn.close()
    # closing the connection drops its watcher and, with the last one, the namespace's watches
    await wait_for_async(lambda: broker.call(broker.service.topic_list_watch.watcher_count) == 0, 10,
                         what="the closed connection's watchers dropped")
    assert broker.call(broker.service.topic_list_watch.watched_namespaces) == []
    with pytest.raises(ClientError):
        await stale.next_update(0.1)


# ------------------------------------------------------------------------------------------ across brokers


def owner_of(http_url: str, name: str) -> str:
    """The pulsar:// URL of the broker owning ``public/default/name`` (a lookup assigns it when unowned)."""
    with urllib.request.urlopen(f"{http_url}/lookup/v2/topic/persistent/public/default/{name}", timeout=15) as r:
        return json.loads(r.read())["brokerUrl"]


@pytest.mark.timeout(240)
async def test_a_watcher_on_one_broker_hears_of_topics_created_and_deleted_on_another(tmp_path, zk_connect,
                                                                                      bookie_factory):
    bookie_factory(2)
    a, b = await asyncio.to_thread(start_brokers, 2, tmp_path, zk_connect)
    prefix = unique_prefix("x")
    name = ""
    for i in range(64):  # a name whose bundle b owns (lookups spread bundles over both)
        if await asyncio.to_thread(owner_of, a.http_url, f"{prefix}-{i}") == b.pulsar_url:
            name = f"{prefix}-{i}"
            break
    assert name, "no bundle was assigned to the second broker"
    topic = f"{NS}/{name}"
    conn = await Connection(a.pulsar_url, topic_watchers=True).start()
    client = pulsar.Client(a.pulsar_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        watch = await TopicListWatch.start(conn, "public/default", f"{NS}/{prefix}-.*")
        assert watch.topics == set()
        with honour_discovery_period(1):
            consumer = await asyncio.to_thread(client.subscribe, re.compile(f"{NS}/{prefix}-.*"), "s",
                                               initial_position=pulsar.InitialPosition.Earliest)
        producer = await asyncio.to_thread(client.create_producer, topic)  # served by b
        await asyncio.to_thread(producer.send, b"from b")
        update = await watch.next_update(UPDATE_WITHIN_S)
        assert (update.new_topics, update.deleted_topics) == ([topic], [])
        # the pattern consumer polls a, which lists what b stored
        msg = await asyncio.to_thread(consumer.receive, 20_000)
        assert (msg.data(), msg.topic_name()) == (b"from b", topic)
        await asyncio.to_thread(consumer.acknowledge, msg)
        await asyncio.to_thread(consumer.close)
        await asyncio.to_thread(producer.close)

        request = urllib.request.Request(f"{b.http_url}/admin/v2/persistent/public/default/{name}", method="DELETE")
        with await asyncio.to_thread(urllib.request.urlopen, request, timeout=30) as response:
            assert response.status in (200, 204)
        update = await watch.next_update(UPDATE_WITHIN_S)
        assert (update.new_topics, update.deleted_topics) == ([], [topic])
        assert watch.topics == set() and watch.topics_hash == topics_hash([])
    finally:
        await asyncio.to_thread(client.close)
        await conn.close()
