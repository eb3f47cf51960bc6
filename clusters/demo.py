"""``magnetar demo`` (``make demo``): bring a local deployment up, run the main job, show the result.

At this stage of Magnetar the main job is the storage layer's: write a replicated ledger at E/Qw/Qa 3/2/2
over three bookie processes, read it back through a fresh client (which recovers nothing, since the writer
closed it), check every byte, and print what happened with the figures. The deployment is left running,
with the commands to look at it and to stop it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import time
from typing import Optional

from rich.console import Console
from rich.table import Table

REPO_CLUSTERS = pathlib.Path(__file__).resolve().parent
DEFAULT_TOPOLOGY = REPO_CLUSTERS / "standalone.toml"

console = Console()


def _supervisor_alive(data_dir: pathlib.Path) -> bool:
    topo = data_dir / "topology.json"
    if not topo.exists():
        return False
    try:
        pid = int(json.loads(topo.read_text()).get("supervisor_pid", 0))
        os.kill(pid, 0)
        return pid > 0
    except (ValueError, OSError, json.JSONDecodeError):
        return False


async def _job(zk_connect: str, entries: int, size: int) -> dict:
    from hdrh.histogram import HdrHistogram

    from bookie.client import LedgerClient
    from config_store import KazooMetadataStore, RegionStore

    store = KazooMetadataStore(zk_connect)
    await store.start()
    try:
        async with LedgerClient(RegionStore(store)) as client:
            deadline = time.monotonic() + 30
            while len(client.writable_bookies()) < 3:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {client.writable_bookies()} bookies are writable")
                await asyncio.sleep(0.1)
            handle = await client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
            payloads = [os.urandom(size) for _ in range(entries)]
            hist = HdrHistogram(1, 60_000_000, 3)
            window = asyncio.Semaphore(2000)

            async def add(p: bytes) -> int:
                async with window:
                    t0 = time.perf_counter()
                    entry_id = await handle.add(p)
                    hist.record_value(max(1, int((time.perf_counter() - t0) * 1e6)))
                    return entry_id

            t0 = time.perf_counter()
            await asyncio.gather(*(add(p) for p in payloads))
            write_s = time.perf_counter() - t0
            await handle.close()
            ensemble = handle.metadata.ensembles[0][1]

        # A second, independent client reads it back.
        async with LedgerClient(RegionStore(store)) as reader_client:
            reader = await reader_client.open_ledger(handle.ledger_id)
            t0 = time.perf_counter()
            got = [e.payload async for e in reader.read_all()]
            read_s = time.perf_counter() - t0
        return {
            "ledger_id": handle.ledger_id,
            "ensemble": ensemble,
            "entries": entries,
            "size": size,
            "write_s": write_s,
            "read_s": read_s,
            "identical": got == payloads,
            "last_entry_id": reader.last_add_confirmed,
            "p50_ms": hist.get_value_at_percentile(50) / 1000,
            "p99_ms": hist.get_value_at_percentile(99) / 1000,
        }
    finally:
        await store.close()


def run(data_dir: pathlib.Path, *, topology: Optional[pathlib.Path] = None, entries: int = 20_000, size: int = 1024) -> int:
    from clusters.supervisor import up

    data_dir = pathlib.Path(data_dir)
    topology = topology or DEFAULT_TOPOLOGY
    if _supervisor_alive(data_dir):
        console.print(f"[bold]Reusing the deployment already running in {data_dir}[/bold]")
    else:
        console.print(f"[bold]Starting {topology.name} in {data_dir}[/bold] (ZooKeeper + bookies)...")
        code = up(topology, data_dir, detach=True)
        if code != 0:
            return code
    topo = json.loads((data_dir / "topology.json").read_text())
    region_name, region = next(iter(topo["regions"].items()))
    zk_connect = region["zookeeper"]["connect"]

    console.print(f"Writing {entries:,} entries of {size} B to a new ledger at E/Qw/Qa 3/2/2 (fsync on)...")
    result = asyncio.run(_job(zk_connect, entries, size))

    table = Table(title=f"Ledger {result['ledger_id']} in region {region_name}")
    table.add_column("what")
    table.add_column("value", justify="right")
    mb = result["entries"] * result["size"] / 1e6
    table.add_row("ensemble", ", ".join(result["ensemble"]))
    table.add_row("entries written / acknowledged", f"{result['entries']:,}")
    table.add_row("write throughput", f"{result['entries'] / result['write_s']:,.0f} entries/s, {mb / result['write_s']:.1f} MB/s")
    table.add_row("add latency p50 / p99 (2,000 in flight)", f"{result['p50_ms']:.1f} ms / {result['p99_ms']:.1f} ms")
    table.add_row("read back (fresh client)", f"{result['entries'] / result['read_s']:,.0f} entries/s")
    table.add_row("last entry id", str(result["last_entry_id"]))
    table.add_row("byte-identical", "yes" if result["identical"] else "[red]NO[/red]")
    console.print(table)

    console.print("\nThe deployment is still running:")
    console.print(f"  magnetar status --data-dir {data_dir}     # every process and endpoint")
    console.print(f"  cat {data_dir}/topology.json")
    console.print(f"  magnetar down --data-dir {data_dir}       # stop everything (or: make down)")
    return 0 if result["identical"] else 1
