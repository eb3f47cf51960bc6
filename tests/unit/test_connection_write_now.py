"""Receipts leave at once: ``Connection.write_now`` sends in the call when nothing waits for the turn's flush,
and otherwise joins that flush behind what is already waiting, so the order of frames on the wire is kept."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

from broker.service.config import ServiceConfig
from broker.service.session.connection import Connection
from tests.kit.wait import wait_for_async


async def _connection() -> tuple[Connection, socket.socket]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=ours)
    return Connection(SimpleNamespace(config=ServiceConfig()), reader, writer), theirs


def _received(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return b""


async def test_write_now_sends_in_the_call_when_nothing_waits():
    conn, peer = await _connection()
    try:
        conn.write_now([b"receipt-1", b"receipt-2"])
        assert _received(peer) == b"receipt-1receipt-2"  # no turn of the event loop in between
    finally:
        conn._transport.abort()
        peer.close()


async def test_write_now_joins_a_pending_flush_behind_what_waits():
    conn, peer = await _connection()
    try:
        conn.write(b"message-frame")  # waits for the turn's flush
        conn.write_now([b"receipt"])
        assert _received(peer) == b""
        got = bytearray()

        def arrived() -> bool:
            got.extend(_received(peer))
            return len(got) >= len(b"message-framereceipt")

        await wait_for_async(arrived, 5, what="the flush")
        assert bytes(got) == b"message-framereceipt"
    finally:
        conn._transport.abort()
        peer.close()
