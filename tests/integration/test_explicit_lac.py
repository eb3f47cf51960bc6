"""The explicit LAC (WriteLastAddConfirmed) against real bookie processes and a real ZooKeeper.

* the bookie keeps the highest explicit LAC per ledger, clamps it to the last entry it holds, leaves a ledger
  it does not hold alone, refuses a LAC below -1, and reports max(piggybacked, explicit) in
  ReadLastAddConfirmed and read answers; it forgets it on restart (memory only, by design);
* the ledger writer sends it once adds stop: a reader that does not share the writer (open without recovery,
  as the Spark source opens) sees the newest entry of an idle open ledger; while adds flow it sends
  (almost) nothing, and after close nothing.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from bookie.client import LedgerClient, LedgerClientConfig
from config_store import KazooMetadataStore, RegionStore
from magnetar.proto import bookie_pb2 as pb
from tests.integration.test_bookie_process import Client, add_request
from tests.kit.bookies import start_bookies
from tests.kit.wait import wait_for_async

S = pb.Status


async def write_lac(client: Client, ledger_id: int, lac: int) -> pb.ReadLacResponse:
    return await client.unary("WriteLastAddConfirmed", pb.WriteLacRequest(ledger_id=ledger_id, last_add_confirmed=lac),
                              pb.ReadLacResponse)


async def test_bookie_keeps_the_highest_explicit_lac_clamped_to_what_it_holds(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    client = Client(bookie.address)
    ledger = 4242
    try:
        (ok,) = await client.add([add_request(1, [(ledger, e, b"e%d" % e) for e in range(5)])])  # carries LAC e-1
        assert ok.status == S.OK
        assert (await client.lac(ledger)).last_add_confirmed == 3

        answer = await write_lac(client, ledger, 4)
        assert (answer.last_add_confirmed, answer.last_entry_id, answer.known) == (4, 4, True)
        assert (await client.lac(ledger)).last_add_confirmed == 4
        assert (await write_lac(client, ledger, 2)).last_add_confirmed == 4, "the highest is kept"
        assert (await write_lac(client, ledger, 99)).last_add_confirmed == 4, "clamped to the last entry held"
        assert (await write_lac(client, ledger, -1)).last_add_confirmed == 4
        # Read answers carry the explicit LAC where it is higher than what the entry carried.
        entries = {}
        async for raw in client.raw("ReadEntries", "unary_stream")(
                pb.ReadRequest(ledger_id=ledger, first_entry_id=0, last_entry_id=4).SerializeToString(), timeout=10):
            entries.update({e.entry_id: e.last_add_confirmed for e in pb.ReadResponse.FromString(raw).entries})
        assert entries == {e: 4 for e in range(5)}

        # A ledger this bookie does not hold: answered, and no state made for it.
        unknown = await write_lac(client, 777, 10)
        assert (unknown.known, unknown.last_add_confirmed, unknown.last_entry_id) == (False, -1, -1)
        assert (await client.lac(777)).known is False

        for bad in (pb.WriteLacRequest(ledger_id=ledger, last_add_confirmed=-2).SerializeToString(),
                    b"\xff\xff\xff\xff\x0f garbage"):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.raw("WriteLastAddConfirmed")(bad, timeout=10)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (await client.lac(ledger)).last_add_confirmed == 4, "a refused request changes nothing"

        # More entries: the piggybacked LAC catches up and the maximum is reported.
        (ok,) = await client.add([add_request(2, [(ledger, e, b"e%d" % e) for e in range(5, 8)])])
        assert ok.status == S.OK and (await client.lac(ledger)).last_add_confirmed == 6

        await client.close()
        bookie.restart()  # kept in memory only: a restarted bookie answers the piggybacked LAC
        client = Client(bookie.address)
        assert (await write_lac(client, ledger, 7)).last_add_confirmed == 7
        bookie.restart()
        assert (await client.lac(ledger)).last_add_confirmed == 6
    finally:
        await client.close()


class Region:
    def __init__(self, zk_connect: str, config: LedgerClientConfig) -> None:
        self.store = KazooMetadataStore(zk_connect, session_timeout_ms=10_000)
        self.client = LedgerClient(RegionStore(self.store), config=config)

    async def __aenter__(self) -> "Region":
        await self.store.start()
        await self.client.start()
        await wait_for_async(lambda: len(self.client.writable_bookies()) >= 3, timeout_s=30, what="3 bookies")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.close()
        await self.store.close()


async def reader_lac(reader: Region, ledger_id: int) -> int:
    return (await reader.client.open_ledger(ledger_id, recovery=False)).last_add_confirmed


async def test_writer_sends_the_explicit_lac_when_idle_and_a_reader_sees_the_newest_entry(tmp_path, zk_connect):
    start_bookies(3, tmp_path, zk_connect)
    config = LedgerClientConfig(add_timeout_s=5.0, read_timeout_s=5.0, explicit_lac_interval_ms=100)
    async with Region(zk_connect, config) as w, Region(zk_connect, LedgerClientConfig()) as r:
        handle = await w.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        for i in range(5):  # one at a time: each add carries the LAC of the one before
            assert await handle.add(b"m%d" % i) == i
        # The newest entry: confirmed to the writer, and told to the bookies by the explicit LAC only.
        lacs: list[int] = []

        async def reader_sees_everything() -> bool:
            lacs.append(await reader_lac(r, handle.ledger_id))
            return lacs[-1] == 4

        await wait_for_async(reader_sees_everything, timeout_s=10, what="the reader's LAC reaches entry 4")
        assert handle.explicit_lacs_sent >= 1
        reader = await r.client.open_ledger(handle.ledger_id, recovery=False)
        assert [e.payload for e in await reader.read(0, 4)] == [b"m%d" % i for i in range(5)]

        # Idle again after one more entry: the same, and only one more explicit LAC for it.
        sent = handle.explicit_lacs_sent
        assert await handle.add(b"m5") == 5
        await wait_for_async(_equals(reader_lac, r, handle.ledger_id, 5), timeout_s=10, what="the LAC reaches 5")
        assert handle.explicit_lacs_sent == sent + 1
        await handle.close()
        assert handle._lac_task is None


def _equals(fn, *args_and_expected):
    *args, expected = args_and_expected

    async def check() -> bool:
        return await fn(*args) == expected

    return check


async def test_writer_sends_no_explicit_lac_while_adds_flow_nor_after_close(tmp_path, zk_connect):
    start_bookies(3, tmp_path, zk_connect)
    config = LedgerClientConfig(add_timeout_s=5.0, read_timeout_s=5.0, explicit_lac_interval_ms=250)
    async with Region(zk_connect, config) as w:
        handle = await w.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        for i in range(150):  # adds flow back to back: each carries the LAC the previous one made
            await handle.add(b"x")
        # At most the one for the last entry, once adds stopped (never one per interval while they flowed).
        assert handle.explicit_lacs_sent <= 1
        closing = await w.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        await closing.add(b"y")
        await closing.add(b"z")  # its LAC (1) is past what its adds carried (0): an explicit LAC is pending
        assert closing._lac_task is not None and not closing._lac_task.done()
        task = closing._lac_task
        await closing.close()
        assert task.done() and closing._lac_task is None and closing.explicit_lacs_sent == 0
        await handle.close()

    # A disabled interval sends nothing and starts no task.
    off = LedgerClientConfig(add_timeout_s=5.0, read_timeout_s=5.0, explicit_lac_interval_ms=0)
    async with Region(zk_connect, off) as w:
        handle = await w.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        await handle.add(b"a")
        await handle.add(b"b")
        assert handle._lac_task is None
        await handle.close()
        assert handle.explicit_lacs_sent == 0
