"""gRPC keepalive between the bookie client and a real bookie process: pings at the configured interval are
never strikes, so the bookie never answers GOAWAY ``too_many_pings``.

The bookie runs with gRPC's ``http_keepalive`` trace, which logs every ping it receives with the time the
next one is allowed; a ping received before that is a strike (three close the connection). The client
side watches its channels stay READY and its add stream stay open. Three connections run at once, for
several keepalive periods: an AddEntries stream left idle after one add (the production case: a broker's
ledger with nothing to write), a stream kept busy, and a channel with no call in flight at all.
"""

from __future__ import annotations

import asyncio
import re

import grpc

from bookie.client.bookie_client import BookieClient, ClientState
from bookie.client.wire import encode_entry
from magnetar.proto import bookie_pb2
from tests.kit.bookies import BookieProcess
from tests.kit.wait import wait_for_async

INTERVAL_MS = 1000
PINGS_PER_IDLE_CONNECTION = 6  # two more than gRPC's default tolerance of 2 strikes needs to close one

# "SERVER[0x...]: received ping 123: now=@2610ms transport_idle=0 next_allowed_ping=@301608ms ping_strikes=0"
_RECEIVED_PING = re.compile(
    r"SERVER\[(?P<transport>0x[0-9a-f]+)\]: received ping \d+: now=@(?P<now>\d+)ms transport_idle=\d "
    r"next_allowed_ping=@(?P<next>-∞|∞|\d+)ms"
)


def received_pings(log_text: str) -> dict[str, list[tuple[int, str]]]:
    """``transport -> [(received at ms, next allowed at)]`` of every ping the bookie logged."""
    out: dict[str, list[tuple[int, str]]] = {}
    for m in _RECEIVED_PING.finditer(log_text):
        out.setdefault(m["transport"], []).append((int(m["now"]), m["next"]))
    return out


def strikes(pings: dict[str, list[tuple[int, str]]]) -> list[str]:
    """The pings received sooner than the bookie allowed (each one a strike)."""
    return [
        f"{transport}: ping at {now} ms, next allowed at {allowed} ms"
        for transport, seen in pings.items()
        for now, allowed in seen
        if allowed == "∞" or (allowed != "-∞" and now < int(allowed))
    ]


async def add_one(client: BookieClient, ledger_id: int, entry_id: int) -> int:
    """Adds one entry through the client's pipelined stream; returns its status."""
    done: asyncio.Future = asyncio.get_running_loop().create_future()
    client.add(encode_entry(ledger_id, entry_id, entry_id - 1, b"keepalive-%d" % entry_id), entry_id,
               lambda _bookie, _entry, status, _message: done.done() or done.set_result(status))
    return await asyncio.wait_for(done, 10)


async def test_keepalive_pings_never_earn_too_many_pings(tmp_path) -> None:
    bookie = BookieProcess("bookie-1", tmp_path / "bookies", "", grpc_keepalive_interval_ms=INTERVAL_MS)
    bookie.process.env = {"GRPC_VERBOSITY": "debug", "GRPC_TRACE": "http_keepalive"}
    bookie.start()
    clients = {
        name: BookieClient(bookie.bookie_id, bookie.address, keepalive_interval_ms=INTERVAL_MS,
                           keepalive_timeout_ms=5 * INTERVAL_MS)
        for name in ("idle-stream", "busy-stream", "no-calls")
    }
    not_ready: list[str] = []
    stop = asyncio.Event()

    async def watch_channels() -> None:
        while not stop.is_set():
            for name, client in clients.items():
                state = client._channel.get_state()
                if state is not grpc.ChannelConnectivity.READY:
                    not_ready.append(f"{name}: {state.name}")
            await asyncio.sleep(0.01)

    async def keep_busy() -> int:
        entry_id = 0
        while not stop.is_set():
            assert await add_one(clients["busy-stream"], 2, entry_id) == bookie_pb2.Status.OK
            entry_id += 1
        return entry_id

    def idle_connections_pinged_enough() -> bool:
        pings = received_pings(bookie.process.log_path.read_text(errors="replace"))
        return sum(len(seen) >= PINGS_PER_IDLE_CONNECTION for seen in pings.values()) >= 2

    try:
        assert await add_one(clients["idle-stream"], 1, 0) == bookie_pb2.Status.OK
        assert (await clients["no-calls"].info()).bookie_id == bookie.bookie_id
        assert await add_one(clients["busy-stream"], 2, 0) == bookie_pb2.Status.OK
        watcher = asyncio.create_task(watch_channels())
        busy = asyncio.create_task(keep_busy())
        try:
            await wait_for_async(  # ends early once a channel left READY: the assertions below say why
                lambda: not_ready or idle_connections_pinged_enough(),
                timeout_s=4 * PINGS_PER_IDLE_CONNECTION * INTERVAL_MS / 1000, interval_s=0.2,
                what=f"{PINGS_PER_IDLE_CONNECTION} keepalive pings on each idle connection",
            )
        finally:
            stop.set()
            busy_adds = await busy
            await watcher
        assert busy_adds > 10, "the busy stream must have carried adds the whole time"
        log_text = bookie.process.log_path.read_text(errors="replace")
        assert "too_many_pings" not in log_text
        assert strikes(received_pings(log_text)) == []
        assert not_ready == [], f"channels left READY: {sorted(set(not_ready))}"
        # The idle stream is the one opened by the first add: still open, and it still carries adds.
        assert clients["idle-stream"].state is ClientState.STREAMING
        assert await add_one(clients["idle-stream"], 1, 1) == bookie_pb2.Status.OK
        assert (await clients["no-calls"].info()).bookie_id == bookie.bookie_id
    finally:
        await asyncio.gather(*(c.close() for c in clients.values()))
        bookie.process.cleanup()
