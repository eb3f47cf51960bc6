"""The link between regions: an asyncio TCP relay that delays every chunk, and cuts and heals pairs of regions.

Run inside the wan namespace (see clusters/netns.py); ``magnetar up --netns`` starts it as the process
``wan-relay`` (``clusters.network``), the test kit as its own::

    python -m clusters.wan_relay --control /tmp/x.sock --delay-ms 40 --jitter-ms 5 \\
        --route 10.101.1.1=10.100.1.1:6650,8080 --route 10.101.2.1=10.100.2.1:6651,8081

It listens on every ``public:port`` and forwards to ``direct:port``. Every chunk read from one side is written
to the other ``delay ± jitter`` ms after it was read, in order (a chunk never overtakes the previous one of the
same direction, as TCP cannot reorder). Regions are named by their index (the third octet of their
addresses; the root namespace, 10.n.0.x, is region 0).

Control (one line per connection to the unix socket ``--control``, answer ``ok`` or ``error: ...``):
``cut A B`` closes every relayed connection between regions A and B (both directions, by RST) and refuses new
ones until ``heal A B``; ``silence A B`` is a partition as a network shows it: nothing passes either way and
nothing is closed (the relay stops reading and delivering on the pair's connections, so the senders' buffers
fill, and holds new connections without connecting them on), so each end only learns of it by its own
timeouts; ``heal A B`` ends either, and what was held flows on to whichever end is still there. ``delay MS
JITTER_MS`` changes the delay of chunks read from then on; ``stats`` answers a JSON object (connections, bytes,
refused, held, the delay, and the pairs cut and silenced now).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import struct
import time
from typing import Optional

_CHUNK_BYTES = 65536


def region_of(address: str) -> int:
    """The region index of a 10.n.i.x address of clusters/netns.py: i (0 is the root namespace)."""
    parts = address.split(".")
    if len(parts) == 4 and parts[0] == "10":
        return int(parts[2])
    return 0


class Relay:
    def __init__(self, *, delay_ms: float, jitter_ms: float, seed: int = 0) -> None:
        self.delay_ms = delay_ms
        self.jitter_ms = jitter_ms
        self.cut: set[frozenset[int]] = set()
        self.silenced: dict[frozenset[int], asyncio.Event] = {}  # set when the pair's silence ends
        self.links: dict[frozenset[int], set[asyncio.StreamWriter]] = {}
        self.random = random.Random(seed)
        self.stats = {"connections": 0, "refused": 0, "held": 0, "bytes": 0}
        self.servers: list[asyncio.AbstractServer] = []

    async def listen(self, public: str, direct: str, port: int, *, listen_port: Optional[int] = None) -> None:
        """Relays ``public:listen_port`` (default ``port``) to ``direct:port``."""
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._relay(reader, writer, direct, port, region_of(public))
        self.servers.append(await asyncio.start_server(handle, public, listen_port or port, reuse_address=True))

    def close(self) -> None:
        for server in self.servers:
            server.close()

    async def _relay(self, c_reader, c_writer, direct: str, port: int, to_region: int) -> None:
        peer = c_writer.get_extra_info("peername")[0]
        pair = frozenset((region_of(peer), to_region))
        if pair in self.cut:
            self.stats["refused"] += 1
            _reset(c_writer)
            return
        if pair in self.silenced:
            self.stats["held"] += 1
            await self._until_heard(pair)
            if pair in self.cut:
                _reset(c_writer)
                return
        try:
            s_reader, s_writer = await asyncio.open_connection(direct, port)
        except OSError:
            _reset(c_writer)
            return
        self.stats["connections"] += 1
        members = self.links.setdefault(pair, set())
        members.update((c_writer, s_writer))
        pipes = [asyncio.ensure_future(self._pipe(c_reader, s_writer, pair)),
                 asyncio.ensure_future(self._pipe(s_reader, c_writer, pair))]
        try:
            pending = set(pipes)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                errors = [t.exception() for t in done if not t.cancelled()]  # each one retrieved, not just the first
                if any(e is not None for e in errors):
                    for w in (c_writer, s_writer):
                        _reset(w)  # one side died: so does the other, as through a cut link
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    break
        finally:
            members.discard(c_writer)
            members.discard(s_writer)
            for w in (c_writer, s_writer):
                w.close()

    async def _until_heard(self, pair: frozenset[int]) -> None:
        """Returns at once unless ``pair`` is silenced; then when it is healed."""
        silence = self.silenced.get(pair)
        if silence is not None:
            await silence.wait()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: frozenset[int]) -> None:
        """Copies one direction with the delay (held while the pair is silenced); returns at end of stream,
        raises OSError when a side dies."""
        queue: asyncio.Queue[Optional[tuple[float, bytes]]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    break
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._until_heard(pair)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        task = asyncio.ensure_future(deliver())
        last_due = 0.0
        try:
            while True:
                await self._until_heard(pair)  # silenced: unread bytes stay in the kernel and the sender waits
                data = await reader.read(_CHUNK_BYTES)
                if not data:
                    break
                self.stats["bytes"] += len(data)
                delay_s = (self.delay_ms + self.random.uniform(-self.jitter_ms, self.jitter_ms)) / 1000.0
                last_due = max(last_due, time.monotonic() + max(0.0, delay_s))
                queue.put_nowait((last_due, data))
                if task.done():
                    task.result()  # the writing side died: raise its error
            queue.put_nowait(None)
            await task
        finally:
            if not task.done():
                task.cancel()

    def command(self, line: str) -> str:
        words = line.split()
        if not words:
            return "error: empty command"
        if words[0] in ("cut", "heal", "silence") and len(words) == 3:
            pair = frozenset((int(words[1]), int(words[2])))
            if words[0] == "cut":
                self.cut.add(pair)
                for w in list(self.links.get(pair, ())):
                    _reset(w)
            elif words[0] == "silence":
                self.silenced.setdefault(pair, asyncio.Event())
            else:
                self.cut.discard(pair)
            if words[0] != "silence" and pair in self.silenced:
                self.silenced.pop(pair).set()  # held connections go on (or, cut, are reset)
            return "ok"
        if words[0] == "delay" and len(words) == 3:
            self.delay_ms, self.jitter_ms = float(words[1]), float(words[2])
            return "ok"
        if words[0] == "stats":
            return json.dumps({**self.stats, "delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms,
                               "cut": sorted(sorted(pair) for pair in self.cut),
                               "silenced": sorted(sorted(pair) for pair in self.silenced)})
        return f"error: unknown command {line!r}"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes with RST (SO_LINGER 0): the far end sees the connection die, as on a cut link."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.close()


async def _main(args: argparse.Namespace) -> None:
    relay = Relay(delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, seed=args.seed)
    for route in args.route:
        public, _, rest = route.partition("=")
        direct, _, ports = rest.partition(":")
        for port in ports.split(","):
            await relay.listen(public, direct, int(port))

    async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode().strip()
        try:
            answer = relay.command(line)
        except ValueError as err:
            answer = f"error: {err}"
        writer.write(answer.encode() + b"\n")
        await writer.drain()
        writer.close()

    await asyncio.start_unix_server(control, args.control)
    print("relay ready", flush=True)
    await asyncio.Event().wait()


def send_command(control_path: str, line: str, *, timeout_s: float = 5.0) -> str:
    """Sends one control line to a running relay and returns its answer (raises on ``error:``)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(control_path)
        sock.sendall(line.encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            data = sock.recv(4096)
            if not data:
                break
            answer += data
    text = answer.decode().strip()
    if text.startswith("error"):
        raise RuntimeError(f"relay: {text}")
    return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--control", required=True)
    parser.add_argument("--delay-ms", type=float, default=40.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--route", action="append", default=[], help="public=direct:port[,port...]")
    asyncio.run(_main(parser.parse_args()))
