"""Ledger add throughput and latency over real bookie processes (E/Qw/Qa 3/2/2, fsync on).

Brings up ``clusters/standalone.toml`` (one ZooKeeper, three bookies) with ``magnetar up --detach`` in a
temporary data directory (or uses a running one with ``--data-dir``), then for each entry size:

* peak: pipelined adds with a bounded window of outstanding bytes for ``--seconds``;
* half rate: adds paced at half the measured peak, to read latency when not saturated.

Prints one line per entry size and phase, e.g.::

    64 KiB peak: 1650 entries/s, 103.1 MB/s, p50 4.1 ms, p99 9.8 ms, p99.9 14.0 ms
    64 KiB @50%: 825 entries/s, 51.6 MB/s, p50 2.0 ms, p99 6.1 ms, p99.9 9.0 ms

Latency is from ``add_nowait`` to the acknowledgement (Qa bookies fsynced, every earlier entry acked),
recorded in an HdrHistogram in microseconds. Each line also gives this process's CPU time per acknowledged
entry (the ledger client's cost: framing, the add stream's writes and reads, settling).

``--transports tcp,grpc --rounds 3`` runs every phase with each add transport in turn (the bookies' add
port, or gRPC's AddEntries stream: ``LedgerClientConfig.add_transport``), alternating, against the same
bookies, so the two are compared under the same machine load.

Usage: ``.venv/bin/python bench/ledger_add.py [--sizes 1024,65536] [--seconds 10] [--data-dir D]
[--rate 10000 --transports tcp,grpc --rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from hdrh.histogram import HdrHistogram

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bookie.client import LedgerClient, LedgerClientConfig  # noqa: E402
from config_store import KazooMetadataStore, RegionStore  # noqa: E402


def _fmt_size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


async def _run_phase(client: LedgerClient, size: int, seconds: float, rate: float | None, window_bytes: int):
    handle = await client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    payload = os.urandom(size)
    hist = HdrHistogram(1, 60_000_000, 3)
    window_max = max(1, window_bytes // size)
    room = asyncio.Event()
    room.set()
    outstanding = 0
    acked = 0
    errors: list[BaseException] = []
    record = hist.record_value
    clock = time.perf_counter

    def on_done(fut: asyncio.Future, t0: float) -> None:
        nonlocal acked, outstanding
        outstanding -= 1
        if outstanding < window_max:
            room.set()
        if fut.exception() is not None:
            errors.append(fut.exception())
            return
        acked += 1
        record(max(1, int((clock() - t0) * 1e6)))

    start = clock()
    deadline = start + seconds
    sent = 0
    while not errors:
        now = clock()
        if now >= deadline:
            break
        # Issue everything due now in one go (paced in 1 ms ticks), bounded by the window.
        due = int((now - start) * rate) if rate is not None else sent + 64
        burst = min(due - sent, window_max - outstanding)
        for _ in range(burst):
            t0 = clock()
            handle.add_nowait(payload).add_done_callback(lambda f, t0=t0: on_done(f, t0))
        sent += max(0, burst)
        outstanding += max(0, burst)
        if outstanding >= window_max:
            room.clear()
            await room.wait()
        elif rate is not None:
            await asyncio.sleep(0.001)
        else:
            await asyncio.sleep(0)
    await handle.close()
    elapsed = clock() - start
    if errors:
        raise errors[0]
    return acked / elapsed, acked * size / elapsed / 1e6, hist


def _line(label: str, rate: float, mbps: float, hist: HdrHistogram, cpu_us: float) -> str:
    p = lambda q: hist.get_value_at_percentile(q) / 1000.0  # noqa: E731
    return (f"{label}: {rate:,.0f} entries/s, {mbps:.1f} MB/s, p50 {p(50):.1f} ms, p99 {p(99):.1f} ms, "
            f"p99.9 {p(99.9):.1f} ms, client CPU {cpu_us:.0f} µs/entry")


async def _measured(client: LedgerClient, size: int, seconds: float, rate: float | None, window_bytes: int):
    cpu = time.process_time()
    rate, mbps, hist = await _run_phase(client, size, seconds, rate, window_bytes)
    entries = max(1, hist.get_total_count())
    return rate, mbps, hist, (time.process_time() - cpu) * 1e6 / entries


async def bench(zk_connect: str, sizes: list[int], seconds: float, window_bytes: int, fixed_rate: float | None = None,
                inflight: int = 2, transports: tuple[str, ...] = ("tcp",), rounds: int = 1) -> list[str]:
    store = KazooMetadataStore(zk_connect)
    await store.start()
    lines = []
    try:
        for round_no in range(1, rounds + 1):
            for transport in transports:
                config = LedgerClientConfig(max_inflight_requests=inflight, add_transport=transport)
                tag = f" [{transport}]" + (f" round {round_no}" if rounds > 1 else "")
                async with LedgerClient(RegionStore(store), config=config) as client:
                    for size in sizes:
                        if fixed_rate:
                            rate, mbps, hist, cpu = await _measured(client, size, seconds, fixed_rate, window_bytes)
                            lines.append(_line(f"{_fmt_size(size)} @{fixed_rate:.0f}/s{tag}", rate, mbps, hist, cpu))
                            print(lines[-1], flush=True)
                            continue
                        rate, mbps, hist, cpu = await _measured(client, size, seconds, None, window_bytes)
                        lines.append(_line(f"{_fmt_size(size)} peak{tag}", rate, mbps, hist, cpu))
                        print(lines[-1], flush=True)
                        half = await _measured(client, size, seconds, rate / 2, window_bytes)
                        lines.append(_line(f"{_fmt_size(size)} @50%{tag}", *half))
                        print(lines[-1], flush=True)
    finally:
        await store.close()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024,65536", help="entry sizes in bytes, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each phase")
    parser.add_argument("--window-mb", type=float, default=16.0, help="outstanding bytes at peak")
    parser.add_argument("--data-dir", help="use the deployment already running in this data dir")
    parser.add_argument("--rate", type=float, help="only one phase, paced at this many entries/s")
    parser.add_argument("--inflight", type=int, default=2, help="AddRequests in flight per bookie")
    parser.add_argument("--topology", default=str(REPO / "clusters" / "standalone.toml"))
    parser.add_argument("--transports", default="tcp", help="add transports to compare, in turn: tcp, grpc")
    parser.add_argument("--rounds", type=int, default=1, help="times to run every transport, alternating")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    magnetar = [sys.executable, "-m", "magnetar"]
    own = args.data_dir is None
    data_dir = pathlib.Path(args.data_dir or tempfile.mkdtemp(prefix="magnetar-bench-"))
    if own:
        subprocess.run(magnetar + ["up", args.topology, "--data-dir", str(data_dir), "--detach"], check=True)
    try:
        topology = json.loads((data_dir / "topology.json").read_text())
        region = next(iter(topology["regions"].values()))
        zk_connect = region["zookeeper"]["connect"]
        asyncio.run(bench(zk_connect, sizes, args.seconds, int(args.window_mb * 1024 * 1024), args.rate, args.inflight,
                          tuple(args.transports.split(",")), args.rounds))
    finally:
        if own:
            subprocess.run(magnetar + ["down", "--data-dir", str(data_dir)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
