"""Add throughput of one bookie process over a real gRPC stream (fsync on unless --no-sync).

    .venv/bin/python bench/bookie_add.py --entry-bytes 1024 --batch 100 --seconds 10
    .venv/bin/python bench/bookie_add.py --entry-bytes 65536 --batch 16 --seconds 10
    .venv/bin/python bench/bookie_add.py --bookies 3 --qw 2 --batch 50     # striped like a 3/2 ledger

Starts a bookie (``magnetar bookie``) on a temporary data dir unless ``--address`` names a running one,
streams pipelined AddRequests (``--batch`` entries each, at most ``--inflight`` unanswered), and prints the
acknowledged entries/s and MB/s. With ``--bookies N --qw Q`` it starts N bookies and sends every batch
to Q of them (rotating, as a ledger's write sets do); an entry counts once all Q bookies acknowledged it. Requests are framed by hand (as the ledger client does), so the client's
own cost stays small next to the bookie's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import grpc

from magnetar.net import free_port
from magnetar.proto import bookie_pb2

_ADD = "/magnetar.bookie.v1.BookieService/AddEntries"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _entry(ledger_id: int, entry_id: int, lac: int, payload: bytes) -> bytes:
    zigzag = (lac << 1) ^ (lac >> 63)
    body = (b"\x08" + _varint(ledger_id) + b"\x10" + _varint(entry_id) + b"\x18" + _varint(zigzag)
            + b"\x22" + _varint(len(payload)) + payload)
    return b"\x12" + _varint(len(body)) + body


def _spawn(tmp: pathlib.Path, sync: bool, extra: list[str]) -> tuple[subprocess.Popen, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    data = tmp / "data"
    config = tmp / "bookie.toml"
    config.write_text(
        f'bookie_id = "bench"\nport = {port}\ndata_dir = "{data}"\njournal_sync = {"true" if sync else "false"}\n'
        "disk_free_min_bytes = 0\ndisk_free_resume_bytes = 0\n" + "".join(f"{kv}\n" for kv in extra)
    )
    log = open(tmp / "bookie.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "magnetar", "bookie", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while not (data / "endpoints.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"bookie did not start: {(tmp / 'bookie.log').read_text()}")
        time.sleep(0.05)
    return proc, json.loads((data / "endpoints.json").read_text())["grpc"]


async def _drive(addresses: list[str], args) -> tuple[int, float]:
    payload = os.urandom(args.entry_bytes)
    options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    channels = [grpc.aio.insecure_channel(a, options=options) for a in addresses]
    calls = [
        ch.stream_stream(_ADD, request_serializer=None, response_deserializer=None)(wait_for_ready=True)
        for ch in channels
    ]
    windows = [asyncio.Semaphore(args.inflight) for _ in calls]
    acks = [0] * len(calls)
    sent_at: list[dict[int, float]] = [{} for _ in calls]
    latencies: list[float] = []
    deadline = time.monotonic() + args.seconds
    started = time.monotonic()
    n = len(calls)

    async def writer() -> None:
        entry_id = 0
        request_id = 0
        interval = args.batch / args.rate if args.rate else 0.0
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            if interval:
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            request_id += 1
            targets = [(request_id + i) % n for i in range(args.qw)]
            for t in targets:
                await windows[t].acquire()
            framed = b"".join(_entry(args.ledger, entry_id + i, entry_id - 1, payload) for i in range(args.batch))
            entry_id += args.batch
            request = b"\x08" + _varint(request_id) + framed
            for t in targets:
                sent_at[t][request_id] = time.monotonic()
                await calls[t].write(request)
        for call in calls:
            await call.done_writing()

    async def reader(i: int) -> None:
        async for raw in calls[i]:
            first = bookie_pb2.AddResponse.FromString(raw)
            now = time.monotonic()
            for response in (first, *first.more):  # one message may answer several requests
                if response.status != bookie_pb2.OK:
                    raise SystemExit(f"add failed: {response}")
                acks[i] += args.batch
                latencies.append(now - sent_at[i].pop(response.request_id))
                windows[i].release()

    await asyncio.gather(writer(), *(reader(i) for i in range(n)))
    elapsed = time.monotonic() - started
    for ch in channels:
        await ch.close()
    latencies.sort()
    if latencies:
        pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
        print(f"request latency ms: p50 {pick(0.5):.1f}, p99 {pick(0.99):.1f}, p99.9 {pick(0.999):.1f}, "
              f"max {latencies[-1] * 1000:.1f}")
    return sum(acks) // args.qw, elapsed


def _print_bookie_latency(tmp: pathlib.Path, n: int) -> None:
    """The spawned bookies' own view: journal fsync and add latency histograms (bucket counts)."""
    import urllib.request

    for i in range(n):
        http = json.loads((tmp / f"bookie-{i}" / "data" / "endpoints.json").read_text())["http"]
        text = urllib.request.urlopen(f"http://{http}/metrics", timeout=5).read().decode()
        for name in ("magnetar_bookie_journal_sync_latency_seconds", "magnetar_bookie_add_latency_seconds"):
            buckets = []
            for line in text.splitlines():
                if line.startswith(name + "_bucket"):
                    le = line.split('le="')[1].split('"')[0]
                    buckets.append((le, float(line.rsplit(" ", 1)[1])))
            total = buckets[-1][1] or 1
            row = ", ".join(f"<={le}s {count / total:.3f}" for le, count in buckets if le in ("0.005", "0.025", "0.1", "0.5"))
            print(f"bookie-{i} {name.removeprefix('magnetar_bookie_')}: n={int(total)} {row}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", action="append", help="a running bookie's host:port (repeatable; default: "
                        "start --bookies of them)")
    parser.add_argument("--bookies", type=int, default=1, help="bookies to start")
    parser.add_argument("--qw", type=int, default=1, help="bookies each batch goes to")
    parser.add_argument("--entry-bytes", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100, help="entries per AddRequest")
    parser.add_argument("--inflight", type=int, default=32, help="unanswered AddRequests at most")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=0.0, help="offered entries/s (0: as fast as acked)")
    parser.add_argument("--ledger", type=int, default=int.from_bytes(os.urandom(4), "big"), help="ledger id")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra bookie.toml line for spawned bookies, e.g. --set flush_interval_ms=500")
    parser.add_argument("--no-sync", action="store_true", help="journal_sync = false (spawned bookie only)")
    args = parser.parse_args()
    procs = []
    with tempfile.TemporaryDirectory(prefix="bookie-bench-") as tmp:
        try:
            addresses = args.address
            if not addresses:
                for i in range(args.bookies):
                    proc, address = _spawn(pathlib.Path(tmp) / f"bookie-{i}", not args.no_sync, args.set)
                    procs.append(proc)
                    addresses = (addresses or []) + [address]
            if args.qw > len(addresses):
                raise SystemExit("--qw cannot exceed the number of bookies")
            acked, seconds = asyncio.run(_drive(addresses, args))
            if procs:
                _print_bookie_latency(pathlib.Path(tmp), len(procs))
        finally:
            for proc in procs:
                os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=30)
    rate = acked / seconds
    print(f"{acked} entries of {args.entry_bytes} B in {seconds:.1f} s: {rate:,.0f} entries/s, "
          f"{rate * args.entry_bytes / 1e6:,.1f} MB/s (batch {args.batch}, inflight {args.inflight}, "
          f"sync {'off' if args.no_sync else 'on'}, {args.qw} of {len(addresses)} bookies)")


if __name__ == "__main__":
    main()
