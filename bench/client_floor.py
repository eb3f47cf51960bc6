"""The publish latency of a load generator alone: the same producer as ``bench/latency.py`` against a server
that answers every SEND at once, storing nothing.

    .venv/bin/python bench/client_floor.py                              # pulsar-client, 10,000 msg/s, 15 s, 2 runs
    .venv/bin/python bench/client_floor.py --clients pulsar,magnetar --rates 1000,10000 --runs 3

What Magnetar's figures in ``bench/latency.py`` cannot go below on this machine: the generator's process
(pulsar-client's batching timer, its I/O thread, the Python callback of every message, the GIL between
them), the loopback sockets and the scheduler. The server (``--serve``, started here in its own process) speaks
just enough of Pulsar's binary protocol for a producer: CONNECT, PARTITIONED_METADATA, LOOKUP (itself),
PRODUCER, SEND (a receipt with an invented position, in the same turn of its event loop), PING and
CLOSE_PRODUCER; anything else is left unanswered. Latency is measured as in ``bench/latency.py``: open loop,
from each message's scheduled send time to its receipt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from magnetar.protocol import pulsar_api_pb2 as pb  # noqa: E402
from magnetar.protocol.frames import FrameDecoder, encode_command, wrap  # noqa: E402

_T = pb.BaseCommand


class _AnswerAtOnce(asyncio.Protocol):
    """One client connection: each frame is answered as soon as it is decoded; SENDs get their receipt."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.decoder = FrameDecoder()
        self.entry_id = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        out = [encode_command(wrap(answer)) for frame in self.decoder.feed(data)
               if (answer := self.answer(frame.command)) is not None]
        if out:
            self.transport.writelines(out)

    def answer(self, cmd: pb.BaseCommand):
        kind = cmd.type
        if kind == _T.SEND:
            send = cmd.send
            self.entry_id += 1
            receipt = pb.CommandSendReceipt(producer_id=send.producer_id, sequence_id=send.sequence_id,
                                            message_id=pb.MessageIdData(ledgerId=1, entryId=self.entry_id))
            if send.HasField("highest_sequence_id"):
                receipt.highest_sequence_id = send.highest_sequence_id
            return receipt
        if kind == _T.CONNECT:
            return pb.CommandConnected(server_version="client-floor", protocol_version=cmd.connect.protocol_version,
                                       max_message_size=5 * 1024 * 1024)
        if kind == _T.PARTITIONED_METADATA:
            return pb.CommandPartitionedTopicMetadataResponse(
                request_id=cmd.partitionMetadata.request_id, partitions=0,
                response=pb.CommandPartitionedTopicMetadataResponse.Success)
        if kind == _T.LOOKUP:
            return pb.CommandLookupTopicResponse(request_id=cmd.lookupTopic.request_id, brokerServiceUrl=self.url,
                                                 response=pb.CommandLookupTopicResponse.Connect, authoritative=True)
        if kind == _T.PRODUCER:
            return pb.CommandProducerSuccess(request_id=cmd.producer.request_id,
                                             producer_name=f"floor-{cmd.producer.producer_id}", last_sequence_id=-1)
        if kind == _T.PING:
            return pb.CommandPong()
        if kind == _T.CLOSE_PRODUCER:
            return pb.CommandSuccess(request_id=cmd.close_producer.request_id)
        return None


async def serve() -> None:
    """Listens on a free loopback port and prints its ``pulsar://`` URL on the first line of stdout."""
    loop = asyncio.get_running_loop()
    box: dict[str, str] = {}
    server = await loop.create_server(lambda: _AnswerAtOnce(box["url"]), "127.0.0.1", 0)
    box["url"] = f"pulsar://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    print(box["url"], flush=True)
    await server.serve_forever()


def run_point(url: str, client: str, rate: float, seconds: float, size: int, batch_delay_ms: int,
              work: pathlib.Path) -> dict:
    out = work / f"floor-{client}-{int(rate)}.json"
    argv = [sys.executable, "-m", "magnetar", "perf", "produce", url, "persistent://public/default/floor",
            "--client", client, "--rate", str(rate), "--duration", str(seconds), "--size", str(size), "--open-loop",
            "--batch-delay-ms", str(batch_delay_ms), "--interval", str(seconds), "--json", str(out), "--pin"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode != 0 or not out.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
        return {"client": client, "rate": rate, "error": f"perf exited {done.returncode}: {' '.join(tail)[-200:]}"}
    got = json.loads(out.read_text())
    return {"client": client, "rate": rate, "achieved": got["msg_per_s"], "latency_ms": got["latency_ms"],
            "errors": got["errors"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="only run the answer-at-once server")
    parser.add_argument("--clients", default="pulsar", help="pulsar, magnetar (comma-separated)")
    parser.add_argument("--rates", default="10000", help="msg/s of each point (comma-separated)")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch-delay-ms", type=int, default=1)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
        return
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("pulsar://"):
            raise SystemExit(f"the answer-at-once server did not start (exit {server.poll()})")
        print(f"# answer-at-once server at {url}; payload {args.size} B, {args.seconds:g} s a point, open loop")
        print(f"{'client':10} {'rate asked':>10} {'achieved':>9} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} "
              f"{'max ms':>7}")
        with tempfile.TemporaryDirectory(prefix="client-floor-") as tmp:
            for _ in range(args.runs):
                for client in [c for c in args.clients.split(",") if c]:
                    for rate in [float(r) for r in args.rates.split(",") if r]:
                        row = run_point(url, client, rate, args.seconds, args.size, args.batch_delay_ms,
                                        pathlib.Path(tmp))
                        if "error" in row:
                            print(f"{client:10} {rate:>10,.0f}  {row['error']}")
                            continue
                        ms = row["latency_ms"]
                        print(f"{client:10} {rate:>10,.0f} {row['achieved']:>9,.0f} {ms['p50']:>7.2f} "
                              f"{ms['p99']:>7.2f} {ms['p99.9']:>8.2f} {ms['max']:>7.2f}", flush=True)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
