"""E/Qw/Qa 3/3/2 (issue 18): every entry is written to all three bookies and acknowledged by the first two, so a
stalled disk on one bookie does not stall the topic.

Three real bookie processes, one real broker process configured ``managed_ledger_ensemble_size = 3``,
``managed_ledger_write_quorum = 3``, ``managed_ledger_ack_quorum = 2``, and pulsar-client. One bookie is
paused (SIGSTOP: for its peers exactly a disk that stopped answering); publishes go on being acknowledged,
each within a bound far below any add timeout; then it resumes and every message reads back in order.
"""

from __future__ import annotations

import time

import pulsar

from tests.kit.brokers import start_brokers


def test_publishes_are_acknowledged_by_two_of_three_while_one_bookie_is_stalled(tmp_path, zk_connect, bookie_factory):
    bookies = bookie_factory(3)
    (broker,) = start_brokers(1, tmp_path, zk_connect, managed_ledger_ensemble_size=3,
                              managed_ledger_write_quorum=3, managed_ledger_ack_quorum=2)
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    topic = "persistent://public/default/qa-two-of-three"
    try:
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=20_000)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        for i in range(20):
            producer.send(f"m{i}".encode())
        stalled = bookies[2]
        stalled.process.pause()
        try:
            slowest_s = 0.0
            for i in range(20, 80):
                started = time.monotonic()
                producer.send(f"m{i}".encode())
                slowest_s = max(slowest_s, time.monotonic() - started)
            # acknowledged by the two live bookies: no wait for the stalled one (its adds stay pending)
            assert slowest_s < 5.0, f"a publish waited {slowest_s:.1f} s for the stalled bookie"
        finally:
            stalled.process.resume()
        got = [reader.read_next(timeout_millis=30_000).data().decode() for _ in range(80)]
        assert got == [f"m{i}" for i in range(80)]
    finally:
        client.close()
