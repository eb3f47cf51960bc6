"""The managed ledger's broker entry metadata against real bookies and ZooKeeper: indexes continuous across
rollovers, reopening and a crashed owner; finding entries by index; entries written before indexes."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from broker.managed_ledger import IndexBeyondEndError, IndexNotEnabledError, IndexTrimmedError, Position
from broker.managed_ledger.interceptor import entry_base_index, read_broker_entry_metadata, stored_index
from magnetar.protocol import pb
from magnetar.protocol.frames import encode_entry
from tests.integration.test_managed_ledger import Broker, cfg
from tests.kit.bookies import start_bookies

TOPIC = "acme/ns/persistent/indexed"
BOTH = ("timestamp", "index")


@pytest.fixture
def bookies(tmp_path, zk_connect):
    return start_bookies(3, tmp_path, zk_connect)


def batch(n: int, tag: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=tag, publish_time=1)
    if n > 1:
        md.num_messages_in_batch = n
    return encode_entry(md, f"entry-{tag}".encode())


async def read_everything(ml) -> list:
    reader = ml.new_non_durable_cursor(Position(ml.layout.ledger_ids[0], -1))
    out = []
    while got := await reader.read_entries(100):
        out.extend(got)
    return out


def check_continuous(entries, counts, start=0) -> None:
    expected = start
    for e, n in zip(entries, counts, strict=True):
        assert entry_base_index(e.data) == expected, e.position
        expected += n
        assert stored_index(e.data) == expected - 1


async def test_indexes_continue_over_rollovers_reopen_and_a_crashed_owner(bookies, zk_connect) -> None:
    config = cfg(max_entries_per_ledger=7, broker_entry_metadata_interceptors=BOTH, retention_time_s=-1, retention_size_bytes=-1)
    rng = random.Random(7)
    counts = [rng.choice([1, 1, 3, 10]) for _ in range(40)]
    async with Broker(zk_connect, config) as a:
        ml = await a.factory.open(TOPIC)
        assert ml.next_index == 0
        before_ms = int(time.time() * 1000)
        bases = []
        futures = []
        for i, n in enumerate(counts[:25]):
            bases.append(ml.next_index)  # read just before the append: that entry's base index
            futures.append(ml.add_entry_nowait(batch(n, i)))
        await asyncio.gather(*futures)
        assert bases == [sum(counts[:i]) for i in range(25)] and ml.next_index == sum(counts[:25])
        stored = await read_everything(ml)
        assert len({e.position.ledger_id for e in stored}) >= 4  # rolled over several times
        check_continuous(stored, counts[:25])
        stamps = [read_broker_entry_metadata(e.data).broker_timestamp for e in stored]
        assert before_ms <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= int(time.time() * 1000)
    async with Broker(zk_connect, config) as b:  # a clean reopen (topic unload/reload)
        ml = await b.factory.open(TOPIC)
        assert ml.next_index == sum(counts[:25]) == ml.last_confirmed_index + 1
        await asyncio.gather(*(ml.add_entry_nowait(batch(n, 25 + i)) for i, n in enumerate(counts[25:32])))
        in_flight = [ml.add_entry_nowait(batch(n, 32 + i)) for i, n in enumerate(counts[32:])]
        await b.abandon()  # crash: in-flight appends may or may not have landed
    await asyncio.gather(*in_flight, return_exceptions=True)
    async with Broker(zk_connect, config) as c:
        ml = await c.factory.open(TOPIC)
        stored = await read_everything(ml)
        landed = len(stored)
        assert 32 <= landed <= 40
        check_continuous(stored, counts[:landed])
        assert ml.next_index == sum(counts[:landed])
        await ml.add_entry(batch(1, 99))
        assert stored_index((await read_everything(ml))[-1].data) == sum(counts[:landed])


async def test_first_index_of_a_topic_with_entries_in_flight_is_theirs(bookies, zk_connect) -> None:
    """Regression (a Kafka consumer reading a replicated topic from the earliest offset got nothing): with no
    entry confirmed yet, ListOffsets(earliest) answered the index after the entries still in flight, so the
    consumer skipped them, or its fetch was out of range and it reset to the latest offset."""
    async with Broker(zk_connect, cfg(broker_entry_metadata_interceptors=BOTH)) as a:
        ml = await a.factory.open(TOPIC)
        in_flight = [ml.add_entry_nowait(batch(n, i)) for i, n in enumerate((3, 2))]  # not confirmed yet
        assert ml.next_index == 5 and ml.last_confirmed_index == -1
        assert await ml.first_index() == 0
        await asyncio.gather(*in_flight)
        assert await ml.first_index() == 0 and ml.last_confirmed_index == 4


async def test_find_position_by_index_over_ledgers_with_batches(bookies, zk_connect) -> None:
    config = cfg(max_entries_per_ledger=5, broker_entry_metadata_interceptors=BOTH, retention_time_s=0,
                 retention_size_bytes=0)
    counts = [1, 4, 1, 1, 10, 2, 1, 1, 1, 7, 3, 1, 1, 20, 1, 5, 1]
    async with Broker(zk_connect, config) as a:
        ml = await a.factory.open(TOPIC)
        with pytest.raises(IndexBeyondEndError):
            await ml.find_position_by_index(1)
        assert await ml.find_position_by_index(0) == ml.layout.tail()  # the next message to come
        cursor = await ml.open_cursor("sub")
        positions = [await ml.add_entry(batch(n, i)) for i, n in enumerate(counts)]
        assert len({p.ledger_id for p in positions}) == 4
        total = sum(counts)
        reads = 0
        original = ml._read_positions

        async def counting(ps):
            nonlocal reads
            reads += len(ps)
            return await original(ps)

        ml._read_positions = counting
        index = 0
        for position, n in zip(positions, counts):
            for member in range(n):
                assert await ml.find_position_by_index(index + member) == position, index + member
            index += n
        assert reads <= 2 * total  # per-ledger bounds cached, then bisection inside one ledger of 5 entries
        reads = 0
        assert await ml.find_position_by_index(37) == positions[counts.index(20)]
        assert reads <= 4
        assert await ml.find_position_by_index(total) == ml.layout.tail()
        with pytest.raises(IndexBeyondEndError) as info:
            await ml.find_position_by_index(total + 1)
        assert info.value.next_index == total
        with pytest.raises(IndexTrimmedError):
            await ml.find_position_by_index(-1)
        assert await ml.first_index() == 0
        # trim the first two ledgers away: their indexes are gone, the rest still resolve
        await cursor.mark_delete(positions[11])
        await ml.trim()
        first_kept = ml.first_position()
        assert first_kept.ledger_id == positions[10].ledger_id
        kept_from = positions.index(first_kept)
        first_index = sum(counts[:kept_from])
        assert await ml.first_index() == first_index
        with pytest.raises(IndexTrimmedError) as trimmed:
            await ml.find_position_by_index(first_index - 1)
        assert trimmed.value.first_index == first_index and trimmed.value.next_index == total
        assert await ml.find_position_by_index(first_index) == first_kept
        assert await ml.find_position_by_index(total - 1) == positions[-1]


async def test_entries_written_before_indexes_count_from_zero_after_them(bookies, zk_connect) -> None:
    async with Broker(zk_connect, cfg(max_entries_per_ledger=4, retention_time_s=-1, retention_size_bytes=-1)) as a:
        ml = await a.factory.open(TOPIC)
        with pytest.raises(IndexNotEnabledError):
            ml.next_index
        for i in range(6):
            await ml.add_entry(batch(3, i))
        assert read_broker_entry_metadata((await read_everything(ml))[0].data) is None  # stored as given
    async with Broker(zk_connect, cfg(max_entries_per_ledger=4, broker_entry_metadata_interceptors=BOTH, retention_time_s=-1, retention_size_bytes=-1)) as b:
        ml = await b.factory.open(TOPIC)
        assert ml.next_index == 0
        first = await ml.add_entry(batch(2, 6))
        second = await ml.add_entry(batch(1, 7))
        assert await ml.find_position_by_index(0) == first == await ml.find_position_by_index(1)
        assert await ml.find_position_by_index(2) == second
        assert await ml.first_index() == 0
    async with Broker(zk_connect, cfg(max_entries_per_ledger=4, broker_entry_metadata_interceptors=BOTH, retention_time_s=-1, retention_size_bytes=-1)) as c:
        ml = await c.factory.open(TOPIC)
        assert ml.next_index == 3  # recovered from the last stored index, not restarted
