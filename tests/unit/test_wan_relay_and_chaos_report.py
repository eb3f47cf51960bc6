"""The wan relay (delay in order, cut and heal) on loopback, and the chaos check (pure)."""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.net import free_port
from tests.kit.chaos_report import check_region, percentile, replication_delays_ms, table
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
