"""Publish throughput and latency of one broker, through both clients: a matrix of ``magnetar perf produce``.

    .venv/bin/python bench/broker_perf.py                      # ZooKeeper + 3 bookies + 1 broker, started here
    .venv/bin/python bench/broker_perf.py --url pulsar://host:6650 --seconds 20
    .venv/bin/python bench/broker_perf.py --clients magnetar --processes 1,2 --sizes 100,1024,65536

Without ``--url`` it starts a local deployment with the test kit (a real ZooKeeper, ``--bookies`` bookie
processes, one ``magnetar broker`` process; E/Qw/Qa 3/2/2 as in ``clusters/standalone.toml``) in a temporary directory and stops it at the
end. Each cell runs ``magnetar perf produce`` on a fresh topic for ``--seconds`` at ``--rate`` (default: the
maximum; latencies at the maximum are mostly queueing behind ``--max-pending``, so give a rate to see the
latency of a loaded but unsaturated broker) and
records msg/s, MB/s and send-to-receipt latency; the table is printed at the end and, with ``--json``,
written for comparisons. Rows: ``pulsar`` = pulsar-client batching (what an application sees);
``magnetar`` = pre-built batches from the asyncio client (what the broker and bookies sustain).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _start_deployment(base: pathlib.Path, bookies: int):
    from tests.kit.bookies import start_bookies
    from tests.kit.brokers import start_brokers
    from tests.kit.zookeeper import start_zookeeper

    zk = start_zookeeper(base)
    zk_connect = zk.new_chroot("bench")
    bks = start_bookies(bookies, base, zk_connect)
    ensemble = min(3, bookies)
    (broker,) = start_brokers(1, base, zk_connect, managed_ledger_ensemble_size=ensemble,
                              managed_ledger_write_quorum=min(2, bookies), managed_ledger_ack_quorum=min(2, bookies))
    return broker.pulsar_url, [zk.process, *(b.process for b in bks), broker.process]


def _cell(url: str, client: str, size: int, processes: int, batching: bool, seconds: float, rate: float) -> dict:
    topic = f"persistent://public/default/bench-{uuid.uuid4().hex[:8]}"
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = [sys.executable, "-m", "magnetar", "perf", "produce", url, topic, "--client", client,
                "--size", str(size), "--processes", str(processes), "--duration", str(seconds),
                "--interval", str(max(1.0, seconds / 4)), "--rate", str(rate), "--json", out.name]
        if not batching:
            args.append("--no-batching")
        result = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120)
        sys.stderr.write(result.stdout)
        if result.returncode != 0:
            return {"client": client, "size_bytes": size, "processes": processes, "batching": batching,
                    "error": (result.stderr or result.stdout).strip().splitlines()[-1:]}
        return json.loads(pathlib.Path(out.name).read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing deployment (default: start one here)")
    parser.add_argument("--bookies", type=int, default=3)
    parser.add_argument("--clients", default="pulsar,magnetar")
    parser.add_argument("--sizes", default="1024")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--no-batching", action="store_true", help="also run every cell without batching")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=0.0, help="msg/s per cell (0 = as fast as possible)")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()

    started = []
    tmp = tempfile.TemporaryDirectory(prefix="magnetar-bench-")
    try:
        url = args.url
        if url is None:
            url, started = _start_deployment(pathlib.Path(tmp.name), args.bookies)
            print(f"deployment: {url} ({args.bookies} bookies) in {tmp.name}", file=sys.stderr)
        rows = []
        for client in args.clients.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                for processes in (int(p) for p in args.processes.split(",")):
                    for batching in ([True, False] if args.no_batching else [True]):
                        rows.append(_cell(url, client, size, processes, batching, args.seconds, args.rate))
    finally:
        for proc in reversed(started):
            proc.cleanup()
        tmp.cleanup()

    print(f"{'client':9} {'size':>7} {'procs':>5} {'batch':>5} {'msg/s':>10} {'MB/s':>8} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['client']:9} {r['size_bytes']:>7} {r['processes']:>5} {str(r['batching']):>5}  error: {r['error']}")
            continue
        lat = r["latency_ms"]
        print(f"{r['client']:9} {r['size_bytes']:>7} {r['processes']:>5} {'on' if r['batching'] else 'off':>5} "
              f"{r['msg_per_s']:>10,.0f} {r['mb_per_s']:>8.2f} {lat.get('p50', 0):>8.2f} {lat.get('p99', 0):>8.2f} "
              f"{lat.get('p99.9', 0):>9.2f} {lat.get('max', 0):>8.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
