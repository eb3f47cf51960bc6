"""The bookie's add port (AddEntries over plain TCP) against real bookie processes and real sockets.

A raw client speaks the frames by hand (in-order answers, ``more`` coalescing, a bad request answered
INVALID_ARGUMENT on a connection that goes on, durability across SIGKILL); broken framing and random bytes
end only their own connection while another keeps being served; the ledger client adds over TCP when the
bookies register an add port, over gRPC when they do not or when told to, and a bookie SIGKILLed under a
TCP add stream fails its pending adds into an ensemble change; SIGTERM answers what the add port accepted.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import urllib.request

from bookie.add_frames import PREAMBLE, encode_frame
from bookie.client import LedgerClientConfig
from bookie.client.bookie_client import BookieClient
from magnetar.proto import bookie_pb2 as pb
from tests.integration.test_ledger_client import Region
from tests.kit.bookies import BookieProcess
from tests.kit.wait import wait_for_async

S = pb.Status


def metric(bookie: BookieProcess, name: str, **labels: str) -> float:
    """The value of one series of the bookie's /metrics (0 when absent)."""
    text = urllib.request.urlopen(bookie.metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        m = re.match(rf"{re.escape(name)}(?:{{(.*)}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m[1] or "") for k, v in labels.items()):
            return float(m[2])
    return 0.0


def add_request(request_id: int, entries) -> bytes:
    return pb.AddRequest(request_id=request_id, entries=[
        pb.Entry(ledger_id=l, entry_id=e, last_add_confirmed=e - 1, payload=p) for l, e, p in entries
    ]).SerializeToString()


class RawAddConnection:
    """One hand-driven connection to a bookie's add port."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def __aenter__(self) -> "RawAddConnection":
        host, port = self.address.rsplit(":", 1)
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        return self

    async def __aexit__(self, *exc) -> None:
        self.writer.transport.abort()

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answers(self, n: int, *, timeout_s: float = 30) -> list[pb.AddResponse]:
        """The next ``n`` answers, each response's ``more`` unrolled."""
        out: list[pb.AddResponse] = []
        async with asyncio.timeout(timeout_s):
            while len(out) < n:
                length = int.from_bytes(await self.reader.readexactly(4), "big")
                first = pb.AddResponse.FromString(await self.reader.readexactly(length))
                more = list(first.more)
                first.ClearField("more")
                out += [first, *more]
        return out

    async def closed_by_bookie(self, *, timeout_s: float = 15) -> bool:
        async with asyncio.timeout(timeout_s):
            try:
                return await self.reader.read() == b""
            except ConnectionError:
                return True


FAST = LedgerClientConfig(add_timeout_s=3.0, read_timeout_s=3.0)


async def test_raw_adds_round_trip_in_order_and_survive_sigkill(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    ledger = 4242
    async with RawAddConnection(bookie.add_address) as conn:
        conn.send(PREAMBLE)
        # Written at once: the bookie answers each request, in order, many in one message once durable.
        conn.send(b"".join(encode_frame(add_request(i + 1, [(ledger, e, b"e%d" % e) for e in range(i * 5, i * 5 + 5)]))
                           for i in range(40)))
        answers = await conn.answers(40)
        assert [(a.request_id, a.status) for a in answers] == [(i + 1, S.OK) for i in range(40)]
        # A body that is not an AddRequest gets its own INVALID_ARGUMENT answer; the connection goes on.
        conn.send(encode_frame(b"\xff\xff\xff\xff\x0f garbage") + encode_frame(add_request(41, [(ledger, 200, b"x")])))
        bad, good = await conn.answers(2)
        assert bad.status == S.INVALID_ARGUMENT and "malformed AddRequest" in bad.message
        assert (good.request_id, good.status) == (41, S.OK)
    assert metric(bookie, "magnetar_bookie_add_streams_total", transport="tcp") == 1
    bookie.process.kill()
    bookie.process.start()
    client = BookieClient(bookie.bookie_id, bookie.address, read_timeout_s=10.0)
    try:
        got = await client.read_entries(ledger, list(range(200)) + [200])
        assert [(r.entry_id, r.status, r.payload) for r in got] == [(e, S.OK, b"e%d" % e) for e in range(200)] + [
            (200, S.OK, b"x")]
    finally:
        await client.close()


async def test_broken_framing_and_garbage_end_only_their_own_connection(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    ledger = 77
    async with RawAddConnection(bookie.add_address) as steady:
        steady.send(PREAMBLE + encode_frame(add_request(1, [(ledger, 0, b"before")])))
        assert [a.status for a in await steady.answers(1)] == [S.OK]

        abuses = {
            "wrong preamble": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "length over 64 MiB": PREAMBLE + (64 * 1024 * 1024 + 1).to_bytes(4, "big") + b"x" * 100,
            "length 2**32-1": PREAMBLE + b"\xff\xff\xff\xff",
        }
        for what, data in abuses.items():
            async with RawAddConnection(bookie.add_address) as conn:
                conn.send(data)
                assert await conn.closed_by_bookie(), what
        # Cut short: a frame header announcing more than is sent before the peer hangs up.
        async with RawAddConnection(bookie.add_address) as conn:
            conn.send(PREAMBLE + (1000).to_bytes(4, "big") + b"half")
            conn.writer.write_eof()
            assert await conn.closed_by_bookie()
        broken = 4

        rng = random.Random(20261128)
        print("fuzz seed 20261128")
        for _ in range(30):
            async with RawAddConnection(bookie.add_address) as conn:
                blob = rng.randbytes(rng.randint(1, 64))
                conn.send(PREAMBLE + blob if rng.random() < 0.5 else blob)
                conn.writer.write_eof()
                # Whatever it makes of the bytes, the bookie answers or closes; it never stops serving.
                await conn.closed_by_bookie()

        assert bookie.process.alive
        assert metric(bookie, "magnetar_bookie_add_connections_broken_total") >= broken
        steady.send(encode_frame(add_request(2, [(ledger, 1, b"after")])))
        assert [(a.request_id, a.status) for a in await steady.answers(1)] == [(2, S.OK)]


async def write_and_read_back(zk_connect: str, config: LedgerClientConfig, bookies: list[BookieProcess],
                              transport: str) -> None:
    """Writes a ledger on ``bookies`` through a ledger client and checks each bookie saw a new add stream of
    ``transport`` and the client's add address matches; every entry reads back."""
    async with Region(zk_connect, config) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) >= len(bookies), timeout_s=30,
                             what="the bookies registered")
        for b in bookies:
            assert r.client._bookies.registration_of(b.bookie_id).add_address == b.add_address
        before = {b.bookie_id: metric(b, "magnetar_bookie_add_streams_total", transport=transport) for b in bookies}
        n = len(bookies)
        handle = await r.client.create_ledger(ensemble_size=n, write_quorum_size=n, ack_quorum_size=n)
        payloads = [b"%s-%d" % (transport.encode(), i) * 10 for i in range(500)]
        assert await asyncio.gather(*(handle.add_nowait(p) for p in payloads)) == list(range(500))
        await handle.close()
        for b in bookies:
            assert metric(b, "magnetar_bookie_add_streams_total", transport=transport) > before[b.bookie_id], (
                b.bookie_id, transport)
            assert r.client.bookie_client(b.bookie_id).add_address == (b.add_address if transport == "tcp" else "")
        reader = await r.client.open_ledger(handle.ledger_id)
        assert [e.payload for e in await reader.read(0, 499)] == payloads


async def test_ledger_client_adds_over_tcp_or_grpc_as_told(bookie_factory, zk_connect):
    bookies = bookie_factory(2)
    assert all(b.add_address for b in bookies)
    await write_and_read_back(zk_connect, FAST, bookies, "tcp")
    assert all(metric(b, "magnetar_bookie_add_streams_total", transport="grpc") == 0 for b in bookies)
    await write_and_read_back(zk_connect, LedgerClientConfig(add_timeout_s=3.0, add_transport="grpc"), bookies,
                              "grpc")


async def test_ledger_client_falls_back_to_grpc_without_an_add_port(bookie_factory, zk_connect):
    bookies = bookie_factory(2, add_port=-1)
    assert not any(b.add_address for b in bookies)
    await write_and_read_back(zk_connect, FAST, bookies, "grpc")
    assert all(metric(b, "magnetar_bookie_add_streams_total", transport="tcp") == 0 for b in bookies)


async def test_sigkill_under_a_tcp_add_stream_changes_the_ensemble(bookie_factory, zk_connect):
    bookies = bookie_factory(4)
    by_id = {b.bookie_id: b for b in bookies}
    async with Region(zk_connect, FAST) as r:
        await wait_for_async(lambda: len(r.client.writable_bookies()) >= 4, timeout_s=30, what="4 bookies")
        handle = await r.client.create_ledger(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        ensemble = handle.metadata.ensembles[0][1]
        victim = by_id[ensemble[1]]
        acked: dict[int, bytes] = {}
        window = asyncio.Semaphore(300)

        async def add(i: int) -> None:
            async with window:
                data = b"%06d" % i * 100
                acked[await handle.add(data)] = data

        tasks = []
        for i in range(4000):
            tasks.append(asyncio.ensure_future(add(i)))
            if i == 1500:
                await wait_for_async(lambda: len(acked) >= 500, timeout_s=30, what="500 acks before the kill")
                assert r.client.bookie_client(victim.bookie_id)._task is not None
                victim.process.kill()
        await asyncio.gather(*tasks)
        await handle.close()
        md = (await r.region.read_ledger(handle.ledger_id)).value
        assert len(md.ensembles) >= 2 and victim.bookie_id not in md.ensembles[-1][1], md.ensembles
        reader = await r.client.open_ledger(handle.ledger_id)
        entries = await reader.read(0, 3999)
        assert len(entries) == 4000 and all(e.payload == acked[e.entry_id] for e in entries)
        for bookie_id in ensemble:
            if bookie_id != victim.bookie_id:
                assert metric(by_id[bookie_id], "magnetar_bookie_add_streams_total", transport="tcp") >= 1
                assert metric(by_id[bookie_id], "magnetar_bookie_add_streams_total", transport="grpc") == 0


async def test_sigterm_answers_what_the_add_port_accepted(bookie_factory):
    """SIGTERM under a busy add connection: every request the bookie read is answered (OK, or UNAVAILABLE
    once it was shutting down), in order, then the connection closes and the process exits 0."""
    (bookie,) = bookie_factory(1, zookeeper="", shutdown_grace_ms=10_000)
    async with RawAddConnection(bookie.add_address) as conn:
        conn.send(PREAMBLE + b"".join(encode_frame(add_request(i + 1, [(5, i, b"p" * 1000)])) for i in range(500)))
        answers = await conn.answers(1)
        bookie.process._signal_group(signal.SIGTERM)
        try:
            while True:
                answers += await conn.answers(1)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        assert [a.request_id for a in answers] == list(range(1, len(answers) + 1))
        assert answers[0].status == S.OK and all(a.status in (S.OK, S.UNAVAILABLE) for a in answers)
    assert await asyncio.to_thread(bookie.process.proc.wait, 30) == 0
