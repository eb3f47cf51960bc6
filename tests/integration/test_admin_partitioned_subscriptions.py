"""Subscription calls on a partitioned topic's base name, on two real brokers (ZooKeeper, bookies) with the
partitions owned by both: each call reaches every partition at its owner, as Pulsar's admin API does, and
pulsar-client consumers see the effect; refused calls (Pulsar's 405s, unknown names, a subscription missing on
some partitions, consumers still connected) leave every partition as it was. Growing the topic makes its durable
subscriptions on the new partitions, as Pulsar does."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from typing import Any, Optional

import pulsar
import pytest

from magnetar.topic_name import encode_local_name
from tests.kit.brokers import start_brokers
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4
TOPIC = "persistent://public/default/orders"
BASE = "/admin/v2/persistent/public/default/orders"
RECEIVE_MS = 10_000


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 307 surfaces as an HTTPError: rest() follows it with the same method and body


_OPENER = urllib.request.build_opener(_NoRedirect)


def rest(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON answer) of an admin call, following 307s to the owner as pulsar-admin does."""
    data = None if body is None else json.dumps(body).encode()
    for _ in range(5):
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with _OPENER.open(request, timeout=60) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
            if status == 307:
                url = e.headers["Location"]
                continue
        return status, json.loads(text) if text else None
    raise AssertionError(f"{method} {url}: too many redirects")


def now_ms() -> int:
    return int(time.time() * 1000)


def partition_path(i: int) -> str:
    return f"{BASE}-partition-{i}"


def subscription_stats(url: str, subscription: str) -> list[Optional[dict]]:
    """Each partition's stats of ``subscription`` (None where it does not exist)."""
    found = []
    for i in range(PARTITIONS):
        status, stats = rest("GET", f"{url}{partition_path(i)}/stats")
        assert status == 200, stats
        found.append(stats["subscriptions"].get(subscription))
    return found


def backlogs(url: str, subscription: str = "audit") -> list[Optional[int]]:
    return [None if s is None else s["msgBacklog"] for s in subscription_stats(url, subscription)]


def consumers_connected_since(url: str) -> list[Optional[str]]:
    return [s["consumers"][0]["connectedSince"] if s and s["consumers"] else None
            for s in subscription_stats(url, "audit")]


def place_partitions(urls: list[str], local_name: str = "orders", partitions: int = PARTITIONS) -> list[str]:
    """Gives the partitions' bundles to the brokers in turn (an authoritative lookup acquires an unowned bundle);
    the owner's HTTP URL of each partition."""
    lookup = f"/lookup/v2/topic/persistent/public/default/{local_name}-partition-"
    bundles = [rest("GET", f"{urls[0]}{lookup}{i}/bundle")[1] for i in range(partitions)]
    distinct = sorted(set(bundles))
    assert len(distinct) > 1, f"the partitions of {local_name} share one bundle: {bundles}"
    owners = []
    for i, bundle in enumerate(bundles):
        status, answer = rest("GET", f"{urls[distinct.index(bundle) % len(urls)]}{lookup}{i}?authoritative=true")
        assert status == 200, answer
        owners.append(answer["httpUrl"])
    return owners


def receive(consumer: pulsar.Consumer, n: int) -> list[str]:
    got = []
    for _ in range(n):
        message = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(message)
        got.append(message.data().decode())
    return got


def test_subscription_calls_on_the_base_name_reach_every_partition(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    first, second = start_brokers(2, tmp_path, zk_connect)
    a, b = first.http_url, second.http_url
    assert rest("PUT", f"{a}{BASE}/partitions", PARTITIONS) == (204, None)
    assert set(place_partitions([a, b])) == {a, b}
    client = pulsar.Client(first.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        run_scenario(client, a, b)
    finally:
        # The scenario ends by terminating every partition: pulsar-client closes a producer itself once a send
        # fails with TopicTerminated, and its close() raises AlreadyClosed when it still lists one (timing).
        with contextlib.suppress(pulsar.AlreadyClosed):
            client.close()


def run_scenario(client: pulsar.Client, a: str, b: str) -> None:
    # create: asked at b, made on every partition at its owner
    sub = f"{b}{BASE}/subscription/audit"
    assert rest("PUT", sub, {"ledgerId": -1, "entryId": -1}) == (204, None)
    assert backlogs(a) == [0] * PARTITIONS
    status, answer = rest("PUT", sub)
    assert status == 409 and "already exists" in answer["reason"]
    assert rest("GET", f"{a}{BASE}/subscriptions") == (200, ["audit"])

    producers = [client.create_producer(f"{TOPIC}-partition-{i}", batching_enabled=False) for i in range(PARTITIONS)]

    def send(tag: str, per_partition: int) -> list[str]:
        sent = [f"{tag}-{i}-{j}" for i in range(PARTITIONS) for j in range(per_partition)]
        for text in sent:
            producers[int(text.rsplit("-", 2)[1])].send(text.encode())
        return sent

    send("early", 3)
    middle_ms = now_ms() + 1  # every "early" message was published before it, every "late" one at or after it
    wait_for(lambda: now_ms() >= middle_ms, 5, what="the clock to pass the middle")
    late = send("late", 3)
    wait_for(lambda: backlogs(a) == [6] * PARTITIONS, 30, what="a backlog of 6 on every partition")

    # refused calls and bad input change nothing
    assert rest("PUT", f"{b}{partition_path(2)}/subscription/solo") == (204, None)  # on one partition only
    for method, url, body, status, words in (
            ("POST", f"{sub}/skip/1", None, 405, "Skip messages on a partitioned topic is not allowed"),
            ("POST", f"{sub}/resetcursor", {"ledgerId": -1, "entryId": -1}, 405,
             "Reset-cursor at position is not allowed for partitioned-topic"),
            ("POST", f"{sub}/resetcursor/yesterday", None, 400, "timestamp"),
            ("POST", f"{sub}/expireMessages/-5", None, 400, "seconds"),
            ("PUT", f"{b}{BASE}/subscription/x", {"ledgerId": "1", "entryId": 0}, 400, "ledgerId"),
            ("POST", f"{b}{BASE}/subscription/nope/skip_all", None, 404, "Subscription nope not found"),
            ("POST", f"{b}{BASE}/subscription/solo/expireMessages/0", None, 404, "orders-partition-0"),
            ("POST", f"{b}{BASE}/subscription/solo/resetcursor/0", None, 404, "nothing was changed"),
            ("DELETE", f"{b}/admin/v2/persistent/public/default/ghost/subscription/audit", None, 404, "not found"),
            ("DELETE", f"{b}/admin/v2/persistent/public/nowhere/orders/subscription/audit", None, 404, "nowhere"),
            ("POST", f"{b}/admin/v2/persistent/public/default/ghost/terminate/partitions", None, 405,
             "non-partitioned")):
        got, answer = rest(method, url, body)
        assert got == status and words in answer["reason"], (method, url, got, answer)
    assert backlogs(a) == [6] * PARTITIONS
    assert backlogs(a, "solo") == [None, None, 0, None]
    assert rest("GET", f"{a}{BASE}/subscriptions") == (200, ["audit", "solo"])

    # reset to a publish time: the consumer gets every partition's later messages again
    consumer = client.subscribe(TOPIC, "audit", consumer_type=pulsar.ConsumerType.Shared)
    assert len(receive(consumer, 6 * PARTITIONS)) == 6 * PARTITIONS
    wait_for(lambda: backlogs(a) == [0] * PARTITIONS, 30, what="everything acknowledged")
    assert rest("POST", f"{a}{BASE}/subscription/audit/resetcursor/{middle_ms}") == (204, None)
    assert sorted(receive(consumer, len(late))) == sorted(late)
    wait_for(lambda: backlogs(a) == [0] * PARTITIONS, 30, what="the replay acknowledged")
    consumer.close()

    # skip all (clear backlog) and expire, on every partition
    send("more", 2)
    wait_for(lambda: backlogs(a) == [2] * PARTITIONS, 30, what="a backlog of 2 on every partition")
    assert rest("POST", f"{b}{BASE}/subscription/audit/skip_all") == (204, None)
    assert backlogs(a) == [0] * PARTITIONS
    send("old", 2)
    sent_ms = now_ms()
    wait_for(lambda: backlogs(a) == [2] * PARTITIONS, 30, what="a backlog of 2 on every partition")
    assert rest("POST", f"{b}{BASE}/subscription/audit/expireMessages/3600") == (204, None)
    assert backlogs(a) == [2] * PARTITIONS  # nothing is an hour old
    wait_for(lambda: now_ms() > sent_ms, 5, what="the clock to pass the last publish time")
    assert rest("POST", f"{a}{BASE}/subscription/audit/expireMessages/0") == (204, None)
    assert backlogs(a) == [0] * PARTITIONS
    assert backlogs(a, "solo") == [None, None, 4, None]  # other subscriptions untouched

    # unload: every partition's topic is closed at its owner, so every partition's consumer reconnects
    consumer = client.subscribe(TOPIC, "audit", consumer_type=pulsar.ConsumerType.Shared)
    before = wait_for(lambda: all(consumers_connected_since(a)) and consumers_connected_since(a), 30,
                      what="a consumer on every partition")
    assert rest("PUT", f"{b}{BASE}/unload") == (204, None)
    wait_for(lambda: all(now and now != then for now, then in zip(consumers_connected_since(a), before)), 30,
             what="every partition's consumer reconnected")
    after = send("after-unload", 1)
    assert sorted(receive(consumer, len(after))) == sorted(after)

    # delete: refused while consumers are connected (nothing deleted), then done on every partition
    status, answer = rest("DELETE", sub)
    assert status == 412 and answer["reason"] == "Subscription has active connected consumers"
    assert None not in subscription_stats(a, "audit")
    consumer.close()
    assert rest("DELETE", sub) == (204, None)
    assert subscription_stats(a, "audit") == [None] * PARTITIONS
    assert rest("GET", f"{b}{BASE}/subscriptions") == (200, ["solo"])
    assert rest("DELETE", sub)[0] == 404

    # terminate: Pulsar's partitioned variant, every partition at its owner
    status, answer = rest("POST", f"{a}{BASE}/terminate")
    assert status == 405 and "partitioned" in answer["reason"]
    status, last = rest("POST", f"{b}{BASE}/terminate/partitions")
    assert status == 200 and sorted(last) == [str(i) for i in range(PARTITIONS)], last
    assert all(mid["ledgerId"] >= 0 and mid["entryId"] >= 0 for mid in last.values())
    for producer in producers:
        with pytest.raises(pulsar.TopicTerminated):
            producer.send(b"too late")


# ---------------------------------------------------------------------------------------------- growing

GROWING = "persistent://public/default/growing"
GROWING_BASE = "/admin/v2/persistent/public/default/growing"
ODD_NAME = "audit trail é"  # travels as "audit+trail+%C3%A9", as Pulsar encodes names in paths
COPIED = sorted(["s1", "s2", ODD_NAME])


def growing_subscriptions(url: str, i: int) -> dict[str, dict]:
    """Partition ``i``'s subscriptions (stats by name)."""
    status, stats = rest("GET", f"{url}{GROWING_BASE}-partition-{i}/stats")
    assert status == 200, stats
    return stats["subscriptions"]


def growing_backlogs(url: str, partitions: int, subscription: str = "s1") -> list[Optional[int]]:
    found = [growing_subscriptions(url, i).get(subscription) for i in range(partitions)]
    return [None if s is None else s["msgBacklog"] for s in found]


def test_growing_a_partitioned_topic_copies_its_durable_subscriptions(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    first, second = start_brokers(2, tmp_path, zk_connect)
    a, b = first.http_url, second.http_url
    assert rest("PUT", f"{a}{GROWING_BASE}/partitions", 2) == (204, None)
    owners = place_partitions([a, b], "growing", 6)  # the partitions to come too, so copies reach both brokers
    assert b in owners[:5], owners  # killing b fails the copy of the last growth (5 -> 6)
    client = pulsar.Client(first.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        grow_with_clients(client, a, b)
    finally:
        client.close()

    # the copy fails (b, owning an old partition, is gone): the topic has grown all the same, and says so
    second.process.kill()
    status, answer = rest("POST", f"{a}{GROWING_BASE}/partitions", 6)
    assert status == 502 and "now has 6 partitions" in answer["reason"], answer
    assert rest("GET", f"{a}{GROWING_BASE}/partitions") == (200, {"partitions": 6})
    # once a has taken b's bundles over, creating each subscription on the base name finishes the job. A try
    # made while a owned partition 5 but not yet b's old partitions creates it on partition 5 and fails on
    # those; the next try then finds it on every partition and answers 409 (as Pulsar): done all the same.
    for name in COPIED:
        wait_for(lambda: rest("PUT", f"{a}{GROWING_BASE}/subscription/{encode_local_name(name)}")[0] in (204, 409),
                 60, what=f"{name!r} created on partition 5")
    assert sorted(growing_subscriptions(a, 5)) == COPIED


def grow_with_clients(client: pulsar.Client, a: str, b: str) -> None:
    # durable subscriptions made by the admin API and by a consumer, a reader's non-durable one on partition 0
    for name in ("s1", ODD_NAME):
        assert rest("PUT", f"{b}{GROWING_BASE}/subscription/{encode_local_name(name)}") == (204, None)
    s2 = client.subscribe(GROWING, "s2", consumer_type=pulsar.ConsumerType.Shared)
    reader = client.create_reader(f"{GROWING}-partition-0", pulsar.MessageId.earliest)
    reader_subscription = wait_for(
        lambda: [n for n, s in growing_subscriptions(a, 0).items() if not s["isDurable"]], 30,
        what="the reader's subscription on partition 0")[0]
    assert sorted(growing_subscriptions(a, 1)) == COPIED

    # grow 2 -> 4: the new partitions get the durable subscriptions only
    assert rest("POST", f"{b}{GROWING_BASE}/partitions", 4) == (204, None)
    for i in (2, 3):
        subscriptions = growing_subscriptions(a, i)
        assert sorted(subscriptions) == COPIED and reader_subscription not in subscriptions, (i, subscriptions)
        assert all(s["isDurable"] and s["msgBacklog"] == 0 for s in subscriptions.values()), subscriptions
    assert rest("POST", f"{a}{GROWING_BASE}/subscription/s1/skip_all") == (204, None)  # was 404 on partition 2
    assert rest("POST", f"{b}{GROWING_BASE}/subscription/{encode_local_name(ODD_NAME)}/expireMessages/0") \
        == (204, None)

    # a producer and a consumer that see the 4 partitions: messages published to the new ones reach s1
    producer = client.create_producer(GROWING, batching_enabled=False,
                                      message_router=lambda message, n: int(message.partition_key()))
    sent = [f"m-{i}-{j}" for i in range(4) for j in range(2)]
    for text in sent:
        producer.send(text.encode(), partition_key=text.split("-")[1])
    wait_for(lambda: growing_backlogs(a, 4) == [2] * 4, 30, what="a backlog of 2 on every partition's s1")
    consumer = client.subscribe(GROWING, "s1", consumer_type=pulsar.ConsumerType.Shared)
    got = {}
    for _ in sent:
        message = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(message)
        got[message.data().decode()] = message.topic_name()
    assert got == {text: f"{GROWING}-partition-{text.split('-')[1]}" for text in sent}
    wait_for(lambda: growing_backlogs(a, 4) == [0] * 4, 30, what="everything acknowledged")
    for closeable in (consumer, producer, reader, s2):
        closeable.close()

    # grow 4 -> 5 where a client already made s1 on the new partition: "already exists" is no failure
    assert rest("PUT", f"{a}{GROWING_BASE}-partition-4/subscription/s1") == (204, None)
    assert rest("POST", f"{a}{GROWING_BASE}/partitions", 5) == (204, None)
    assert sorted(growing_subscriptions(a, 4)) == COPIED
