"""Cost of a broker's ``/metrics`` with many topics: scrape time, size, and the CPU share of metrics work.

    .venv/bin/python bench/metrics_scrape.py                       # 10,000 topics, 20 scrapes
    .venv/bin/python bench/metrics_scrape.py --topics 2000 --scrapes 10 --py-spy /tmp/scrape.txt
    .venv/bin/python bench/metrics_scrape.py --json /tmp/scrape.json

Starts a real deployment with the test kit in a temporary directory (ZooKeeper, one bookie, one
``magnetar broker`` process, E/Qw/Qa 1/1/1) and loads ``--topics`` persistent topics the way applications
do: each gets a subscription (admin REST ``PUT .../subscription/s``, which loads the topic on the broker) and
a pulsar-client producer that publishes one message and stays connected, so every topic has per-topic,
per-subscription and per-producer state (``--no-producers`` skips the producers). Topics are loaded by
``--workers`` threads.

Then it scrapes ``/metrics`` ``--scrapes`` times, one after the other, and reports:

* wall time of a scrape (p50, p99, max) and the size of the answer;
* the broker's CPU time per scrape (``/proc/<pid>/stat`` utime+stime during the request, minus the idle
  rate measured over ``--idle-seconds`` beforehand), and what that is as a share of one core at Prometheus'
  ``--interval-s`` scrape interval (aim: a scrape under 1 s, and under 5 % of a core at 15 s).

``--py-spy FILE`` records the broker with py-spy during the scrapes (collapsed stacks, ``--format raw``) and
prints the functions with the most samples (self and total), to see where the time goes before tuning.
The figures depend on the machine: run it on a quiet one, or say how busy it was.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (all its threads)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S  # utime, stime: fields 14 and 15 of stat(5)


def start_deployment(base: pathlib.Path):
    from tests.kit.bookies import start_bookies
    from tests.kit.brokers import start_brokers
    from tests.kit.zookeeper import start_zookeeper

    zk = start_zookeeper(base)
    zk_connect = zk.new_chroot("bench")
    bookies = start_bookies(1, base, zk_connect)
    # No automatic bundle split or shedding: they would unload topics in the middle of loading or scraping.
    # Load reports and the ZooKeeper session at the broker's defaults, not the test kit's quick ones.
    (broker,) = start_brokers(1, base, zk_connect, cluster="bench", managed_ledger_ensemble_size=1,
                              managed_ledger_write_quorum=1, managed_ledger_ack_quorum=1,
                              load_balancer_auto_bundle_split_enabled=False, load_balancer_shedding_enabled=False,
                              load_report_interval_ms=5000, zk_session_timeout_ms=10_000, timeout_s=120)
    return broker, [zk.process, *(b.process for b in bookies), broker.process]


def load_topics(broker, client, n: int, *, producers: bool, workers: int) -> list:
    """Loads ``n`` topics (subscription + optionally a connected producer that sent one message); returns the
    producers (they must stay open)."""
    made: list = []

    def one(i: int):
        name = f"bench-metrics-{i:05d}"
        request = urllib.request.Request(f"{broker.http_url}/admin/v2/persistent/public/default/{name}/subscription/s",
                                         method="PUT")
        for attempt in range(10):  # 503 while a bundle is being taken: try again
            try:
                with urllib.request.urlopen(request, timeout=120):
                    break
            except urllib.error.HTTPError as e:
                if e.code != 503 or attempt == 9:
                    raise
                time.sleep(0.5)  # back-off before the next attempt
        if not producers:
            return None
        producer = client.create_producer(f"persistent://public/default/{name}", batching_enabled=False)
        producer.send(b"x" * 100)
        return producer

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for done, producer in enumerate(pool.map(one, range(n)), 1):
            made.append(producer)
            if done % 1000 == 0:
                print(f"  {done} topics loaded ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    print(f"loaded {n} topics in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return made


_RUNTIME_PREFIXES = (b"magnetar_gc_pause_seconds_", b"magnetar_event_loop_lag_seconds_")


def runtime_samples(body: bytes) -> dict[str, float]:
    """The broker's own GC-pause and event-loop-lag histogram samples in a scrape (``name{labels}`` -> value)."""
    out = {}
    for line in body.splitlines():
        if line.startswith(_RUNTIME_PREFIXES):
            key, _, value = line.decode().rpartition(" ")
            out[key] = float(value)
    return out


def lag_and_gc(before: dict[str, float], after: dict[str, float]) -> dict:
    """What happened between two scrapes, from the broker's runtime histograms: full (generation 2) GC
    collections and their pause time, and a bound on the event loop's longest stall (the smallest lag bucket
    holding every probe taken meanwhile; None when some probe was later than the largest bucket)."""
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    probes = delta('magnetar_event_loop_lag_seconds_bucket{le="+Inf"}')
    buckets = sorted((float(k.split('le="')[1].rstrip('"}')), k) for k in after
                     if k.startswith("magnetar_event_loop_lag_seconds_bucket") and "+Inf" not in k)
    lag_bound = next((bound for bound, key in buckets if delta(key) >= probes), None)
    return {"gc_gen2_collections": delta('magnetar_gc_pause_seconds_count{generation="2"}'),
            "gc_gen2_pause_s": delta('magnetar_gc_pause_seconds_sum{generation="2"}'),
            "loop_probes": probes, "loop_lag_max_bound_s": lag_bound}


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=300) as response:
        return response.read()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def measure(url: str, pid: int, *, scrapes: int, idle_s: float) -> dict:
    first = runtime_samples(scrape(url))  # warm-up (first-time imports, label caches)
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    time.sleep(idle_s)  # measuring the broker's idle CPU rate, not waiting for a condition
    idle_rate = (cpu_seconds(pid) - cpu0) / (time.monotonic() - wall0)
    walls, cpus, sizes = [], [], []
    for _ in range(scrapes):
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        body = scrape(url)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - c0 - idle_rate * wall
        walls.append(wall)
        cpus.append(max(cpu, 0.0))
        sizes.append(len(body))
    return {**lag_and_gc(first, runtime_samples(body)), "scrapes": scrapes, "idle_cpu_share": idle_rate,
            "wall_s": walls, "cpu_s": cpus,
            "size_bytes": statistics.median(sizes), "series": body.count(b"\n") - body.count(b"\n#"),
            "families": body.count(b"\n# TYPE ") + body.startswith(b"# TYPE ")}


def report(result: dict, *, interval_s: float, topics: int) -> str:
    walls, cpus = result["wall_s"], result["cpu_s"]
    cpu_mean = statistics.mean(cpus)
    share = cpu_mean / interval_s
    lines = [
        f"/metrics of one broker with {topics} topics ({result['scrapes']} scrapes, load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores):",
        f"  scrape wall time   p50 {percentile(walls, 0.5) * 1000:.0f} ms   p99 {percentile(walls, 0.99) * 1000:.0f} ms"
        f"   max {max(walls) * 1000:.0f} ms",
        f"  size               {result['size_bytes'] / 1e6:.1f} MB, {result['series']} series, "
        f"{result['families']} families",
        f"  broker CPU/scrape  mean {cpu_mean * 1000:.0f} ms   p99 {percentile(cpus, 0.99) * 1000:.0f} ms "
        f"(idle broker: {result['idle_cpu_share'] * 100:.1f} % of a core)",
        f"  CPU share at a {interval_s:g} s scrape interval: {share * 100:.2f} % of a core "
        f"(aim < 5 %); scrape p99 {'<' if percentile(walls, 0.99) < 1 else '>='} 1 s",
        f"  during the scrapes: {result['gc_gen2_collections']:.0f} full GC collections "
        f"({result['gc_gen2_pause_s'] * 1000:.0f} ms); event loop's longest stall "
        + (f"<= {result['loop_lag_max_bound_s'] * 1000:g} ms" if result["loop_lag_max_bound_s"] is not None
           else "beyond the largest lag bucket") + f" ({result['loop_probes']:.0f} lag probes)",
    ]
    return "\n".join(lines)


def py_spy_top(raw: pathlib.Path, n: int = 25) -> str:
    """The functions with the most samples in py-spy's collapsed stacks, by self and by total samples."""
    self_counts: dict[str, int] = {}
    total_counts: dict[str, int] = {}
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        frames = stack.split(";")
        samples += k
        self_counts[frames[-1]] = self_counts.get(frames[-1], 0) + k
        for frame in set(frames):
            total_counts[frame] = total_counts.get(frame, 0) + k
    out = [f"py-spy: {samples} samples"]
    for title, counts in (("self", self_counts), ("total", total_counts)):
        out.append(f"  top by {title}:")
        for frame, k in sorted(counts.items(), key=lambda kv: -kv[1])[:n]:
            out.append(f"    {k * 100 / max(samples, 1):5.1f} %  {frame}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--interval-s", type=float, default=15.0, help="Prometheus' scrape interval")
    parser.add_argument("--idle-seconds", type=float, default=12.0,
                        help="how long the idle CPU rate is measured (longer than the stats period)")
    parser.add_argument("--workers", type=int, default=16, help="threads loading topics")
    parser.add_argument("--no-producers", action="store_true")
    parser.add_argument("--py-spy", metavar="FILE", help="record the broker with py-spy during the scrapes")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args()

    import pulsar

    from tests.kit.process import kill_all

    client = None
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as tmp:
        try:
            broker, _ = start_deployment(pathlib.Path(tmp))
            client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=120, io_threads=2,
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            held = load_topics(broker, client, args.topics, producers=not args.no_producers, workers=args.workers)
            url, pid = f"{broker.http_url}/metrics", broker.process.pid
            spy = None
            if args.py_spy:
                py_spy = shutil.which("py-spy") or str(pathlib.Path(sys.executable).with_name("py-spy"))
                spy = subprocess.Popen([py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200",
                                        "--output", args.py_spy, "--nonblocking"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(1.0)  # py-spy attaches; not a condition to wait on
            result = measure(url, pid, scrapes=args.scrapes, idle_s=args.idle_seconds)
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
                spy.wait(60)
            print(report(result, interval_s=args.interval_s, topics=args.topics))
            if spy is not None and pathlib.Path(args.py_spy).exists():
                print(py_spy_top(pathlib.Path(args.py_spy)))
            if args.json:
                pathlib.Path(args.json).write_text(json.dumps({"topics": args.topics, **result}, indent=1))
            print(f"({len(held)} producers held open while scraping)", file=sys.stderr)
        finally:
            if client is not None:
                client.close()
            kill_all()


if __name__ == "__main__":
    main()
