"""``magnetar demo`` (``make demo``): bring a local deployment up, run the main job, show the result.

Two jobs run against one region (ZooKeeper, three bookies, two brokers):

* storage: write a replicated ledger at E/Qw/Qa 3/2/2 over the bookie processes, read it back through a
  fresh client, check every byte;
* messaging: an unmodified Pulsar application (the official ``pulsar-client``) produces to a topic through
  one broker's ``pulsar://`` URL and consumes it through the other broker's ``http://`` lookup URL, and
  every message must arrive once, in order.

The deployment is left running, with the commands to look at it and to stop it.
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


def _pulsar_job(produce_url: str, consume_url: str, messages: int) -> dict:
    """A plain Pulsar application: what runs against Apache Pulsar runs here unchanged."""
    import pulsar

    topic = f"persistent://public/default/demo-{int(time.time())}"
    client = pulsar.Client(produce_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    reader_client = pulsar.Client(consume_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = reader_client.subscribe(topic, "demo-subscription", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(
            topic, batching_enabled=True, block_if_queue_full=True, max_pending_messages=10_000,
            batching_max_publish_delay_ms=5,
        )
        t0 = time.perf_counter()
        for i in range(messages):
            producer.send_async(f"message {i}".encode(), None, properties={"seq": str(i)})
        producer.flush()
        produce_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        received = []
        while len(received) < messages:
            msg = consumer.receive(timeout_millis=30_000)
            received.append(msg.data().decode())
            consumer.acknowledge(msg)
        consume_s = time.perf_counter() - t0
        producer.close()
        consumer.close()
    finally:
        client.close()
        reader_client.close()
    return {
        "topic": topic,
        "messages": messages,
        "produce_s": produce_s,
        "consume_s": consume_s,
        "in_order_once": received == [f"message {i}" for i in range(messages)],
    }


def run(data_dir: pathlib.Path, *, topology: Optional[pathlib.Path] = None, entries: int = 20_000, size: int = 1024) -> int:
    from clusters.supervisor import up

    data_dir = pathlib.Path(data_dir)
    topology = topology or DEFAULT_TOPOLOGY
    if _supervisor_alive(data_dir):
        console.print(f"[bold]Reusing the deployment already running in {data_dir}[/bold]")
    else:
        console.print(f"[bold]Starting {topology.name} in {data_dir}[/bold] (ZooKeeper, bookies, brokers)...")
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

    ok = result["identical"]
    brokers = region.get("brokers", [])
    if brokers:
        produce_url = brokers[0]["pulsar"]
        consume_url = brokers[-1]["http"]
        messages = 20_000
        console.print(
            f"\nA Pulsar application (pulsar-client) sends {messages:,} messages through {produce_url} "
            f"and consumes them through {consume_url}..."
        )
        pj = _pulsar_job(produce_url, consume_url, messages)
        table = Table(title=f"Topic {pj['topic']}")
        table.add_column("what")
        table.add_column("value", justify="right")
        table.add_row("produced (batched, 1 client process)", f"{messages / pj['produce_s']:,.0f} msg/s")
        table.add_row("consumed (Shared subscription)", f"{messages / pj['consume_s']:,.0f} msg/s")
        table.add_row("every message once, in order", "yes" if pj["in_order_once"] else "[red]NO[/red]")
        console.print(table)
        ok = ok and pj["in_order_once"]
        console.print("\nTry it yourself:")
        console.print(f"  magnetar produce {produce_url} my-topic -m hello -n 3")
        console.print(f"  magnetar consume {produce_url} my-topic -s my-sub -n 3")
        console.print(f"  magnetar admin topics stats {pj['topic']} --data-dir {data_dir}")

    console.print("\nThe deployment is still running:")
    console.print(f"  magnetar status --data-dir {data_dir}     # every process and endpoint")
    console.print(f"  cat {data_dir}/topology.json")
    console.print(f"  magnetar down --data-dir {data_dir}       # stop everything (or: make down)")
    return 0 if ok else 1
