"""The add port's connection protocol in one process: a real Storage (journal fsyncs, write cache), the real
BookieService and AddListener on 127.0.0.1, and a raw client on a real socket.

What the process-level tests (test_bookie_add_port.py) cannot see from outside: requests cut into single
bytes are answered whole and in order; a request that arrives while the write cache is full waits for room
instead of overrunning it; a peer that sends its last request and half-closes gets every answer before the
bookie closes; closing the listener answers what each connection accepted and stops reading the rest.
"""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from bookie.add_frames import PREAMBLE, encode_frame
from bookie.add_listener import AddListener
from bookie.metrics import BookieMetrics
from bookie.service import BookieService
from bookie.storage import Storage
from magnetar.proto import bookie_pb2 as pb
from tests.kit.wait import wait_for_async
from tests.unit.test_bookie_storage import make_config, payload, read

S = pb.Status


class WatchedStorage(Storage):
    """The real storage, noting the most bytes its write cache held right after an add."""

    most_cached = 0

    def add(self, request, raw):
        ticket = super().add(request, raw)
        self.most_cached = max(self.most_cached, self.cached_bytes)
        return ticket


def add_frame(request_id: int, ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    body = pb.AddRequest(request_id=request_id, entries=[pb.Entry(
        ledger_id=ledger_id, entry_id=entry_id, last_add_confirmed=entry_id - 1,
        payload=payload(ledger_id, entry_id, size))]).SerializeToString()
    return encode_frame(body)


async def answers(reader: asyncio.StreamReader, n: int) -> list[pb.AddResponse]:
    out: list[pb.AddResponse] = []
    async with asyncio.timeout(30):
        while len(out) < n:
            length = int.from_bytes(await reader.readexactly(4), "big")
            first = pb.AddResponse.FromString(await reader.readexactly(length))
            more = list(first.more)
            first.ClearField("more")
            out += [first, *more]
    return out


@pytest.fixture
async def bookie(tmp_path):
    storage = WatchedStorage(make_config(tmp_path / "data", write_cache_max_bytes=1 << 20,
                                         entry_max_size_bytes=64 << 10))
    await storage.start()
    service = BookieService(storage, BookieMetrics(CollectorRegistry(), "b1"), bookie_id="b1")
    listener = AddListener(service, "127.0.0.1", 0, keepalive_idle_s=30, keepalive_timeout_s=30)
    await listener.start()
    try:
        yield storage, service, listener
    finally:
        await listener.close(timeout_s=5)
        await storage.close()


async def connect(listener: AddListener):
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(PREAMBLE)
    return reader, writer


async def test_requests_cut_into_single_bytes_are_answered_whole_and_in_order(bookie):
    storage, _service, listener = bookie
    reader, writer = await connect(listener)
    try:
        stream = b"".join(add_frame(i + 1, 3, i) for i in range(20)) + encode_frame(b"\xff\xff") + add_frame(22, 3, 20)
        for i in range(len(stream)):
            writer.write(stream[i:i + 1])
            if i % 64 == 0:
                await writer.drain()
        got = await answers(reader, 22)
        assert [a.request_id for a in got] == list(range(1, 21)) + [0, 22]
        assert [a.status for a in got] == [S.OK] * 20 + [S.INVALID_ARGUMENT, S.OK]
        assert "malformed AddRequest" in got[20].message
        stored = await read(storage, 3, range(21))
        assert all(stored[e] == (S.OK, payload(3, e)) for e in range(21))
    finally:
        writer.transport.abort()


async def test_a_full_write_cache_holds_requests_back_instead_of_overrunning_it(bookie):
    storage, _service, listener = bookie
    reader, writer = await connect(listener)
    try:
        # 100 entries of 60 KB in one write: 6 MB against a 1 MiB cache; read in one go, they must wait for
        # room (flushes) rather than all enter the cache at once.
        writer.write(b"".join(add_frame(e + 1, 9, e, 60_000) for e in range(100)))
        got = await answers(reader, 100)
        assert [(a.request_id, a.status) for a in got] == [(e + 1, S.OK) for e in range(100)]
        # The storage's own bound: an add is let in below the limit, and one more once a flush has taken the
        # whole active cache (so a full cache never blocks the add that lets it flush).
        assert storage.most_cached <= (1 << 20) + 2 * 60_000, storage.most_cached
        stored = await read(storage, 9, range(100))
        assert all(stored[e] == (S.OK, payload(9, e, 60_000)) for e in range(100))
    finally:
        writer.transport.abort()


async def test_a_half_closed_peer_gets_every_answer_then_the_bookie_closes(bookie):
    _storage, _service, listener = bookie
    reader, writer = await connect(listener)
    writer.write(b"".join(add_frame(i + 1, 4, i) for i in range(50)))
    writer.write_eof()
    got = await answers(reader, 50)
    assert [(a.request_id, a.status) for a in got] == [(i + 1, S.OK) for i in range(50)]
    async with asyncio.timeout(10):
        assert await reader.read() == b""
    await asyncio.wait_for(asyncio.shield(asyncio.gather(*(c.ended for c in listener._connections))), 10)
    assert not listener._connections
    writer.transport.abort()


async def test_closing_answers_what_was_accepted_and_reads_no_more(bookie):
    _storage, service, listener = bookie
    reader, writer = await connect(listener)
    writer.write(b"".join(add_frame(i + 1, 6, i, 1000) for i in range(200)))
    first = await answers(reader, 1)
    service.closing = True  # as the service's drain() leaves it
    await listener.close(timeout_s=10)
    rest: list[pb.AddResponse] = []
    try:
        while True:
            rest += await answers(reader, 1)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    got = first + rest
    assert [a.request_id for a in got] == list(range(1, len(got) + 1))
    assert all(a.status in (S.OK, S.UNAVAILABLE) for a in got)
    assert not listener._connections
    writer.transport.abort()


@pytest.mark.parametrize("reply", ["wrong request id", "length over the limit", "not a protobuf", "cut short"])
async def test_the_client_fails_its_adds_when_the_add_port_misbehaves(reply):
    """A peer on the add port that answers wrongly: the bookie client fails every pending add UNAVAILABLE,
    naming the bookie, as soon as the bad bytes arrive (not at the add timeout), and its next add opens a new
    connection that works."""
    from bookie.client.bookie_client import BookieClient
    from bookie.client.wire import encode_entry

    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        try:
            assert await reader.readexactly(len(PREAMBLE)) == PREAMBLE
            while True:
                length = int.from_bytes(await reader.readexactly(4), "big")
                request = pb.AddRequest.FromString(await reader.readexactly(length))
                if not first:
                    writer.write(encode_frame(pb.AddResponse(request_id=request.request_id).SerializeToString()))
                elif reply == "wrong request id":
                    writer.write(encode_frame(pb.AddResponse(request_id=request.request_id + 7).SerializeToString()))
                elif reply == "length over the limit":
                    writer.write(b"\xff\xff\xff\xff")
                elif reply == "not a protobuf":
                    writer.write(encode_frame(b"\xff\xff\xff"))
                else:
                    writer.write(encode_frame(pb.AddResponse(request_id=request.request_id).SerializeToString())[:5])
                    writer.write_eof()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = BookieClient("fake-bookie", "127.0.0.1:1", add_address=f"127.0.0.1:{port}", add_timeout_s=60)
    outcomes: list[tuple[int, int, str]] = []
    try:
        for e in range(3):
            client.add(encode_entry(1, e, e - 1, b"x"), e, lambda _b, eid, st, msg: outcomes.append((eid, st, msg)))
        # Far under the 60 s add timeout: the bad bytes end the stream.
        await wait_for_async(lambda: len(outcomes) == 3, 10, what="the pending adds failed")
        assert [(eid, st) for eid, st, _ in outcomes] == [(0, S.UNAVAILABLE), (1, S.UNAVAILABLE), (2, S.UNAVAILABLE)]
        assert all("fake-bookie" in msg for _, _, msg in outcomes), outcomes
        client.add(encode_entry(1, 3, 2, b"x"), 3, lambda _b, eid, st, msg: outcomes.append((eid, st, msg)))
        await wait_for_async(lambda: len(outcomes) == 4, 10, what="the add on a new connection")
        assert outcomes[3][:2] == (3, S.OK) and connections == 2
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
