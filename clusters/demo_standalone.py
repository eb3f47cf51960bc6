"""The single-region demo jobs (``magnetar demo --topology clusters/standalone.toml``): a replicated ledger
written at E/Qw/Qa 3/2/2 over the bookie processes and read back by a fresh client, then a plain
pulsar-client application producing through one broker's ``pulsar://`` URL and consuming through the
other's ``http://`` lookup URL, or, when the region has a proxy, producing and consuming through the proxy
(``pulsar+ssl://``, a token) after the refusals the proxy makes (``clusters.demo_access``). ``clusters/demo.py``
runs them when the topology has one region.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
from typing import Any, Optional

from rich.table import Table

from .demo import _new_histogram, console
from .demo_access import RegionAccess, access_of, grant_app, pulsar_client, refusals, wait_granted
from .security import APP_ROLE

async def _ledger_job(zk_connect: str, entries: int, size: int) -> dict:
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
            hist = _new_histogram()
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
            "ledger_id": handle.ledger_id, "ensemble": ensemble, "entries": entries, "size": size,
            "write_s": write_s, "read_s": read_s, "identical": got == payloads,
            "last_entry_id": reader.last_add_confirmed,
            "p50_ms": hist.get_value_at_percentile(50) / 1000, "p99_ms": hist.get_value_at_percentile(99) / 1000,
        }
    finally:
        await store.close()


def _pulsar_job(produce: RegionAccess, consume: RegionAccess, topic: str, messages: int,
                client_log: Optional[pathlib.Path]) -> dict:
    """A plain Pulsar application: what runs against Apache Pulsar runs here unchanged."""
    import pulsar

    client = pulsar_client(produce, client_log)
    reader_client = pulsar_client(consume, client_log)
    try:
        consumer = reader_client.subscribe(topic, "demo-subscription", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True,
                                          max_pending_messages=10_000, batching_max_publish_delay_ms=5)
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
    return {"topic": topic, "messages": messages, "produce_s": produce_s, "consume_s": consume_s,
            "in_order_once": received == [f"message {i}" for i in range(messages)]}


def single_region(data_dir: pathlib.Path, topo: dict[str, Any], entries: int, size: int,
                   client_log: pathlib.Path) -> bool:
    region_name, region = next(iter(topo["regions"].items()))
    console.print(f"Writing {entries:,} entries of {size} B to a new ledger at E/Qw/Qa 3/2/2 (fsync on)...")
    result = asyncio.run(_ledger_job(region["zookeeper"]["connect"], entries, size))
    table = Table(title=f"Ledger {result['ledger_id']} in region {region_name}")
    table.add_column("what")
    table.add_column("value", justify="right")
    mb = result["entries"] * result["size"] / 1e6
    table.add_row("ensemble", ", ".join(result["ensemble"]))
    table.add_row("entries written / acknowledged", f"{result['entries']:,}")
    table.add_row("write throughput", f"{result['entries'] / result['write_s']:,.0f} entries/s, "
                                      f"{mb / result['write_s']:.1f} MB/s")
    table.add_row("add latency p50 / p99 (2,000 in flight)", f"{result['p50_ms']:.1f} ms / {result['p99_ms']:.1f} ms")
    table.add_row("read back (fresh client)", f"{result['entries'] / result['read_s']:,.0f} entries/s")
    table.add_row("last entry id", str(result["last_entry_id"]))
    table.add_row("byte-identical", "yes" if result["identical"] else "[red]NO[/red]")
    console.print(table)
    ok = result["identical"]
    brokers = region.get("brokers", [])
    if brokers:
        produce = access_of(topo, region_name)
        consume = produce if produce.secured else RegionAccess(region_name, brokers[-1]["http"], brokers[-1]["http"])
        topic, messages = f"persistent://public/default/demo-{int(time.time())}", 20_000
        if produce.secured:
            ok = _secured(produce, topic, client_log) and ok
        console.print(f"\nA Pulsar application (pulsar-client) sends {messages:,} messages through "
                      f"{produce.service_url} and consumes them through {consume.service_url}...")
        pj = _pulsar_job(produce, consume, topic, messages, client_log)
        table = Table(title=f"Topic {pj['topic']}")
        table.add_column("what")
        table.add_column("value", justify="right")
        table.add_row("produced (batched, 1 client process)", f"{messages / pj['produce_s']:,.0f} msg/s")
        table.add_row("consumed (Shared subscription)", f"{messages / pj['consume_s']:,.0f} msg/s")
        table.add_row("every message once, in order", "yes" if pj["in_order_once"] else "[red]NO[/red]")
        console.print(table)
        ok = ok and pj["in_order_once"]
        if not produce.secured:
            console.print("\nTry it yourself:")
            console.print(f"  magnetar produce {produce.service_url} my-topic -m hello -n 3")
            console.print(f"  magnetar consume {produce.service_url} my-topic -s my-sub -n 3")
            console.print(f"  magnetar admin topics stats {pj['topic']} --data-dir {data_dir}")
    return ok


def _secured(access: RegionAccess, topic: str, client_log: Optional[pathlib.Path]) -> bool:
    """The app role is granted ``topic``'s namespace; the proxy's refusals shown. True when all passed."""
    namespace = topic.split("://", 1)[1].rsplit("/", 1)[0]
    grant_app(access.admin(), namespace)
    wait_granted(access, topic, client_log)
    checks = refusals([access], namespace, client_log)
    table = Table(title=f"At {access.service_url}: {APP_ROLE} granted produce and consume on {namespace}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail")
    for c in checks:
        table.add_row(c.name, "[green]pass[/green]" if c.ok else "[red]FAIL[/red]", c.detail)
    console.print(table)
    return all(c.ok for c in checks)
