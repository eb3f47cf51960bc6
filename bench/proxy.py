"""The gateway proxy's cost: going through it over TLS against going straight to the broker, in one run.

    .venv/bin/python bench/proxy.py                  # ZooKeeper + 3 bookies + 1 broker + 1 proxy, started here
    .venv/bin/python bench/proxy.py --seconds 20 --rate 10000 --idle-connections 10000 --json out.json
    .venv/bin/python bench/proxy.py --quick          # a smoke test: tiny numbers, every figure printed
    .venv/bin/python bench/proxy.py --broker-tls     # the broker serves TLS too: a "direct TLS" column

One deployment, started here in a temporary directory and stopped at the end: a real ZooKeeper, ``--bookies``
bookie processes, one ``magnetar broker`` (E/Qw/Qa 3/2/2, as ``bench/broker_perf.py``) and one ``magnetar proxy``
serving ``pulsar+ssl://`` with a certificate (EC P-256, SANs 127.0.0.1 and localhost) from a CA made here by
``magnetar.auth.certs``. Token authentication is on at the broker and the proxy (``--no-auth``: off): clients
present a token of role ``bench``; the proxy presents its own (role ``proxy``, one of the broker's
``proxy_roles``) and names the client's role as ``original_principal``. The proxy reaches the broker over plain
``pulsar://``; with ``--broker-tls`` the broker serves ``pulsar+ssl://`` as well, the proxy forwards over TLS
(host name verified) and a third path, straight to the broker's TLS port, is measured too.

Four measurements, each skippable (``--skip-throughput``, ``--skip-latency``, ``--skip-connect-rate``,
``--skip-memory``):

1. **Throughput.** ``magnetar perf produce --client pulsar`` (pulsar-client, 1 KiB messages, batching on, as fast
   as it goes, ``--processes`` pinned worker processes; ``--client magnetar``: Magnetar's pre-built batches, which
   cost the client little, so the servers' limits show) for ``--seconds`` on a fresh topic, once per path, with the
   same settings; over TLS with ``--tls-trust-certs-file`` and ``--tls-validate-hostname``. The proxy's CPU time
   during its run (``/proc/PID/stat``) is given per message: on a shared machine msg/s move with the neighbours'
   load, CPU per message much less.
2. **Latency.** The same at a fixed ``--rate`` (10,000 msg/s): send-to-receipt p50 / p99 / p99.9 per path, and
   what the proxy adds to the direct path's. With each produce run go how busy the machine's CPUs were and the
   p99 of the proxy's event-loop lag (how late it ran a 50 ms timer: how long one wake-up of the proxy waited
   for a CPU). A message through the proxy wakes it twice (in, and its receipt out): near 100 % busy, what the
   proxy adds is mostly those waits, whatever the proxy's own code costs.
3. **Connection rate.** ``--connect-workers`` asyncio tasks in this process, each in a loop for
   ``--connect-seconds``: TCP connect, TLS handshake (chain and host name verified), CONNECT with the token,
   CONNECTED, close. Connections per second, and p50 / p99 of one such round. This process's own TLS work runs
   on the same machine: the figure is a floor for the proxy alone.
4. **Idle memory.** The proxy's RSS (``VmRSS`` of ``/proc/PID/status``) before and after this process opens
   ``--idle-connections`` (10,000) TLS connections that completed CONNECT and stay idle (answering the proxy's
   PINGs), again after they are closed, and the lowest it goes in the ``--settle-seconds`` (15) after that (the
   proxy gives freed heap back to the system on a 10 s timer). The open-files limit of this process, which the
   proxy inherits, is raised towards its hard limit when the connections need it.

Parts 3 and 4 connect with ``bench/proxy_clients.py`` (Magnetar's frame codec on asyncio, 16 KiB TLS buffers).

The table comes at the end (``--json FILE`` writes the figures too), with the load average before and after:
on a shared machine, compare runs only with similar load.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Every process started from here (servers, perf workers) runs this checkout's code, as this process does.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)

from magnetar.auth import tokens  # noqa: E402
from magnetar.net import free_port  # noqa: E402
from tests.kit.bookies import start_bookies  # noqa: E402
from tests.kit.brokers import start_brokers  # noqa: E402
from tests.kit.certs import TestCa  # noqa: E402
from tests.kit.process import kill_all  # noqa: E402
from tests.kit.proxies import ProxyHandle, start_proxy  # noqa: E402
from tests.kit.zookeeper import start_zookeeper  # noqa: E402

from proxy_clients import ProxyTarget, cpu_seconds, measure_connect_rate, measure_idle_memory  # noqa: E402

HOST = "127.0.0.1"
CLIENT_ROLE = "bench"
PROXY_ROLE = "proxy"
_OPEN_FILES_SPARE = 2_000  # beyond the idle connections: perf clients, logs, the servers' own sockets


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------------
# The deployment
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """One way a client reaches the topics: its column in the table."""

    name: str
    url: str

    @property
    def tls(self) -> bool:
        return self.url.startswith("pulsar+ssl://")


@dataclass
class Deployment:
    direct: list[Route]  # the broker's plain port first: the reference the proxy is compared with
    proxy_route: Route
    proxy: ProxyHandle
    ca_file: str
    token: str  # "" without authentication

    @property
    def routes(self) -> list[Route]:
        return [*self.direct, self.proxy_route]

    @property
    def proxy_pid(self) -> int:
        pid = self.proxy.process.pid
        assert pid is not None
        return pid

    def proxy_target(self) -> ProxyTarget:
        """The proxy's TLS port as :mod:`proxy_clients` connects to it."""
        return ProxyTarget(host=HOST, port=self.proxy.tls_port, ca_file=self.ca_file, token=self.token,
                           pid=self.proxy_pid,
                           active_connections=lambda: self.proxy.metric("pulsar_proxy_active_connections"))


def start_deployment(base: pathlib.Path, *, bookies: int, auth: bool, broker_tls: bool,
                     max_connections: int) -> Deployment:
    """Starts ZooKeeper, the bookies, one broker and one TLS proxy (stopped by :func:`tests.kit.process.kill_all`)."""
    zk = start_zookeeper(base)
    zk_connect = zk.new_chroot("bench")
    start_bookies(bookies, base, zk_connect)
    ca = TestCa(base / "ca")
    broker_settings: dict[str, Any] = {
        "managed_ledger_ensemble_size": min(3, bookies), "managed_ledger_write_quorum": min(2, bookies),
        "managed_ledger_ack_quorum": min(2, bookies)}
    # The proxy accepts every idle connection part 4 opens, and those part 3 may not have seen closed yet.
    proxy_settings: dict[str, Any] = {"max_concurrent_inbound_connections": max_connections}
    token = ""
    if auth:
        secret = tokens.create_secret_key()
        key_setting = "data:;base64," + base64.b64encode(secret).decode()
        token = tokens.create_token(CLIENT_ROLE, key=secret, algorithm="HS256")
        proxy_token = tokens.create_token(PROXY_ROLE, key=secret, algorithm="HS256")
        common = {"authentication_enabled": True, "authentication_providers": ["token"],
                  "token_secret_key": key_setting}
        broker_settings.update(common, proxy_roles=[PROXY_ROLE])
        proxy_settings.update(common, broker_client_auth_method="token",
                              broker_client_auth_params="token:" + proxy_token)
    if broker_tls:
        cert = ca.server("broker-server")
        broker_settings.update(tls_port=free_port(HOST), tls_cert_file=str(cert.cert), tls_key_file=str(cert.key))
        proxy_settings.update(tls_enabled_with_broker=True, broker_client_trust_certs_file=str(ca.ca_file))
    (broker,) = start_brokers(1, base, zk_connect, **broker_settings)
    proxy = start_proxy(base, zk_connect, ca, plain=False, **proxy_settings)
    direct = [Route("direct", broker.pulsar_url)]
    if broker_tls:
        direct.append(Route("direct TLS", f"pulsar+ssl://{HOST}:{broker.settings['tls_port']}"))
    return Deployment(direct=direct, proxy_route=Route("proxy TLS", proxy.pulsar_ssl_url), proxy=proxy,
                      ca_file=str(ca.ca_file), token=token)


def raise_open_files_limit(wanted: int) -> int:
    """Raises this process's soft RLIMIT_NOFILE (inherited by the servers it starts) towards ``wanted``, up to
    the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


# --------------------------------------------------------------------------------------------------------
# 1 and 2: magnetar perf produce, per route and round
# --------------------------------------------------------------------------------------------------------


def machine_cpu() -> tuple[int, int]:
    """All CPUs' time so far and the idle part of it (``/proc/stat``, clock ticks)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]  # idle + iowait


_LAG = "magnetar_event_loop_lag_seconds_bucket"


def loop_lag_buckets(dep: Deployment) -> dict[float, float]:
    """The proxy's event-loop lag histogram (``magnetar_event_loop_lag_seconds``): upper bound (s) -> count;
    empty when its metrics cannot be read."""
    try:
        samples = dep.proxy.metrics()
    except OSError:
        return {}
    found = {}
    for key, value in samples.items():
        if key.startswith(_LAG + "{"):
            bound = key.split('le="', 1)[1].split('"', 1)[0]
            found[float("inf") if bound == "+Inf" else float(bound)] = value
    return found


def lag_p99_ms(before: dict[float, float], after: dict[float, float]) -> Optional[float]:
    """p99 of the lag observed between two readings of :func:`loop_lag_buckets`, as the upper bound of the bucket
    it falls in (ms; None: no observation, or beyond the last finite bucket)."""
    bounds = sorted(after)
    if not bounds:
        return None
    counts = {b: after[b] - before.get(b, 0.0) for b in bounds}
    total = counts[bounds[-1]]
    if total <= 0:
        return None
    for b in bounds:  # cumulative buckets
        if counts[b] >= 0.99 * total:
            return None if b == float("inf") else b * 1000
    return None


def perf_produce(dep: Deployment, route: Route, *, seconds: float, rate: float, processes: int,
                 size_bytes: int, client: str) -> dict[str, Any]:
    """One ``magnetar perf produce`` run on a fresh topic; its JSON summary, with the proxy's CPU seconds over the
    run added (``proxy_cpu_s``), how busy the machine's CPUs were (``machine_busy_pct``: on a shared machine
    latency figures taken near 100 % tell of the neighbours, not of the path) and the p99 of the proxy's
    event-loop lag meanwhile (``proxy_loop_lag_p99_ms``: how late the proxy ran a 50 ms timer, i.e. how long a
    wake-up of the proxy waited; every message through the proxy needs one on its way in and one on its way out)."""
    topic = f"persistent://public/default/bench-proxy-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "produce.json"
        argv = [sys.executable, "-m", "magnetar", "perf", "produce", route.url, topic, "--client", client,
                "--size", str(size_bytes), "--rate", str(rate), "--processes", str(processes),
                "--duration", str(seconds), "--interval", str(max(1.0, seconds / 4)), "--json", str(out)]
        if route.tls:
            argv += ["--tls-trust-certs-file", dep.ca_file, "--tls-validate-hostname"]
        env = dict(os.environ)
        if dep.token:
            env["MAGNETAR_AUTH_TOKEN"] = dep.token  # not on the command line
        cpu_before, machine_before, lag_before = cpu_seconds(dep.proxy_pid), machine_cpu(), loop_lag_buckets(dep)
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=seconds + 180)
        cpu_used = cpu_seconds(dep.proxy_pid) - cpu_before
        machine_after, lag_after = machine_cpu(), loop_lag_buckets(dep)
        sys.stderr.write(proc.stdout)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
        summary = json.loads(out.read_text())
    summary["proxy_cpu_s"] = round(cpu_used, 3)
    ticks, idle = machine_after[0] - machine_before[0], machine_after[1] - machine_before[1]
    summary["machine_busy_pct"] = round(100 * (1 - idle / ticks), 1) if ticks > 0 else 0.0
    summary["proxy_loop_lag_p99_ms"] = lag_p99_ms(lag_before, lag_after)
    return summary


def warm_up(dep: Deployment, *, seconds: float, processes: int, size_bytes: int, client: str) -> None:
    """One unmeasured run per route: the first topic of a fresh broker pays for its namespace bundle, the
    bookies' first ledgers and connections, which would otherwise count against whichever route goes first."""
    for route in dep.routes:
        _say(f"-- warm-up for {seconds:g} s: {route.name}")
        result = perf_produce(dep, route, seconds=seconds, rate=0.0, processes=processes, size_bytes=size_bytes,
                              client=client)
        if "error" in result:
            _say(f"   warm-up error: {result['error']}")


def measure_produce(dep: Deployment, *, seconds: float, rate: float, rounds: int, processes: int,
                    size_bytes: int, client: str) -> dict[str, dict[str, Any]]:
    """Every route once per round, interleaved (direct, proxy, direct, proxy, ...) so that a change in the
    machine's load falls on all of them; per route, the median of each figure over its rounds."""
    runs: dict[str, list[dict[str, Any]]] = {r.name: [] for r in dep.routes}
    what = "as fast as possible" if rate <= 0 else f"at {rate:,.0f} msg/s"
    for n in range(rounds):
        for route in dep.routes:
            _say(f"-- produce {what} for {seconds:g} s, round {n + 1}/{rounds}: {route.name} ({route.url})")
            runs[route.name].append(perf_produce(dep, route, seconds=seconds, rate=rate, processes=processes,
                                                 size_bytes=size_bytes, client=client))
    return {name: median_of_rounds(done) for name, done in runs.items()}


def median_of_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """msg/s, MB/s, each latency percentile and the proxy's CPU per message: the median over the rounds
    (each figure on its own); messages and errors added up; the rounds themselves under ``rounds``. A
    failed round makes the whole an error."""
    failed = [r["error"] for r in rounds if "error" in r]
    if failed:
        return {"error": failed[0], "rounds": rounds}

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    keys = set.intersection(*(set(r["latency_ms"]) for r in rounds))
    lags = [r["proxy_loop_lag_p99_ms"] for r in rounds if r.get("proxy_loop_lag_p99_ms") is not None]
    return {
        "msg_per_s": median([r["msg_per_s"] for r in rounds]),
        "mb_per_s": median([r["mb_per_s"] for r in rounds]),
        "latency_ms": {k: median([r["latency_ms"][k] for r in rounds]) for k in sorted(keys)},
        "proxy_cpu_us_per_msg": median([r["proxy_cpu_s"] * 1e6 / r["messages"] if r["messages"] else 0.0
                                        for r in rounds]),
        "machine_busy_pct": median([r.get("machine_busy_pct", 0.0) for r in rounds]),
        "proxy_loop_lag_p99_ms": median(lags) if lags else None,
        "messages": sum(r["messages"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "rounds": rounds,
    }


# --------------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------------


@dataclass
class Table:
    """Rows of label and one cell per column, printed aligned."""

    columns: list[str]
    rows: list[tuple[str, list[str]]] = field(default_factory=list)

    def add(self, label: str, *cells: str) -> None:
        self.rows.append((label, list(cells) + [""] * (len(self.columns) - len(cells))))

    def render(self) -> str:
        width = max([len(label) for label, _ in self.rows] + [10])
        cols = [max([len(c)] + [len(cells[i]) for _, cells in self.rows]) for i, c in enumerate(self.columns)]
        lines = [" " * width + "  " + "  ".join(c.rjust(w) for c, w in zip(self.columns, cols))]
        for label, cells in self.rows:
            lines.append(label.ljust(width) + "  " + "  ".join(c.rjust(w) for c, w in zip(cells, cols)))
        return "\n".join(lines)


def _ms_or_dash(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:g}"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _produce_rows(table: Table, dep: Deployment, results: dict[str, dict[str, Any]], *, fixed_rate: bool) -> None:
    names = [r.name for r in dep.routes]
    base, proxy = results.get(names[0], {}), results.get(dep.proxy_route.name, {})
    bad = {n: results[n]["error"] for n in names if "error" in results.get(n, {"error": "not run"})}
    if bad:
        title = "latency" if fixed_rate else "throughput"
        for name, err in bad.items():
            table.add(f"{title} {name}: error", err)
        return
    cpu = [f"{results[n]['proxy_cpu_us_per_msg']:.1f}" for n in names]
    busy = [f"{results[n].get('machine_busy_pct', 0.0):.0f} %" for n in names]
    lag = [_ms_or_dash(results[n].get("proxy_loop_lag_p99_ms")) for n in names]
    if not fixed_rate:
        ratio = proxy["msg_per_s"] / base["msg_per_s"] * 100 if base["msg_per_s"] else 0.0
        table.add("published msg/s, max rate", *[f"{results[n]['msg_per_s']:,.0f}" for n in names],
                  f"{ratio:.1f} %")
        table.add("  MB/s", *[f"{results[n]['mb_per_s']:.2f}" for n in names])
        table.add("  proxy CPU µs per message", *cpu)
        table.add("  machine CPUs busy", *busy)
        return
    table.add("achieved msg/s, fixed rate", *[f"{results[n]['msg_per_s']:,.0f}" for n in names])
    for key in ("p50", "p99", "p99.9"):
        values = [results[n]["latency_ms"].get(key, 0.0) for n in names]
        table.add(f"  publish latency {key} ms", *[f"{v:.3f}" for v in values], f"{values[-1] - values[0]:+.3f} ms")
    table.add("  proxy CPU µs per message", *cpu)
    table.add("  machine CPUs busy", *busy)
    table.add("  proxy event-loop lag p99 ms", *lag)


def render(dep: Deployment, figures: dict[str, Any], args: argparse.Namespace) -> str:
    names = [r.name for r in dep.routes]
    table = Table(columns=[*names, "proxy vs direct"])
    if "throughput" in figures:
        _produce_rows(table, dep, figures["throughput"], fixed_rate=False)
    if "latency" in figures:
        _produce_rows(table, dep, figures["latency"], fixed_rate=True)
    if "connect_rate" in figures:
        c = figures["connect_rate"]
        cells = [""] * (len(names) - 1)
        table.add(f"TLS connections/s accepted ({c['workers']} workers)", *cells, f"{c['per_s']:,.0f}")
        table.add("  TLS + CONNECT p50 / p99 ms", *cells, f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f}")
        table.add("  proxy CPU ms per connection", *cells, f"{c['proxy_cpu_ms_per_connection']:.2f}")
        table.add("  errors", *cells, f"{c['errors']}")
    if "memory" in figures:
        m = figures["memory"]
        cells = [""] * (len(names) - 1)
        table.add("proxy RSS before", *cells, _mib(m["rss_before_bytes"]))
        table.add(f"proxy RSS with {m['connections']:,} idle TLS connections", *cells, _mib(m["rss_idle_bytes"]))
        table.add("  per idle connection", *cells, f"{m['per_connection_bytes'] / 1024:.1f} KiB")
        table.add("  proxy RSS after closing them", *cells, _mib(m["rss_after_close_bytes"]))
        table.add(f"  lowest in the {m['settle_s']:g} s after", *cells, _mib(m["rss_settled_bytes"]))
        table.add("  opened in / failed attempts", *cells, f"{m['open_s']:.1f} s / {m['failures']}")
    auth = "token auth" if dep.token else "no auth"
    rounds = f", medians of {args.rounds} rounds" if args.rounds > 1 else ""
    generator = "pulsar-client batching" if args.client == "pulsar" else "magnetar pre-built batches"
    head = (f"== proxy bench: {args.size} B messages, {generator}, {args.processes} process(es), "
            f"{args.seconds:g} s per run{rounds}, {auth}; load average {figures['load_before']} -> "
            f"{figures['load_after']} ({os.cpu_count()} CPUs)")
    return head + "\n" + table.render()


# --------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="each produce run (default 10)")
    parser.add_argument("--rate", type=float, default=10_000.0, help="msg/s of the latency runs (default 10,000)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="produce runs per route, interleaved; each figure's median is shown (default 1)")
    parser.add_argument("--warmup-seconds", type=float, default=3.0,
                        help="an unmeasured produce run per route first (0: none; default 3)")
    parser.add_argument("--size", type=int, default=1024, help="message size in bytes (default 1 KiB)")
    parser.add_argument("--client", choices=("pulsar", "magnetar"), default="pulsar",
                        help="perf produce's load generator: pulsar-client (default) or Magnetar's pre-built batches")
    parser.add_argument("--processes", type=int, default=1, help="perf produce worker processes (default 1)")
    parser.add_argument("--connect-seconds", type=float, default=None, help="connection-rate loop (default --seconds)")
    parser.add_argument("--connect-workers", type=int, default=16, help="concurrent connecting loops (default 16)")
    parser.add_argument("--idle-connections", type=int, default=10_000, help="idle TLS connections (default 10,000)")
    parser.add_argument("--open-concurrency", type=int, default=64, help="idle connections being opened at once")
    parser.add_argument("--settle-seconds", type=float, default=15.0,
                        help="how long the proxy's RSS is watched after the idle connections close (default 15: "
                             "longer than its 10 s heap-trim timer)")
    parser.add_argument("--bookies", type=int, default=3)
    parser.add_argument("--no-auth", action="store_true", help="no token authentication at the broker and proxy")
    parser.add_argument("--broker-tls", action="store_true",
                        help="the broker serves TLS too: the proxy forwards over TLS; a 'direct TLS' column")
    for part in ("throughput", "latency", "connect-rate", "memory"):
        parser.add_argument(f"--skip-{part}", action="store_true", help=f"do not measure {part.replace('-', ' ')}")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 2 s runs at 1,000 msg/s, 1 s warm-up, 1 s of connections, 100 idle ones "
                             "watched for 1 s after they close")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rate, args.idle_connections, args.connect_workers = 2.0, 1_000.0, 100, 4
        args.warmup_seconds = min(args.warmup_seconds, 1.0)
        args.connect_seconds = args.connect_seconds or 1.0
        args.settle_seconds = min(args.settle_seconds, 1.0)
    if args.connect_seconds is None:
        args.connect_seconds = args.seconds
    for name in ("seconds", "rate", "connect_seconds"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("warmup_seconds", "settle_seconds"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be 0 or more")
    for name in ("rounds", "size", "processes", "connect_workers", "idle_connections", "open_concurrency", "bookies"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # its retries while ZooKeeper starts are no news
    idle = 0 if args.skip_memory else args.idle_connections
    limit = raise_open_files_limit(idle + _OPEN_FILES_SPARE)
    if idle and idle + _OPEN_FILES_SPARE > limit:
        _say(f"note: the open-files limit is {limit}: {limit - _OPEN_FILES_SPARE} idle connections instead of {idle}")
        idle = args.idle_connections = max(1, limit - _OPEN_FILES_SPARE)
    figures: dict[str, Any] = {"load_before": _load()}
    tmp = tempfile.TemporaryDirectory(prefix="magnetar-bench-proxy-")
    failed = False
    try:
        dep = start_deployment(pathlib.Path(tmp.name), bookies=args.bookies, auth=not args.no_auth,
                               broker_tls=args.broker_tls, max_connections=idle + 1_000)
        _say(f"deployment in {tmp.name}: " + ", ".join(f"{r.name} {r.url}" for r in dep.routes))
        produce = {"size_bytes": args.size, "processes": args.processes, "seconds": args.seconds,
                   "rounds": args.rounds, "client": args.client}
        if args.warmup_seconds and not (args.skip_throughput and args.skip_latency):
            warm_up(dep, seconds=args.warmup_seconds, processes=args.processes, size_bytes=args.size,
                    client=args.client)
        if not args.skip_throughput:
            figures["throughput"] = measure_produce(dep, rate=0.0, **produce)
        if not args.skip_latency:
            figures["latency"] = measure_produce(dep, rate=args.rate, **produce)
        if not args.skip_connect_rate:
            _say(f"-- TLS connections for {args.connect_seconds:g} s, {args.connect_workers} workers")
            figures["connect_rate"] = asyncio.run(measure_connect_rate(dep.proxy_target(), seconds=args.connect_seconds,
                                                                       workers=args.connect_workers))
        if idle:
            _say(f"-- {idle:,} idle TLS connections")
            figures["memory"] = asyncio.run(measure_idle_memory(dep.proxy_target(), count=idle,
                                                                concurrency=args.open_concurrency,
                                                                settle_s=args.settle_seconds))
        figures["load_after"] = _load()
        print(render(dep, figures, args), flush=True)
        failed = _any_failure(figures, idle)
    finally:
        kill_all()
        tmp.cleanup()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=2))
    return 1 if failed else 0


def _any_failure(figures: dict[str, Any], idle: int) -> bool:
    """A run that errored, or idle connections that did not all open: the figures are not the ones asked for."""
    for part in ("throughput", "latency"):
        if any("error" in r for r in figures.get(part, {}).values()):
            return True
    memory = figures.get("memory")
    return bool(memory and (memory["connections"] < idle or memory["still_open"] < idle))


if __name__ == "__main__":
    sys.exit(main())
