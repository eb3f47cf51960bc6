"""Managed ledgers and cursors against real bookie processes and a real ZooKeeper.

Each ``Broker`` is what a broker process holds: its own ZooKeeper session, ledger client and factory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from bookie.client import LedgerClient, LedgerClientConfig
from broker.managed_ledger import (CursorNotFoundError, EntryTooLargeError, InitialPosition,
                                   InvalidCursorPositionError, ManagedLedgerClosedError, ManagedLedgerConfig,
                                   ManagedLedgerFactory, ManagedLedgerFencedError, Position)
from config_store import KazooMetadataStore, LedgerState, RegionStore
from config_store.managed_ledgers import ManagedCursorInfo, ManagedLedgerStore, cursor_path
from tests.kit.bookies import start_bookies
from tests.kit.wait import wait_for_async

FAST = LedgerClientConfig(add_timeout_s=5.0, read_timeout_s=5.0)
TOPIC = "acme/ns/persistent/orders"


class Broker:
    """One broker's storage stack: ZooKeeper session, ledger client, managed-ledger factory."""

    def __init__(self, zk_connect: str, config: ManagedLedgerConfig) -> None:
        self.store = KazooMetadataStore(zk_connect, session_timeout_ms=10_000)
        self.region = RegionStore(self.store)
        self.client = LedgerClient(self.region, config=FAST)
        self.factory = ManagedLedgerFactory(self.client, self.store, config=config)

    async def __aenter__(self) -> "Broker":
        await self.store.start()
        await self.client.start()
        await wait_for_async(lambda: len(self.client.writable_bookies()) >= 3, timeout_s=30, what="3 bookies")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.factory.close()
        await self.client.close()
        await self.store.close()

    async def abandon(self) -> None:
        """A crash as far as metadata and bookies can tell: nothing is flushed or closed gracefully."""
        for ml in self.factory.ledgers.values():
            for task in (ml._flusher_task, ml._housekeeping_task, ml._appender._rollover_task):
                if task is not None:
                    task.cancel()
        await self.store.close()  # the session ends; no further metadata writes get through
        await self.client.close()


def cfg(**kw) -> ManagedLedgerConfig:
    base = dict(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, cursor_persist_interval_ms=200)
    base.update(kw)
    return ManagedLedgerConfig(**base)


def payload(i: int) -> bytes:
    return f"msg-{i:06d}-".encode() + bytes(40)


@pytest.fixture
def bookies(tmp_path, zk_connect):
    return start_bookies(3, tmp_path, zk_connect)


async def read_all(cursor, max_entries: int = 500) -> list:
    out = []
    while batch := await cursor.read_entries(max_entries):
        out.extend(batch)
    return out


async def test_pipelined_appends_roll_over_and_read_back_in_order(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg(max_entries_per_ledger=1000)) as b:
        ml = await b.factory.open(TOPIC)
        assert await b.factory.open(TOPIC) is ml
        cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        futures = [ml.add_entry_nowait(payload(i)) for i in range(5000)]
        positions = await asyncio.gather(*futures)
        assert positions == sorted(positions) and len(set(positions)) == 5000
        assert len({p.ledger_id for p in positions}) == 5
        assert ml.last_confirmed_position == positions[-1]
        mls = ManagedLedgerStore(b.store)

        async def closed_ledgers_recorded():  # the 5th rollover finishes after the last add resolved
            info = (await mls.get(TOPIC)).value
            return [li.entries for li in info.ledgers[:5]] == [1000] * 5 and len(info.ledgers) == 6

        await wait_for_async(closed_ledgers_recorded, timeout_s=10, what="5 full ledgers in the metadata")
        entries = await read_all(cursor, 700)
        assert [e.data for e in entries] == [payload(i) for i in range(5000)]
        assert [e.position for e in entries] == positions
        assert cursor.backlog_entries() == 5000
        stats = ml.internal_stats()
        assert stats["numberOfEntries"] == 5000 and stats["entriesAddedCounter"] == 5000
        assert stats["lastConfirmedEntry"] == str(positions[-1])
        assert stats["cursors"]["sub"]["readPosition"] == str(ml.layout.tail())
        # a second cursor reading from the start goes to the bookies (closed and current ledgers)
        other = ml.new_non_durable_cursor(Position(positions[0].ledger_id, -1), name="reader")
        assert [e.data for e in await read_all(other, 333)] == [payload(i) for i in range(5000)]
        assert list(ml.cursors) == ["sub"] and "reader" in ml.internal_stats()["cursors"]
        await ml.delete_cursor("reader")
        assert "reader" not in ml.internal_stats()["cursors"]


async def test_individual_acks_then_restart_in_a_new_broker(bookies, zk_connect) -> None:
    config = cfg(max_entries_per_ledger=40)
    async with Broker(zk_connect, config) as a:
        ml = await a.factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        positions = await asyncio.gather(*(ml.add_entry_nowait(payload(i)) for i in range(100)))
        await cursor.delete([positions[i] for i in (0, 1, 2, 4, 5, 39, 40, 41, 60)])
        assert cursor.mark_delete_position == positions[2]
        assert cursor.individually_deleted_ranges() == [(positions[3], positions[5]), (positions[38], positions[41]),
                                                        (positions[59], positions[60])]
        assert cursor.backlog_entries() == 100 - 9
        await cursor.delete([positions[3]])
        assert cursor.mark_delete_position == positions[5]
        assert cursor.backlog_entries() == 100 - 10
        assert cursor.is_deleted(positions[40]) and not cursor.is_deleted(positions[6])
        await cursor.mark_delete(positions[39])  # jumps over the range across the ledger boundary
        assert cursor.mark_delete_position == positions[41]
        assert cursor.individually_deleted_ranges() == [(positions[59], positions[60])]
        assert cursor.backlog_entries() == 100 - 43
        stats = ml.internal_stats()["cursors"]["sub"]
        assert stats["markDeletePosition"] == str(positions[41])
        assert stats["individuallyDeletedMessages"] == f"[({positions[59]}..{positions[60]}]]"
        got = await read_all(cursor)
        assert [e.position for e in got] == [p for i, p in enumerate(positions) if i > 41 and i != 60]
    async with Broker(zk_connect, config) as b:
        ml2 = await b.factory.open(TOPIC)
        cursor2 = ml2.cursors["sub"]
        assert cursor2.mark_delete_position == positions[41]
        assert cursor2.individually_deleted_ranges() == [(positions[59], positions[60])]
        assert cursor2.backlog_entries() == 100 - 43
        got = await read_all(cursor2)
        assert [e.position for e in got] == [p for i, p in enumerate(positions) if i > 41 and i != 60]
        assert [e.data for e in got][:3] == [payload(42), payload(43), payload(44)]


async def test_broker_crash_fences_the_old_owner_and_keeps_every_acked_entry(bookies, zk_connect) -> None:
    config = cfg(max_entries_per_ledger=300)
    a = Broker(zk_connect, config)
    await a.__aenter__()
    try:
        ml_a = await a.factory.open(TOPIC)
        cursor_a = await ml_a.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        acked = await asyncio.gather(*(ml_a.add_entry_nowait(payload(i)) for i in range(700)))
        await cursor_a.mark_delete(acked[99])
        await cursor_a.flush()
        in_flight = [ml_a.add_entry_nowait(payload(700 + i)) for i in range(50)]
        async with Broker(zk_connect, config) as b:  # a second broker takes the topic over
            ml_b = await b.factory.open(TOPIC)
            old_ledger = acked[-1].ledger_id
            md = (await b.region.read_ledger(old_ledger)).value
            assert md.state is LedgerState.CLOSED
            landed = [f.result() for f in in_flight if f.done() and not f.exception()]
            assert md.last_entry_id >= acked[-1].entry_id
            new_pos = await ml_b.add_entry(b"from-b")
            assert new_pos.ledger_id > old_ledger
            with pytest.raises(ManagedLedgerFencedError):
                await ml_a.add_entry(b"from-a")
            with pytest.raises(ManagedLedgerFencedError):
                ml_a.add_entry_nowait(b"again")
            # every entry A had acknowledged is readable from B, in order
            reader = ml_b.new_non_durable_cursor(Position(acked[0].ledger_id, -1))
            got = await read_all(reader)
            assert [e.data for e in got[:700]] == [payload(i) for i in range(700)]
            assert got[-1].data == b"from-b"
            assert all(p in {e.position for e in got} for p in landed)
            cursor_b = ml_b.cursors["sub"]
            assert cursor_b.mark_delete_position == acked[99]
            # A's cursor writes now lose their race: B re-wrote the cursor node when it opened. The mark-delete
            # writes at once when A's last write is over an interval old (B's start took that long), else the
            # flush writes it; either write is refused (regression: the test assumed the first never happened)
            with pytest.raises(ManagedLedgerFencedError):
                await cursor_a.mark_delete(acked[200])
                await cursor_a.flush()
            assert (await b.store.get(cursor_path(TOPIC, "sub"))) is not None
            info = ManagedCursorInfo.from_json((await b.store.get(cursor_path(TOPIC, "sub"))).value)
            assert info.mark_delete == tuple(acked[99])
    finally:
        await a.abandon()


async def test_throttled_persistence_loses_at_most_the_last_interval(bookies, zk_connect) -> None:
    config = cfg(cursor_persist_interval_ms=500)
    a = Broker(zk_connect, config)
    await a.__aenter__()
    try:
        ml = await a.factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        positions = await asyncio.gather(*(ml.add_entry_nowait(payload(i)) for i in range(1000)))
        path = cursor_path(TOPIC, "sub")
        before = (await a.store.get(path)).version
        # phase 1: acks with holes, never flushed: the flusher persists them within an interval
        phase1 = [p for i, p in enumerate(positions[:500]) if i % 7 != 3]
        started_s = time.monotonic()
        for p in phase1:
            await cursor.delete([p])

        async def persisted() -> ManagedCursorInfo:
            return ManagedCursorInfo.from_json((await a.store.get(path)).value)

        await wait_for_async(lambda: _covers(persisted(), cursor), timeout_s=5, what="phase-1 acks persisted")
        writes = (await a.store.get(path)).version - before
        allowed = 2 + (time.monotonic() - started_s) / 0.5  # the first ack, then at most one per interval
        assert 1 <= writes <= allowed, f"{writes} cursor writes for {len(phase1)} acks: not throttled"
        # phase 2: more acks, then the broker dies without flushing
        phase2 = [p for i, p in enumerate(positions[500:], 500) if i % 5 != 0]
        for p in phase2:
            await cursor.delete([p])
    finally:
        await a.abandon()
    unacked = {p for i, p in enumerate(positions) if (i < 500 and i % 7 == 3) or (i >= 500 and i % 5 == 0)}
    async with Broker(zk_connect, config) as b:
        ml2 = await b.factory.open(TOPIC)
        redelivered = {e.position for e in await read_all(ml2.cursors["sub"])}
        assert unacked <= redelivered  # nothing unacknowledged is lost
        assert redelivered - unacked <= set(phase2)  # only acks of the last interval are repeated
        assert not (redelivered & set(phase1))


async def _covers(info_coro, cursor) -> bool:
    info = await info_coro
    return info.mark_delete == tuple(cursor.mark_delete_position) and len(info.individually_deleted) == len(
        cursor.individually_deleted_ranges())


async def test_trimming_removes_consumed_ledgers_and_retention_keeps_them(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg(max_entries_per_ledger=50)) as b:
        ml = await b.factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        positions = await asyncio.gather(*(ml.add_entry_nowait(payload(i)) for i in range(200)))
        ledgers = sorted({p.ledger_id for p in positions})
        assert await ml.trim() == 0  # nothing consumed yet
        await cursor.mark_delete(positions[120])  # ledgers 0 and 1 fully consumed, 2 not
        assert await ml.trim() == 2
        for ledger_id in ledgers[:2]:
            assert await b.store.get(f"/ledgers/{ledger_id}") is None
        assert await b.store.get(f"/ledgers/{ledgers[2]}") is not None
        info = (await ManagedLedgerStore(b.store).get(TOPIC)).value
        assert [li.ledger_id for li in info.ledgers][:1] == [ledgers[2]]
        assert ml.number_of_entries == 100 and cursor.backlog_entries() == 79
        assert ml.first_position() == Position(ledgers[2], 0)
        await ml.delete_cursor("sub")
        assert await ml.trim() == 2  # no durable cursor: everything but the current ledger goes
        assert ml.number_of_entries == 0

    async with Broker(zk_connect, cfg(max_entries_per_ledger=50, retention_time_s=3600,
                                      retention_size_bytes=-1)) as b:
        ml = await b.factory.open("acme/ns/persistent/kept")
        cursor = await ml.open_cursor("sub")
        positions = await asyncio.gather(*(ml.add_entry_nowait(payload(i)) for i in range(120)))
        await cursor.mark_delete(positions[-1])
        assert await ml.trim() == 0
        for ledger_id in {p.ledger_id for p in positions}:
            assert await b.store.get(f"/ledgers/{ledger_id}") is not None


async def test_trimming_runs_after_rollover(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg(max_entries_per_ledger=20)) as b:
        ml = await b.factory.open(TOPIC)
        cursor = await ml.open_cursor("sub")
        positions = await asyncio.gather(*(ml.add_entry_nowait(payload(i)) for i in range(19)))
        await cursor.mark_delete(positions[-1])
        await ml.add_entry(payload(19))  # fills the ledger: rollover, then a trim
        await cursor.mark_delete(ml.last_confirmed_position)
        await ml.add_entry(payload(20))  # something in the new ledger, so the first is fully behind
        await wait_for_async(lambda: positions[0].ledger_id not in ml.layout, timeout_s=20,
                             what="the consumed ledger trimmed")


async def test_find_position_by_publish_time(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg(max_entries_per_ledger=64)) as b:
        ml = await b.factory.open(TOPIC)
        cursor = await ml.open_cursor("sub")  # holds the data back from trimming
        stamps = [1_000 + 10 * i for i in range(300)]
        positions = await asyncio.gather(*(ml.add_entry_nowait(struct.pack(">q", t)) for t in stamps))
        publish_time = lambda data: struct.unpack(">q", data)[0]  # noqa: E731
        assert await ml.find_position_by_publish_time(0, publish_time) == positions[0]
        assert await ml.find_position_by_publish_time(1_000, publish_time) == positions[0]
        assert await ml.find_position_by_publish_time(1_995, publish_time) == positions[100]
        assert await ml.find_position_by_publish_time(2_000, publish_time) == positions[100]
        assert await ml.find_position_by_publish_time(3_990, publish_time) == positions[299]
        assert await ml.find_position_by_publish_time(10**9, publish_time) == ml.layout.tail()
        await cursor.reset(positions[100])
        assert cursor.mark_delete_position == positions[99]
        got = await cursor.read_entries(3)
        assert [publish_time(e.data) for e in got] == [2_000, 2_010, 2_020]


async def test_wait_for_entries_wakes_on_append(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg()) as b:
        ml = await b.factory.open(TOPIC)
        cursor = await ml.open_cursor("sub")
        assert await cursor.wait_for_entries(timeout_s=0.05) is False
        waiter = asyncio.create_task(cursor.wait_for_entries(timeout_s=30))
        await wait_for_async(lambda: ml.internal_stats()["waitingCursorsCount"] == 1, timeout_s=5)
        pos = await ml.add_entry(b"hello")
        assert await asyncio.wait_for(waiter, 10) is True
        got = await cursor.read_entries(10)
        assert [(e.position, e.data) for e in got] == [(pos, b"hello")]
        assert ml._cache.hits >= 1  # a caught-up cursor is served from memory
        assert await cursor.read_entries(10) == []
        cursor.rewind()
        assert [e.data for e in await cursor.read_entries(10)] == [b"hello"]


async def test_factory_lists_exists_and_deletes(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg()) as b:
        ml = await b.factory.open(TOPIC)
        await ml.open_cursor("sub")
        ledger_id = (await ml.add_entry(b"x")).ledger_id
        await b.factory.open("acme/ns/persistent/other")
        assert await b.factory.list("acme/ns/persistent") == ["acme/ns/persistent/orders",
                                                              "acme/ns/persistent/other"]
        assert await b.factory.exists(TOPIC)
        await b.factory.delete(TOPIC)
        assert not await b.factory.exists(TOPIC)
        assert await b.store.get(f"/ledgers/{ledger_id}") is None
        assert await b.factory.list("acme/ns/persistent") == ["acme/ns/persistent/other"]


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from bookie.client import LedgerClient
    from broker.managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
    from config_store import KazooMetadataStore, RegionStore

    async def main(zk, topic):
        store = KazooMetadataStore(zk)
        await store.start()
        client = LedgerClient(RegionStore(store))
        await client.start()
        deadline = asyncio.get_running_loop().time() + 30
        while len(client.writable_bookies()) < 3:  # a condition with a deadline (this script has no test kit)
            if asyncio.get_running_loop().time() > deadline:
                sys.exit("3 writable bookies not seen within 30 s")
            await asyncio.sleep(0.05)
        config = ManagedLedgerConfig(max_entries_per_ledger=500, cursor_persist_interval_ms=100,
                                     retention_time_s=-1, retention_size_bytes=-1)  # keep it all to check
        ml = await ManagedLedgerFactory(client, store, config=config).open(topic)
        cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        i = 0
        while True:
            futures = [ml.add_entry_nowait(f"m-{i + k}".encode()) for k in range(100)]
            positions = [await f for f in futures]
            for k, p in enumerate(positions):
                print(f"acked {i + k} {p.ledger_id} {p.entry_id}", flush=True)
            # Printed before it is asked for: a kill between the mark-delete and a line after it left the
            # recovered position past the last printed one.
            print(f"md {positions[49].ledger_id} {positions[49].entry_id}", flush=True)
            await cursor.mark_delete(positions[49])
            if i % 500 == 0:
                await cursor.flush()
                print(f"flushed {positions[49].ledger_id} {positions[49].entry_id}", flush=True)
            i += 100

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_sigkilled_writer_process_loses_no_acknowledged_entry(bookies, tmp_path, zk_connect) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    out_path = tmp_path / "writer.out"
    with open(out_path, "w") as out:
        writer = subprocess.Popen([sys.executable, str(script), zk_connect, TOPIC], stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True, cwd=os.getcwd())
    try:
        def lines(kind: str) -> list[list[int]]:
            return [[int(x) for x in line.split()[1:]] for line in out_path.read_text().splitlines()
                    if line.startswith(kind + " ")]

        await wait_for_async(lambda: len(lines("acked")) >= 2_000, timeout_s=60, what="the writer's 2,000 acks")
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
            writer.wait()
    acked = lines("acked")
    assert [a[0] for a in acked] == list(range(len(acked)))
    requested_md = [Position(*m) for m in lines("md")]
    flushed_md = [Position(*m) for m in lines("flushed")]
    async with Broker(zk_connect, cfg(max_entries_per_ledger=500, retention_time_s=-1,
                                      retention_size_bytes=-1)) as b:
        ml = await b.factory.open(TOPIC)
        old_last = acked[-1][1]
        assert (await b.region.read_ledger(old_last)).value.state is LedgerState.CLOSED
        reader = ml.new_non_durable_cursor(Position(acked[0][1], -1))
        got = await read_all(reader)
        assert len(got) >= len(acked)
        assert [e.data for e in got] == [f"m-{i}".encode() for i in range(len(got))]
        assert [tuple(e.position) for e in got[: len(acked)]] == [(a[1], a[2]) for a in acked]
        md = ml.cursors["sub"].mark_delete_position
        assert flushed_md[-1] <= md <= requested_md[-1]
        assert (await ml.add_entry(b"after")).ledger_id > old_last


async def test_time_based_rollover_and_error_paths(bookies, zk_connect) -> None:
    config = cfg(max_ledger_rollover_time_s=0.3, housekeeping_interval_s=0.05, retention_time_s=-1,
                 retention_size_bytes=-1)
    async with Broker(zk_connect, config) as b:
        ml = await b.factory.open(TOPIC)
        first = await ml.add_entry(b"one")
        await wait_for_async(lambda: len(ml.layout) == 2 and ml.state.value == "LedgerOpened", timeout_s=10,
                             what="a time-based rollover")
        second = await ml.add_entry(b"two")
        assert second.ledger_id > first.ledger_id
        assert ml.next_position(first) == second and ml.entries_between(Position(0, -1), second) == 2
        assert ml.internal_stats()["ledgers"][0] == {"ledgerId": first.ledger_id, "entries": 1, "size": 3,
                                                     "offloaded": False}
        with pytest.raises(CursorNotFoundError):
            await ml.delete_cursor("nope")
        cursor = await ml.open_cursor("sub", initial_position=InitialPosition.EARLIEST)
        with pytest.raises(InvalidCursorPositionError):
            await cursor.delete([Position(second.ledger_id, 5)])
        with pytest.raises(InvalidCursorPositionError):
            await cursor.mark_delete(Position(second.ledger_id, 1))
        with pytest.raises(EntryTooLargeError):
            ml.add_entry_nowait(bytes(b.client.config.entry_max_size_bytes + 1))
        await ml.close()
        with pytest.raises(ManagedLedgerClosedError):
            ml.add_entry_nowait(b"x")
        with pytest.raises(ManagedLedgerClosedError):
            await cursor.read_entries(1)
        ml2 = await b.factory.open(TOPIC)
        assert ml2 is not ml and ml2.number_of_entries == 2
        assert [e.data for e in await read_all(ml2.cursors["sub"])] == [b"one", b"two"]


async def test_on_done_runs_in_the_turn_the_bookies_answer_settles_the_entry(bookies, zk_connect) -> None:
    """A publish's receipt need not wait a turn of the event loop: ``on_done`` runs inside the write handle's
    settlement of the bookies' answer (not as a done callback a turn later), once per entry, failures too."""
    async with Broker(zk_connect, cfg()) as b:
        ml = await b.factory.open(TOPIC)
        writer = ml._appender.writer
        settling = {"now": False}
        settle = writer.on_settled

        def watched_settle() -> None:
            settling["now"] = True
            try:
                settle()
            finally:
                settling["now"] = False

        writer.on_settled = watched_settle
        seen: list[tuple[bool, Position]] = []
        futures = [ml.add_entry_nowait(payload(i), on_done=lambda f: seen.append((settling["now"], f.result())))
                   for i in range(20)]
        positions = await asyncio.gather(*futures)
        assert seen == [(True, p) for p in positions]
        assert positions == sorted(positions)

        failed: list[BaseException] = []
        fut = ml.add_entry_nowait(payload(99), on_done=lambda f: failed.append(f.exception()))
        ml._appender.fence(ManagedLedgerFencedError("fenced by the test"))  # before any bookie answers
        assert len(failed) == 1 and isinstance(failed[0], ManagedLedgerFencedError) and fut.done()
