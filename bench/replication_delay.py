"""Replication delay between regions that are really apart: p50/p99 at 5,000 msg/s with 40 ms ± 5 ms between them.

    sudo .venv/bin/python bench/replication_delay.py                 # 5,000 msg/s for 20 s, 1 KiB
    sudo .venv/bin/python bench/replication_delay.py --rate 2000 --seconds 10 --delay-ms 40 --jitter-ms 5

Needs root: it starts two regions in their own network namespaces linked by the wan relay (tests/kit/netns.py,
tests/kit/netns_regions.py; one broker and two bookies per region, E/Qw/Qa 2/2/2), and removes all of it at the
end. Then, at once: a consumer in the second region (``magnetar perf consume``, Magnetar's asyncio client,
run inside that region's namespace), and a rate-limited pulsar-client producer in the first (``magnetar perf
produce``, inside the first region's namespace). A message's delay is its receipt time minus its publish time
(both regions share this machine's clock), so it holds: the producer's own publish latency in the first region
+ the replicator's read, the relay's one-way 40 ms ± 5 ms and the remote publish + the dispatch to the
consumer. The aim of issue 18 is p99 < 40 + 100 ms. Before producing, the origin's topic is created and its
replicator to the second region connected (the steady state); ``--cold`` produces at once instead, so the
figures include the replicator's own start across the link (lookup, connect, producer: several round trips
while messages wait). The load average is printed beside the figure: on a
loaded 2-core machine it is the machine's figure as much as Magnetar's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from magnetar.perf import PerfSpec, run_perf  # noqa: E402


def role_main(args: argparse.Namespace) -> int:
    """Inside a region's namespace: one ``run_perf`` (its spawned workers stay in the namespace)."""
    if args.role == "consume":
        spec = PerfSpec(mode="consume", service_url=args.url, topics=[args.topic], client="magnetar",
                        subscription="bench", initial_position="earliest", receiver_queue_size=5000,
                        duration_s=args.seconds)
    else:
        spec = PerfSpec(mode="produce", service_url=args.url, topics=[args.topic], client="pulsar",
                        rate=args.rate, size_bytes=args.size, duration_s=args.seconds)
    processes = max(1, int(-(-args.rate // 5000))) if args.role == "produce" else 1
    result = run_perf(spec, processes=processes, interval_s=5.0, echo=lambda s: print(f"  [{args.role}] {s}", flush=True))
    pathlib.Path(args.out).write_text(json.dumps(result))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--delay-ms", type=float, default=40.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--cold", action="store_true",
                        help="start producing before the origin's topic exists (the replicator connects meanwhile, "
                             "across the link, and its first seconds' backlog is in the figures)")
    parser.add_argument("--role", choices=("consume", "produce"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        return role_main(args)

    from tests.kit import netns
    from tests.kit.netns_regions import start_netns_regions
    from tests.kit.regions import AdminError
    from tests.kit.wait import wait_for

    why = netns.available()
    if why:
        print(f"skipped: {why}")
        return 2
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="magnetar-repl-delay-"))
    dep = start_netns_regions(["east", "west"], tmp, delay_ms=args.delay_ms, jitter_ms=args.jitter_ms)
    try:
        regions = dep.regions
        ns = regions.create_replicated_namespace("bench", "delay", ["east", "west"])
        topic = f"persistent://{ns}/t-{int(time.time())}"
        me = [sys.executable, str(pathlib.Path(__file__).resolve())]
        common = ["--topic", topic, "--rate", str(args.rate), "--size", str(args.size)]
        consumer = dep.in_region("west", [*me, "--role", "consume", "--url", regions["west"].pulsar_url, *common,
                                          "--seconds", str(args.seconds + 20), "--out", str(tmp / "consume.json")])
        wait_for(lambda: "bench" in regions["west"].topic_stats(topic).get("subscriptions", {}), 60,
                 what="consumer subscribed in west")
        if not args.cold:  # the steady state: the origin's topic loaded and its replicator connected first
            try:
                regions["east"].admin("PUT", f"/admin/v2/{topic.replace('://', '/')}")
            except AdminError as err:
                if err.status != 409:  # 409: west's replicator made it already; loaded is what counts
                    raise
            wait_for(lambda: (regions["east"].replication_stats(topic, "west") or {}).get("connected"), 60,
                     what="the replicator east -> west connected")
        loads: list[float] = []
        sampling = threading.Event()

        def sample_load() -> None:
            while not sampling.wait(2.0):
                loads.append(os.getloadavg()[0])
        sampler = threading.Thread(target=sample_load, daemon=True)
        sampler.start()
        producer = dep.in_region("east", [*me, "--role", "produce", "--url", regions["east"].pulsar_url, *common,
                                          "--seconds", str(args.seconds), "--out", str(tmp / "produce.json")])
        producer.wait(timeout=args.seconds + 120)
        consumer.wait(timeout=args.seconds + 120)
        sampling.set()
        produced = json.loads((tmp / "produce.json").read_text())
        consumed = json.loads((tmp / "consume.json").read_text())
        lat = consumed.get("latency_ms") or {}
        pub = produced.get("latency_ms") or {}
        print(f"\nreplication delay at {produced.get('msg_per_s', 0):,.0f} msg/s achieved "
              f"(target {args.rate:,.0f}, {args.size} B), {args.delay_ms:g} ± {args.jitter_ms:g} ms between regions: "
              f"p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms, max {lat.get('max')} ms; "
              f"consumed {consumed.get('messages', 0):,}/{produced.get('messages', 0):,}; "
              f"publish latency in the origin p50 {pub.get('p50')} ms p99 {pub.get('p99')} ms; "
              f"load average during the run {min(loads, default=0):.1f}..{max(loads, default=0):.1f} "
              f"on {os.cpu_count()} cores")
    finally:
        dep.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
