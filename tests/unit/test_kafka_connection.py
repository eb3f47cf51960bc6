"""broker/kafka/connection.py on a real local socket with a stand-in dispatcher: answers leave in request order
even when later requests finish first, a request without an answer (acks=0) leaves no gap, a failing handler
closes only its connection, and in-flight requests are bounded."""

from __future__ import annotations

import asyncio
import struct

import pytest
from aiokafka.protocol.metadata import MetadataRequest_v1, MetadataResponse_v1

from broker.kafka.connection import KafkaConnection


def frame(correlation_id: int, topics: list[str]) -> bytes:
    request = MetadataRequest_v1(topics)
    body = request.build_request_header(correlation_id, "t").encode() + request.encode()
    return struct.pack(">i", len(body)) + body


async def read_ids(reader: asyncio.StreamReader, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        ids.append(struct.unpack(">i", (await reader.readexactly(size))[:4])[0])
    return ids


async def serve(dispatch, **kwargs):
    connections = []

    async def accept(reader, writer):
        conn = KafkaConnection(reader, writer, dispatch=dispatch, listener_name="PLAINTEXT",
                               max_request_size_bytes=kwargs.get("max_request_size_bytes", 1 << 20),
                               max_in_flight_requests=kwargs.get("max_in_flight_requests", 8))
        connections.append(conn)
        await conn.serve()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


def answer():
    return MetadataResponse_v1([], -1, [])


def test_answers_leave_in_request_order_and_unanswered_requests_leave_no_gap() -> None:
    async def scenario() -> list[int]:
        last_done = asyncio.Event()

        async def dispatch(header, request, ctx):
            if request.topics[0] == "slow":  # a long poll that finishes after every later request
                await last_done.wait()
            if header.correlation_id == 4:
                last_done.set()
            return None if request.topics[0] == "silent" else answer()

        server, port, _ = await serve(dispatch)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(1, ["slow"]) + frame(2, ["fast"]) + frame(3, ["silent"]) + frame(4, ["fast"]))
        ids = await asyncio.wait_for(read_ids(reader, 3), 10)
        writer.close()
        server.close()
        return ids

    assert asyncio.run(scenario()) == [1, 2, 4]


def test_a_failing_handler_closes_only_its_connection() -> None:
    async def scenario() -> tuple[bytes, list[int]]:
        async def dispatch(header, request, ctx):
            if request.topics == ["boom"]:
                raise RuntimeError("handler bug")
            return answer()

        server, port, _ = await serve(dispatch)
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w1.write(frame(1, ["boom"]))
        closed = await asyncio.wait_for(r1.read(), 10)
        w2.write(frame(7, ["fine"]))
        ids = await asyncio.wait_for(read_ids(r2, 1), 10)
        w2.close()
        server.close()
        return closed, ids

    closed, ids = asyncio.run(scenario())
    assert closed == b"" and ids == [7]


def test_in_flight_requests_are_bounded() -> None:
    async def scenario() -> int:
        running = 0
        peak = 0
        release = asyncio.Event()

        async def dispatch(header, request, ctx):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await release.wait()
            running -= 1
            return answer()

        server, port, _ = await serve(dispatch, max_in_flight_requests=3)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(frame(i, ["t"]) for i in range(10)))
        await writer.drain()
        async with asyncio.timeout(10):
            while running < 3:
                await asyncio.sleep(0.01)
        release.set()
        ids = await asyncio.wait_for(read_ids(reader, 10), 10)
        assert ids == list(range(10))
        writer.close()
        server.close()
        return peak

    assert asyncio.run(scenario()) == 3


@pytest.mark.parametrize("prefix", [struct.pack(">i", 2 << 20), struct.pack(">i", -1)])
def test_frames_of_a_size_out_of_bounds_close_the_connection(prefix: bytes) -> None:
    async def scenario() -> bytes:
        async def dispatch(header, request, ctx):
            return answer()

        server, port, _ = await serve(dispatch)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(prefix)
        data = await asyncio.wait_for(reader.read(), 10)
        server.close()
        return data

    assert asyncio.run(scenario()) == b""


def test_requests_read_before_the_client_closes_are_still_carried_out() -> None:
    """Regression: a Produce with acks=0 followed at once by the client closing its socket was cancelled."""
    async def scenario() -> list[int]:
        handled: list[int] = []
        gate = asyncio.Event()

        async def dispatch(header, request, ctx):
            await gate.wait()  # still in progress when the client is gone
            handled.append(header.correlation_id)
            return None

        server, port, connections = await serve(dispatch)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(1, ["t"]) + frame(2, ["t"]))
        await writer.drain()
        writer.close()
        async with asyncio.timeout(10):
            while not connections or len(connections[0]._tasks) < 2:
                await asyncio.sleep(0.01)
        gate.set()
        async with asyncio.timeout(10):
            while not connections[0].closed or connections[0]._tasks:
                await asyncio.sleep(0.01)
        server.close()
        return handled

    assert asyncio.run(scenario()) == [1, 2]
