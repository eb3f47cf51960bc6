"""Geo-replication under faults, with the real pulsar-client as the application in every region.

Each test runs its own two-region deployment (``tests.kit.regions``: us-east and eu-west, two bookies per
region, one or two brokers) because each breaks it:

* the broker owning the topic in the source region is SIGKILLed while it replicates: the topic and its
  replicator move to the other broker, which resumes from the replicator's persisted cursor; what it
  re-sends is dropped by the target's deduplication by origin position. The source namespace runs with
  deduplication on, so the source producer's own re-sends after failover add nothing either;
* the broker owning the topic in the target region is SIGKILLed while it receives: the replicator reconnects
  to the other target broker and re-sends what was not acknowledged;
* the target region is unreachable for 30 s (all its brokers stopped) under a steady load: the source's
  replication backlog grows, source producers are not slowed, and once the target is back the backlog drains
  on its own.

Every test ends by reading both regions in full: every message once, in order per producer. Consumers read
only after the faults (their subscriptions exist from the start), so a consumer's own redeliveries after a
failover cannot blur the check. Random kill points are seeded; the seed is printed.
"""

from __future__ import annotations

import random
import threading
import time

import pulsar
import pytest

from tests.e2e.test_geo_replication import (
    EAST, TENANT, WEST, Inbox, Sends, assert_exactly_once_in_order, client, new_topic, producer_for, stored_messages,
    subscribe, wait_replicated, wait_subscription_drained,
)
from tests.kit.regions import Regions, start_regions
from tests.kit.wait import wait_for

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]


def deploy(tmp_path, zk_server, request, *, brokers: dict[str, int]) -> Regions:
    return start_regions([EAST, WEST], tmp_path, zk_server, bookies=2, brokers=brokers, request=request)


def prepare(regions: Regions, *, deduplication: bool) -> tuple[str, str]:
    """A namespace replicated between both regions (deduplication on if asked) and a topic in it, with a
    durable subscription ``audit`` in each region, created before anything is produced."""
    ns = regions.create_replicated_namespace(TENANT, f"chaos-{random.getrandbits(32):08x}", [EAST, WEST])
    if deduplication:
        regions[EAST].admin("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
        wait_for(lambda: all(regions[r].admin("GET", f"/admin/v2/namespaces/{ns}/deduplication") is True
                             for r in regions), 30, what="deduplication on in both regions")
    topic = new_topic(ns)
    for name in regions:
        c = client(regions[name])
        try:
            c.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest).close()
        finally:
            c.close()
    return ns, topic


def read_everything(regions: Regions, name: str, topic: str, expected: list) -> Inbox:
    """Reads ``audit`` in region ``name`` until every expected message came; checks exactly-once and order
    and that the subscription drains (nothing stored beyond what was expected)."""
    c = client(regions[name])
    try:
        inbox = subscribe(c, topic, "audit", name)
        inbox.receive_keys(expected, timeout_s=180)
        assert_exactly_once_in_order(inbox, expected)
        wait_subscription_drained(regions[name], topic, "audit")
        inbox.consumer.close()
        return inbox
    finally:
        c.close()


def test_sigkill_of_the_source_owner_during_replication(tmp_path, zk_server, request) -> None:
    seed = random.randrange(1 << 32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    regions = deploy(tmp_path, zk_server, request, brokers={EAST: 2, WEST: 1})
    _ns, topic = prepare(regions, deduplication=True)
    total = 12_000
    kill_at = rng.randrange(3_000, 6_000)
    c = client(regions[EAST], operation_timeout_seconds=60)
    try:
        producer = producer_for(c, topic, f"{EAST}-producer", batching_max_messages=50)
        owner = regions[EAST].owner_of(topic)
        sends = Sends()
        for i in range(total):
            if i == kill_at:
                wait_for(lambda: sends.ok >= kill_at // 2, 60, what="acks before the kill")
                # Replication is under way: eu-west has stored part of it, and more is pending.
                wait_for(lambda: regions[WEST].topic_stats(topic)["msgInCounter"] > 0, 60,
                         what="replication under way")
                owner.kill()
                print(f"killed {owner.broker_id} (owner in {EAST}) after {i} sends, {sends.ok} acknowledged")
            sends.send(producer, EAST, "m", i)
        producer.flush()
        sends.wait_all(timeout_s=180)
        new_owner = regions[EAST].owner_of(topic)
        assert new_owner is not owner and new_owner.process.alive
        producer.close()
    finally:
        c.close()

    wait_replicated(regions, topic, [EAST], [WEST], timeout_s=180)
    assert regions[EAST].replication_stats(topic, WEST)["connected"] is True
    expected = [(EAST, "m", i) for i in range(total)]
    read_everything(regions, WEST, topic, expected)
    read_everything(regions, EAST, topic, expected)
    # eu-west kept its broker: its counter covers the whole run, and deduplication stored nothing twice.
    assert stored_messages(regions[WEST], topic) == total


def test_sigkill_of_the_target_owner_during_replication(tmp_path, zk_server, request) -> None:
    seed = random.randrange(1 << 32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    regions = deploy(tmp_path, zk_server, request, brokers={EAST: 1, WEST: 2})
    _ns, topic = prepare(regions, deduplication=False)
    total = 12_000
    kill_at = rng.randrange(3_000, 6_000)
    c = client(regions[EAST], operation_timeout_seconds=60)
    try:
        producer = producer_for(c, topic, f"{EAST}-producer", batching_max_messages=50)
        sends = Sends()
        owner = None
        for i in range(total):
            if i == kill_at:
                wait_for(lambda: regions[WEST].topic_stats(topic)["msgInCounter"] >= kill_at // 4, 60,
                         what="part of the topic replicated to eu-west")
                owner = regions[WEST].owner_of(topic)
                owner.kill()
                print(f"killed {owner.broker_id} (owner in {WEST}) after {i} sends, {sends.ok} acknowledged")
            sends.send(producer, EAST, "m", i)
        producer.flush()
        sends.wait_all(timeout_s=180)
        producer.close()
    finally:
        c.close()

    wait_replicated(regions, topic, [EAST], [WEST], timeout_s=180)
    new_owner = regions[WEST].owner_of(topic)
    assert owner is not None and new_owner is not owner and new_owner.process.alive
    assert regions[EAST].replication_stats(topic, WEST)["connected"] is True
    expected = [(EAST, "m", i) for i in range(total)]
    read_everything(regions, WEST, topic, expected)
    read_everything(regions, EAST, topic, expected)
    assert stored_messages(regions[EAST], topic) == total  # the source never failed over


def test_target_region_unreachable_for_30s_under_load(tmp_path, zk_server, request) -> None:
    regions = deploy(tmp_path, zk_server, request, brokers={EAST: 1, WEST: 1})
    _ns, topic = prepare(regions, deduplication=False)
    rate, warmup, outage_s, after = 1_000, 5_000, 30.0, 5_000
    total = warmup + int(rate * outage_s) + after
    c = client(regions[EAST], operation_timeout_seconds=60)
    sends = Sends()
    stop = threading.Event()
    errors: list[BaseException] = []
    try:
        producer = producer_for(c, topic, f"{EAST}-producer")

        def produce() -> None:
            try:
                started = time.monotonic()
                for i in range(total):
                    if stop.is_set():
                        return
                    delay_s = started + i / rate - time.monotonic()
                    if delay_s > 0:
                        time.sleep(delay_s)  # pacing the load, not waiting for a condition
                    sends.send(producer, EAST, "m", i)
                producer.flush()
            except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
                errors.append(exc)

        thread = threading.Thread(target=produce, name="steady producer", daemon=True)
        thread.start()
        try:
            wait_for(lambda: sends.issued >= warmup, 60, interval_s=0.1, what="warm-up sends")
            wait_for(lambda: (regions[EAST].replication_stats(topic, WEST) or {}).get("connected"), 30,
                     what="replicating to eu-west before the outage")

            regions[WEST].stop_brokers(kill=True)
            down_at = time.monotonic()
            wait_for(lambda: regions[EAST].replication_stats(topic, WEST)["connected"] is False, 30,
                     what="us-east sees eu-west disconnected")
            # The backlog grows for as long as eu-west is away, sampled as the load goes on.
            samples: list[int] = []
            delays: list[float] = []
            for k in range(1, 6):
                wait_for(lambda: time.monotonic() - down_at >= outage_s * k / 6, outage_s + 10, interval_s=0.1,
                         what=f"outage sample {k}")
                stats = regions[EAST].replication_stats(topic, WEST)
                assert stats["connected"] is False, stats
                samples.append(stats["replicationBacklog"])
                delays.append(stats["replicationDelayInSeconds"])
            wait_for(lambda: time.monotonic() - down_at >= outage_s, outage_s + 10, interval_s=0.1,
                     what="the end of the outage")
            during = sends.issued - warmup
            print(f"outage {time.monotonic() - down_at:.1f}s; replication backlog samples {samples}, delay samples "
                  f"{delays}; {during} sends during the outage")
            assert all(b > a for a, b in zip(samples, samples[1:])), f"the backlog did not grow: {samples}"
            # The delay is the age of the oldest message eu-west lacks: about as old as the outage.
            assert all(b > a for a, b in zip(delays, delays[1:])), f"the delay did not grow: {delays}"
            assert delays[-1] >= outage_s * 5 / 6 - 2, \
                f"replicationDelayInSeconds {delays} during a {outage_s:g}s outage"
            assert not errors, errors

            regions[WEST].start_brokers()
            thread.join(timeout=outage_s + 60)
            assert not thread.is_alive(), "the producer did not finish"
        finally:
            stop.set()
            thread.join(timeout=30)
        assert not errors, errors
        sends.wait_all(timeout_s=120)
        p99_s = sends.p99_s()
        print(f"send latency p99 {p99_s * 1000:.0f} ms over {sends.ok} sends")
        assert p99_s < 1.0, f"source producers were slowed by the outage: p99 {p99_s:.3f}s"
        producer.close()
    finally:
        c.close()

    # The backlog drains on its own once eu-west is back; then every message is there once.
    wait_replicated(regions, topic, [EAST], [WEST], timeout_s=180)
    assert regions[EAST].replication_stats(topic, WEST)["connected"] is True
    expected = [(EAST, "m", i) for i in range(total)]
    read_everything(regions, WEST, topic, expected)
    read_everything(regions, EAST, topic, expected)
    assert stored_messages(regions[EAST], topic) == total
