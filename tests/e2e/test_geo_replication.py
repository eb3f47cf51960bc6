"""Geo-replication between real regions, as an application sees it through the official pulsar-client.

One three-region deployment (us-east, eu-west, ap-south: each its own ZooKeeper chroot, two bookies and one
broker, sharing a global configuration store) serves every test of this module; each test uses a namespace of
its own and replicates it to the regions it needs. What is checked:

* messages produced in every region reach every region of the namespace exactly once, in per-producer order
  (two regions, three regions: no loops; a partitioned topic);
* pulsar-client's per-message ``replication_clusters`` and ``disable_replication`` are honoured;
* changing a namespace's ``replication_clusters`` at runtime starts and stops replication to a region;
* a replicated subscription acknowledged in one region resumes in another near where it was acknowledged.

"Exactly once" is checked three ways: the consumer in each region receives every expected message, none twice;
the topic there stored exactly as many messages as were expected (``msgInCounter``, read once the source's
replication backlog is zero, so no replicated send is still in flight); and the subscription's backlog
drains to zero once everything received is acknowledged (nothing extra was stored after the last message).
The helpers are shared with ``tests/chaos/test_geo_replication_chaos.py``.
"""

from __future__ import annotations

import collections
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kit.regions import Region, Regions, start_regions
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

EAST, WEST, SOUTH = "us-east", "eu-west", "ap-south"
TENANT = "geo"
N = 10_000


# ------------------------------------------------------------------------------------------ shared helpers


def client(region: Region, **kwargs) -> pulsar.Client:
    """A pulsar-client for ``region`` (all its brokers), with the C++ logger quiet."""
    kwargs.setdefault("operation_timeout_seconds", 30)
    return pulsar.Client(region.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), **kwargs)


def new_topic(namespace: str, prefix: str = "t") -> str:
    return f"persistent://{namespace}/{prefix}-{uuid.uuid4().hex[:8]}"


def producer_for(c: pulsar.Client, topic: str, name: str, *, batching: bool = True, **kwargs) -> pulsar.Producer:
    kwargs.setdefault("send_timeout_millis", 0)
    return c.create_producer(topic, producer_name=name, batching_enabled=batching, block_if_queue_full=True,
                             max_pending_messages=2_000, **kwargs)


def payload(origin: str, tag: str, i: int) -> bytes:
    return f"{origin}|{tag}|{i}".encode()


@dataclass(frozen=True)
class Got:
    """One message as a consumer received it."""

    origin: str
    tag: str
    i: int
    producer: str
    partition: int  # from the topic name: -1 for a non-partitioned topic
    properties: dict

    @property
    def seq(self) -> int:
        return int(self.properties["seq"])

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.origin, self.tag, self.i)


class Sends:
    """Asynchronous sends of one or more producers, with every outcome and its latency recorded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok = 0
        self.failed: list[str] = []
        self.latencies_s: list[float] = []
        self.issued = 0
        self.seq: collections.Counter[str] = collections.Counter()  # per origin: the order of sending

    def send(self, producer: pulsar.Producer, origin: str, tag: str, i: int, **kwargs) -> None:
        started = time.monotonic()

        def done(result, _msg_id) -> None:
            with self.lock:
                self.latencies_s.append(time.monotonic() - started)
                if result == pulsar.Result.Ok:
                    self.ok += 1
                else:
                    self.failed.append(f"{origin}|{tag}|{i}: {result}")

        self.issued += 1
        seq = self.seq[origin]
        self.seq[origin] += 1
        producer.send_async(payload(origin, tag, i), done,
                            properties={"origin": origin, "i": str(i), "seq": str(seq)}, **kwargs)

    def wait_all(self, timeout_s: float = 120.0) -> None:
        wait_for(lambda: self.ok + len(self.failed) == self.issued, timeout_s,
                 what=f"all {self.issued} sends answered (ok {self.ok}, failed {len(self.failed)})")
        assert not self.failed, self.failed[:5]

    def p99_s(self) -> float:
        with self.lock:
            values = sorted(self.latencies_s)
        return values[min(len(values) - 1, int(len(values) * 0.99))] if values else 0.0


class Inbox:
    """What one consumer received, acknowledged one by one as it arrives."""

    def __init__(self, consumer: pulsar.Consumer, region: str) -> None:
        self.consumer = consumer
        self.region = region
        self.got: list[Got] = []
        self.foreign: list[bytes] = []  # payloads that are none of ours (e.g. a marker that leaked)

    def receive_until(self, done: Callable[["Inbox"], bool], timeout_s: float, what: str, *,
                      ack: bool = True) -> None:
        deadline = time.monotonic() + timeout_s
        while not done(self):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.region}: timed out after {timeout_s:g}s waiting for {what}; "
                                     f"received {len(self.got)} ({self.summary()})")
            try:
                msg = self.consumer.receive(timeout_millis=max(1, int(min(remaining, 1.0) * 1000)))
            except pulsar.Timeout:
                continue
            self.record(msg)
            if ack:
                self.consumer.acknowledge(msg)

    def record(self, msg: pulsar.Message) -> Optional[Got]:
        try:
            origin, tag, i = msg.data().decode().split("|")
            topic = msg.topic_name()
            partition = int(topic.rsplit("-", 1)[1]) if "-partition-" in topic else -1
            got = Got(origin, tag, int(i), msg.producer_name(), partition, dict(msg.properties()))
        except (UnicodeDecodeError, ValueError):
            self.foreign.append(msg.data())
            return None
        self.got.append(got)
        return got

    def receive_keys(self, keys: Iterable[tuple[str, str, int]], timeout_s: float = 120.0) -> None:
        """Receives until every key of ``keys`` was seen (anything else received is kept too)."""
        missing = set(keys)
        seen = 0

        def done(_inbox: "Inbox") -> bool:
            nonlocal seen
            for got in self.got[seen:]:
                missing.discard(got.key)
            seen = len(self.got)
            return not missing

        self.receive_until(done, timeout_s, f"{len(missing)} expected message(s)")

    def keys(self) -> list[tuple[str, str, int]]:
        return [g.key for g in self.got]

    def summary(self) -> str:
        counts = collections.Counter((g.origin, g.tag) for g in self.got)
        return ", ".join(f"{o}/{t}: {n}" for (o, t), n in sorted(counts.items())) or "nothing"


def assert_exactly_once_in_order(inbox: Inbox, expected: Iterable[tuple[str, str, int]]) -> None:
    """``inbox`` holds exactly ``expected`` (each once), in increasing order per (producer, partition), with
    the origin's producer name and properties intact, and nothing that is not an application message."""
    expected = set(expected)
    counts = collections.Counter(inbox.keys())
    duplicates = [k for k, n in counts.items() if n > 1]
    assert not duplicates, f"{inbox.region}: {len(duplicates)} duplicated, e.g. {sorted(duplicates)[:5]}"
    unexpected = set(counts) - expected
    assert not unexpected, f"{inbox.region}: {len(unexpected)} unexpected, e.g. {sorted(unexpected)[:5]}"
    missing = expected - set(counts)
    assert not missing, f"{inbox.region}: {len(missing)} missing, e.g. {sorted(missing)[:5]}"
    assert not inbox.foreign, f"{inbox.region}: received {len(inbox.foreign)} foreign payload(s): {inbox.foreign[:3]}"
    last: dict[tuple[str, int], int] = {}
    for got in inbox.got:
        assert got.producer == f"{got.origin}-producer", f"{inbox.region}: producer name lost: {got}"
        assert got.properties.get("origin") == got.origin and got.properties.get("i") == str(got.i), got
        key = (got.producer, got.partition)
        assert got.seq > last.get(key, -1), \
            f"{inbox.region}: {got} after send #{last[key]} of the same producer (partition {got.partition})"
        last[key] = got.seq


def wait_replicated(regions: Regions, topic: str, sources: Sequence[str], remotes: Sequence[str], *,
                    timeout_s: float = 120.0, partitions: int = 0) -> None:
    """Waits until every source region's replicators of ``topic`` (or of each of its partitions) towards
    every other region of ``remotes`` have a zero backlog."""
    names = [f"{topic}-partition-{p}" for p in range(partitions)] if partitions else [topic]

    def backlogs() -> dict:
        out = {}
        for source in sources:
            for name in names:
                section = regions[source].topic_stats(name).get("replication", {})
                for remote in remotes:
                    if remote != source:
                        out[(source, name.rsplit("-", 1)[-1] if partitions else "", remote)] = \
                            section.get(remote, {}).get("replicationBacklog")
        return out

    wait_for(lambda: all(v == 0 for v in backlogs().values()) or None, timeout_s,
             what=f"replication backlogs of {topic} at zero (now {backlogs()})")


def stored_messages(region: Region, topic: str, *, partitions: int = 0) -> int:
    if partitions:
        return sum(region.topic_stats(f"{topic}-partition-{p}")["msgInCounter"] for p in range(partitions))
    return region.topic_stats(topic)["msgInCounter"]


def wait_subscription_drained(region: Region, topic: str, subscription: str, *, partitions: int = 0,
                              timeout_s: float = 30.0) -> None:
    """Everything stored was acknowledged: nothing beyond what the consumer received is in the topic."""
    names = [f"{topic}-partition-{p}" for p in range(partitions)] if partitions else [topic]

    def backlog() -> int:
        return sum(region.topic_stats(n)["subscriptions"][subscription]["msgBacklog"] for n in names)

    wait_for(lambda: backlog() == 0, timeout_s, what=f"{region.name}: subscription {subscription} of {topic} "
                                                     f"drained (backlog now {backlog()})")


def subscribe(c: pulsar.Client, topic: str, subscription: str, region: str, **kwargs) -> Inbox:
    kwargs.setdefault("initial_position", pulsar.InitialPosition.Earliest)
    kwargs.setdefault("receiver_queue_size", 2_000)
    return Inbox(c.subscribe(topic, subscription, **kwargs), region)


# ------------------------------------------------------------------------------------------ the deployment


@pytest.fixture(scope="module")
def regions(tmp_path_factory, zk_server):
    deployment = start_regions([EAST, WEST, SOUTH], tmp_path_factory.mktemp("geo"), zk_server,
                               bookies=2, brokers=1)
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def clients(regions):
    """One pulsar-client per region, closed after the test."""
    made = {name: client(regions[name]) for name in regions}
    yield made
    for c in made.values():
        c.close()


def namespace(regions: Regions, clusters: Sequence[str], **policies) -> str:
    return regions.create_replicated_namespace(TENANT, f"ns-{uuid.uuid4().hex[:8]}", clusters, **policies)


def run_all_to_all(regions: Regions, clients: dict, names: Sequence[str], *, partitions: int = 0) -> str:
    """Produces N messages in each region of ``names`` (batched) and checks every region got all of them."""
    ns = namespace(regions, names)
    topic = new_topic(ns)
    if partitions:
        regions[names[0]].admin("PUT", f"/admin/v2/{topic.replace('://', '/')}/partitions", partitions)
        for name in names:
            wait_for(lambda: regions[name].admin("GET", f"/admin/v2/{topic.replace('://', '/')}/partitions")
                     ["partitions"] == partitions, 30, what=f"{name} sees {partitions} partitions")
    inboxes = {name: subscribe(clients[name], topic, "audit", name) for name in names}
    producers = {name: producer_for(clients[name], topic, f"{name}-producer") for name in names}
    sends = Sends()
    for i in range(N):
        for name in names:
            sends.send(producers[name], name, "m", i)
    for p in producers.values():
        p.flush()
    sends.wait_all()

    expected = [(name, "m", i) for name in names for i in range(N)]
    for name in names:
        inboxes[name].receive_keys(expected, timeout_s=120)
    wait_replicated(regions, topic, names, names, partitions=partitions)
    for name in names:
        assert_exactly_once_in_order(inboxes[name], expected)
        assert stored_messages(regions[name], topic, partitions=partitions) == len(expected), name
        wait_subscription_drained(regions[name], topic, "audit", partitions=partitions)
    # The replication section names every other region, in and out.
    section = regions[names[0]].topic_stats(f"{topic}-partition-0" if partitions else topic)["replication"]
    for remote in names[1:]:
        assert section[remote]["connected"] is True, section
        assert section[remote]["replicationBacklog"] == 0, section
        assert section[remote]["msgInCounter"] > 0, section
    for p in producers.values():
        p.close()
    return topic


# ------------------------------------------------------------------------------------------ tests


def replication_series(region: Region, topic: str) -> dict[tuple[str, str], float]:
    """``{(metric name, remote_cluster): value}`` of ``topic``'s ``pulsar_replication_*`` series on the region's
    broker (one broker per region in this module)."""
    with urllib.request.urlopen(f"{region.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("pulsar_replication_") and sample.labels.get("topic") == topic:
                assert sample.labels.get("cluster") == region.name, sample
                out[(sample.name, sample.labels["remote_cluster"])] = sample.value
    return out


def test_two_regions_each_receive_everything_exactly_once_in_order(regions, clients) -> None:
    topic = run_all_to_all(regions, clients, [EAST, WEST])
    # The replication section is also exported under Pulsar's metric names, per remote cluster.
    for local, remote in ((EAST, WEST), (WEST, EAST)):
        def caught_up(local=local, remote=remote) -> dict | None:
            series = replication_series(regions[local], topic)
            ok = (series.get(("pulsar_replication_backlog", remote)) == 0
                  and series.get(("pulsar_replication_connected_count", remote)) == 1)
            return series if ok else None

        series = wait_for(caught_up, 30, what=f"pulsar_replication_* of {topic} in {local}: {remote} caught up")
        assert ("pulsar_replication_rate_out", remote) in series and ("pulsar_replication_rate_in", remote) in series


def test_three_regions_no_loops_each_message_once_everywhere(regions, clients) -> None:
    run_all_to_all(regions, clients, [EAST, WEST, SOUTH])


def test_partitioned_topic_replicates_every_partition(regions, clients) -> None:
    run_all_to_all(regions, clients, [EAST, WEST], partitions=4)


def test_per_message_replication_clusters_and_disable_replication(regions, clients) -> None:
    ns = namespace(regions, [EAST, WEST, SOUTH])
    topic = new_topic(ns)
    inboxes = {name: subscribe(clients[name], topic, "audit", name) for name in (EAST, WEST, SOUTH)}
    # Unbatched: pulsar-client (like Pulsar's Java client) gives a batch the metadata of its first message,
    # replicate_to included, so with batching on the per-message settings apply batch by batch (seen: "local"
    # messages batched behind an "all" message reach every region). Checked here is the broker honouring
    # each entry's replicate_to.
    producer = producer_for(clients[EAST], topic, f"{EAST}-producer", batching=False)
    sends = Sends()
    kinds = {
        "all": {},
        "to-west": {"replication_clusters": [WEST]},
        "to-south": {"replication_clusters": [SOUTH]},
        "local": {"disable_replication": True},
    }
    per_kind = 50
    for i in range(per_kind):
        for tag, kwargs in kinds.items():
            sends.send(producer, EAST, tag, i, **kwargs)
    # The last message goes everywhere: replication keeps order, so once it arrived, everything replicated
    # before it has arrived too.
    sends.send(producer, EAST, "end", 0)
    producer.flush()
    sends.wait_all()

    def keys(*tags: str) -> list[tuple[str, str, int]]:
        return [(EAST, t, i) for t in tags for i in range(per_kind)] + [(EAST, "end", 0)]

    expected = {EAST: keys("all", "to-west", "to-south", "local"), WEST: keys("all", "to-west"),
                SOUTH: keys("all", "to-south")}
    for name, inbox in inboxes.items():
        inbox.receive_keys([(EAST, "end", 0)], timeout_s=60)
    wait_replicated(regions, topic, [EAST], [WEST, SOUTH])
    for name, inbox in inboxes.items():
        inbox.receive_keys(expected[name], timeout_s=30)
        assert_exactly_once_in_order(inbox, expected[name])
        assert stored_messages(regions[name], topic) == len(expected[name]), name
        wait_subscription_drained(regions[name], topic, "audit")
    producer.close()


def test_runtime_replication_clusters_change_starts_and_stops_replication(regions, clients) -> None:
    ns = namespace(regions, [EAST])  # replicated nowhere yet
    topic = new_topic(ns)
    east = subscribe(clients[EAST], topic, "audit", EAST)
    producer = producer_for(clients[EAST], topic, f"{EAST}-producer", batching=False)
    sends = Sends()
    per_phase = 200

    def phase(tag: str) -> None:
        for i in range(per_phase):
            sends.send(producer, EAST, tag, i)
        sends.send(producer, EAST, f"{tag}-end", 0)
        producer.flush()
        sends.wait_all()

    def keys(tag: str) -> list[tuple[str, str, int]]:
        return [(EAST, tag, i) for i in range(per_phase)] + [(EAST, f"{tag}-end", 0)]

    def replicating_to_west() -> bool:
        section = regions[EAST].topic_stats(topic).get("replication", {})
        return bool(section.get(WEST, {}).get("connected"))

    # A: local only. The topic's stats name no remote cluster.
    phase("a")
    east.receive_keys(keys("a"))
    assert regions[EAST].topic_stats(topic)["replication"] == {}

    # B: eu-west added at runtime: the replicator starts (from now on) and later messages reach eu-west.
    regions.set_replication_clusters(ns, [EAST, WEST])
    wait_for(replicating_to_west, 30, what="us-east replicating to eu-west")
    west = subscribe(clients[WEST], topic, "audit", WEST)
    phase("b")
    west.receive_keys(keys("b"), timeout_s=60)

    # C: eu-west removed again: the replicator (and its cursor) goes, later messages stay in us-east.
    regions.set_replication_clusters(ns, [EAST])
    wait_for(lambda: WEST not in regions[EAST].topic_stats(topic)["replication"], 30,
             what="us-east's replicator to eu-west removed")
    assert not any(c.startswith("pulsar.repl.") for c in regions[EAST].admin(
        "GET", f"/admin/v2/{topic.replace('://', '/')}/internalStats")["cursors"]), "replication cursor left"
    phase("c")
    east.receive_keys(keys("c"))

    # D: eu-west added once more, then a marker: the new replicator starts after C, so once D's messages
    # arrived in eu-west, C's would have arrived before them had C been replicated at all.
    regions.set_replication_clusters(ns, [EAST, WEST])
    wait_for(replicating_to_west, 30, what="us-east replicating to eu-west again")
    phase("d")
    west.receive_keys(keys("d"), timeout_s=60)
    east.receive_keys(keys("d"))
    wait_replicated(regions, topic, [EAST], [WEST])

    assert_exactly_once_in_order(east, keys("a") + keys("b") + keys("c") + keys("d"))
    assert_exactly_once_in_order(west, keys("b") + keys("d"))
    assert stored_messages(regions[WEST], topic) == 2 * (per_phase + 1)
    wait_subscription_drained(regions[WEST], topic, "audit")
    producer.close()


def test_replicated_subscription_resumes_in_the_other_region(regions, clients) -> None:
    """Acknowledged up to message 5,000 in us-east, the subscription resumes in eu-west before message 5,000.

    The controller snapshots every ``replicated_subscriptions_snapshot_interval_ms`` (1 s by default) while
    there is new data and no snapshot is still waiting for its response; a subscription moves the other region
    to its newest snapshot at or before its mark-delete position. How far before 5,000 that is depends on the
    snapshots' spacing (one or two intervals: a tick that finds a snapshot waiting starts none) and on the
    snapshot's round trip through replication at the time (eu-west's position is where the request reached it,
    the us-east position where the answer came back): on loaded CI machines eu-west resumed 1.6 and 2.9
    intervals early. So what is checked: it resumes past the first interval's messages (the subscription did
    follow, and not only to the first snapshot), never after 5,000, and skips nothing.
    """
    total, acked, rate, interval_s = 10_000, 5_000, 1_000, 1.0
    ns = namespace(regions, [EAST, WEST])
    topic = new_topic(ns)
    sub = "replicated"
    east = subscribe(clients[EAST], topic, sub, EAST, replicate_subscription_state_enabled=True)
    # Unbatched: one message is one entry, so backlogs (counted in entries) compare with message counts.
    producer = producer_for(clients[EAST], topic, f"{EAST}-producer", batching=False)
    sends = Sends()
    started = time.monotonic()
    for i in range(total):
        delay_s = started + i / rate - time.monotonic()
        if delay_s > 0:
            time.sleep(delay_s)  # pacing the producer, not waiting for a condition
        sends.send(producer, EAST, "m", i)
    producer.flush()
    sends.wait_all()
    produced_rate = total / (time.monotonic() - started)
    per_interval = int(max(rate, produced_rate) * interval_s)
    lowest = per_interval  # past the first interval's messages (see above for why not nearer 5,000)

    # us-east: acknowledge 0..4999, then go away.
    east.receive_until(lambda inbox: len(inbox.got) >= acked, 60, f"{acked} messages in us-east")
    east.consumer.close()
    assert [g.i for g in east.got[:acked]] == list(range(acked)) and not east.foreign

    markers_slack = 4 * int(total / rate / interval_s) + 20  # requests, responses, updates: a few per interval

    def east_backlog() -> int:
        return regions[EAST].topic_stats(topic)["subscriptions"][sub]["msgBacklog"]

    wait_for(lambda: east_backlog() <= total - acked + markers_slack, 30,
             what=f"us-east's subscription acknowledged up to {acked} (backlog {east_backlog()})")

    # One more message after the acknowledgements: the UPDATE marker they caused is written before it, and
    # replication keeps order, so once eu-west stored it, no update is still on its way to move the
    # subscription under the consumer.
    sends.send(producer, EAST, "sentinel", 0)
    producer.flush()
    sends.wait_all()
    wait_replicated(regions, topic, [EAST], [WEST], timeout_s=60)

    def west_backlog() -> Optional[int]:
        stats = regions[WEST].topic_stats(topic)["subscriptions"].get(sub)
        return None if stats is None else stats["msgBacklog"]

    bound = total - lowest + 1 + markers_slack
    wait_for(lambda: (west_backlog() is not None and west_backlog() <= bound), 60,
             what=f"eu-west's {sub} moved to a backlog <= {bound} (now {west_backlog()})")
    moved_backlog = west_backlog()

    west = subscribe(clients[WEST], topic, sub, WEST, replicate_subscription_state_enabled=True)
    west.receive_keys([(EAST, "sentinel", 0)], timeout_s=60)
    assert west.got[-1].tag == "sentinel", west.got[-1]
    got = [g.i for g in west.got if g.tag == "m"]
    first = got[0]
    print(f"eu-west resumed at message {first} (acknowledged up to {acked - 1} in us-east; produced at "
          f"{produced_rate:.0f}/s, snapshot interval {interval_s:g}s, lowest allowed {lowest}); its backlog "
          f"was {moved_backlog} entries (bound {bound})")
    assert lowest <= first <= acked, f"eu-west resumed at {first}, acknowledged up to {acked - 1} in us-east"
    assert got == list(range(first, total)), "eu-west skipped or repeated messages after the first"
    assert not west.foreign, f"markers reached the application: {west.foreign[:3]}"
    producer.close()


def test_topic_level_replication_clusters_override_the_namespace(regions, clients) -> None:
    """A topic's own replication clusters (``POST .../{topic}/replication``) win over its namespace's, take
    effect on the loaded topic at run time, and its removal brings the namespace's back."""
    ns = namespace(regions, [EAST])  # the namespace replicates nowhere
    regions.create_tenant(TENANT, [EAST, WEST])  # but the tenant may use eu-west
    topic, other = new_topic(ns, "override"), new_topic(ns, "plain")
    path = f"/admin/v2/{topic.replace('://', '/')}/replication"
    producer = producer_for(clients[EAST], topic, f"{EAST}-producer", batching=False)
    plain = producer_for(clients[EAST], other, f"{EAST}-plain", batching=False)
    sends = Sends()
    for i in range(20):
        sends.send(plain, EAST, "plain", i)
    regions[EAST].admin("POST", path, [EAST, WEST])  # loaded topic: the watch applies it
    wait_for(lambda: regions[EAST].topic_stats(topic).get("replication", {}).get(WEST, {}).get("connected"), 30,
             what="the overridden topic replicating to eu-west")
    assert regions[EAST].admin("GET", path) == [EAST, WEST]
    west = subscribe(clients[WEST], topic, "audit", WEST)
    for i in range(50):
        sends.send(producer, EAST, "over", i)
    producer.flush()
    sends.wait_all()
    west.receive_keys([(EAST, "over", i) for i in range(50)], timeout_s=60)
    assert_exactly_once_in_order(west, [(EAST, "over", i) for i in range(50)])
    assert regions[EAST].topic_stats(other)["replication"] == {}  # the namespace's rule still holds there
    regions[EAST].admin("DELETE", path)
    wait_for(lambda: WEST not in regions[EAST].topic_stats(topic)["replication"], 30,
             what="the override removed: replication to eu-west stopped")
    producer.close()
    plain.close()
