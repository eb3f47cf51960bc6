"""aiokafka against the Kafka listener, side by side with pulsar-client against the same broker, in one run.

    .venv/bin/python bench/kafka.py                   # ZooKeeper + 3 bookies + 1 broker (with a Kafka listener)
    .venv/bin/python bench/kafka.py --seconds 20 --size 1024 --json out.json
    .venv/bin/python bench/kafka.py --quick           # a smoke test: tiny numbers, every figure printed

One deployment, started here with the test kit in a temporary directory and stopped at the end: a real
ZooKeeper, ``--bookies`` bookie processes, one ``magnetar broker`` (E/Qw/Qa 3/2/2 with three bookies) serving
``pulsar://`` and ``PLAINTEXT://``. For each client, on a fresh single-partition topic:

* **produce**: ``--size`` byte messages (1 KiB), batching on (aiokafka ``linger_ms`` 5 and 64 KiB batches;
  pulsar-client's default batching), acks=all for aiokafka (Pulsar has one kind of acknowledgement), as fast
  as the client goes with at most ``--max-pending`` messages unacknowledged, for ``--seconds``: msg/s, MB/s and
  send-to-acknowledgement p50 / p99 per message;
* **consume**: then everything produced read back from the start (aiokafka: an assigned consumer from offset
  0; pulsar-client: a subscription from the earliest message): msg/s.

Both clients run in this process, one after the other (the broker is the same, and so is the machine's load
only if nothing else runs: compare runs with similar load averages, printed with the table).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def start_deployment(base: pathlib.Path, bookies: int) -> tuple[Any, list]:
    from tests.kit.bookies import start_bookies
    from tests.kit.brokers import start_brokers
    from tests.kit.zookeeper import start_zookeeper

    zk = start_zookeeper(base)
    zk_connect = zk.new_chroot("bench")
    bks = start_bookies(bookies, base, zk_connect)
    ensemble = min(3, bookies)
    (broker,) = start_brokers(1, base, zk_connect, kafka=True, managed_ledger_ensemble_size=ensemble,
                              managed_ledger_write_quorum=min(2, bookies), managed_ledger_ack_quorum=min(2, bookies))
    return broker, [zk.process, *(b.process for b in bks), broker.process]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(count: int, elapsed_s: float, size: int, latencies_s: list[float]) -> dict[str, float]:
    return {"messages": count, "msg_per_s": count / elapsed_s if elapsed_s else 0.0,
            "mb_per_s": count * size / elapsed_s / 1e6 if elapsed_s else 0.0,
            "p50_ms": percentile(latencies_s, 0.50) * 1000, "p99_ms": percentile(latencies_s, 0.99) * 1000}


async def kafka_produce(bootstrap: str, topic: str, *, seconds: float, size: int, max_pending: int) -> dict:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=65536,
                                max_request_size=8 << 20)
    await producer.start()
    payload = os.urandom(size)
    latencies: list[float] = []
    pending = asyncio.Semaphore(max_pending)
    errors = 0

    def done(started: float, future: asyncio.Future) -> None:
        nonlocal errors
        pending.release()
        if future.cancelled() or future.exception() is not None:
            errors += 1
        else:
            latencies.append(time.perf_counter() - started)

    try:
        await producer.send_and_wait(topic, payload)  # metadata and connection before the clock starts
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            await pending.acquire()
            started = time.perf_counter()
            future = await producer.send(topic, payload)
            future.add_done_callback(lambda f, s=started: done(s, f))
        await producer.flush()
        elapsed = time.perf_counter() - start
    finally:
        await producer.stop()
    return {**figures(len(latencies), elapsed, size, latencies), "errors": errors}


async def kafka_consume(bootstrap: str, topic: str, expected: int) -> dict:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_bytes=16 << 20,
                                max_partition_fetch_bytes=8 << 20)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = 0
        start = time.perf_counter()
        deadline = start + 120
        while got < expected and time.perf_counter() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=10_000)).values():
                got += len(records)
        elapsed = time.perf_counter() - start
    finally:
        await consumer.stop()
    return {"messages": got, "msg_per_s": got / elapsed if elapsed else 0.0}


def pulsar_produce(url: str, topic: str, *, seconds: float, size: int, max_pending: int) -> dict:
    import pulsar

    client = pulsar.Client(url)
    producer = client.create_producer(topic, batching_enabled=True, max_pending_messages=max_pending,
                                      block_if_queue_full=True)
    payload = os.urandom(size)
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    pending = threading.Semaphore(max_pending)

    def done(result: Any, _msg_id: Any, started: float) -> None:
        nonlocal errors
        with lock:
            if result == pulsar.Result.Ok:
                latencies.append(time.perf_counter() - started)
            else:
                errors += 1
        pending.release()

    try:
        producer.send(payload)
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            pending.acquire()
            started = time.perf_counter()
            producer.send_async(payload, lambda r, m, s=started: done(r, m, s))
        producer.flush()
        elapsed = time.perf_counter() - start
    finally:
        client.close()
    return {**figures(len(latencies), elapsed, size, latencies), "errors": errors}


def pulsar_consume(url: str, topic: str, expected: int) -> dict:
    import pulsar

    client = pulsar.Client(url)
    try:
        consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                                    receiver_queue_size=20_000)
        got = 0
        start = time.perf_counter()
        deadline = start + 120
        while got < expected and time.perf_counter() < deadline:
            try:
                messages = consumer.batch_receive()
            except Exception:
                continue
            got += len(messages)
            if len(messages):
                consumer.acknowledge_cumulative(messages[len(messages) - 1])
        elapsed = time.perf_counter() - start
    finally:
        client.close()
    return {"messages": got, "msg_per_s": got / elapsed if elapsed else 0.0}


def render(results: dict[str, dict], args: argparse.Namespace, load: tuple[str, str]) -> str:
    lines = [f"{args.size}-byte messages, {args.seconds:.0f} s per producer, at most {args.max_pending} pending; "
             f"load average before {load[0]}, after {load[1]}",
             f"{'client':<28}{'produce msg/s':>14}{'MB/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'consume msg/s':>15}"]
    for name, row in results.items():
        p, c = row["produce"], row["consume"]
        lines.append(f"{name:<28}{p['msg_per_s']:>14,.0f}{p['mb_per_s']:>8.1f}{p['p50_ms']:>9.1f}{p['p99_ms']:>9.1f}"
                     f"{c['msg_per_s']:>15,.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--max-pending", type=int, default=5000)
    parser.add_argument("--bookies", type=int, default=3)
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--quick", action="store_true", help="2 s per producer, 500 pending")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.max_pending = 2.0, 500
    load_before = open("/proc/loadavg").read().split()[0]
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-kafka-") as tmp:
        broker, processes = start_deployment(pathlib.Path(tmp), args.bookies)
        try:
            results: dict[str, dict] = {}
            run = uuid.uuid4().hex[:8]
            topic = f"bench-kafka-{run}"
            produced = asyncio.run(kafka_produce(broker.kafka_bootstrap, topic, seconds=args.seconds, size=args.size,
                                                 max_pending=args.max_pending))
            consumed = asyncio.run(kafka_consume(broker.kafka_bootstrap, topic, produced["messages"] + 1))
            results["aiokafka (Kafka listener)"] = {"produce": produced, "consume": consumed}
            topic = f"persistent://public/default/bench-pulsar-{run}"
            produced = pulsar_produce(broker.pulsar_url, topic, seconds=args.seconds, size=args.size,
                                      max_pending=args.max_pending)
            consumed = pulsar_consume(broker.pulsar_url, topic, produced["messages"] + 1)
            results["pulsar-client (pulsar://)"] = {"produce": produced, "consume": consumed}
        finally:
            for process in reversed(processes):
                process.terminate()
    load = (load_before, open("/proc/loadavg").read().split()[0])
    print(render(results, args, load))
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)}, "load": load,
                                         "results": results}, indent=2, default=str) + "\n")
    return 0 if all(r["produce"]["errors"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
