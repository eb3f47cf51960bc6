"""Producers with pulsar-client: deduplication (retries, restarts), access modes and fencing, names."""

from __future__ import annotations

import threading

import pulsar
import pytest

from config_store import Policies
from tests.kit.broker_thread import broker, client, make_client, new_client, storage, unique_topic  # noqa: F401
from tests.kit.wait import wait_for

RECEIVE_MS = 5000
DEDUP = {"policies": {"public/default": Policies(deduplication_enabled=True)}}


def read_all(client, topic, *, timeout_ms=1000):
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while True:
        try:
            out.append(reader.read_next(timeout_ms).data())
        except pulsar.Timeout:
            reader.close()
            return out


@pytest.mark.parametrize("broker", [DEDUP], indirect=True)
def test_dedup_drops_a_resent_sequence_id(broker, client):
    topic = unique_topic()
    p1 = client.create_producer(topic, producer_name="dedup-p")
    assert p1.last_sequence_id() == -1
    for i in range(5):
        p1.send(f"a{i}".encode(), sequence_id=i)
    p1.close()
    p2 = client.create_producer(topic, producer_name="dedup-p")
    assert p2.last_sequence_id() == 4
    p2.send(b"dup", sequence_id=3)  # acknowledged, not stored
    p2.send(b"new", sequence_id=5)
    assert read_all(client, topic) == [b"a0", b"a1", b"a2", b"a3", b"a4", b"new"]
    assert broker.stats(topic)["deduplicationStatus"] == "Enabled"


@pytest.mark.parametrize("broker", [DEDUP], indirect=True)
def test_dedup_state_survives_a_broker_restart(broker):
    topic = unique_topic()
    c1 = make_client(broker.url)
    p = c1.create_producer(topic, producer_name="survivor", batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(20):
        p.send_async(f"m{i}".encode(), None)
    p.flush()
    c1.close()
    broker.restart_service()  # the topic is loaded again: the state comes back from the pulsar.dedup cursor
    c2 = make_client(broker.url)
    try:
        p2 = c2.create_producer(topic, producer_name="survivor")
        assert p2.last_sequence_id() == 19
        p2.send(b"again", sequence_id=10)
        p2.send(b"m20", sequence_id=20)
        assert read_all(c2, topic) == [f"m{i}".encode() for i in range(21)]
    finally:
        c2.close()


# Holding appends in flight is a hook of the managed-ledger test double, so this runs on it only (the
# real-storage crash/takeover path of dedup is test_broker_failover.py and tests/chaos).
@pytest.mark.parametrize("storage", ["memory"])
@pytest.mark.parametrize("broker, expected_entries", [(DEDUP, 10), ({}, 20)], indirect=["broker"])
def test_producer_retries_after_a_lost_connection(broker, client, expected_entries):
    """Receipts lost with the connection: the client re-sends; with dedup nothing is stored twice."""
    topic = unique_topic()
    producer = client.create_producer(topic, producer_name="retrier", send_timeout_millis=30_000)
    ml = broker.run(lambda: broker.service.get_topic(topic)).ml
    broker.call(ml.hold_adds)
    results = []
    for i in range(10):
        producer.send_async(f"m{i}".encode(), lambda res, mid: results.append(res))
    wait_for(lambda: broker.call(lambda: ml.held_adds) == 10, 10, what="10 appends in flight")

    def cut():
        for conn in broker.service.connections:
            conn.close()
    broker.call(cut)
    wait_for(lambda: broker.call(lambda: ml.held_adds) >= 20 or
             (expected_entries == 10 and broker.call(lambda: len(broker.service.connections)) >= 1
              and broker.call(lambda: bool(broker.service.topics()[topic].producers))), 15,
             what="the client reconnected and re-sent")
    if expected_entries == 10:
        wait_for(lambda: broker.call(lambda: sum(p.pending_count for p in broker.service.topics()[topic]
                                                 .producers.values())) == 10, 15, what="resends queued")
    broker.call(ml.release_adds)
    wait_for(lambda: len(results) == 10, 15, what="every send acknowledged")
    assert all(r == pulsar.Result.Ok for r in results)
    assert broker.call(lambda: ml.number_of_entries) == expected_entries


def test_exclusive_producer_refuses_others(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    p1 = c1.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):  # a Shared one meeting an exclusive holder: busy, as Pulsar
        c2.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):  # a second Exclusive one: fenced, as Pulsar (not retried)
        c2.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    p1.send(b"still mine")
    assert [p["producerName"] for p in broker.stats(topic)["publishers"]] == [p1.producer_name()]
    p1.close()
    shared = c2.create_producer(topic)
    shared.send(b"shared again")
    with pytest.raises(pulsar.ProducerFenced):  # Exclusive meeting Shared producers: fenced too
        c1.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    assert [p["producerName"] for p in broker.stats(topic)["publishers"]] == [shared.producer_name()]
    assert broker.stats(topic)["topicEpoch"] == 1


def _create_in_thread(client, topic, **kwargs):
    """Starts ``client.create_producer`` in a thread (it blocks while queued); returns (thread, outcome), the
    outcome holding the producer under "p" or the exception under "error" once the thread ends."""
    outcome = {}

    def create():
        try:
            outcome["p"] = client.create_producer(topic, **kwargs)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    t = threading.Thread(target=create, daemon=True)
    t.start()
    return t, outcome


def test_a_waiting_exclusive_producer_keeps_newcomers_out(broker, new_client):
    topic = unique_topic()
    c1, c2, c3 = new_client(), new_client(), new_client()
    shared = c1.create_producer(topic)
    t, waiting = _create_in_thread(c2, topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)
    wait_for(lambda: broker.stats(topic)["waitingPublishers"] == 1, 10, what="WaitForExclusive queued")
    with pytest.raises(pulsar.ProducerBusy):  # Pulsar refuses Shared while an exclusive one waits
        c3.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        c3.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    shared.close()
    t.join(15)
    assert not t.is_alive() and "error" not in waiting, waiting
    waiting["p"].send(b"mine now")
    assert [p["producerName"] for p in broker.stats(topic)["publishers"]] == [waiting["p"].producer_name()]


def test_exclusive_with_fencing_fails_the_waiting_producers(broker, new_client):
    topic = unique_topic()
    c1, c2, c3 = new_client(), new_client(), new_client()
    c1.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    t, waiting = _create_in_thread(c2, topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)
    wait_for(lambda: broker.stats(topic)["waitingPublishers"] == 1, 10, what="WaitForExclusive queued")
    fencer = c3.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    t.join(15)
    assert not t.is_alive() and isinstance(waiting.get("error"), pulsar.ProducerFenced), waiting
    fencer.send(b"only me")
    stats = broker.stats(topic)
    assert stats["waitingPublishers"] == 0 and stats["topicEpoch"] == 2
    assert [p["producerName"] for p in stats["publishers"]] == [fencer.producer_name()]


def test_exclusive_with_fencing_fences_the_holder(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    p1 = c1.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    p1.send(b"one")
    p2 = c2.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    p2.send(b"two")
    with pytest.raises(pulsar.ProducerFenced):  # closed by the broker, it came back with an old epoch
        p1.send(b"three")
    assert broker.stats(topic)["topicEpoch"] == 2
    assert [p["producerName"] for p in broker.stats(topic)["publishers"]] == [p2.producer_name()]


def test_wait_for_exclusive_gets_the_topic_when_the_holder_leaves(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    p1 = c1.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    created = {}

    def create():
        created["p"] = c2.create_producer(topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)

    t = threading.Thread(target=create)
    t.start()
    wait_for(lambda: broker.stats(topic)["waitingPublishers"] == 1, 10, what="second producer queued")
    assert "p" not in created
    p1.close()
    t.join(10)
    created["p"].send(b"finally")
    assert broker.stats(topic)["publishers"][0]["accessMode"] == "WaitForExclusive"


def test_producer_name_in_use_is_refused(broker, new_client):
    topic = unique_topic()
    c1, c2 = new_client(), new_client()
    c1.create_producer(topic, producer_name="same")
    with pytest.raises(pulsar.ProducerBusy):
        c2.create_producer(topic, producer_name="same")


def test_generated_names_are_unique_and_stamped(broker, client):
    topic = unique_topic()
    names = {client.create_producer(topic).producer_name() for _ in range(3)}
    assert len(names) == 3 and all(n.startswith("test-") for n in names)
