"""A pulsar-client worker run *inside* a region's namespace by the chaos tests (``python -m tests.kit.region_client``).

``produce URL TOPIC NAME COUNT RATE OUT``: publishes COUNT messages ``NAME:seq`` at RATE msg/s (send timeout off,
so a message waits through a fault rather than fail) and appends ``seq`` to OUT when acknowledged.
``consume URL TOPIC SUB OUT``: a replicated subscription from the earliest position; appends
``payload publish_ms receive_ms`` to OUT for every message received, acknowledges it, until SIGTERM.
``read URL TOPIC OUT``: a reader from the earliest entry; writes every payload in order until none comes for 3 s.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import pulsar


def produce(url: str, topic: str, name: str, count: int, rate: float, out: str) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=60)
    producer = client.create_producer(topic, producer_name=name, send_timeout_millis=0, block_if_queue_full=True,
                                      batching_enabled=True, batching_max_publish_delay_ms=5)
    lock = threading.Lock()
    with open(out, "a", buffering=1) as f:
        def acked(result, msg_id, seq):
            if result == pulsar.Result.Ok:
                with lock:
                    f.write(f"{seq}\n")
        start = time.monotonic()
        for seq in range(count):
            due = start + seq / rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            producer.send_async(f"{name}:{seq}".encode(), lambda r, m, s=seq: acked(r, m, s))
        producer.flush()
    client.close()


def consume(url: str, topic: str, sub: str, out: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = pulsar.Client(url, operation_timeout_seconds=60)
    consumer = client.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Earliest,
                                replicate_subscription_state_enabled=True)
    with open(out, "a", buffering=1) as f:
        with open(out + ".ready", "w"):
            pass
        while not stop.is_set():
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            f.write(f"{msg.data().decode()} {msg.publish_timestamp()} {int(time.time() * 1000)}\n")
            consumer.acknowledge(msg)
    client.close()


def read(url: str, topic: str, out: str) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=60)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    # Everything stored, to the topic's last message as the broker reports it (not "until 3 s pass with
    # nothing": a stall that long on a loaded machine would have cut the read short).
    with open(out, "w") as f:
        while reader.has_message_available():
            f.write(reader.read_next(timeout_millis=30_000).data().decode() + "\n")
    client.close()


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "produce":
        produce(args[0], args[1], args[2], int(args[3]), float(args[4]), args[5])
    elif command == "consume":
        consume(*args)
    elif command == "read":
        read(*args)
    else:
        raise SystemExit(f"unknown command {command!r}")
