"""Publish latency at fixed rates: Magnetar against NATS JetStream and Redis Streams, in one run, on one disk.

    .venv/bin/python bench/latency.py                                   # 1k, 10k, 50k msg/s; 10 s a point
    .venv/bin/python bench/latency.py --rates 1000,10000 --seconds 20 --systems magnetar,redis --json out.json
    .venv/bin/python bench/latency.py --journal-sync on,off             # Magnetar with and without fsync
    .venv/bin/python bench/latency.py --systems magnetar --profile /tmp/prof   # py-spy at 10k msg/s

Every point publishes 1 KiB messages (``--size``) at a fixed rate for ``--seconds`` on a fixed, open-loop
schedule: message *k* is due at *(k + 1) / rate* after the start, whatever happened to the messages before
it, and its latency runs from that scheduled time to its acknowledgement. A sender that stalls (a full
queue, a slow client) therefore shows its stall in the latency of every message that waited behind it;
latency from the send call would hide it (coordinated omission). Percentiles come from HdrHistogram (µs,
three significant digits).

Systems, each started here in a temporary directory on the same disk and stopped at the end:

* ``magnetar``: ZooKeeper, ``--bookies`` bookie processes and one broker (the test kit, as bench/broker_perf.py),
  E/Qw/Qa ``--quorum``; the default is one bookie, one copy, like the single-node peers. Two clients, each a
  ``magnetar perf produce --open-loop`` worker process on a fresh topic:
  ``pulsar`` = the official pulsar-client, ``send_async`` with a callback per message, batching on (at most
  1,000 messages / 128 KiB / ``--batch-delay-ms`` per batch); ``magnetar`` = Magnetar's asyncio client,
  each tick's due messages sent as one pre-built batch entry. At the end the broker's and bookies' stage
  histograms of each point are printed (``magnetar perf --stages-from``'s table), headed by the CPU time the
  broker and the bookies used per acknowledged message during the point (``/proc``: user + system).
* ``nats``: ``nats-server`` with JetStream file storage; nats-py, one connection (see bench/latency_peers.py).
* ``redis``: ``redis-server`` with ``appendfsync always``; redis-py ``XADD`` pipelined over
  ``--redis-connections`` connections.

A peer whose server binary or client is missing is skipped with a line saying how to install it
(``scripts/ensure-bench-peers``); the run goes on. ``--profile DIR`` records py-spy (raw collapsed stacks,
one file per process) of the broker and bookies during each Magnetar point at ``--profile-rate``
(``bench/latency_probes.py py-spy-top FILE`` summarises one). docs/latency.md says how to read the output and
what it found.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Iterable, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "bench"):  # magnetar and the kit; latency_peers beside this file
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from magnetar.perf_worker import new_histogram  # noqa: E402

_HIST_MAX_US = 3_600_000_000
COLUMNS = ("system", "client", "rate asked", "achieved", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors")


# --------------------------------------------------------------------------------------------------------
# Pure: figures and the table
# --------------------------------------------------------------------------------------------------------


def summarize_ns(samples_ns: Iterable[int]) -> dict[str, float]:
    """p50/p99/p99.9/max in ms (and the count) of latencies in ns, through an HdrHistogram of µs."""
    counts = collections.Counter(max(1, min(ns // 1000, _HIST_MAX_US)) for ns in samples_ns)
    hist = new_histogram()
    for us, n in counts.items():
        hist.record_value(us, n)
    return latency_ms(hist)


def latency_ms(hist: Any) -> dict[str, float]:
    total = hist.get_total_count()
    if not total:
        return {"count": 0}
    out = {name: hist.get_value_at_percentile(p) / 1000 for name, p in (("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9))}
    out["max"] = hist.get_max_value() / 1000
    out["count"] = total
    return out


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.2f}"


def format_table(rows: list[dict[str, Any]]) -> list[str]:
    """One line per point: system, client, rate asked, rate achieved, p50, p99, p99.9, max (ms), errors."""
    cells = [list(COLUMNS)]
    for r in rows:
        lat = r.get("latency_ms", {})
        if r.get("skipped"):
            cells.append([r["system"], r.get("client", "-"), f"{r.get('rate', 0):,.0f}", "skipped", "", "", "", "", ""])
            continue
        cells.append([
            r["system"], r["client"], f"{r['rate']:,.0f}",
            f"{r['achieved']:,.0f}" if r.get("achieved") is not None else "-",
            _ms(lat.get("p50")), _ms(lat.get("p99")), _ms(lat.get("p99.9")), _ms(lat.get("max")),
            f"{r.get('errors', 0):,}" + (f" ({r['error']})" if r.get("error") else ""),
        ])
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS) - 1)]
    lines = []
    for row in cells:
        left = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        right = [row[i].rjust(widths[i]) for i in range(2, len(COLUMNS) - 1)]
        lines.append("  ".join(left + right + [row[-1]]).rstrip())
    return lines


def parse_settings(pairs: Iterable[str]) -> dict[str, Any]:
    """``["flush_interval_ms=200", "direct_io=false"]`` -> {"flush_interval_ms": 200, "direct_io": False}."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"a setting is KEY=VALUE, not {pair!r}")
        value: Any = text.strip()
        if value.lower() in ("true", "false"):
            value = value.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(value)
                    break
                except ValueError:
                    continue
        out[key.strip()] = value
    return out


def parse_rates(text: str) -> list[float]:
    """``"1000,10k,50000"`` -> [1000.0, 10000.0, 50000.0]; every rate positive."""
    rates = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        factor = 1000.0 if part.endswith("k") else 1.0
        value = float(part[:-1] if part.endswith("k") else part) * factor
        if value <= 0:
            raise ValueError(f"a rate must be positive, not {part}")
        rates.append(value)
    if not rates:
        raise ValueError("no rate given")
    return rates


# --------------------------------------------------------------------------------------------------------
# Magnetar
# --------------------------------------------------------------------------------------------------------


class Magnetar:
    """A local deployment (the test kit's processes): ZooKeeper, bookies, one broker."""

    def __init__(self, base: pathlib.Path, *, bookies: int, quorum: tuple[int, int, int], journal_sync: bool,
                 bookie_settings: Optional[dict[str, Any]] = None,
                 broker_settings: Optional[dict[str, Any]] = None) -> None:
        from tests.kit.bookies import start_bookies
        from tests.kit.brokers import start_brokers
        from tests.kit.zookeeper import start_zookeeper

        self.processes = []
        try:
            zk = start_zookeeper(base)
            self.processes.append(zk.process)
            zk_connect = zk.new_chroot("latency")
            self.bookies = start_bookies(bookies, base, zk_connect,
                                         **{"journal_sync": journal_sync, **(bookie_settings or {})})
            self.processes += [b.process for b in self.bookies]
            e, qw, qa = (min(q, bookies) for q in quorum)
            (self.broker,) = start_brokers(1, base, zk_connect, managed_ledger_ensemble_size=e,
                                           managed_ledger_write_quorum=qw, managed_ledger_ack_quorum=qa,
                                           **(broker_settings or {}))
            self.processes.append(self.broker.process)
        except BaseException:
            self.close()
            raise
        self.http_urls = [self.broker.http_url, *(b.http_url for b in self.bookies)]

    def profiled(self) -> list[tuple[str, int]]:
        return [(self.broker.name, self.broker.process.pid), *((b.name, b.process.pid) for b in self.bookies)]

    def close(self) -> None:
        for proc in reversed(self.processes):
            proc.cleanup()


def _py_spy() -> Optional[str]:
    found = shutil.which("py-spy") or str(pathlib.Path(sys.executable).parent / "py-spy")
    return found if os.access(found, os.X_OK) else None


def _start_profiles(targets: list[tuple[str, int]], seconds: float, out_dir: pathlib.Path, tag: str,
                    mode: str) -> list[subprocess.Popen]:
    py_spy = _py_spy()
    if py_spy is None:
        print("profile: py-spy not found (pip install the test extra)", file=sys.stderr)
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for name, pid in targets:
        argv = [py_spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200",
                "--format", "raw", "--threads", "--nonblocking", "--output", str(out_dir / f"{name}-{tag}.txt")]
        if mode != "cpu":
            argv.append(f"--{mode}")
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    return procs


def run_magnetar_point(dep: Magnetar, *, client: str, rate: float, seconds: float, size: int,
                       batch_delay_ms: int, work: pathlib.Path, profile: Optional[tuple[pathlib.Path, str]],
                       label: str, pin: bool = True) -> tuple[dict[str, Any], list]:
    """One ``magnetar perf produce --open-loop`` run on a fresh topic; returns its row and its stage rows."""
    topic = f"persistent://public/default/latency-{uuid.uuid4().hex[:8]}"
    out = work / f"perf-{uuid.uuid4().hex[:8]}.json"
    log = work / f"perf-{client}-{int(rate)}.log"
    argv = [sys.executable, "-m", "magnetar", "perf", "produce", dep.broker.pulsar_url, topic, "--client", client,
            "--rate", str(rate), "--duration", str(seconds), "--size", str(size), "--open-loop",
            "--batch-delay-ms", str(batch_delay_ms), "--interval", str(max(1.0, seconds / 2)), "--json", str(out),
            "--pin" if pin else "--no-pin"]
    row: dict[str, Any] = {"system": label, "client": _CLIENT_LABELS[client], "rate": rate}
    before = _scrape_by_process(dep)
    cpu_before = _cpu_by_kind(dep)
    profilers: list[subprocess.Popen] = []
    with open(log, "w") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, text=True)
        if profile is not None:
            # The worker needs a moment to connect and create its producer: start sampling once it reports.
            time.sleep(min(3.0, seconds / 4))
            profilers = _start_profiles(dep.profiled(), seconds / 2, profile[0],
                                        f"{client}-{int(rate)}-{profile[1]}", profile[1])
        try:
            code = proc.wait(timeout=seconds + 180)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -9
    for p in profilers:
        _, err = p.communicate(timeout=seconds + 60)
        if p.returncode:
            print(f"profile: py-spy exited {p.returncode}: {err.strip()[-300:]}", file=sys.stderr)
    stages = stage_rows_by_process(before, _scrape_by_process(dep))
    cpu_s = {kind: after - cpu_before.get(kind, 0.0) for kind, after in _cpu_by_kind(dep).items()}
    if code != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        row.update(errors=0, error=f"perf exited {code}: {' '.join(tail)[-200:]}")
        return row, stages
    got = json.loads(out.read_text())
    row.update(achieved=got["msg_per_s"], latency_ms=got["latency_ms"], errors=got["errors"],
               messages=got["messages"])
    if got["messages"]:
        row["cpu_us_per_msg"] = {kind: round(s * 1e6 / got["messages"], 1) for kind, s in cpu_s.items()}
    return row, stages


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux ``/proc``; 0 where unreadable)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_by_kind(dep: Magnetar) -> dict[str, float]:
    """CPU seconds used so far by the broker and by the bookies together."""
    return {"broker": _cpu_seconds(dep.broker.process.pid),
            "bookies": sum(_cpu_seconds(b.process.pid) for b in dep.bookies)}


_CLIENT_LABELS = {"pulsar": "pulsar-client", "magnetar": "magnetar-perf"}
_RUNTIME_STAGES = ("event-loop lag", "gc pause")


def _scrape_by_process(dep: Magnetar) -> dict[str, Any]:
    from magnetar import perf_stages

    return {"broker": perf_stages.scrape([dep.broker.http_url]),
            "bookie": perf_stages.scrape([b.http_url for b in dep.bookies])}


def stage_rows_by_process(before: dict[str, Any], after: dict[str, Any]) -> list[tuple]:
    """perf_stages' rows of the broker and of the bookies, the runtime rows (loop lag, gc) named per kind."""
    from magnetar import perf_stages

    rows = []
    for kind in ("broker", "bookie"):
        for row in perf_stages.stage_rows(before[kind], after[kind]):
            if row[0] in _RUNTIME_STAGES:
                rows.append((f"{kind}: {row[0]}", *row[1:]))
            elif row[0].startswith("broker") == (kind == "broker"):
                rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------------------
# Peers
# --------------------------------------------------------------------------------------------------------


def run_peer(system: str, base: pathlib.Path, rates: list[float], seconds: float, size: int,
             options: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    import latency_peers as peers

    reason = peers.missing(system)
    if reason:
        print(reason, file=sys.stderr)
        return [{"system": system, "client": "-", "rate": r, "skipped": reason} for r in rates]
    start, drive, client = {
        "nats": (peers.start_nats, peers.drive_nats, "nats-py"),
        "redis": (peers.start_redis, peers.drive_redis, "redis-py"),
    }[system]
    server, url = start(base)
    payload = os.urandom(size)
    rows = []
    try:
        for rate in rates:
            point = f"{int(rate)}_{uuid.uuid4().hex[:6]}"
            row: dict[str, Any] = {"system": system, "client": client, "rate": rate}
            try:
                got = asyncio.run(drive(url, rate=rate, seconds=seconds, payload=payload, point=point,
                                        **(options or {})))
            except Exception as exc:  # noqa: BLE001 - one failed point is a row, not the end of the run
                row.update(errors=0, error=f"{type(exc).__name__}: {exc}"[:200])
                rows.append(row)
                continue
            lat = summarize_ns(got.samples_ns)
            row.update(latency_ms=lat, errors=got.errors, messages=lat["count"],
                       achieved=lat["count"] / got.elapsed_s if got.elapsed_s else 0.0)
            if got.first_error:
                row["error"] = got.first_error[:200]
            rows.append(row)
            print(f"{system} {rate:,.0f} msg/s: {_brief(row)}", file=sys.stderr)
    finally:
        server.cleanup()
    return rows


def _brief(row: dict[str, Any]) -> str:
    lat = row.get("latency_ms", {})
    return (f"achieved {row.get('achieved', 0):,.0f} msg/s, p50 {_ms(lat.get('p50'))} p99 {_ms(lat.get('p99'))} "
            f"p99.9 {_ms(lat.get('p99.9'))} max {_ms(lat.get('max'))} ms, errors {row.get('errors', 0)}"
            + (f" ({row['error']})" if row.get("error") else ""))


# --------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------


def _args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,10000,50000", help="msg/s of each point (comma-separated)")
    parser.add_argument("--seconds", type=float, default=10.0, help="publishing time of each point")
    parser.add_argument("--systems", default="magnetar,nats,redis")
    parser.add_argument("--clients", default="pulsar,magnetar", help="Magnetar's load generators: pulsar, magnetar")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes")
    parser.add_argument("--bookies", type=int, default=1)
    parser.add_argument("--quorum", default="1/1/1", help="E/Qw/Qa of Magnetar's ledgers (3/2/2 with --bookies 3)")
    parser.add_argument("--journal-sync", default="on", help="on, off or on,off: bookies fsync their journal "
                        "before acknowledging (off: like nats-server 2.9, which does not fsync each write)")
    parser.add_argument("--redis-connections", type=int, default=16,
                        help="Redis fsyncs once per event-loop round but reads <= 16 KiB of each connection's "
                             "commands per round: its group commit grows with connections")
    parser.add_argument("--bookie-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a bookie setting (bookie/config.py) for the deployment started here (repeat)")
    parser.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (broker/config.py) for the deployment started here (repeat)")
    parser.add_argument("--batch-delay-ms", type=int, default=1, help="pulsar-client's batching delay")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="pin the pulsar-client worker to one CPU (magnetar perf's default)")
    parser.add_argument("--profile", help="a folder: py-spy the broker and bookies during --profile-rate points")
    parser.add_argument("--profile-rate", type=float, default=10000.0)
    parser.add_argument("--profile-mode", default="cpu", choices=("cpu", "idle", "gil"),
                        help="py-spy: threads on a CPU (default), waiting threads too (--idle), or only the "
                             "thread holding the GIL (--gil)")
    parser.add_argument("--json", help="write the rows, stages and settings here")
    args = parser.parse_args(argv)
    try:
        args.rate_list = parse_rates(args.rates)
        args.bookie_settings = parse_settings(args.bookie_set)
        args.broker_settings = parse_settings(args.broker_set)
        args.quorum_t = tuple(int(q) for q in args.quorum.split("/"))
        if len(args.quorum_t) != 3 or not 1 <= args.quorum_t[2] <= args.quorum_t[1] <= args.quorum_t[0]:
            raise ValueError
    except ValueError as exc:
        parser.error(str(exc) or "--quorum is E/Qw/Qa with 1 <= Qa <= Qw <= E")
    args.system_list = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.client_list = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.sync_list = [s.strip() for s in args.journal_sync.split(",") if s.strip()]
    for value, allowed, name in ((args.system_list, {"magnetar", "nats", "redis"}, "--systems"),
                                 (args.client_list, {"pulsar", "magnetar"}, "--clients"),
                                 (args.sync_list, {"on", "off"}, "--journal-sync")):
        if not value or set(value) - allowed:
            parser.error(f"{name} takes {', '.join(sorted(allowed))}")
    if args.seconds <= 0 or args.size <= 0 or args.bookies < 1 or args.redis_connections < 1:
        parser.error("--seconds, --size, --bookies and --redis-connections must be positive")
    return args


def settings_lines(args: argparse.Namespace) -> list[str]:
    import latency_peers as peers

    lines = [f"payload {args.size} B, {args.seconds:g} s a point, open loop: latency from each message's "
             "scheduled send time to its acknowledgement"]
    if "magnetar" in args.system_list:
        lines.append(f"magnetar: {args.bookies} bookie(s), E/Qw/Qa {args.quorum}, journal fsync "
                     f"{' and '.join(args.sync_list)}"
                     + "".join(f", bookie {k}={v}" for k, v in args.bookie_settings.items())
                     + "".join(f", broker {k}={v}" for k, v in args.broker_settings.items())
                     + (f", MAGNETAR_SWITCH_INTERVAL_S={os.environ['MAGNETAR_SWITCH_INTERVAL_S']}"
                        if os.environ.get("MAGNETAR_SWITCH_INTERVAL_S") else "")
                     + f"; pulsar-client: send_async + callback, batching on "
                     f"(<= 1000 msgs, 128 KiB, {args.batch_delay_ms} ms delay), max pending 10000, worker "
                     f"{'pinned to one CPU' if args.pin else 'not pinned'}; magnetar-perf: asyncio client, each "
                     "tick's due messages as one batch entry")
    if "nats" in args.system_list:
        lines.append(f"nats: {peers.NATS_SYNC}; nats-py, publish with a reply subject per message, acks on one "
                     "subscription, <= 10000 unanswered")
    if "redis" in args.system_list:
        lines.append(f"redis: {peers.REDIS_SYNC}; redis-py (hiredis parser), "
                     f"{args.redis_connections} pipelined connections: each tick's XADDs written at once on the next "
                     "one, replies read in order, <= 10000 unanswered")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    args = _args(argv)
    rows: list[dict[str, Any]] = []
    stages: list[tuple[str, list]] = []
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="magnetar-latency-") as tmp:
        base = pathlib.Path(tmp)
        for system in args.system_list:
            if system != "magnetar":
                options = {"connections": args.redis_connections} if system == "redis" else {}
                rows += run_peer(system, base / system, args.rate_list, args.seconds, args.size, options)
                continue
            for sync in args.sync_list:
                label = "magnetar" if sync == "on" else "magnetar/nosync"
                work = base / f"magnetar-{sync}"
                work.mkdir()
                dep = Magnetar(work, bookies=args.bookies, quorum=args.quorum_t, journal_sync=sync == "on",
                               bookie_settings=args.bookie_settings, broker_settings=args.broker_settings)
                print(f"{label}: deployment up ({args.bookies} bookie(s), E/Qw/Qa {args.quorum}) in {work}",
                      file=sys.stderr)
                try:
                    for client in args.client_list:
                        for rate in args.rate_list:
                            profile = ((pathlib.Path(args.profile) / label.replace("/", "-"), args.profile_mode)
                                       if args.profile and rate == args.profile_rate else None)
                            row, point_stages = run_magnetar_point(
                                dep, client=client, rate=rate, seconds=args.seconds, size=args.size,
                                batch_delay_ms=args.batch_delay_ms, work=work, profile=profile, label=label,
                                pin=args.pin)
                            rows.append(row)
                            cpu = row.get("cpu_us_per_msg")
                            cpu_text = (f" (CPU per message: broker {cpu['broker']:.0f} µs, bookies "
                                        f"{cpu['bookies']:.0f} µs)" if cpu else "")
                            stages.append((f"{label} {row['client']} {rate:,.0f} msg/s{cpu_text}", point_stages))
                            print(f"{label} {row['client']} {rate:,.0f} msg/s: {_brief(row)}", file=sys.stderr)
                finally:
                    dep.close()
    load_after = os.getloadavg()
    print()
    for line in settings_lines(args):
        print(f"# {line}")
    print(f"# load average (1 min) {load[0]:.2f} at the start, {load_after[0]:.2f} at the end, "
          f"{os.cpu_count()} CPUs")
    print()
    for line in format_table(rows):
        print(line)
    from magnetar import perf_stages

    for title, point_stages in stages:
        print(f"\n== {title}")
        for line in perf_stages.format_rows(point_stages):
            print(line)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "settings": settings_lines(args), "load_average": [load[0], load_after[0]], "rows": rows,
            "stages": [{"point": t, "rows": [list(r) for r in s]} for t, s in stages]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
