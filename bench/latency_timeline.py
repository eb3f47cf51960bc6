"""When the slow publishes happen: a per-message latency timeline at a fixed rate, and its slow episodes.

    .venv/bin/python bench/latency_timeline.py                          # 10,000 msg/s, 15 s, two runs in a row
    .venv/bin/python bench/latency_timeline.py --runs 3 --bookie-set journal_max_size_bytes=67108864
    .venv/bin/python bench/latency_timeline.py --threshold-ms 8 --json /tmp/timeline.json

Starts the same deployment as ``bench/latency.py`` (ZooKeeper, one bookie, one broker; ``--bookie-set`` /
``--broker-set`` as there) and runs ``--runs`` producers one after the other on fresh topics, each in its own
process pinned to one CPU: pulsar-client, batching as in ``bench/latency.py`` (1 ms delay), 1 KiB messages
sent open loop (a message's latency runs from its scheduled time to its acknowledgement). Where a percentile
says how slow, the timeline says when: every 10 ms window whose slowest message passed ``--threshold-ms`` is
slow, and neighbouring slow windows (within 30 ms) make an *episode*, printed as start (s into the run) /
length / slowest (ms). Periodic episodes point at periodic work (a flush, a journal roll); one long episode at
a stall. The runs share one deployment, so later runs see what earlier ones left (files to roll and remove).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

_WINDOW_S = 0.010
_EPISODE_GAP_S = 0.030


def produce(url: str, topic: str, rate: float, seconds: float, size: int, out: pathlib.Path) -> None:
    """The producer process: sends ``rate * seconds`` messages on the schedule, writes their latencies (µs)."""
    import pulsar

    from magnetar.perf_worker import Pacer, pin_worker
    from observability.runtime import keep_large_blocks

    keep_large_blocks()
    pin_worker(0)
    client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=1000, batching_max_allowed_size_in_bytes=128 << 10,
            batching_max_publish_delay_ms=1, block_if_queue_full=True, max_pending_messages=10000,
            send_timeout_millis=0)
        payload = os.urandom(size)
        count = int(rate * seconds)
        latency_us = [-1] * count
        now_ns = time.perf_counter_ns
        ok = pulsar.Result.Ok

        def acked(k: int, scheduled_ns: int, result, _msg_id) -> None:
            latency_us[k] = (now_ns() - scheduled_ns) // 1000 if result == ok else -1

        pacer = Pacer(rate)
        while pacer.sent < count:
            due = min(pacer.due(1000), count - pacer.sent)
            if not due:
                time.sleep(pacer.wait_s())
                continue
            for k in range(pacer.sent, pacer.sent + due):
                producer.send_async(payload, functools.partial(acked, k, pacer.scheduled_ns(k)))
            pacer.sent += due
        producer.flush()
        out.write_text(json.dumps({"rate": rate, "latency_us": latency_us}))
    finally:
        client.close()


def episodes(latency_us: list[int], rate: float, threshold_ms: float) -> list[tuple[float, float, float]]:
    """``(start s, length s, slowest ms)`` of each run of slow windows (see the module docstring)."""
    per_window = max(1, int(rate * _WINDOW_S))
    found: list[list[float]] = []
    for first in range(0, len(latency_us), per_window):
        slowest = max(latency_us[first:first + per_window]) / 1000
        if slowest <= threshold_ms:
            continue
        at = first / rate
        if found and at - found[-1][1] <= _EPISODE_GAP_S:
            found[-1][1] = at
            found[-1][2] = max(found[-1][2], slowest)
        else:
            found.append([at, at, slowest])
    return [(start, end - start + _WINDOW_S, slowest) for start, end, slowest in found]


def summary(latency_us: list[int]) -> dict[str, float]:
    done = sorted(x for x in latency_us if x >= 0)
    if not done:
        return {"acknowledged": 0}
    pick = lambda q: done[min(len(done) - 1, int(q * len(done)))] / 1000  # noqa: E731
    return {"acknowledged": len(done), "failed": len(latency_us) - len(done), "p50": pick(0.5), "p99": pick(0.99),
            "p99.9": pick(0.999), "max": done[-1] / 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10000.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--threshold-ms", type=float, default=10.0)
    parser.add_argument("--bookie-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=pathlib.Path, help="write every run's summary and episodes here")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "produce":
        produce(args.url, args.topic, args.rate, args.seconds, args.size, args.out)
        return 0

    import latency

    base = pathlib.Path(tempfile.mkdtemp(prefix="magnetar-timeline-"))
    dep = latency.Magnetar(base, bookies=1, quorum=(1, 1, 1), journal_sync=True,
                           bookie_settings=latency.parse_settings(args.bookie_set),
                           broker_settings=latency.parse_settings(args.broker_set))
    results = []
    try:
        for run in range(args.runs):
            out = base / f"run-{run}.json"
            topic = f"persistent://public/default/timeline-{uuid.uuid4().hex[:8]}"
            subprocess.run([sys.executable, __file__, "--role", "produce", "--url", dep.broker.pulsar_url,
                            "--topic", topic, "--rate", str(args.rate), "--seconds", str(args.seconds),
                            "--size", str(args.size), "--out", str(out)], check=True, timeout=args.seconds + 180)
            got = json.loads(out.read_text())["latency_us"]
            row = {"run": run + 1, **summary(got),
                   "episodes": [list(e) for e in episodes(got, args.rate, args.threshold_ms)],
                   "load_average": os.getloadavg()[0]}
            results.append(row)
            print(f"run {row['run']}: {row['acknowledged']:,} acknowledged, {row.get('failed', 0)} failed; "
                  f"p50 {row.get('p50', 0):.2f} p99 {row.get('p99', 0):.2f} p99.9 {row.get('p99.9', 0):.2f} "
                  f"max {row.get('max', 0):.1f} ms; load average {row['load_average']:.2f}")
            print(f"  {len(row['episodes'])} episodes over {args.threshold_ms:g} ms (start s / length ms / slowest ms): "
                  + "  ".join(f"{s:.2f}/{length * 1000:.0f}/{worst:.0f}" for s, length, worst in row["episodes"]),
                  flush=True)
    finally:
        dep.close()
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"rate": args.rate, "seconds": args.seconds, "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
