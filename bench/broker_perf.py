"""Publish throughput and latency of one broker, through both clients: a matrix of ``magnetar perf produce``.

    .venv/bin/python bench/broker_perf.py                      # ZooKeeper + 3 bookies + 1 broker, started here
    .venv/bin/python bench/broker_perf.py --url pulsar://host:6650 --seconds 20
    .venv/bin/python bench/broker_perf.py --clients magnetar --processes 1,2 --sizes 100,1024,65536
    .venv/bin/python bench/broker_perf.py --consume --processes 1 --seconds 15   # published and consumed
    .venv/bin/python bench/broker_perf.py --clients pulsar --processes 1 --rate 10000 --stages --quorum 3/3/2

Without ``--url`` it starts a local deployment with the test kit (a real ZooKeeper, ``--bookies`` bookie
processes, one ``magnetar broker`` process; E/Qw/Qa 3/2/2 as in ``clusters/standalone.toml``) in a temporary directory and stops it at the
end. Each cell runs ``magnetar perf produce`` on a fresh topic for ``--seconds`` at ``--rate`` (default: the
maximum; latencies at the maximum are mostly queueing behind ``--max-pending``, so give a rate to see the
latency of a loaded but unsaturated broker) and
records msg/s, MB/s and send-to-receipt latency; the table is printed at the end and, with ``--json``,
written for comparisons. Rows: ``pulsar`` = pulsar-client batching (what an application sees);
``magnetar`` = pre-built batches from the asyncio client (what the broker and bookies sustain).

With ``--consume`` every cell also runs ``magnetar perf consume`` (same client, ``--receiver-queue-size``
20,000, from the earliest message of the fresh topic) for the publishing time plus ``--drain-seconds``, and
reports how many of the published messages it received and at what rate while publishing went on: "all"
means the consumer kept up, end to end.
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


def _start_deployment(base: pathlib.Path, bookies: int, quorum: tuple[int, int, int]):
    from tests.kit.bookies import start_bookies
    from tests.kit.brokers import start_brokers
    from tests.kit.zookeeper import start_zookeeper

    zk = start_zookeeper(base)
    zk_connect = zk.new_chroot("bench")
    bks = start_bookies(bookies, base, zk_connect)
    e, qw, qa = (min(q, bookies) for q in quorum)
    (broker,) = start_brokers(1, base, zk_connect, managed_ledger_ensemble_size=e,
                              managed_ledger_write_quorum=qw, managed_ledger_ack_quorum=qa)
    return (broker.pulsar_url, [zk.process, *(b.process for b in bks), broker.process],
            [broker.http_url, *(b.http_url for b in bks)])


def _perf(mode: str, url: str, topic: str, client: str, extra: list[str], seconds: float, out: str):
    args = [sys.executable, "-m", "magnetar", "perf", mode, url, topic, "--client", client,
            "--duration", str(seconds), "--interval", str(max(1.0, seconds / 4)), "--json", out, *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, out: str, seconds: float, label: dict) -> dict:
    stdout, stderr = proc.communicate(timeout=seconds + 120)
    sys.stderr.write(stdout)
    if proc.returncode != 0:
        return {**label, "error": (stderr or stdout).strip().splitlines()[-1:]}
    return json.loads(pathlib.Path(out).read_text())


def _cell(url: str, client: str, size: int, processes: int, batching: bool, seconds: float, rate: float,
          consume: bool, drain_seconds: float, stages: list[str]) -> dict:
    topic = f"persistent://public/default/bench-{uuid.uuid4().hex[:8]}"
    label = {"client": client, "size_bytes": size, "processes": processes, "batching": batching}
    with tempfile.TemporaryDirectory() as tmp:
        consumer = None
        if consume:  # from the earliest message: it may subscribe before or after the first publish
            consumer = _perf("consume", url, topic, client, ["--receiver-queue-size", "20000",
                                                              "--initial-position", "earliest"],
                             seconds + drain_seconds, f"{tmp}/consume.json")
        produce = ["--size", str(size), "--processes", str(processes), "--rate", str(rate),
                   *(arg for url_ in stages for arg in ("--stages-from", url_))]
        if not batching:
            produce.append("--no-batching")
        row = _finish(_perf("produce", url, topic, client, produce, seconds, f"{tmp}/produce.json"),
                      f"{tmp}/produce.json", seconds, label)
        if consumer is not None:
            got = _finish(consumer, f"{tmp}/consume.json", seconds + drain_seconds, label)
            row["consumed"] = got.get("messages", 0)
            row["consume_msg_per_s"] = got.get("msg_per_s", 0.0)
            row["consume_error"] = got.get("error")
        return row


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
    parser.add_argument("--consume", action="store_true", help="consume each cell's topic as it is published")
    parser.add_argument("--drain-seconds", type=float, default=5.0,
                        help="with --consume: how long the consumer may go on after publishing stops")
    parser.add_argument("--quorum", default="3/2/2", help="E/Qw/Qa of the deployment started here (3/3/2: "
                        "every entry on three bookies, acknowledged by two)")
    parser.add_argument("--stages", action="store_true",
                        help="print where each cell's publish time went (the deployment started here)")
    parser.add_argument("--stages-from", action="append", default=[],
                        help="with --url: a broker's or bookie's HTTP address to take the stages from (repeat)")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()
    try:
        quorum = tuple(int(q) for q in args.quorum.split("/"))
        assert len(quorum) == 3 and quorum[2] <= quorum[1] <= quorum[0]
    except (ValueError, AssertionError):
        parser.error("--quorum is E/Qw/Qa with Qa <= Qw <= E")

    started = []
    tmp = tempfile.TemporaryDirectory(prefix="magnetar-bench-")
    try:
        url = args.url
        stages = list(args.stages_from)
        if url is None:
            url, started, http_urls = _start_deployment(pathlib.Path(tmp.name), args.bookies, quorum)
            stages = http_urls if args.stages else []
            print(f"deployment: {url} ({args.bookies} bookies, E/Qw/Qa {args.quorum}) in {tmp.name}", file=sys.stderr)
        rows = []
        for client in args.clients.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                for processes in (int(p) for p in args.processes.split(",")):
                    for batching in ([True, False] if args.no_batching else [True]):
                        rows.append(_cell(url, client, size, processes, batching, args.seconds, args.rate,
                                          args.consume, args.drain_seconds, stages))
    finally:
        for proc in reversed(started):
            proc.cleanup()
        tmp.cleanup()

    print(f"{'client':9} {'size':>7} {'procs':>5} {'batch':>5} {'msg/s':>10} {'MB/s':>8} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8}" + (f" {'consumed':>16} {'consume/s':>10}" if args.consume else ""))
    for r in rows:
        if "error" in r:
            print(f"{r['client']:9} {r['size_bytes']:>7} {r['processes']:>5} {str(r['batching']):>5}  error: {r['error']}")
            continue
        lat = r["latency_ms"]
        print(f"{r['client']:9} {r['size_bytes']:>7} {r['processes']:>5} {'on' if r['batching'] else 'off':>5} "
              f"{r['msg_per_s']:>10,.0f} {r['mb_per_s']:>8.2f} {lat.get('p50', 0):>8.2f} {lat.get('p99', 0):>8.2f} "
              f"{lat.get('p99.9', 0):>9.2f} {lat.get('max', 0):>8.2f}" + (_consumed(r) if args.consume else ""))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    return 1 if any("error" in r for r in rows) else 0


def _consumed(row: dict) -> str:
    if row.get("consume_error"):
        return f"  consumer error: {row['consume_error']}"
    got, sent = row.get("consumed", 0), row.get("messages", 0)
    share = "all" if got == sent else f"{got:,}"
    return f" {share:>16} {row.get('consume_msg_per_s', 0):>10,.0f}"


if __name__ == "__main__":
    sys.exit(main())
