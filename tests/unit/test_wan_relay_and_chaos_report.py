"""The wan relay (delay in order, cut and heal) on loopback, and the chaos check (pure)."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from magnetar.net import free_port
from tests.kit.chaos_report import check_region, percentile, replication_delays_ms, table
from tests.kit.wait import wait_for_async
from tests.kit.wan_relay import Relay, region_of


async def echo_server(port: int) -> asyncio.AbstractServer:
    async def echo(reader, writer):
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()
    return await asyncio.start_server(echo, "127.0.0.1", port)


async def round_trip_s(port: int, payload: bytes = b"x") -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        started = time.monotonic()
        writer.write(payload)
        assert await reader.readexactly(len(payload)) == payload
        return time.monotonic() - started
    finally:
        writer.close()


async def test_relay_delays_each_direction_keeps_order_and_cuts_and_heals():
    target, relayed = free_port(), free_port()
    server = await echo_server(target)
    relay = Relay(delay_ms=30.0, jitter_ms=5.0, seed=1)
    # one port relayed to another (the public and direct addresses are the same host here)
    await relay.listen("127.0.0.1", "127.0.0.1", target, listen_port=relayed)
    try:
        assert await round_trip_s(target) < 0.025  # direct: no delay
        rtt = await round_trip_s(relayed)
        assert 0.045 <= rtt < 1.0, rtt  # two directions of 30 ± 5 ms

        reader, writer = await asyncio.open_connection("127.0.0.1", relayed)
        chunks = [f"{i:04d}".encode() for i in range(200)]
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        assert await reader.readexactly(800) == b"".join(chunks)  # jitter never reorders

        assert relay.command("cut 0 0") == "ok"
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            writer.write(b"more")
            await writer.drain()
            await asyncio.wait_for(reader.readexactly(4), 5)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await round_trip_s(relayed)  # refused while cut
        assert relay.stats["refused"] >= 1
        assert relay.command("heal 0 0") == "ok"
        assert await round_trip_s(relayed) >= 0.045
        assert relay.command("bogus").startswith("error")
    finally:
        relay.close()
        server.close()


async def test_silence_holds_both_ways_and_new_connections_until_healed_then_everything_flows_on():
    """A partition as a network shows it: nothing passes, nothing is closed; the ends only see silence."""
    target, relayed = free_port(), free_port()
    server = await echo_server(target)
    relay = Relay(delay_ms=1.0, jitter_ms=0.0)
    await relay.listen("127.0.0.1", "127.0.0.1", target, listen_port=relayed)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", relayed)
        writer.write(b"before")
        assert await reader.readexactly(6) == b"before"
        assert relay.command("silence 0 0") == "ok"
        writer.write(b"during")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(6), 0.5)  # nothing comes back, and nothing is closed
        assert not reader.at_eof()
        late = asyncio.ensure_future(round_trip_s(relayed, b"new"))  # a new connection: accepted, held
        done, _ = await asyncio.wait({late}, timeout=0.5)
        assert not done and relay.stats["held"] == 1
        assert '"silenced": [[0]]' in relay.command("stats")  # the pair {0, 0} is {0}
        assert relay.command("heal 0 0") == "ok"
        assert await asyncio.wait_for(reader.readexactly(6), 5) == b"during"  # what was held flows on
        assert await asyncio.wait_for(late, 5) < 5
        assert relay.command("silence 0 0") == "ok" and relay.command("cut 0 0") == "ok"
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):  # a cut ends a silence by RST
            writer.write(b"gone")
            await writer.drain()
            await asyncio.wait_for(reader.readexactly(4), 5)
        writer.close()
        assert '"silenced": []' in relay.command("stats")
    finally:
        relay.close()
        server.close()


async def test_a_relayed_connection_dying_on_both_sides_at_once_leaves_no_unretrieved_error():
    """Regression: when both directions failed in the same round only the first error was retrieved; the relay's
    log filled with "Task exception was never retrieved" after a silence whose two ends had given up."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context.get("message", "")))
    target, relayed = free_port(), free_port()
    accepted: list[asyncio.StreamWriter] = []

    async def sink(reader, writer):
        accepted.append(writer)
        while await reader.read(65536):
            pass
    server = await asyncio.start_server(sink, "127.0.0.1", target)
    relay = Relay(delay_ms=1.0, jitter_ms=0.0)
    await relay.listen("127.0.0.1", "127.0.0.1", target, listen_port=relayed)
    try:
        for n in range(1, 4):
            _, client = await asyncio.open_connection("127.0.0.1", relayed)
            await wait_for_async(lambda: accepted and relay.stats["connections"] == n, 5,
                                 what="the relay connected through")
            far = accepted.pop()
            relay.command("silence 0 0")
            client.write(b"x" * 100)
            far.write(b"y" * 100)
            client.transport.abort()  # both ends give up while nothing passes
            far.transport.abort()
            relay.command("heal 0 0")
            await wait_for_async(lambda: not relay.links.get(frozenset((0,))), 5, what="the relayed connection ended")
        gc.collect()
        assert not [m for m in reported if "never retrieved" in m], reported
    finally:
        relay.close()
        server.close()


def test_region_of_addresses():
    assert region_of("10.100.3.1") == 3 and region_of("10.101.2.1") == 2 and region_of("127.0.0.1") == 0


def test_check_region_counts_lost_duplicated_and_reordered():
    acked = {"a": [0, 1, 2, 3], "b": [0, 1]}
    contents = ["a:0", "b:0", "a:2", "a:1", "a:2", "b:1"]
    check = check_region("r", contents, acked)
    assert (check.messages, check.lost, check.duplicated, check.out_of_order) == (6, 1, 1, 2)
    assert check_region("r", ["a:0", "a:1", "x:5"], {"a": [0, 1]}).lost == 0  # unacked extras are not losses


def test_replication_delays_keep_first_receipt_of_remote_messages_only():
    records = ["w-p:0 1000 1050", "e-p:0 1000 1001", "w-p:0 1000 1900", "w-p:1 1010 1100", "cut"]
    assert replication_delays_ms(records, ["e-p"]) == [50, 90]
    assert percentile([1, 2, 3, 4], 50) == 3
    assert "lost" in table([("f", 1.0, 10, 0, 0, 0, 5.0, 1.0)]).splitlines()[0]
