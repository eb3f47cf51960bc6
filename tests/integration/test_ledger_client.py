"""The ledger client against real bookie processes and a real ZooKeeper.

Covers the storage issue's guarantees: striping and quorum acks, an ensemble change when a bookie is
SIGKILLed mid-write (nothing acknowledged lost), recovery after a writer crash (fencing, a well-defined end,
identical readers), and a bookie whose ZooKeeper session expires coming back to the client's view.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

from bookie.client import LedgerClient, LedgerClientConfig
from bookie.errors import LedgerFencedError
from config_store import KazooMetadataStore, LedgerState, RegionStore
from tests.kit.bookies import start_bookies
from tests.kit.wait import wait_for_async

FAST = LedgerClientConfig(add_timeout_s=3.0, read_timeout_s=3.0)


class Region:
    """A ledger client plus its own ZooKeeper session (each test may open several)."""

    def __init__(self, zk_connect: str, config: LedgerClientConfig = FAST) -> None:
        self.store = KazooMetadataStore(zk_connect, session_timeout_ms=10_000)
        self.region = RegionStore(self.store)
        self.client = LedgerClient(self.region, config=config)

    async def __aenter__(self) -> "Region":
        await self.store.start()
        await self.client.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.close()
        await self.store.close()


def payload(i: int, size: int = 100) -> bytes:
    head = f"entry-{i:08d}-".encode()
    return head + bytes((i + k) % 251 for k in range(size - len(head)))


async def wait_writable(r: Region, n: int) -> None:
    await wait_for_async(lambda: len(r.client.writable_bookies()) >= n, timeout_s=30, what=f"{n} writable bookies")


async def test_write_close_read_identical(tmp_path, zk_connect) -> None:
    start_bookies(3, tmp_path, zk_connect)
    async with Region(zk_connect) as r:
        await wait_writable(r, 3)
        handle = await r.client.create_ledger()
        ids = await asyncio.gather(*(handle.add_nowait(payload(i)) for i in range(1000)))
        assert ids == list(range(1000))
        await handle.close()
        md = (await r.region.read_ledger(handle.ledger_id)).value
        assert md.state is LedgerState.CLOSED and md.last_entry_id == 999
        assert md.length == sum(len(payload(i)) for i in range(1000))
        reader = await r.client.open_ledger(handle.ledger_id)
        entries = await reader.read(0, 999)
        assert [e.payload for e in entries] == [payload(i) for i in range(1000)]


async def test_bookie_sigkill_mid_write_ensemble_change_loses_nothing(tmp_path, zk_connect) -> None:
    """SIGKILL one of the ensemble's 3 bookies while 10,000 entries are added at 3/2/2 (a fourth bookie
    is registered so the ensemble can change); every acknowledged entry reads back byte-identical."""
    bookies = start_bookies(4, tmp_path, zk_connect)
    by_id = {b.bookie_id: b for b in bookies}
    async with Region(zk_connect) as r:
        await wait_writable(r, 4)
        handle = await r.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        victim = by_id[handle.metadata.ensembles[0][1][1]]
        acked: dict[int, bytes] = {}
        window = asyncio.Semaphore(500)

        async def add(i: int) -> None:
            async with window:
                entry_id = await handle.add(payload(i, 1024))
                acked[entry_id] = payload(i, 1024)

        tasks = []
        for i in range(10_000):
            tasks.append(asyncio.ensure_future(add(i)))
            if i == 3_000:
                await wait_for_async(lambda: len(acked) >= 1_000, timeout_s=30, what="1,000 acks before the kill")
                victim.process.kill()
            if i % 200 == 0:
                await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        await handle.close()
        assert len(acked) == 10_000
        md = (await r.region.read_ledger(handle.ledger_id)).value
        assert len(md.ensembles) >= 2, md.ensembles
        assert victim.bookie_id not in md.ensembles[-1][1]
        assert md.last_entry_id == 9_999
        reader = await r.client.open_ledger(handle.ledger_id)
        entries = await reader.read(0, 9_999)
        assert all(e.payload == acked[e.entry_id] for e in entries)
        assert len(entries) == 10_000

        # The killed bookie comes back with every entry it had acknowledged (journal fsync before ack).
        victim.process.start(timeout_s=30)
        first_ensemble_end = md.ensembles[1][0] - 1
        vc = r.client.bookie_client(victim.bookie_id)
        on_victim = [e for e in range(0, first_ensemble_end + 1) if victim.bookie_id in md.write_set(e)]
        # Its channel may still be backing off from the refused connections: wait until it reads.
        got = await wait_for_async(
            lambda: vc.read_entries(handle.ledger_id, on_victim[:2000]), timeout_s=30, what="the restarted bookie"
        )
        assert len(got) == len(on_victim[:2000]) > 0
        assert all(x.status == 0 and x.payload == acked[x.entry_id] for x in got)


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from bookie.client import LedgerClient, LedgerClientConfig
    from config_store import KazooMetadataStore, RegionStore

    async def main(zk):
        store = KazooMetadataStore(zk)
        await store.start()
        client = LedgerClient(RegionStore(store), config=LedgerClientConfig())
        await client.start()
        handle = await client.create_ledger()
        print(f"ledger {handle.ledger_id}", flush=True)
        i = 0
        while True:
            futs = [handle.add_nowait(f"m-{i + k}".encode() * 20) for k in range(50)]
            for f in futs:
                print(f"acked {await f}", flush=True)
            i += 50

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_writer_crash_then_recovery_fences_and_readers_agree(tmp_path, zk_connect) -> None:
    start_bookies(3, tmp_path, zk_connect)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    out = open(tmp_path / "writer.out", "w+")
    writer = subprocess.Popen(
        [sys.executable, str(script), zk_connect], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        cwd=os.getcwd(),
    )
    try:
        def acked_lines() -> list[str]:
            return [line for line in (tmp_path / "writer.out").read_text().splitlines() if line.startswith("acked ")]

        async with Region(zk_connect) as r:
            await wait_for_async(lambda: len(acked_lines()) >= 2_000, timeout_s=60, what="the writer's 2,000 acks")
            os.killpg(writer.pid, 9)
            writer.wait()
            text = (tmp_path / "writer.out").read_text().splitlines()
            ledger_id = int(next(line for line in text if line.startswith("ledger ")).split()[1])
            acked = sorted(int(line.split()[1]) for line in acked_lines())
            assert acked == list(range(len(acked)))

            reader1 = await r.client.open_ledger(ledger_id, recovery=True)
            md = (await r.region.read_ledger(ledger_id)).value
            assert md.state is LedgerState.CLOSED
            assert md.last_entry_id == reader1.last_add_confirmed >= acked[-1]

            async with Region(zk_connect) as r2:
                reader2 = await r2.client.open_ledger(ledger_id)
                assert reader2.last_add_confirmed == reader1.last_add_confirmed
                a = await reader1.read(0, reader1.last_add_confirmed)
                b = await reader2.read(0, reader2.last_add_confirmed)
                assert [e.payload for e in a] == [e.payload for e in b]
                assert [e.payload for e in a[: len(acked)]] == [f"m-{i}".encode() * 20 for i in acked]
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, 9)
            writer.wait()
        out.close()


async def test_recovery_fences_a_live_writer(tmp_path, zk_connect) -> None:
    start_bookies(3, tmp_path, zk_connect)
    async with Region(zk_connect) as w, Region(zk_connect) as r:
        await wait_writable(w, 3)
        handle = await w.client.create_ledger()
        await asyncio.gather(*(handle.add_nowait(payload(i)) for i in range(500)))
        reader = await r.client.open_ledger(handle.ledger_id, recovery=True)
        assert reader.last_add_confirmed == 499
        with pytest.raises(LedgerFencedError) as info:
            await handle.add(payload(500))
        assert "fenced" in str(info.value)
        with pytest.raises(LedgerFencedError):
            await handle.close()
        md = (await r.region.read_ledger(handle.ledger_id)).value
        assert md.state is LedgerState.CLOSED and md.last_entry_id == 499
        assert [e.payload for e in await reader.read(0, 499)] == [payload(i) for i in range(500)]


async def test_read_moves_past_a_dead_replica(tmp_path, zk_connect) -> None:
    bookies = start_bookies(3, tmp_path, zk_connect)
    async with Region(zk_connect) as r:
        await wait_writable(r, 3)
        handle = await r.client.create_ledger()
        await asyncio.gather(*(handle.add_nowait(payload(i)) for i in range(300)))
        await handle.close()
        bookies[0].process.kill()
        reader = await r.client.open_ledger(handle.ledger_id)
        assert [e.payload for e in await reader.read(0, 299)] == [payload(i) for i in range(300)]
        # A paused (slow) replica is passed over too, after the read deadline (bookie-1 back first, so
        # every entry keeps one live replica).
        bookies[0].process.start(timeout_s=30)
        bookies[1].process.pause()
        try:
            entries = await reader.read(0, 299)
        finally:
            bookies[1].process.resume()
        assert [e.payload for e in entries] == [payload(i) for i in range(300)]


async def test_bookie_session_expiry_reregisters_and_client_sees_it(tmp_path, zk_connect) -> None:
    bookies = start_bookies(3, tmp_path, zk_connect, zk_session_timeout_ms=2000)
    async with Region(zk_connect) as r:
        await wait_writable(r, 3)
        target = bookies[2]
        # Freeze the bookie past its session timeout: ZooKeeper expires the session for real and deletes
        # its ephemeral registration; after SIGCONT the bookie must notice and register again.
        target.process.pause()
        try:
            await wait_for_async(
                lambda: target.bookie_id not in r.client.writable_bookies(), timeout_s=30, what="session expiry"
            )
        finally:
            target.process.resume()
        await wait_for_async(
            lambda: target.bookie_id in r.client.writable_bookies(), timeout_s=30, what="re-registration"
        )
        handle = await r.client.create_ledger()
        assert target.bookie_id in handle.metadata.ensembles[0][1]
        await handle.add(b"after expiry")
        await handle.close()
