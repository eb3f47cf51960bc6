"""Issue 19's "must show" through Pulsar's own client. First: 4 bookie processes, E/Qw/Qa 3/2/2, 50,000
messages over many ledgers (a broker rolling its ledger every 20 entries), an auto-recovery process. One
bookie SIGKILLed and its data deleted: the producer sees no error (its next entries take an ensemble change)
and, within the grace period plus the copy time, every ledger fragment is back at Qw intact copies on live
bookies; a second bookie SIGKILLed: every acknowledged message reads back byte-identical, in order."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import pulsar

from bookie.autorecovery.model import Fragment, fragment_entries, segments
from bookie.autorecovery.underreplication import UnderReplicationStore
from bookie.client import LedgerClient, LedgerClientConfig
from config_store import KazooMetadataStore, LedgerState, RegionStore
from magnetar.proto import bookie_pb2
from tests.kit.autorecovery import start_autorecovery
from tests.kit.broker_thread import BrokerThread, make_client, real_storage, unique_topic
from tests.kit.wait import wait_for

MESSAGES = 50_000
OK = bookie_pb2.Status.OK


def message(i: int) -> bytes:
    return f"message-{i:06d}-".encode() + bytes((i * 7 + k) % 256 for k in range(64))


async def fragments_at_qw_on(zk_connect: str, live: set[str]) -> bool:
    """No under-replication record, every closed ledger names only ``live`` bookies, and each of them
    answers every entry of its fragments."""
    store = KazooMetadataStore(zk_connect)
    await store.start()
    try:
        region = RegionStore(store)
        if await UnderReplicationStore(store).list_ledgers():
            return False
        async with LedgerClient(region, config=LedgerClientConfig(read_timeout_s=3.0)) as client:
            for lid in await region.list_ledgers():
                md = (await region.read_ledger(lid)).value
                for first, last, ensemble in segments(md):
                    if md.state is not LedgerState.CLOSED and last < first:
                        continue  # the open ledger's current segment: written by the live broker
                    for bookie in ensemble:
                        if bookie not in live:
                            return False
                        ids = fragment_entries(md, Fragment(first, bookie))
                        if ids:
                            got = await client.bookie_client(bookie).read_entries(lid, ids)
                            if any(e.status != OK for e in got) or len(got) != len(ids):
                                return False
        return True
    finally:
        await store.close()


async def registered(zk_connect: str) -> set[str]:
    store = KazooMetadataStore(zk_connect)
    await store.start()
    try:
        return set(await RegionStore(store).list_bookies())
    finally:
        await store.close()


def test_fifty_thousand_messages_survive_a_lost_bookie_then_a_second_loss(tmp_path, zk_connect) -> None:
    storage = real_storage(tmp_path, zk_connect, bookies=4, max_entries_per_ledger=20)
    storage.pop("held")
    bookies = storage.pop("bookies")
    (recovery,) = start_autorecovery(1, tmp_path, zk_connect)
    broker = BrokerThread(**storage).start()
    client = make_client(broker.url)
    topic = unique_topic("autorecovery")
    try:
        consumer = client.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        consumer.close()  # the subscription keeps every message until read
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                                          batching_max_publish_delay_ms=5, block_if_queue_full=True)
        half = MESSAGES // 2
        for i in range(half):
            producer.send_async(message(i), None)
        producer.flush()

        victim = bookies[0]
        victim.kill()
        shutil.rmtree(victim.data_dir)
        # Ledgers created before the dead bookie's ZooKeeper session expires may still pick it (and change
        # ensemble at their first entry). The second half is produced after that, so the topic's ledger that is
        # still open at the end does not name it: an open ledger is repaired only once its writer closes it.
        wait_for(lambda: asyncio.run(registered(zk_connect)) == {b.bookie_id for b in bookies[1:]}, 30,
                 what="the dead bookie unregistered")
        sent_ids = []
        for i in range(half, MESSAGES):  # keeps rolling ledgers; the first entries meet the dead bookie
            producer.send_async(message(i), lambda res, msg_id: sent_ids.append(res))
        producer.flush()
        assert set(sent_ids) == {pulsar.Result.Ok}

        live = {b.bookie_id for b in bookies[1:]}
        wait_for(lambda: asyncio.run(fragments_at_qw_on(zk_connect, live)), 120, interval_s=1.0,
                 what="every fragment back at Qw copies on live bookies")

        text = urllib.request.urlopen(recovery.metrics_url, timeout=5).read().decode()
        replicated = [line for line in text.splitlines()
                      if line.startswith("magnetar_autorecovery_fragments_replicated_total{")]
        assert replicated and float(replicated[0].rsplit(" ", 1)[1]) >= 5  # closed ledgers were repaired

        bookies[1].kill()
        consumer = client.subscribe(topic, "audit")
        got = [consumer.receive(15_000).data() for _ in range(MESSAGES)]
        assert got == [message(i) for i in range(MESSAGES)]
    finally:
        try:
            client.close()
        finally:
            broker.stop()
            for b in bookies:
                b.process.cleanup()


def test_decommission_under_pulsar_load_no_error_nothing_lost(tmp_path, zk_connect) -> None:
    """A producer and a consumer run through a broker while ``magnetar admin bookies decommission --wait``
    empties a bookie: neither sees an error, the broker's new ledgers avoid the bookie, and once it is
    SIGKILLed every message still reads back."""
    storage = real_storage(tmp_path, zk_connect, bookies=4, max_entries_per_ledger=20)
    storage.pop("held")
    bookies = storage.pop("bookies")
    start_autorecovery(1, tmp_path, zk_connect)
    broker = BrokerThread(**storage).start()
    client = make_client(broker.url)
    topic = unique_topic("decommission")
    leaving = bookies[2]
    sent: list[bytes] = []
    received: list[bytes] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    produced = threading.Event()  # set once the producer has appended its last acknowledged message
    try:
        consumer = client.subscribe(topic, "live", initial_position=pulsar.InitialPosition.Earliest)
        client.subscribe(topic, "after", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=20,
                                          batching_max_publish_delay_ms=2)

        def produce() -> None:
            i = 0
            try:
                while not stop.is_set():
                    producer.send(message(i))  # synchronous: each send is acknowledged or raises
                    sent.append(message(i))
                    i += 1
            except BaseException as err:  # noqa: BLE001 - asserted empty below
                errors.append(err)
            finally:
                produced.set()

        def consume() -> None:
            # Reads until the producer is done and every message it counted has arrived. (Waiting on ``stop``
            # raced: a send acknowledged but not yet appended to ``sent`` was left unread.) A receive that times
            # out only checks that again — the producer may have finished after the last check, with nothing more
            # to come — unless nothing has come for 15 s.
            last = time.monotonic()
            try:
                while not produced.is_set() or len(received) < len(sent):
                    try:
                        msg = consumer.receive(200)
                    except pulsar.Timeout:
                        if time.monotonic() - last > 15:
                            raise
                        continue
                    last = time.monotonic()
                    received.append(msg.data())
                    consumer.acknowledge(msg)
            except BaseException as err:  # noqa: BLE001
                errors.append(err)

        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        wait_for(lambda: len(sent) >= 500, 60, what="traffic flowing")
        cli = subprocess.run(
            [sys.executable, "-m", "magnetar", "admin", "bookies", "decommission", leaving.bookie_id, "--wait",
             "--timeout-s", "120", "--zookeeper", zk_connect], capture_output=True, text=True, timeout=180)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        done_at = len(sent)
        wait_for(lambda: len(sent) >= done_at + 500, 60, what="traffic after the decommission")
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert received == sent
        assert asyncio.run(fragments_at_qw_on(zk_connect, {b.bookie_id for b in bookies} - {leaving.bookie_id}))

        leaving.kill()
        after = client.subscribe(topic, "after")
        assert [after.receive(15_000).data() for _ in range(len(sent))] == sent
    finally:
        stop.set()
        try:
            client.close()
        finally:
            broker.stop()
            for b in bookies:
                b.process.cleanup()
