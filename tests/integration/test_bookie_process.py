"""Real bookie processes: crash safety (SIGKILL, torn journal tails), fencing, malformed and oversized input,
the disk threshold, metrics, and the ZooKeeper registration (including a session expiry)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import struct
import urllib.request

import grpc
import lmdb
import pytest
from kazoo.client import KazooClient

from bookie.journal import list_journal_files
from config_store import KazooMetadataStore, RegionStore
from magnetar.proto import bookie_pb2 as pb
from tests.kit.bookies import BookieProcess
from tests.kit.wait import wait_for_async
from tests.kit.zookeeper import start_zookeeper

S = pb.Status
SERVICE = "/magnetar.bookie.v1.BookieService/"
_OPTIONS = [("grpc.max_receive_message_length", 128 << 20), ("grpc.max_send_message_length", 128 << 20)]


def payload(ledger_id: int, entry_id: int, size: int = 1000) -> bytes:
    head = f"{ledger_id}/{entry_id}/".encode()
    return head + bytes((entry_id * 7 + k) % 251 for k in range(size - len(head)))


def add_request(request_id: int, entries, *, recovery: bool = False) -> pb.AddRequest:
    return pb.AddRequest(
        request_id=request_id,
        recovery=recovery,
        entries=[pb.Entry(ledger_id=l, entry_id=e, last_add_confirmed=e - 1, payload=p) for l, e, p in entries],
    )


def answers_in(raw: bytes) -> list[pb.AddResponse]:
    """The answers one AddEntries stream message carries: itself, then those it brought along (``more``)."""
    first = pb.AddResponse.FromString(raw)
    more = list(first.more)
    first.ClearField("more")
    return [first, *more]


class Client:
    """A minimal raw client of one bookie (the ledger client is the lead's; tests here poke the wire)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address, options=_OPTIONS)

    def raw(self, method: str, kind: str = "unary_unary"):
        return getattr(self.channel, kind)(SERVICE + method, request_serializer=None, response_deserializer=None)

    async def add(self, requests: list[pb.AddRequest]) -> list[pb.AddResponse]:
        call = self.raw("AddEntries", "stream_stream")(iter([r.SerializeToString() for r in requests]), timeout=30)
        return [a async for raw in call for a in answers_in(raw)]

    async def read(self, ledger_id: int, entry_ids=None, *, first=None, last=None, fence=False) -> dict:
        request = pb.ReadRequest(ledger_id=ledger_id, fence=fence)
        if entry_ids is not None:
            request.entry_ids.extend(entry_ids)
        else:
            request.first_entry_id, request.last_entry_id = first, last
        out = {}
        async for raw in self.raw("ReadEntries", "unary_stream")(request.SerializeToString(), timeout=30):
            for e in pb.ReadResponse.FromString(raw).entries:
                out[e.entry_id] = (e.status, e.payload)
        return out

    async def unary(self, method: str, request, response_cls):
        raw = await self.raw(method)(request.SerializeToString(), timeout=10)
        return response_cls.FromString(raw)

    async def fence(self, ledger_id: int) -> pb.ReadLacResponse:
        return await self.unary("FenceLedger", pb.FenceRequest(ledger_id=ledger_id), pb.ReadLacResponse)

    async def lac(self, ledger_id: int) -> pb.ReadLacResponse:
        return await self.unary("ReadLastAddConfirmed", pb.ReadLacRequest(ledger_id=ledger_id), pb.ReadLacResponse)

    async def info(self) -> pb.BookieInfoResponse:
        return await self.unary("GetBookieInfo", pb.BookieInfoRequest(), pb.BookieInfoResponse)

    async def close(self) -> None:
        await self.channel.close()


async def stream_until_killed(client: Client, bookie: BookieProcess, ledgers: list[int], *, kill_after_acks: int,
                              entry_bytes: int, batch: int, window: int = 64) -> dict[tuple[int, int], bytes]:
    """Streams pipelined adds and SIGKILLs the bookie once ``kill_after_acks`` requests were acknowledged;
    returns every entry whose request was acknowledged OK."""
    sent: dict[int, list[tuple[int, int, bytes]]] = {}
    acked: dict[tuple[int, int], bytes] = {}
    next_entry = {l: 0 for l in ledgers}
    answered = asyncio.Event()  # set on every response: room may have opened in the pipeline

    async def requests():
        request_id = 0
        while True:
            request_id += 1
            ledger = ledgers[request_id % len(ledgers)]
            entries = [(ledger, next_entry[ledger] + i, payload(ledger, next_entry[ledger] + i, entry_bytes))
                       for i in range(batch)]
            next_entry[ledger] += batch
            sent[request_id] = entries
            yield add_request(request_id, entries).SerializeToString()
            while len(sent) - count > window:  # a bounded pipeline, as a client keeps
                answered.clear()
                await answered.wait()

    count = 0
    call = client.raw("AddEntries", "stream_stream")(requests())
    try:
        async for raw in call:
            for response in answers_in(raw):
                assert response.status == S.OK, response
                for l, e, p in sent[response.request_id]:
                    acked[(l, e)] = p
                count += 1
                answered.set()
                if count == kill_after_acks:
                    bookie.kill()
    except grpc.aio.AioRpcError:
        pass
    call.cancel()
    return acked


def indexed_entries(bookie: BookieProcess) -> set[tuple[int, int]]:
    """(ledger, entry) of every entry the (stopped) bookie's index holds, i.e. flushed to entry logs."""
    env = lmdb.open(str(bookie.data_dir / "ledgers" / "index"), readonly=True, max_dbs=4, lock=False)
    try:
        db = env.open_db(b"entries", create=False)
        with env.begin(db=db) as txn:
            return {struct.unpack(">QQ", key) for key, _ in txn.cursor()}
    finally:
        env.close()


async def assert_all_readable(client: Client, acked: dict[tuple[int, int], bytes]) -> None:
    by_ledger: dict[int, list[int]] = {}
    for l, e in acked:
        by_ledger.setdefault(l, []).append(e)
    for ledger, ids in by_ledger.items():
        got = await client.read(ledger, sorted(ids))
        bad = [e for e in ids if got.get(e) != (S.OK, acked[(ledger, e)])]
        assert not bad, f"ledger {ledger}: {len(bad)} acknowledged entries lost or changed, e.g. {bad[:5]}"


async def test_sigkill_loses_no_acknowledged_entry(bookie_factory):
    (bookie,) = bookie_factory(
        1, zookeeper="", write_cache_max_bytes=4 << 20, entry_max_size_bytes=64 << 10, flush_interval_ms=600_000
    )
    client = Client(bookie.address)
    try:
        # Phase 1 passes the size trigger (half the write cache): a flush writes entry logs and the index.
        first = [(10, e, payload(10, e, 2000)) for e in range(1500)]
        responses = await client.add([add_request(i, first[i * 10 : i * 10 + 10]) for i in range(150)])
        assert all(r.status == S.OK for r in responses)
        await wait_for_async(lambda: _metric(bookie, "magnetar_bookie_flush_latency_seconds_count") >= 1, 30,
                             what="a size-triggered flush")
        # Phase 2 stays below the next trigger (journal only) and is cut short by SIGKILL mid-stream.
        acked = await stream_until_killed(
            client, bookie, [11, 12, 13], kill_after_acks=20, entry_bytes=2000, batch=8, window=16
        )
        acked.update({(l, e): p for l, e, p in first})
        flushed = indexed_entries(bookie)
        journal_only = set(acked) - flushed
        assert journal_only and set(acked) & flushed, (
            f"want acknowledged entries both flushed and only journaled: {len(journal_only)} of {len(acked)} "
            f"journal-only"
        )
        bookie.process.start()
        await assert_all_readable(client, acked)
        # The bookie keeps taking adds after the restart.
        response, = await client.add([add_request(1, [(99, 0, b"after restart")])])
        assert response.status == S.OK
    finally:
        await client.close()


def _metric(bookie: BookieProcess, name: str) -> float:
    text = urllib.request.urlopen(bookie.metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


async def test_torn_journal_tail_is_cut_at_restart(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="", flush_interval_ms=600_000)
    client = Client(bookie.address)
    try:
        acked = await stream_until_killed(client, bookie, [21], kill_after_acks=100, entry_bytes=500, batch=4)
        assert not bookie.process.alive
        (_, newest) = list_journal_files(bookie.journal_dir)[-1]
        good_size = newest.stat().st_size
        with open(newest, "ab") as f:
            f.write(b"\x40\x00\x00\x00garbage-that-is-not-a-record" + os.urandom(300))
        bookie.process.start()
        await assert_all_readable(client, acked)
        assert newest.stat().st_size == good_size, "the garbage must have been truncated away"
        assert "cutting" in bookie.process.log_tail(20000)
    finally:
        await client.close()


async def test_fencing_refuses_normal_adds_and_survives_a_crash(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    client = Client(bookie.address)
    try:
        responses = await client.add([add_request(1, [(31, 0, b"a"), (31, 1, b"b")])])
        assert responses[0].status == S.OK
        fenced = await client.fence(31)
        assert (fenced.fenced, fenced.known, fenced.last_entry_id, fenced.last_add_confirmed) == (True, True, 1, 0)
        refused, accepted = await client.add([
            add_request(2, [(31, 2, b"c")]),
            add_request(3, [(31, 2, b"c")], recovery=True),
        ])
        assert refused.status == S.FENCED and "fenced" in refused.message
        assert accepted.status == S.OK
        # A recovery read fences too, before answering.
        await client.add([add_request(4, [(32, 0, b"x")])])
        got = await client.read(32, [0], fence=True)
        assert got == {0: (S.OK, b"x")}
        (late,) = await client.add([add_request(5, [(32, 1, b"y")])])
        assert late.status == S.FENCED
        bookie.restart()  # SIGKILL: fences are durable (journal) before they are answered
        assert (await client.lac(31)).fenced and (await client.lac(32)).fenced
        (late,) = await client.add([add_request(6, [(31, 3, b"d")])])
        assert late.status == S.FENCED
        assert await client.read(31, first=0, last=2) == {0: (S.OK, b"a"), 1: (S.OK, b"b"), 2: (S.OK, b"c")}
    finally:
        await client.close()


async def test_malformed_oversized_and_out_of_order_input_changes_nothing(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    ledger = 987_654_321_123
    client = Client(bookie.address)
    try:
        stored = [(ledger, e, payload(ledger, e, 3000)) for e in range(20)]
        assert (await client.add([add_request(1, stored)]))[0].status == S.OK
        garbage = b"\xff\xff\xff\xff\x0f garbage"
        for method in ("ReadLastAddConfirmed", "FenceLedger", "DeleteLedger", "GetBookieInfo"):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.raw(method)(garbage, timeout=10)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert "malformed" in info.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in client.raw("ReadEntries", "unary_stream")(garbage, timeout=10):
                pass
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for bad in (pb.ReadRequest(ledger_id=ledger, entry_ids=[3, 2]),
                    pb.ReadRequest(ledger_id=ledger, first_entry_id=5, last_entry_id=4),
                    pb.ReadRequest(ledger_id=ledger),
                    pb.ReadRequest(ledger_id=ledger, entry_ids=[1], first_entry_id=1, last_entry_id=2)):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                async for _ in client.raw("ReadEntries", "unary_stream")(bad.SerializeToString(), timeout=10):
                    pass
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad

        # In the add stream a bad request gets its own answer and the stream goes on.
        call = client.raw("AddEntries", "stream_stream")(iter([
            garbage,
            add_request(2, [(ledger + 1, 5, b"a"), (ledger + 1, 5, b"b")]).SerializeToString(),
            add_request(3, [(ledger + 1, 1, b"x" * (bookie_limit := 5243904 + 1))]).SerializeToString(),
            add_request(4, [(ledger, 20, b"fine")]).SerializeToString(),
        ]), timeout=30)
        answers = [a async for raw in call for a in answers_in(raw)]
        assert [a.status for a in answers] == [S.INVALID_ARGUMENT, S.INVALID_ARGUMENT, S.TOO_LARGE, S.OK]
        assert str(bookie_limit - 1) in answers[2].message
        assert (await client.lac(ledger + 1)).known is False, "refused requests store nothing"

        # Oversized messages are refused by gRPC itself.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.raw("GetBookieInfo")(b"\x00" * (65 << 20), timeout=30)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.aio.AioRpcError) as info:
            big = add_request(9, [(ledger, 100 + i, os.urandom(5 << 20)) for i in range(14)]).SerializeToString()
            async for _ in client.raw("AddEntries", "stream_stream")(iter([big]), timeout=30):
                pass
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        # Random bytes at every RPC: an answer, never a crash or an INTERNAL.
        rng = random.Random(1234)
        print("fuzz seed 1234")
        for _ in range(200):
            blob = rng.randbytes(rng.randint(0, 40))
            method = rng.choice(["ReadLastAddConfirmed", "GetBookieInfo", "FenceLedger", "ReadEntries"])
            try:
                if method == "ReadEntries":
                    async for _ in client.raw(method, "unary_stream")(blob, timeout=10):
                        pass
                else:
                    await client.raw(method)(blob, timeout=10)
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, blob, err)

        assert bookie.process.alive
        info = await client.info()
        assert info.bookie_id == bookie.bookie_id
        got = await client.read(ledger, list(range(21)))
        assert got == {**{e: (S.OK, p) for _, e, p in stored}, 20: (S.OK, b"fine")}
    finally:
        await client.close()


async def test_metrics_endpoint_serves_the_bookie_series(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    client = Client(bookie.address)
    try:
        await client.add([add_request(1, [(41, e, b"m" * 100) for e in range(10)])])
        await client.read(41, first=0, last=9)
    finally:
        await client.close()
    text = urllib.request.urlopen(bookie.metrics_url, timeout=5).read().decode()
    for name in (
        "magnetar_bookie_add_entries_total", "magnetar_bookie_add_bytes_total", "magnetar_bookie_add_latency_seconds",
        "magnetar_bookie_read_entries_total", "magnetar_bookie_read_bytes_total",
        "magnetar_bookie_read_latency_seconds", "magnetar_bookie_journal_sync_latency_seconds",
        "magnetar_bookie_journal_batch_entries", "magnetar_bookie_journal_queue_depth", "magnetar_bookie_ledgers",
        "magnetar_bookie_disk_free_bytes", "magnetar_bookie_disk_total_bytes", "magnetar_bookie_read_only",
        "magnetar_bookie_entry_logs", "magnetar_bookie_gc_reclaimed_bytes_total",
        "magnetar_bookie_flush_yields_total", "magnetar_bookie_flush_yield_timeouts_total",
    ):
        assert f'{name}' in text, name
    assert f'magnetar_bookie_add_entries_total{{bookie="{bookie.bookie_id}"}} 10.0' in text
    assert f'magnetar_bookie_read_entries_total{{bookie="{bookie.bookie_id}"}} 10.0' in text
    assert f'magnetar_bookie_ledgers{{bookie="{bookie.bookie_id}"}} 1.0' in text
    health = urllib.request.urlopen(f"http://{bookie.http_address}/health", timeout=5)
    assert health.status == 200


def zk_path_exists(zk_connect: str, path: str) -> bool:
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=15)
    try:
        return client.exists(path) is not None
    finally:
        client.stop()
        client.close()


async def test_registration_clean_shutdown_and_session_expiry(bookie_factory, zk_connect):
    (bookie,) = bookie_factory(1, zk_session_timeout_ms=4000)
    async with KazooMetadataStore(zk_connect) as store:
        region = RegionStore(store)
        registered = await wait_for_async(lambda: region.list_bookies(), 10, what="registration")
        reg = registered[bookie.bookie_id]
        assert reg.address == bookie.address and reg.http_address == bookie.http_address

        # Expire the bookie's session from outside: join it with its id and password, then close it.
        session = bookie.endpoints()["zk_session"]
        session_hex, password_hex = session.split(":")
        old_session = int(session_hex, 16)
        intruder = KazooClient(hosts=zk_connect, client_id=(old_session, bytes.fromhex(password_hex)))
        await asyncio.to_thread(intruder.start, 15)
        await asyncio.to_thread(intruder.stop)
        intruder.close()

        def re_registered() -> bool:
            endpoints = bookie.endpoints()
            return endpoints["zk_session"] and endpoints["zk_session"] != session

        await wait_for_async(re_registered, 30, what="a new ZooKeeper session")
        raw = KazooClient(hosts=zk_connect, timeout=10)
        await asyncio.to_thread(raw.start, 15)
        try:
            def owner():
                stat = raw.exists(f"/bookies/available/{bookie.bookie_id}")
                return stat is not None and stat.ephemeralOwner not in (0, old_session) and stat.ephemeralOwner
            new_owner = await wait_for_async(owner, 30, what="the registration re-created by the new session")
            assert new_owner == int(bookie.endpoints()["zk_session"].split(":")[0], 16)
        finally:
            raw.stop()
            raw.close()

        # A clean shutdown unregisters at once (not after the session timeout) and exits 0.
        assert bookie.terminate() == 0
        assert bookie.bookie_id not in await region.list_bookies()


async def test_disk_threshold_turns_read_only_and_back(bookie_factory, zk_connect, tmp_path):
    free = shutil.disk_usage(tmp_path).free
    if free < 4 << 30:
        pytest.skip(f"issue 3 disk-threshold test: needs 4 GiB free on {tmp_path}'s filesystem for a 1.5 GiB "
                    f"ballast, has {free >> 20} MiB")
    # Margins of hundreds of MiB either way: other processes may write to this filesystem meanwhile.
    min_bytes = free - (768 << 20)
    (bookie,) = bookie_factory(
        1, disk_free_min_bytes=min_bytes, disk_free_resume_bytes=min_bytes + (384 << 20), disk_check_interval_ms=100,
    )
    client = Client(bookie.address)
    ballast = tmp_path / "ballast"
    try:
        assert (await client.add([add_request(1, [(51, 0, b"before")])]))[0].status == S.OK
        assert not (await client.info()).read_only
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, 1536 << 20)
        except OSError as err:
            pytest.skip(f"issue 3 disk-threshold test: posix_fallocate not supported on this filesystem: {err}")
        finally:
            os.close(fd)
        info = await wait_for_async(
            lambda: _read_only_info(client), 15, what="GetBookieInfo.read_only after the ballast"
        )
        assert info.free_disk_bytes < min_bytes
        await wait_for_async(
            lambda: zk_path_exists(zk_connect, f"/bookies/readonly/{bookie.bookie_id}"), 15,
            what="the registration under /bookies/readonly",
        )
        refused = (await client.add([add_request(2, [(51, 1, b"refused")])]))[0]
        assert refused.status == S.READ_ONLY
        assert str(min_bytes) in refused.message and "free" in refused.message
        assert await client.read(51, [0, 1]) == {0: (S.OK, b"before"), 1: (S.NO_SUCH_ENTRY, b"")}
        text = urllib.request.urlopen(bookie.metrics_url, timeout=5).read().decode()
        assert f'magnetar_bookie_read_only{{bookie="{bookie.bookie_id}"}} 1.0' in text

        ballast.unlink()
        await wait_for_async(lambda: _writable_info(client), 15, what="writable again after removing the ballast")
        await wait_for_async(
            lambda: zk_path_exists(zk_connect, f"/bookies/available/{bookie.bookie_id}")
            and not zk_path_exists(zk_connect, f"/bookies/readonly/{bookie.bookie_id}"),
            15, what="the registration back under /bookies/available",
        )
        assert (await client.add([add_request(3, [(51, 1, b"after")])]))[0].status == S.OK
    finally:
        ballast.unlink(missing_ok=True)
        await client.close()


async def _read_only_info(client: Client):
    info = await client.info()
    return info if info.read_only else None


async def _writable_info(client: Client):
    info = await client.info()
    return info if not info.read_only else None


async def test_sigterm_ends_open_streams_exits_zero_and_keeps_everything(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="", shutdown_grace_ms=30_000)
    client = Client(bookie.address)
    try:
        stop = asyncio.Event()

        async def requests():
            for i in range(50):
                yield add_request(i, [(61, i, payload(61, i))]).SerializeToString()
            await stop.wait()  # a client keeps its add stream open, as the ledger client does

        call = client.raw("AddEntries", "stream_stream")(requests())
        answered = []
        async for raw in call:
            answered.extend(answers_in(raw))
            if len(answered) == 50:
                break
        assert all(r.status == S.OK for r in answered)
        started = asyncio.get_running_loop().time()
        bookie.process.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(bookie.process.proc.wait, 30)
        assert code == 0
        assert asyncio.get_running_loop().time() - started < 15, "the open add stream must not hold up shutdown"
        assert "bookie bookie-1 stopped" in bookie.process.log_tail()
        stop.set()
        call.cancel()
        bookie.process.start()
        assert await client.read(61, first=0, last=49) == {i: (S.OK, payload(61, i)) for i in range(50)}
        assert "0 journal records replayed" in bookie.process.log_tail(20000).split("===== start #2")[-1]
    finally:
        await client.close()


async def test_sigterm_with_zookeeper_gone_exits_promptly(bookie_factory, tmp_path):
    """Regression: with its ZooKeeper gone, a SIGTERMed bookie waited on the unregistration (and on closing the
    session) and outlived the supervisor's grace; the node is ephemeral, so the shutdown must not wait for it."""
    zookeeper = start_zookeeper(tmp_path / "own-zk")
    try:
        (bookie,) = bookie_factory(1, zookeeper=zookeeper.connect, zk_session_timeout_ms=4000)
        async with KazooMetadataStore(zookeeper.connect) as store:
            await wait_for_async(lambda: RegionStore(store).list_bookies(), 30, what="registration")
        zookeeper.process.kill()
        bookie.process.proc.send_signal(signal.SIGTERM)
        # Twice the shutdown grace (5 s) would be a bookie waiting on ZooKeeper.
        assert await asyncio.to_thread(bookie.process.proc.wait, 10) == 0
    finally:
        zookeeper.process.cleanup()
