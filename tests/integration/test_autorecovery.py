"""Auto-recovery against real bookie and auto-recovery processes and a real ZooKeeper (issue 19).

Also: a bookie back within the grace period is left alone; an open ledger is repaired only once closed (or,
with ``open_ledger_fence_ms``, fenced after that long).

* a bookie SIGKILLed with its data directory deleted: within the grace period plus the copy time every
  fragment is back at Qw intact copies on live bookies, even though the elected auditor is SIGKILLed half-way
  (the other process takes over, and each fragment costs exactly one metadata write); then a second bookie
  is SIGKILLed and every acknowledged entry still reads back byte-identical;
* a live bookie decommissioned while a writer and a reader run: neither sees an error, and afterwards no
  ledger names the bookie, so stopping it loses nothing;
* bytes flipped in an entry log on disk, a ledger deleted from one bookie its metadata still names, and a
  replica holding a Pulsar entry whose producer checksum fails: the scrubber finds the record failing its
  CRC, the missing entries and the bad Pulsar copy, and the three fragments are re-replicated from the good
  copies.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import sys
import urllib.request

from bookie.autorecovery.model import fragment_entries, segments, Fragment
from bookie.autorecovery.underreplication import UnderReplicationStore
from bookie.client import LedgerClient, LedgerClientConfig
from bookie.client.wire import encode_entry
from config_store import KazooMetadataStore, LedgerMetadata, LedgerState, RegionStore
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.protocol.frames import encode_entry as encode_pulsar_entry
from magnetar.proto import bookie_pb2
from tests.kit.autorecovery import start_autorecovery
from tests.kit.bookies import start_bookies
from tests.kit.wait import wait_for_async

FAST = LedgerClientConfig(add_timeout_s=3.0, read_timeout_s=3.0)
OK = bookie_pb2.Status.OK


class Region:
    def __init__(self, zk_connect: str) -> None:
        self.store = KazooMetadataStore(zk_connect, session_timeout_ms=10_000)
        self.region = RegionStore(self.store)
        self.client = LedgerClient(self.region, config=FAST)
        self.ur = UnderReplicationStore(self.store)

    async def __aenter__(self) -> "Region":
        await self.store.start()
        await self.client.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.close()
        await self.store.close()


def payload(ledger: int, entry: int, size: int) -> bytes:
    rnd = random.Random(ledger * 1_000_003 + entry)
    return f"L{ledger}E{entry}:".encode() + rnd.randbytes(size)


async def write_ledgers(r: Region, count: int, entries: int, size: int) -> dict[int, list[bytes]]:
    written = {}
    for _ in range(count):
        handle = await r.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        data = [payload(handle.ledger_id, e, size) for e in range(entries)]
        await asyncio.gather(*(handle.add_nowait(p) for p in data))
        await handle.close()
        written[handle.ledger_id] = data
    return written


async def replicas_intact(r: Region, written: dict[int, list[bytes]], live: set[str]) -> bool:
    """Every entry is on each bookie of its write set, byte-identical, and those bookies are all ``live``."""
    if await r.ur.list_ledgers():
        return False
    for lid, data in written.items():
        md = (await r.region.read_ledger(lid)).value
        for first, _last, ensemble in segments(md):
            for bookie in ensemble:
                if bookie not in live:
                    return False
                ids = fragment_entries(md, Fragment(first, bookie))
                got = await r.client.bookie_client(bookie).read_entries(lid, ids)
                if [(e.entry_id, e.status, e.payload) for e in got] != [(i, OK, data[i]) for i in ids]:
                    return False
    return True


async def read_back(zk_connect: str, written: dict[int, list[bytes]]) -> None:
    async with Region(zk_connect) as fresh:
        for lid, data in written.items():
            reader = await fresh.client.open_ledger(lid)
            entries = await reader.read(0, len(data) - 1)
            assert [e.payload for e in entries] == data, f"ledger {lid} differs"


def pulsar_entry(i: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
    return encode_pulsar_entry(md, f"message {i}".encode() * 20)


async def write_with_one_bad_pulsar_copy(r: Region, ensemble: list[str], *, entry_id: int) -> tuple[int, str]:
    """A CLOSED 3/2/2 ledger of 10 Pulsar entries written replica by replica; the first bookie of
    ``entry_id``'s write set gets a copy with one payload byte flipped. Returns (ledger id, that bookie)."""
    lid = await r.region.allocate_ledger_id()
    md = LedgerMetadata(ledger_id=lid, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                        ensembles=[(0, ensemble)], state=LedgerState.CLOSED, last_entry_id=9)
    await r.region.create_ledger(md)
    bad_bookie = md.write_set(entry_id)[0]
    loop = asyncio.get_running_loop()
    futures = []
    for e in range(10):
        for bookie in md.write_set(e):
            data = pulsar_entry(e)
            if e == entry_id and bookie == bad_bookie:
                data = data[:-3] + bytes([data[-3] ^ 0x55]) + data[-2:]
            fut = loop.create_future()
            r.client.bookie_client(bookie).add(encode_entry(lid, e, e - 1, data), e,
                                               lambda _b, _e, status, _m, fut=fut: fut.set_result(status))
            futures.append(fut)
    assert set(await asyncio.gather(*futures)) == {OK}
    return lid, bad_bookie


def metric_sum(urls: list[str], name: str) -> float:
    total = 0.0
    for url in urls:
        try:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
        except OSError:
            continue
        total += sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))
    return total


async def test_lost_bookie_rereplicated_auditor_killed_then_second_loss_loses_nothing(tmp_path, zk_connect) -> None:
    bookies = start_bookies(4, tmp_path, zk_connect)
    by_id = {b.bookie_id: b for b in bookies}
    async with Region(zk_connect) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) == 4, 30, what="4 writable bookies")
        written = await write_ledgers(r, 24, 150, 1024)
        versions = {lid: (await r.region.read_ledger(lid)).version for lid in written}
        # The bookie most ledgers name is the victim.
        counts = {b: 0 for b in by_id}
        for lid in written:
            for b in (await r.region.read_ledger(lid)).value.ensembles[0][1]:
                counts[b] += 1
        victim_id = max(counts, key=counts.get)
        naming = {lid for lid in written if victim_id in (await r.region.read_ledger(lid)).value.ensembles[0][1]}
        # Two processes, each copying at most 400 entries/s: the repair takes seconds, long enough to kill one.
        procs = start_autorecovery(2, tmp_path, zk_connect, throttle_entries_per_s=400.0)
        by_worker = {p.worker_id: p for p in procs}

        victim = by_id.pop(victim_id)
        victim.kill()
        shutil.rmtree(victim.data_dir)

        async def some_repaired_some_left() -> bool:
            left = [lid for lid in naming if victim_id in (await r.region.read_ledger(lid)).value.ensembles[0][1]]
            return 0 < len(left) < len(naming)

        await wait_for_async(some_repaired_some_left, 60, interval_s=0.05, what="repair under way")
        auditor = await r.ur.auditor()
        assert auditor in by_worker
        by_worker.pop(auditor).kill()
        survivor = next(iter(by_worker))

        async def survivor_audits() -> bool:
            return await r.ur.auditor() == survivor

        # The dead auditor's node goes with its session (4 s); then the survivor is elected.
        await wait_for_async(survivor_audits, 30, interval_s=0.1, what=f"{survivor} elected auditor")

        live = set(by_id)
        await wait_for_async(lambda: replicas_intact(r, written, live), 90, interval_s=0.5,
                             what="every fragment back at Qw intact copies on live bookies")
        for lid in written:
            md_version = (await r.region.read_ledger(lid)).version
            assert md_version == versions[lid] + (1 if lid in naming else 0), f"ledger {lid}: metadata writes"
        assert metric_sum([by_worker[survivor].metrics_url], "magnetar_autorecovery_fragments_replicated_total") >= 1

    second = by_id.pop(sorted(by_id)[0])
    second.kill()
    await read_back(zk_connect, written)


async def test_decommission_under_load_loses_nothing(tmp_path, zk_connect) -> None:
    bookies = start_bookies(4, tmp_path, zk_connect)
    start_autorecovery(1, tmp_path, zk_connect)
    leaving = bookies[1]
    written: dict[int, list[bytes]] = {}
    errors: list[BaseException] = []
    stop = asyncio.Event()
    async with Region(zk_connect) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) == 4, 30, what="4 writable bookies")

        async def writer() -> None:
            try:
                while not stop.is_set():
                    written.update(await write_ledgers(r, 1, 40, 512))
            except BaseException as err:  # noqa: BLE001 - the test asserts there is none
                errors.append(err)

        async def reader() -> None:
            async with Region(zk_connect) as other:
                try:
                    while not stop.is_set():
                        for lid, data in list(written.items()):
                            handle = await other.client.open_ledger(lid)
                            assert [e.payload for e in await handle.read(0, len(data) - 1)] == data
                        await asyncio.sleep(0.05)
                except BaseException as err:  # noqa: BLE001
                    errors.append(err)

        tasks = [asyncio.create_task(writer()), asyncio.create_task(reader())]
        async def leaving_holds_some() -> bool:
            for lid in list(written):
                if leaving.bookie_id in (await r.region.read_ledger(lid)).value.ensembles[0][1]:
                    return True
            return False

        await wait_for_async(leaving_holds_some, 30, interval_s=0.05, what="ledgers on the bookie to decommission")
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "magnetar", "admin", "bookies", "decommission", leaving.bookie_id, "--wait",
            "--timeout-s", "90", "--zookeeper", zk_connect, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await asyncio.wait_for(cli.communicate(), 120)
        assert cli.returncode == 0, out.decode()
        assert b"may be stopped" in out
        done_at = len(written)
        await wait_for_async(lambda: len(written) >= done_at + 5, 60, what="more ledgers written afterwards")
        stop.set()
        await asyncio.gather(*tasks)
        assert not errors, errors
        for lid in written:
            md = (await r.region.read_ledger(lid)).value
            assert all(leaving.bookie_id not in ensemble for _f, ensemble in md.ensembles), lid
            assert md.state is LedgerState.CLOSED
    leaving.kill()
    await read_back(zk_connect, written)


async def test_corrupt_and_missing_entries_found_by_scrubber_and_repaired(tmp_path, zk_connect) -> None:
    bookies = start_bookies(4, tmp_path, zk_connect)
    by_id = {b.bookie_id: b for b in bookies}
    async with Region(zk_connect) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) == 4, 30, what="4 writable bookies")
        written = await write_ledgers(r, 3, 60, 2048)
        lid = sorted(written)[0]
        md = (await r.region.read_ledger(lid)).value
        bad_id = md.write_set(17)[0]
        bad = by_id[bad_id]
        assert bad.terminate() == 0  # a clean stop flushes the write cache: the entry is in an entry log
        marker = f"L{lid}E17:".encode()
        hits = 0
        for path in (bad.data_dir / "ledgers").glob("*.log"):
            blob = bytearray(path.read_bytes())
            at = blob.find(marker)
            if at >= 0:
                blob[at + len(marker) + 100] ^= 0xFF
                path.write_bytes(bytes(blob))
                hits += 1
        assert hits == 1, "the entry should be in exactly one entry log"
        bad.start()
        got = await r.client.bookie_client(bad_id).read_entries(lid, [17])
        assert got[0].status == bookie_pb2.Status.INTERNAL  # the bookie itself refuses to return it

        # Another ledger's copy is gone from one bookie although its metadata names it ("missing").
        other = sorted(written)[1]
        lacking = (await r.region.read_ledger(other)).value.ensembles[0][1][0]
        assert await r.client.bookie_client(lacking).delete_ledger(other)

        # A ledger of Pulsar entries where one replica holds a copy whose Pulsar checksum fails (its bytes
        # went bad before the bookie's own record CRC covered them).
        pulsar_lid, pulsar_bad = await write_with_one_bad_pulsar_copy(r, sorted(by_id)[:3], entry_id=4)
        written[pulsar_lid] = [pulsar_entry(i) for i in range(10)]

        procs = start_autorecovery(1, tmp_path, zk_connect, scrub_interval_ms=1000)

        async def repaired() -> bool:
            current = (await r.region.read_ledger(lid)).value
            current_other = (await r.region.read_ledger(other)).value
            current_pulsar = (await r.region.read_ledger(pulsar_lid)).value
            return (bad_id not in current.ensembles[0][1] and lacking not in current_other.ensembles[0][1]
                    and pulsar_bad not in current_pulsar.ensembles[0][1] and not await r.ur.list_ledgers())

        await wait_for_async(repaired, 60, interval_s=0.2, what="the corrupt fragment re-replicated")
        assert await replicas_intact(r, written, set(by_id))
        assert metric_sum([procs[0].metrics_url], "magnetar_autorecovery_scrub_bad_entries_total") >= 3
    await read_back(zk_connect, written)


async def test_an_open_ledger_is_repaired_only_once_its_writer_closed_it(tmp_path, zk_connect) -> None:
    """The writer of an open ledger outlives one of its bookies: its ensemble change moves new entries to
    another bookie, the earlier segment stays under-replicated (recorded, not touched) while the writer
    writes on, and is repaired once the writer closes the ledger. The writer never sees an error."""
    bookies = start_bookies(4, tmp_path, zk_connect)
    by_id = {b.bookie_id: b for b in bookies}
    async with Region(zk_connect) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) == 4, 30, what="4 writable bookies")
        (recovery,) = start_autorecovery(1, tmp_path, zk_connect)
        handle = await r.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        lid = handle.ledger_id
        data = [payload(lid, e, 256) for e in range(400)]
        await asyncio.gather(*(handle.add_nowait(p) for p in data[:200]))
        victim_id = handle.metadata.ensembles[0][1][0]
        by_id.pop(victim_id).kill()
        await asyncio.gather(*(handle.add_nowait(p) for p in data[200:300]))  # ensemble change on the way
        await wait_for_async(lambda: r.ur.read(lid), 60, interval_s=0.2, what="the open ledger recorded")
        version = (await r.region.read_ledger(lid)).version
        deferred = metric_sum([recovery.metrics_url], "magnetar_autorecovery_deferred_total")
        await wait_for_async(
            lambda: metric_sum([recovery.metrics_url], "magnetar_autorecovery_deferred_total") >= deferred + 2, 30,
            interval_s=0.2, what="the worker passing the open ledger over twice more")
        current = await r.region.read_ledger(lid)
        assert current.version == version and current.value.state is LedgerState.OPEN
        assert victim_id in current.value.ensembles[0][1]
        await asyncio.gather(*(handle.add_nowait(p) for p in data[300:]))  # the writer is unharmed
        await handle.close()
        await wait_for_async(lambda: replicas_intact(r, {lid: data}, set(by_id)), 60, interval_s=0.5,
                             what="the closed ledger's earlier segment repaired")


async def test_an_abandoned_open_ledger_is_fenced_after_the_open_ledger_grace_and_repaired(tmp_path, zk_connect) -> None:
    """With ``open_ledger_fence_ms`` set, a ledger whose writer went away (never closed) while one of its
    bookies was lost is recovered by the worker (fenced, closed at its last acknowledged entry) and repaired;
    every acknowledged entry reads back."""
    bookies = start_bookies(4, tmp_path, zk_connect)
    by_id = {b.bookie_id: b for b in bookies}
    async with Region(zk_connect) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) == 4, 30, what="4 writable bookies")
        start_autorecovery(1, tmp_path, zk_connect, open_ledger_fence_ms=2000)
        handle = await r.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        lid = handle.ledger_id
        data = [payload(lid, e, 256) for e in range(300)]
        await asyncio.gather(*(handle.add_nowait(p) for p in data))  # all acknowledged; never closed
        victim_id = handle.metadata.ensembles[0][1][1]
        by_id.pop(victim_id).kill()

        async def closed_and_repaired() -> bool:
            md = (await r.region.read_ledger(lid)).value
            return md.state is LedgerState.CLOSED and await replicas_intact(r, {lid: data}, set(by_id))

        await wait_for_async(closed_and_repaired, 90, interval_s=0.5, what="the open ledger fenced, closed, repaired")
        assert (await r.region.read_ledger(lid)).value.last_entry_id == len(data) - 1
    await read_back(zk_connect, {lid: data})


async def test_a_bookie_back_within_the_grace_period_is_not_rereplicated(tmp_path, zk_connect) -> None:
    """A bookie SIGKILLed and restarted with its data before ``lost_bookie_grace_ms`` ends: the auditor notes
    it missing, then forgets it; no fragment is recorded and no ledger's metadata changes."""
    bookies = start_bookies(4, tmp_path, zk_connect, zk_session_timeout_ms=4000)
    async with Region(zk_connect) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) == 4, 30, what="4 writable bookies")
        written = await write_ledgers(r, 6, 50, 256)
        versions = {lid: (await r.region.read_ledger(lid)).version for lid in written}
        start_autorecovery(1, tmp_path, zk_connect, lost_bookie_grace_ms=60_000)
        victim = bookies[0]
        victim.kill()

        async def noted_missing() -> bool:
            return victim.bookie_id in await r.ur.missing_since()

        await wait_for_async(noted_missing, 30, interval_s=0.2, what="the auditor noting the bookie missing")
        victim.start()

        async def forgotten() -> bool:
            return victim.bookie_id not in await r.ur.missing_since()

        await wait_for_async(forgotten, 30, interval_s=0.2, what="the auditor forgetting the returned bookie")
        assert await r.ur.list_ledgers() == []
        assert {lid: (await r.region.read_ledger(lid)).version for lid in written} == versions
        assert await replicas_intact(r, written, {b.bookie_id for b in bookies})
