"""Re-replication speed: how fast auto-recovery restores Qw copies after a bookie is lost, and what the
foreground writers see meanwhile (issue 19's benchmark).

Brings up a temporary topology with ``magnetar up --detach``: one ZooKeeper, four bookies (fsync on) and one
``magnetar autorecovery`` process (grace 2 s, scans every second, ``--throttle-mb`` bytes/s). Then:

1. writes ``--entries`` entries of ``--size`` bytes over ``--ledgers`` ledgers at E/Qw/Qa 3/2/2 and closes them;
2. measures the foreground peak (pipelined adds to one ledger for ``--seconds``), then the add latency at half
   that rate (baseline);
3. starts a writer at half the peak on a new ledger, SIGKILLs the one bookie outside that ledger's ensemble
   and deletes its data directory (so the foreground sees no ensemble change, only the copying load);
4. waits until no ledger names the lost bookie and no under-replication record is left, then stops the
   writer.

Prints the re-replication rate (MB/s and entries/s of copied payload, from the auditor's first record to the
last repair, and from the kill), and the foreground p50/p99 at half rate before and during the repair::

    loaded: 50,000 entries of 1 KiB over 100 ledgers in 21.3 s
    foreground peak: 3,900 entries/s; at 50%: p50 4.1 ms, p99 12.0 ms
    lost bookie-2 at t=0: first record at 2.3 s, all repaired at 9.8 s (grace 2.0 s)
    re-replicated 37,410 entries, 38.9 MB in 7.5 s: 5.2 MB/s, 4,990 entries/s
    foreground at 50% during the repair: p50 5.0 ms, p99 31.0 ms (1,950 entries/s)

Usage: ``.venv/bin/python bench/autorecovery.py [--entries 50000] [--size 1024] [--ledgers 100]
[--throttle-mb 50] [--parallel 4] [--seconds 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from hdrh.histogram import HdrHistogram

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bookie.autorecovery import UnderReplicationStore  # noqa: E402
from bookie.client import LedgerClient, LedgerClientConfig  # noqa: E402
from config_store import KazooMetadataStore, RegionStore  # noqa: E402

TOPOLOGY = """
name = "bench-autorecovery"
[supervisor]
startup_timeout_s = 90.0
[[regions]]
name = "r"
[regions.zookeeper]
port = 0
[regions.bookies]
count = 4
journal_sync = true
disk_free_min_bytes = 0
disk_free_resume_bytes = 0
[regions.autorecovery]
count = 1
lost_bookie_grace_ms = 2000
audit_interval_ms = 1000
worker_interval_ms = 200
throttle_bytes_per_s = {throttle}
parallel_ledgers = {parallel}
"""


async def load(client: LedgerClient, entries: int, size: int, ledgers: int) -> None:
    per = max(1, entries // ledgers)
    payload = os.urandom(size)
    for i in range(ledgers):
        handle = await client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        n = per if i < ledgers - 1 else entries - per * (ledgers - 1)
        for start in range(0, n, 2000):
            await asyncio.gather(*(handle.add_nowait(payload) for _ in range(min(2000, n - start))))
        await handle.close()


async def paced(handle, size: int, rate: float | None, stop: asyncio.Event, seconds: float | None = None):
    """Adds to ``handle`` at ``rate`` entries/s (None: as fast as a 2,000-entry window allows) until ``stop``
    is set or ``seconds`` pass; returns (acked per second, latency histogram in µs)."""
    payload = os.urandom(size)
    hist = HdrHistogram(1, 60_000_000, 3)
    clock = time.perf_counter
    start = clock()
    sent = acked = 0
    outstanding = 0
    window = 2000
    room = asyncio.Event()
    errors: list[BaseException] = []

    def done(fut, t0: float) -> None:
        nonlocal acked, outstanding
        outstanding -= 1
        room.set()
        if fut.exception() is not None:
            errors.append(fut.exception())
            return
        acked += 1
        hist.record_value(max(1, int((clock() - t0) * 1e6)))

    while not stop.is_set() and not errors and (seconds is None or clock() - start < seconds):
        due = int((clock() - start) * rate) if rate else sent + 64
        for _ in range(max(0, min(due - sent, window - outstanding))):
            t0 = clock()
            handle.add_nowait(payload).add_done_callback(lambda f, t0=t0: done(f, t0))
            sent += 1
            outstanding += 1
        if outstanding >= window:
            room.clear()
            await room.wait()
        else:
            await asyncio.sleep(0.001 if rate else 0)
    while outstanding and not errors:
        room.clear()
        await room.wait()
    if errors:
        raise errors[0]
    return acked / (clock() - start), hist


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def ms(hist: HdrHistogram, q: float) -> float:
    return hist.get_value_at_percentile(q) / 1000.0


async def bench(topology: dict, args) -> None:
    region = next(iter(topology["regions"].values()))
    ar_url = region["autorecovery"][0]["metrics"]
    store = KazooMetadataStore(region["zookeeper"]["connect"])
    await store.start()
    rs, ur = RegionStore(store), UnderReplicationStore(store)
    try:
        async with LedgerClient(rs, config=LedgerClientConfig(max_inflight_requests=2)) as client:
            while len(client.writable_bookies()) < 4:
                await asyncio.sleep(0.1)
            t = time.monotonic()
            await load(client, args.entries, args.size, args.ledgers)
            print(f"loaded: {args.entries:,} entries of {args.size} B over {args.ledgers} ledgers in "
                  f"{time.monotonic() - t:.1f} s", flush=True)
            never = asyncio.Event()
            handle = await client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
            peak, _ = await paced(handle, args.size, None, never, args.seconds)
            half, base = await paced(handle, args.size, peak / 2, never, args.seconds)
            print(f"foreground peak: {peak:,.0f} entries/s; at 50% ({half:,.0f}/s): p50 {ms(base, 50):.1f} ms, "
                  f"p99 {ms(base, 99):.1f} ms", flush=True)

            ensemble = handle.metadata.ensembles[-1][1]
            victim = next(b for b in region["bookies"] if b["bookie_id"] not in ensemble)
            stop = asyncio.Event()
            writer = asyncio.create_task(paced(handle, args.size, peak / 2, stop))
            await asyncio.sleep(1.0)
            copied0 = (metric(ar_url, "magnetar_autorecovery_entries_copied_total"),
                       metric(ar_url, "magnetar_autorecovery_bytes_copied_total"))
            os.kill(victim["pid"], signal.SIGKILL)
            killed = time.monotonic()
            shutil.rmtree(victim["data_dir"], ignore_errors=True)
            first_record = last_change = None
            ledger_ids = [lid for lid in await rs.list_ledgers() if lid != handle.ledger_id]
            while True:
                records = await ur.list_ledgers()
                if records and first_record is None:
                    first_record = time.monotonic()
                if first_record is not None and not records:
                    naming = 0
                    for lid in ledger_ids:
                        md = (await rs.read_ledger(lid)).value
                        naming += any(victim["bookie_id"] in b for _f, b in md.ensembles)
                    if not naming:
                        done = time.monotonic()
                        break
                if time.monotonic() - killed > args.timeout_s:
                    raise SystemExit(f"not repaired within {args.timeout_s:g} s ({len(records)} records left)")
                await asyncio.sleep(0.2)
            stop.set()
            rate_during, during = await writer
            await handle.close()
            entries = metric(ar_url, "magnetar_autorecovery_entries_copied_total") - copied0[0]
            nbytes = metric(ar_url, "magnetar_autorecovery_bytes_copied_total") - copied0[1]
            copy_s = done - first_record
            print(f"lost {victim['bookie_id']} at t=0: first record at {first_record - killed:.1f} s, all repaired at "
                  f"{done - killed:.1f} s (grace 2.0 s)", flush=True)
            print(f"re-replicated {entries:,.0f} entries, {nbytes / 1e6:.1f} MB in {copy_s:.1f} s: "
                  f"{nbytes / 1e6 / copy_s:.1f} MB/s, {entries / copy_s:,.0f} entries/s "
                  f"(throttle {args.throttle_mb:g} MB/s, {args.parallel} ledgers at once)", flush=True)
            print(f"foreground at 50% during the repair: p50 {ms(during, 50):.1f} ms, p99 {ms(during, 99):.1f} ms "
                  f"({rate_during:,.0f} entries/s)", flush=True)
    finally:
        await store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024, help="entry size in bytes")
    parser.add_argument("--ledgers", type=int, default=100)
    parser.add_argument("--throttle-mb", type=float, default=50.0, help="auto-recovery bytes/s per worker, MB")
    parser.add_argument("--parallel", type=int, default=4, help="ledgers the worker repairs at once")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the peak and baseline phases")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    args = parser.parse_args()
    magnetar = [sys.executable, "-m", "magnetar"]
    data_dir = pathlib.Path(tempfile.mkdtemp(prefix="magnetar-bench-ar-"))
    topo = data_dir / "topology.toml"
    topo.write_text(TOPOLOGY.format(throttle=int(args.throttle_mb * 1e6), parallel=args.parallel))
    subprocess.run(magnetar + ["up", str(topo), "--data-dir", str(data_dir / "d"), "--detach"], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        asyncio.run(bench(json.loads((data_dir / "d" / "topology.json").read_text()), args))
    finally:
        subprocess.run(magnetar + ["down", "--data-dir", str(data_dir / "d")], check=False, stdout=subprocess.DEVNULL)
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
