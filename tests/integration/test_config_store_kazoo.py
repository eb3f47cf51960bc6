"""KazooMetadataStore against a real ZooKeeper: semantics at raw paths, watches, session expiry, shutdown."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from kazoo.client import KazooClient

from config_store import (BadVersionError, BookieRegistration, InvalidMetadataError, KazooMetadataStore,
                          MetadataUnavailableError, NodeExistsError, NotEmptyError, NotFoundError, RegionStore,
                          SessionEvent, StoreClosedError, Versioned)
from tests.kit.wait import wait_for, wait_for_async


@pytest.fixture
def raw(zk_server, zk_connect):
    """A plain kazoo client at the *unchrooted* root, and the chroot prefix of this test."""
    client = KazooClient(hosts=zk_server.connect)
    client.start(timeout=15)
    chroot = "/" + zk_connect.split("/", 1)[1]
    yield client, chroot
    client.stop()
    client.close()


@pytest.fixture
async def store(zk_connect):
    async with KazooMetadataStore(zk_connect, session_timeout_ms=6_000) as s:
        yield s


async def test_operations_land_at_the_raw_paths(store: KazooMetadataStore, raw) -> None:
    client, chroot = raw
    assert await store.create("/a/b", b"one") == "/a/b"
    assert client.get(f"{chroot}/a/b")[0] == b"one"
    assert await store.get("/a/b") == Versioned(b"one", 0)
    assert await store.set("/a/b", b"two", expected_version=0) == 1
    assert client.get(f"{chroot}/a/b")[0] == b"two"
    client.set(f"{chroot}/a/b", b"external")  # someone else writes: version 2
    with pytest.raises(BadVersionError, match="/a/b"):
        await store.set("/a/b", b"stale", expected_version=1)
    assert client.get(f"{chroot}/a/b")[0] == b"external"
    with pytest.raises(NodeExistsError, match="/a/b"):
        await store.create("/a/b")
    with pytest.raises(NotFoundError):
        await store.create("/x/y", make_parents=False)
    with pytest.raises(NotFoundError):
        await store.set("/nope", b"", expected_version=-1)
    assert await store.exists("/a/b") == 2 and await store.exists("/nope") is None
    seq = [await store.create("/q/n-", sequential=True) for _ in range(3)]
    assert seq == ["/q/n-0000000000", "/q/n-0000000001", "/q/n-0000000002"]
    assert await store.children("/q") == ["n-0000000000", "n-0000000001", "n-0000000002"]
    assert await store.children("/missing") == []
    path = await store.create("/e/mine", b"x", ephemeral=True)
    assert client.exists(f"{chroot}{path}").ephemeralOwner == store._client.client_id[0]
    with pytest.raises(NotEmptyError):
        await store.delete("/q")
    with pytest.raises(BadVersionError):
        await store.delete("/a/b", expected_version=0)
    await store.delete("/missing")
    with pytest.raises(NotFoundError):
        await store.delete("/missing", expected_version=3)
    await store.delete("/q", recursive=True)
    assert client.exists(f"{chroot}/q") is None
    with pytest.raises(InvalidMetadataError):
        await store.get("relative/path")


async def test_watches_fire_on_changes_made_elsewhere(store: KazooMetadataStore, raw) -> None:
    client, chroot = raw
    loop_thread = threading.get_ident()
    data_seen: list[Versioned[bytes] | None] = []
    kids_seen: list[list[str]] = []
    threads: set[int] = set()

    def on_data(v):
        threads.add(threading.get_ident())
        data_seen.append(v)

    store.watch_data("/w/node", on_data)
    store.watch_children("/w", kids_seen.append)
    await wait_for_async(lambda: data_seen == [None] and kids_seen == [[]], 10, what="initial deliveries")
    client.create(f"{chroot}/w/node", b"1", makepath=True)
    await wait_for_async(lambda: data_seen[-1] == Versioned(b"1", 0) and kids_seen[-1] == ["node"], 10)
    client.set(f"{chroot}/w/node", b"2")
    await wait_for_async(lambda: data_seen[-1] == Versioned(b"2", 1), 10)
    client.create(f"{chroot}/w/other")
    await wait_for_async(lambda: kids_seen[-1] == ["node", "other"], 10)
    client.delete(f"{chroot}/w", recursive=True)
    await wait_for_async(lambda: data_seen[-1] is None and kids_seen[-1] == [], 10)
    assert threads == {loop_thread}  # callbacks run on the event loop, never on kazoo's threads


async def test_concurrent_compare_and_set_racers_never_overwrite(zk_connect) -> None:
    async with KazooMetadataStore(zk_connect) as a, KazooMetadataStore(zk_connect) as b:
        await a.create("/counter", b"0")

        async def increment(store: KazooMetadataStore, times: int) -> int:
            lost = 0
            for _ in range(times):
                while True:
                    current = await store.get("/counter")
                    try:
                        await store.set("/counter", str(int(current.value) + 1).encode(),
                                        expected_version=current.version)
                        break
                    except BadVersionError:
                        lost += 1
            return lost

        lost = await asyncio.gather(increment(a, 25), increment(b, 25), increment(a, 25), increment(b, 25))
        final = await a.get("/counter")
        assert final == Versioned(b"100", 100)  # every increment applied exactly once
        logging.getLogger(__name__).info("lost races: %s", lost)


def expire_session(store: KazooMetadataStore, hosts: str) -> None:
    """Expires the store's session for real, the way kazoo's own test harness does: a second client joins
    the same session (id + password) and closes it."""
    session_id, password = store._client.client_id
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    intruder.start(timeout=15)
    intruder.stop()
    intruder.close()


async def test_session_expiry_is_survived(zk_connect, raw, caplog) -> None:
    client, chroot = raw
    bookie = BookieRegistration("bookie-1", "127.0.0.1:3181", "127.0.0.1:8001", "0.1.0")
    async with KazooMetadataStore(zk_connect, session_timeout_ms=6_000) as store, \
            KazooMetadataStore(zk_connect, session_timeout_ms=6_000) as observer_store:
        events: list[SessionEvent] = []
        store.add_session_listener(events.append)
        region = RegionStore(store)
        await region.register_bookie(bookie)
        watched: list[Versioned[bytes] | None] = []
        store.watch_data("/watched", watched.append)
        cache = await RegionStore(observer_store).bookie_cache()
        assert "bookie-1" in cache.writable()
        gone = asyncio.Event()
        cache.add_listener(lambda c: gone.set() if "bookie-1" not in c.writable() else None)
        old_session = store._client.client_id[0]

        with caplog.at_level(logging.WARNING, logger="config_store"):
            await asyncio.to_thread(expire_session, store, zk_connect)
            await wait_for_async(lambda: SessionEvent.LOST in events, 30, what="LOST delivered")
        assert store.session_lost_count == 1
        assert any("session LOST" in r.message and r.levelno == logging.WARNING for r in caplog.records)
        await asyncio.wait_for(gone.wait(), 30)  # the observer saw the registration vanish with the session

        await wait_for_async(lambda: events[-1] is SessionEvent.CONNECTED, 30, what="a new session")
        assert store._client.client_id[0] != old_session
        # The ephemeral registration is back, owned by the new session, and the other store sees it again.
        await wait_for_async(lambda: client.exists(f"{chroot}/bookies/available/bookie-1"), 30,
                             what="registration re-created")
        stat = client.exists(f"{chroot}/bookies/available/bookie-1")
        assert stat.ephemeralOwner == store._client.client_id[0]
        await cache.wait_for(lambda c: c.writable().get("bookie-1") == bookie, timeout_s=30)
        # Watches were re-armed on the new session.
        client.create(f"{chroot}/watched", b"after expiry")
        await wait_for_async(lambda: watched and watched[-1] == Versioned(b"after expiry", 0), 30)
        assert await store.get("/watched") == Versioned(b"after expiry", 0)
        cache.close()


async def test_close_is_idempotent_and_leaves_no_thread(zk_connect) -> None:
    before = set(threading.enumerate())
    store = KazooMetadataStore(zk_connect)
    await store.start()
    store.watch_data("/x", lambda v: None)
    await store.register_ephemeral("/eph", b"x")
    assert set(threading.enumerate()) - before  # kazoo's threads are running
    await store.close()
    await store.close()
    wait_for(lambda: not (set(threading.enumerate()) - before), 10,
             what=f"no leftover threads: {set(threading.enumerate()) - before}")
    with pytest.raises(StoreClosedError):
        await store.get("/x")


async def test_start_fails_cleanly_when_zookeeper_is_unreachable() -> None:
    from magnetar.net import free_port

    before = set(threading.enumerate())
    store = KazooMetadataStore(f"127.0.0.1:{free_port('127.0.0.1')}", connect_timeout_ms=500)
    with pytest.raises(MetadataUnavailableError, match="could not connect"):
        await store.start()
    await store.close()
    wait_for(lambda: not (set(threading.enumerate()) - before), 10, what="no leftover threads")


async def test_calls_wait_for_a_suspended_connection_then_fail_as_unavailable(zk_connect) -> None:
    """While the connection is down a call waits (bounded by the operation timeout) instead of failing
    at once; past the deadline it is MetadataUnavailableError, a retriable error."""
    store = KazooMetadataStore(zk_connect, operation_timeout_ms=300)
    await store.start()
    try:
        store._connected.clear()  # as after SUSPENDED, without touching the server
        with pytest.raises(MetadataUnavailableError) as info:
            await store.get("/x")
        assert info.value.retriable
        store._connected.set()
        assert await store.get("/x") is None
    finally:
        await store.close()


async def test_fail_fast_ends_the_waits_for_a_lost_connection(tmp_path) -> None:
    """What a shutting-down broker asks (regression: with its ZooKeeper gone a SIGTERMed broker waited the
    operation deadline, 30 s, per call): after ``fail_fast`` a call that finds no connection fails at once,
    one already waiting for the connection stops, and so does a request kazoo holds until it reconnects."""
    import time

    from tests.kit.zookeeper import start_zookeeper

    zookeeper = start_zookeeper(tmp_path)
    store = KazooMetadataStore(zookeeper.new_chroot("fail-fast"), operation_timeout_ms=30_000)
    try:
        await store.start()
        await store.create("/x", b"1")
        zookeeper.process.kill()
        await wait_for_async(lambda: not store.connected, 15, what="the connection lost")
        waiting = asyncio.ensure_future(store.get("/x"))
        held = store._bridge(store._client.get_async("/x"))  # sent while reconnecting: kazoo keeps it
        done, _ = await asyncio.wait([waiting, held], timeout=0.5)
        assert not done, "without fail_fast both wait for a connection"
        began = time.monotonic()
        store.fail_fast()
        with pytest.raises(MetadataUnavailableError):
            await waiting
        with pytest.raises(TimeoutError):
            await held
        with pytest.raises(MetadataUnavailableError):
            await store.set("/x", b"2", expected_version=0)
        assert time.monotonic() - began < 5.0, "no call waited for the connection"
    finally:
        await store.close()
        zookeeper.process.cleanup()
