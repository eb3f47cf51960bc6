"""Key_Shared with pulsar-client: two consumers receiving in turn get every message within a deadline.

A fidelity report had such a loop (receive on consumer A, then on B, acknowledging each) deliver 280 of 300
messages in 20 s once. The loop here receives with a short timeout, so a consumer whose keys ran out costs
little and the deadline measures the broker: it must never hold a message back while the consumer its key
belongs to could take it (``broker/service/topics/dispatch/key_shared_decisions.py``; the dispatcher itself is
property-tested in ``tests/unit/test_key_shared_liveness.py``). Each test runs a few rounds on fresh
topics and consumers, whose names, hence hash ranges, differ every time; in the middle round the second
consumer joins after half the messages were published (it is *recently joined*: its keys wait until the
first consumer acknowledged what came before). A small receiver queue makes consumers run out of permits
and entries go through the replay set, as do negative acknowledgements in the last round.
"""

from __future__ import annotations

import time

import pulsar
import pytest

from broker.service.topics.dispatch.key_ranges import key_hash
from tests.kit.broker_thread import broker, new_client, storage, unique_topic  # noqa: F401 (fixtures)

MESSAGES = 300
KEYS = 37
DEADLINE_S = 20.0
RECEIVE_MS = 20
ROUNDS = 4  # plain, the second consumer joining late, plain, negative acknowledgements


def receive_in_turn(consumers, expected: int, deadline_s: float, *, nack_every: int = 0) -> list[tuple[str, int, int]]:
    """Receives on each consumer in turn, acknowledging each message, until ``expected`` messages were
    acknowledged or the deadline passed; returns (key, consumer index, message number) of the acknowledged
    ones in arrival order. ``nack_every``: every n-th message is negatively acknowledged the first time."""
    got: list[tuple[str, int, int]] = []
    nacked: set[int] = set()
    deadline = time.monotonic() + deadline_s
    while len(got) < expected and time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(RECEIVE_MS)
            except pulsar.Timeout:
                continue
            n = int(msg.data())
            if nack_every and n % nack_every == 0 and n not in nacked:
                nacked.add(n)
                consumer.negative_acknowledge(msg)
                continue
            got.append((msg.partition_key(), i, n))
            consumer.acknowledge(msg)
    return got


def check_key_order(got: list[tuple[str, int, int]], what: str, *, one_owner: bool) -> None:
    """Each consumer got each key in order; ``one_owner``: each key went to one consumer only (not so when
    a consumer joins late: keys move to it, their older messages may still be in flight)."""
    by_key: dict[tuple[str, int], list[int]] = {}
    for key, i, n in got:
        by_key.setdefault((key, i), []).append(n)
    for (key, i), numbers in by_key.items():
        assert numbers == sorted(numbers), f"{what}: {key} out of order at consumer {i}: {numbers}"
    if one_owner:
        owners: dict[str, int] = {}
        for key, i, _ in got:
            assert owners.setdefault(key, i) == i, f"{what}: {key} went to both consumers"


def publish(producer, numbers: range) -> None:
    for i in numbers:
        producer.send_async(str(i).encode(), None, partition_key=f"key-{i % KEYS}")
    producer.flush()


@pytest.mark.parametrize("queue", [1000, 7], ids=["queue1000", "queue7"])
@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_two_consumers_in_turn_get_every_message(broker, new_client, batching, queue):
    for round_ in range(ROUNDS):
        late_join = round_ == 1
        nack_every = 7 if round_ == 3 else 0
        topic = unique_topic()
        clients = [new_client(), new_client()]
        subscribe = lambda c: c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared,  # noqa: E731
                                          receiver_queue_size=queue, negative_ack_redelivery_delay_ms=50)
        consumers = [subscribe(clients[0])]
        if not late_join:
            consumers.append(subscribe(clients[1]))
        producer = clients[0].create_producer(topic, batching_enabled=batching, batching_max_messages=20,
                                              batching_max_publish_delay_ms=5,
                                              batching_type=pulsar.BatchingType.KeyBased)
        publish(producer, range(MESSAGES // 2))
        if late_join:
            consumers.append(subscribe(clients[1]))
        publish(producer, range(MESSAGES // 2, MESSAGES))
        got = receive_in_turn(consumers, MESSAGES, DEADLINE_S, nack_every=nack_every)
        if len(got) < MESSAGES:
            stats = broker.stats(topic)["subscriptions"]["s"]
            consumers_seen = [(c["consumerName"], c["availablePermits"], c["unackedMessages"],
                               c["readPositionWhenJoining"]) for c in stats["consumers"]]
            raise AssertionError(f"round {round_}: {len(got)} of {MESSAGES} delivered in {DEADLINE_S:g}s; "
                                 f"backlog {stats['msgBacklog']}, consumers (name, permits, unacked, "
                                 f"restricted before): {consumers_seen}")
        assert sorted(n for _, _, n in got) == list(range(MESSAGES))
        if not nack_every:  # (a message negatively acknowledged comes back after later ones of its key)
            check_key_order(got, f"round {round_}", one_owner=not late_join)
        for c in consumers:
            c.close()
        producer.close()


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_sticky_keys_nobody_covers_do_not_hold_back_redeliveries(broker, new_client, batching):
    """STICKY: messages whose key no range covers wait in the replay set (for a consumer that covers them).
    Messages of covered keys redelivered after a negative acknowledgement join the set behind them and must
    still come back: a replay round used to read only the first positions of the set, all uncovered ones,
    and stopped there for good."""
    topic = unique_topic()
    client = new_client()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=10,
                                negative_ack_redelivery_delay_ms=50,
                                key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                                    pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 32767)]))
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=20,
                                      batching_max_publish_delay_ms=5, batching_type=pulsar.BatchingType.KeyBased)
    publish(producer, range(MESSAGES))
    covered = {i for i in range(MESSAGES) if key_hash(f"key-{i % KEYS}".encode()) <= 32767}
    assert 0 < len(covered) < MESSAGES
    acked: set[int] = set()
    nacked: set[int] = set()
    deadline = time.monotonic() + DEADLINE_S
    while acked != covered and time.monotonic() < deadline:
        try:
            msg = consumer.receive(RECEIVE_MS)
        except pulsar.Timeout:
            continue
        n = int(msg.data())
        if n % 3 == 0 and n not in nacked:  # every third message once: back to the replay set
            nacked.add(n)
            consumer.negative_acknowledge(msg)
        else:
            acked.add(n)
            consumer.acknowledge(msg)
    assert acked == covered, f"{len(acked)} of {len(covered)} covered messages acknowledged in {DEADLINE_S:g}s"
    with pytest.raises(pulsar.Timeout):
        consumer.receive(200)  # the uncovered ones wait
