"""The auto-recovery metadata (records, locks, election) on the in-memory store with ZooKeeper's semantics:
two stores on one tree are two sessions, and an expired session takes its ephemeral nodes with it."""

from __future__ import annotations

from bookie.autorecovery import Fragment, UnderReplicationStore
from config_store import MemoryMetadataStore, MemoryTree


async def sessions(n: int):
    tree = MemoryTree()
    stores = [MemoryMetadataStore(tree, name=f"s{i}") for i in range(n)]
    for s in stores:
        await s.start()
    return stores


async def test_marking_merges_and_resolving_removes_then_deletes_the_record() -> None:
    (store,) = await sessions(1)
    ur = UnderReplicationStore(store)
    assert await ur.mark(5, [Fragment(0, "a")]) is True
    assert await ur.mark(5, [Fragment(0, "a")]) is False  # already recorded: nothing written
    assert await ur.mark(5, [Fragment(10, "b")]) is True
    record = (await ur.read(5)).value
    assert [f.key for f in record.fragments] == [(0, "a"), (10, "b")]
    await ur.resolve(5, (0, "a"))
    assert [f.key for f in (await ur.read(5)).value.fragments] == [(10, "b")]
    await ur.resolve(5, (10, "b"))
    assert await ur.read(5) is None and await ur.list_ledgers() == []


async def test_one_lock_holder_per_ledger_and_the_lock_goes_with_its_session() -> None:
    a, b = await sessions(2)
    ua, ub = UnderReplicationStore(a), UnderReplicationStore(b)
    assert await ua.try_lock(7, "wa") is True
    assert await ub.try_lock(7, "wb") is False
    assert await ub.lock_owner(7) == "wa"
    a.expire_session()
    assert await ub.try_lock(7, "wb") is True


async def test_one_auditor_and_a_successor_after_its_session_ends() -> None:
    a, b = await sessions(2)
    ua, ub = UnderReplicationStore(a), UnderReplicationStore(b)
    assert await ua.try_become_auditor("a") is True
    assert await ub.try_become_auditor("b") is False
    await ub.resign_auditor("b")  # not the holder: changes nothing
    assert await ub.auditor() == "a"
    a.expire_session()
    assert await ub.try_become_auditor("b") is True and await ua.auditor() == "b"


async def test_enable_disable_and_decommission_marks() -> None:
    (store,) = await sessions(1)
    ur = UnderReplicationStore(store)
    assert await ur.enabled()
    await ur.set_enabled(False)
    await ur.set_enabled(False)
    assert not await ur.enabled()
    await ur.set_enabled(True)
    assert await ur.enabled()
    await ur.decommission("bookie-1")
    await ur.decommission("bookie-1")
    assert await ur.decommissioning() == ["bookie-1"]
    await ur.note_missing("bookie-2", 1234)
    await ur.note_missing("bookie-2", 9999)  # the first sighting stays
    assert await ur.missing_since() == {"bookie-2": 1234}
