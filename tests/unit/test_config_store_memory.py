"""MetadataStore semantics on the in-memory store: versions, CAS, ephemerals, sequentials, watches, sessions,
and the fault hooks other rooms' unit tests rely on."""

from __future__ import annotations

import asyncio

import pytest

from config_store import (BadVersionError, InvalidMetadataError, MemoryMetadataStore, MetadataUnavailableError,
                          NodeExistsError, NotEmptyError, NotFoundError, SessionEvent, StoreClosedError, Versioned)
from tests.kit.wait import wait_for_async


@pytest.fixture
async def store():
    async with MemoryMetadataStore() as s:
        yield s


async def test_create_get_set_delete_with_versions(store: MemoryMetadataStore) -> None:
    assert await store.get("/a/b") is None
    assert await store.exists("/a/b") is None
    assert await store.create("/a/b", b"one") == "/a/b"
    assert await store.get("/a") == Versioned(b"", 0)  # parents are made, empty
    assert await store.get("/a/b") == Versioned(b"one", 0)
    assert await store.set("/a/b", b"two", expected_version=0) == 1
    assert await store.set("/a/b", b"three", expected_version=-1) == 2
    with pytest.raises(BadVersionError, match="/a/b"):
        await store.set("/a/b", b"stale", expected_version=1)
    assert await store.get("/a/b") == Versioned(b"three", 2)
    with pytest.raises(NodeExistsError, match="/a/b"):
        await store.create("/a/b", b"again")
    with pytest.raises(NotFoundError):
        await store.set("/nope", b"x", expected_version=-1)
    with pytest.raises(NotFoundError):
        await store.create("/x/y", make_parents=False)
    with pytest.raises(BadVersionError):
        await store.delete("/a/b", expected_version=1)
    await store.delete("/a/b", expected_version=2)
    assert await store.get("/a/b") is None


async def test_delete_semantics(store: MemoryMetadataStore) -> None:
    await store.delete("/missing")  # unconditional delete of a missing node: no-op
    with pytest.raises(NotFoundError):
        await store.delete("/missing", expected_version=0)
    await store.create("/t/a/1")
    await store.create("/t/b")
    with pytest.raises(NotEmptyError):
        await store.delete("/t")
    await store.delete("/t", recursive=True)
    assert await store.children("/") == []
    with pytest.raises(InvalidMetadataError):
        await store.delete("/")


async def test_children_sorted_and_empty_when_missing(store: MemoryMetadataStore) -> None:
    assert await store.children("/p") == []
    for name in ["c", "a", "b"]:
        await store.create(f"/p/{name}")
    assert await store.children("/p") == ["a", "b", "c"]


async def test_sequential_nodes_have_increasing_ten_digit_suffixes(store: MemoryMetadataStore) -> None:
    first = await store.create("/q/item-", sequential=True)
    second = await store.create("/q/item-", sequential=True)
    assert first == "/q/item-0000000000" and second == "/q/item-0000000001"
    await store.delete(second)
    third = await store.create("/q/item-", sequential=True)
    assert third == "/q/item-0000000003"  # ZooKeeper's cversion also counts the delete


async def test_bad_paths_and_data_are_rejected(store: MemoryMetadataStore) -> None:
    for path in ["", "a", "/a/", "/a//b", "/a/./b", "/a/../b"]:
        with pytest.raises(InvalidMetadataError):
            await store.get(path)
    with pytest.raises(InvalidMetadataError):
        await store.create("/a", "text")  # type: ignore[arg-type]


async def test_ephemeral_nodes_belong_to_the_session() -> None:
    async with MemoryMetadataStore() as owner:
        other = MemoryMetadataStore(owner.tree)
        async with other:
            await owner.create("/e/node", b"x", ephemeral=True)
            assert await other.get("/e/node") == Versioned(b"x", 0)
            with pytest.raises(InvalidMetadataError, match="ephemeral"):
                await owner.create("/e/node/child")
            await owner.close()
            assert await other.get("/e/node") is None


async def test_lifecycle_is_idempotent_and_guarded() -> None:
    s = MemoryMetadataStore()
    with pytest.raises(StoreClosedError, match="start"):
        await s.get("/x")
    await s.start()
    await s.start()
    await s.close()
    await s.close()
    with pytest.raises(StoreClosedError, match="closed"):
        await s.get("/x")
    with pytest.raises(StoreClosedError):
        await s.start()


async def test_data_watch_sees_current_state_then_every_change(store: MemoryMetadataStore) -> None:
    seen: list[Versioned[bytes] | None] = []
    handle = store.watch_data("/w", seen.append)
    await wait_for_async(lambda: seen == [None], 2, what="initial state")
    await store.create("/w", b"1")
    await wait_for_async(lambda: seen[-1] == Versioned(b"1", 0), 2, what="creation")
    await store.set("/w", b"2", expected_version=0)
    await wait_for_async(lambda: seen[-1] == Versioned(b"2", 1), 2, what="change")
    await store.delete("/w")
    await wait_for_async(lambda: seen[-1] is None, 2, what="deletion")
    handle.cancel()
    await asyncio.gather(handle._task, return_exceptions=True)
    assert handle.cancelled and handle._task.cancelled()
    count = len(seen)
    await store.create("/w", b"3")
    assert len(seen) == count


async def test_children_watch_and_async_callbacks(store: MemoryMetadataStore) -> None:
    seen: list[list[str]] = []

    async def on_children(kids: list[str]) -> None:
        seen.append(kids)

    store.watch_children("/kids", on_children)
    await wait_for_async(lambda: seen == [[]], 2)
    await store.create("/kids/b")
    await store.create("/kids/a")
    await wait_for_async(lambda: seen[-1] == ["a", "b"], 2)
    await store.delete("/kids", recursive=True)
    await wait_for_async(lambda: seen[-1] == [], 2)


async def test_a_failing_callback_does_not_kill_the_watch(store: MemoryMetadataStore) -> None:
    seen = []

    def flaky(v):
        seen.append(v)
        if len(seen) == 1:
            raise RuntimeError("boom")

    store.watch_data("/f", flaky)
    await wait_for_async(lambda: len(seen) == 1, 2)
    await store.create("/f", b"x")
    await wait_for_async(lambda: len(seen) == 2, 2)


async def test_fail_next_injects_write_faults(store: MemoryMetadataStore) -> None:
    store.fail_next(2)
    with pytest.raises(MetadataUnavailableError, match="injected"):
        await store.create("/x")
    assert await store.get("/x") is None  # reads are not affected, and the write was not applied
    with pytest.raises(MetadataUnavailableError):
        await store.create("/x")
    await store.create("/x")
    store.fail_next(1, BadVersionError("stolen"))
    with pytest.raises(BadVersionError, match="stolen"):
        await store.set("/x", b"y", expected_version=0)
    assert await store.set("/x", b"y", expected_version=0) == 1


async def test_suspend_and_resume(store: MemoryMetadataStore) -> None:
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    seen = []
    store.watch_data("/s", seen.append)
    await wait_for_async(lambda: seen == [None], 2)
    store.suspend()
    with pytest.raises(MetadataUnavailableError):
        await store.get("/s")
    other = MemoryMetadataStore(store.tree)
    async with other:
        await other.create("/s", b"while away")
        store.resume()
        await wait_for_async(lambda: seen[-1] == Versioned(b"while away", 0), 2)
    assert events == [SessionEvent.SUSPENDED, SessionEvent.RECONNECTED]
    assert store.session_lost_count == 0


async def test_session_expiry_recreates_registrations_and_rearms_watches(caplog) -> None:
    async with MemoryMetadataStore() as store:
        observer = MemoryMetadataStore(store.tree)
        await observer.start()
        events: list[SessionEvent] = []
        store.add_session_listener(events.append)
        reg = await store.register_ephemeral("/reg/me", b"v1")
        seen = []
        observer.watch_data("/reg/me", seen.append)
        await wait_for_async(lambda: seen and seen[-1] is not None, 2)
        with caplog.at_level("WARNING", logger="config_store"):
            store.expire_session()
        assert store.session_lost_count == 1
        assert events == [SessionEvent.LOST, SessionEvent.CONNECTED]
        assert any("session LOST" in r.message for r in caplog.records)
        def recreated() -> bool:
            node = store.tree.node("/reg/me")
            return node is not None and node.owner == store._session_id()

        await wait_for_async(recreated, 2, what="node re-created by the new session")
        # The observer saw a change (vanished and back; the two may be coalesced into one delivery).
        await wait_for_async(lambda: len(seen) >= 2 and seen[-1] == Versioned(b"v1", 0), 2)
        await reg.update(b"v2")
        await wait_for_async(lambda: seen[-1] is not None and seen[-1].value == b"v2", 2)
        await reg.close()
        await reg.close()
        await wait_for_async(lambda: seen[-1] is None, 2)
        store.expire_session()
        assert store.tree.node("/reg/me") is None
        await observer.close()


async def test_registration_replaces_our_leftover_but_not_a_foreign_node() -> None:
    async with MemoryMetadataStore(ephemeral_conflict_timeout_s=0.2) as store:
        squatter = MemoryMetadataStore(store.tree)
        await squatter.start()
        await squatter.create("/r/same", b"mine", ephemeral=True)  # e.g. our previous process's session
        reg = await store.register_ephemeral("/r/same", b"mine")
        assert store.tree.node("/r/same").owner == store._session_id()
        await squatter.create("/r/other", b"theirs", ephemeral=True)
        with pytest.raises(NodeExistsError, match="different content"):
            await store.register_ephemeral("/r/other", b"mine")
        assert (await store.get("/r/other")).value == b"theirs"
        with pytest.raises(NodeExistsError, match="already registered"):
            await store.register_ephemeral("/r/same", b"mine")
        # A foreign node that goes away in time is waited for, then replaced.
        store.ephemeral_conflict_timeout_s = 5.0
        task = asyncio.create_task(store.register_ephemeral("/r/other", b"mine"))
        await wait_for_async(lambda: store._watches, 2, what="the registration waiting on the node")
        await squatter.close()
        reg2 = await asyncio.wait_for(task, 5)
        assert (await store.get("/r/other")).value == b"mine"
        await reg.close()
        await reg2.close()


async def test_registration_retries_after_injected_faults() -> None:
    async with MemoryMetadataStore() as store:
        await store.register_ephemeral("/r/x", b"x")
        store.fail_next(3)  # the first re-creation attempts after the expiry fail
        store.expire_session()
        await wait_for_async(lambda: store.tree.node("/r/x") is not None, 10, what="re-created after faults")


async def test_close_cancels_watch_tasks() -> None:
    store = MemoryMetadataStore()
    await store.start()
    handles = [store.watch_data(f"/n{i}", lambda v: None) for i in range(5)]
    await wait_for_async(lambda: all(h._task is not None for h in handles), 1)
    tasks = list(store._tasks)
    await store.close()
    assert all(t.done() for t in tasks)
    assert not store._tasks
