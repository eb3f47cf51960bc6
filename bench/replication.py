"""Geo-replication between two local regions: delay at a given rate, and the highest rate it keeps up with.

    .venv/bin/python bench/replication.py                              # starts clusters/local.toml here, stops it
    .venv/bin/python bench/replication.py --data-dir .magnetar/demo    # a running two-region deployment
    .venv/bin/python bench/replication.py --rates 5000,10000,15000,20000 --seconds 10 --json out.json

Each step uses a fresh topic of the namespace ``acme/bench`` (replicated to both regions) and runs, at once:

* a consumer in the second region (``magnetar perf consume`` worker; Magnetar's asyncio client by default,
  the cheapest receiver, so the figure is the system's rather than a Python consumer's): the delay of each
  message is its receipt time minus its publish time, set by the producer in the first region and carried
  with the message across (the replicator keeps the origin metadata; both regions run on this machine's
  clock), recorded in an HdrHistogram;
* a rate-limited pulsar-client producer in the first region (``magnetar perf produce``, 1 KiB, batching on),
  over ``ceil(rate / --per-process-rate)`` processes, since one Python process tops out well below the
  higher rates on a loaded 2-core machine; the achieved rate is what is reported;
* a sampler of the first region's topic stats every ``--sample-s``: ``replication.<remote>.replicationBacklog``
  (entries, as Pulsar counts it) and ``msgInCounter - replication.msgOutCounter`` (messages not yet
  replicated).

A step's backlog is **flat** when, once the producer stops, the messages not yet replicated drain to 0
within ``--drain-ok-s`` (the backlog never built up beyond a second or two of traffic). The growth of the
backlog during the step (least-squares slope, after the first two seconds) is printed beside it. The summary
gives the delay at the first step's rate (5,000 msg/s by default) and the highest rate whose step, and every
step below it, stayed flat.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clusters.demo import replicate_namespace, stats_path  # noqa: E402
from magnetar.admin_client import AdminClient, AdminError  # noqa: E402
from magnetar.perf import PerfSpec, run_perf  # noqa: E402

LOCAL = ROOT / "clusters" / "local.toml"
NAMESPACE = "acme/bench"
SUBSCRIPTION = "bench"


def _say(line: str) -> None:
    print(line, flush=True)


class Sampler:
    """Polls the origin region's topic stats in a thread: (seconds since start, entries behind, messages
    behind, messages published so far)."""

    def __init__(self, admin: AdminClient, topic: str, remote: str, interval_s: float) -> None:
        self.admin, self.topic, self.remote, self.interval_s = admin, topic, remote, interval_s
        self.samples: list[tuple[float, int, int, int]] = []
        self.start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backlog-sampler", daemon=True)

    def sample(self) -> Optional[tuple[float, int, int, int]]:
        try:
            st = self.admin.get(stats_path(self.topic)) or {}
        except AdminError:
            return None
        repl = (st.get("replication") or {}).get(self.remote)
        if repl is None:
            return None
        msg_in = int(st.get("msgInCounter") or 0)
        found = (time.monotonic() - self.start, int(repl.get("replicationBacklog") or 0),
                 msg_in - int(repl.get("msgOutCounter") or 0), msg_in)
        self.samples.append(found)
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of (t, y): how fast the backlog grew, per second."""
    if len(points) < 3:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / var if var else 0.0


def _wait_subscribed(admin: AdminClient, topic: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            sub = ((admin.get(stats_path(topic)) or {}).get("subscriptions") or {}).get(SUBSCRIPTION) or {}
            if sub.get("consumers"):
                return
        except AdminError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"no consumer subscribed to {topic} within {timeout_s:g} s")


def backlog_figures(samples: list[tuple[float, int, int, int]]) -> dict[str, Any]:
    """The backlog while publishing (max, growth after the first two seconds) and how long it took to drain
    after the last publish, from the sampler's (t, entries, messages behind, messages in)."""
    # The last publish: the first sample showing the final msgInCounter. The drain counts from there, since
    # run_perf returns a second or more later (its workers report and exit first).
    final_in = samples[-1][3] if samples else 0
    last_in_t = next((s[0] for s in samples if s[3] >= final_in), 0.0)
    first_in_t = next((s[0] for s in samples if s[3] > 0), 0.0)
    during = [s for s in samples if s[0] <= last_in_t]
    warm = [s for s in during if s[0] >= first_in_t + 2.0]
    drained_at = next((s[0] for s in samples if s[0] >= last_in_t and s[1] <= 0 and s[2] <= 0), None)
    return {
        "backlog_max_msgs": max((s[2] for s in during), default=0),
        "backlog_max_entries": max((s[1] for s in during), default=0),
        "backlog_growth_msgs_per_s": round(_slope([(s[0], s[2]) for s in warm]), 1),
        "drain_s": round(drained_at - last_in_t, 2) if drained_at is not None else None,
        "samples": [{"t_s": round(t, 3), "entries": e, "msgs": m, "msg_in": i} for t, e, m, i in samples],
    }


def run_step(urls: dict[str, dict[str, str]], origin: str, remote: str, rate: float, args: argparse.Namespace) -> dict:
    """One step: consumer in ``remote``, producer in ``origin`` at ``rate`` for ``args.seconds``; figures."""
    topic = f"persistent://{NAMESPACE}/repl-{int(rate)}-{uuid.uuid4().hex[:6]}"
    processes = max(1, math.ceil(rate / args.per_process_rate))
    _say(f"\n== step {rate:,.0f} msg/s: {topic}, producer in {origin} ({processes} process(es)), consumer in {remote}")
    results: dict[str, Any] = {}

    def consume() -> None:
        spec = PerfSpec(mode="consume", service_url=urls[remote]["pulsar"], topics=[topic],
                        client=args.consumer_client, subscription=SUBSCRIPTION, initial_position="earliest",
                        receiver_queue_size=5000, duration_s=args.seconds + args.consumer_extra_s)
        try:
            results["consume"] = run_perf(spec, interval_s=args.interval, echo=lambda s: _say(f"  {remote:8} {s}"))
        except Exception as exc:  # noqa: BLE001 - reported in the step's figures
            results["consume_error"] = f"{type(exc).__name__}: {exc}"

    consumer = threading.Thread(target=consume, name="consumer", daemon=True)
    consumer.start()
    _wait_subscribed(AdminClient(urls[remote]["http"]), topic)
    produce_spec = PerfSpec(mode="produce", service_url=urls[origin]["pulsar"], topics=[topic], client="pulsar",
                            rate=rate, size_bytes=args.size, duration_s=args.seconds)
    with Sampler(AdminClient(urls[origin]["http"]), topic, remote, args.sample_s) as sampler:
        try:
            produced = run_perf(produce_spec, processes=processes, interval_s=args.interval,
                                echo=lambda s: _say(f"  {origin:8} {s}"))
        except RuntimeError as exc:
            produced = {"msg_per_s": 0.0, "messages": 0, "error": str(exc)}
        # Drain: until nothing is left to replicate (or --drain-max-s).
        deadline = time.monotonic() + args.drain_max_s
        while time.monotonic() < deadline:
            last = sampler.sample()
            if last is not None and last[1] <= 0 and last[2] <= 0 and last[3] >= produced.get("messages", 0):
                break
            time.sleep(args.sample_s / 2)
    consumer.join(args.seconds + args.consumer_extra_s + 60)
    backlog = backlog_figures(sampler.samples)
    consumed = results.get("consume") or {}
    lat = consumed.get("latency_ms") or {}
    row = {
        "rate_target": rate, "producer_processes": processes,
        "rate_achieved": produced.get("msg_per_s", 0.0), "produced": produced.get("messages", 0),
        "consumed": consumed.get("messages", 0), "consumed_rate": consumed.get("msg_per_s", 0.0),
        "delay_ms": {k: lat.get(k) for k in ("p50", "p99", "p99.9", "max")},
        "publish_latency_ms": {k: (produced.get("latency_ms") or {}).get(k) for k in ("p50", "p99")},
        **backlog,
        "errors": [e for e in (produced.get("error"), results.get("consume_error")) if e],
    }
    drain_s = row["drain_s"]
    row["flat"] = (drain_s is not None and drain_s <= args.drain_ok_s and not row["errors"]
                   and row["consumed"] >= row["produced"] > 0)
    # Below 90 % of the target the origin region (its brokers and bookies, or the producer processes) is the
    # limit: the step then says the replicator kept up with what was published, not with the target.
    row["origin_limited"] = row["rate_achieved"] < 0.9 * rate
    _say(f"== step {rate:,.0f} msg/s: achieved {row['rate_achieved']:,.0f} msg/s ({processes} proc), "
         f"consumed {row['consumed']:,}/{row['produced']:,}; delay ms p50 {_fmt(lat.get('p50'))} "
         f"p99 {_fmt(lat.get('p99'))} max {_fmt(lat.get('max'))}; backlog max {row['backlog_max_msgs']:,} msgs "
         f"({row['backlog_max_entries']:,} entries), growth {row['backlog_growth_msgs_per_s']:+,.0f} msgs/s, "
         f"drained {_drain_text(drain_s, args)} "
         f"after the last publish -> {'FLAT' if row['flat'] else 'NOT FLAT'}"
         + (" (the origin could not publish at the target rate)" if row["origin_limited"] else "")
         + (f"; errors: {row['errors']}" if row["errors"] else ""))
    return row


def _drain_text(drain_s: Optional[float], args: argparse.Namespace) -> str:
    if drain_s is None:
        return f"NOT within {args.drain_max_s:g} s"
    return f"within {args.sample_s:g} s (one sample)" if drain_s == 0 else f"in {drain_s:.2f} s"


def _fmt(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def _deployment(args: argparse.Namespace, tmp: pathlib.Path) -> tuple[pathlib.Path, bool]:
    if args.data_dir:
        return pathlib.Path(args.data_dir), False
    from clusters.commands import up

    data_dir = tmp / "deployment"
    _say(f"starting {LOCAL.name} in {data_dir}")
    if up(LOCAL, data_dir, detach=True) != 0:
        raise SystemExit("magnetar up failed")
    return data_dir, True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="a running two-region deployment (default: start clusters/local.toml)")
    parser.add_argument("--from", dest="origin", help="origin region (default: the first in topology.json)")
    parser.add_argument("--to", dest="remote", help="remote region (default: the second)")
    parser.add_argument("--rates", default="5000,10000,15000,20000", help="msg/s of each step")
    parser.add_argument("--seconds", type=float, default=10.0, help="producing time of each step")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--per-process-rate", type=float, default=10_000.0,
                        help="msg/s asked of one pulsar-client producer process")
    parser.add_argument("--consumer-client", default="magnetar", choices=("magnetar", "pulsar"))
    parser.add_argument("--consumer-extra-s", type=float, default=15.0,
                        help="the consumer runs this long beyond --seconds (start-up and drain)")
    parser.add_argument("--sample-s", type=float, default=0.25, help="seconds between stats samples")
    parser.add_argument("--drain-ok-s", type=float, default=2.0, help="flat: drained within this after the step")
    parser.add_argument("--drain-max-s", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between progress lines")
    parser.add_argument("--json", help="write the steps and the summary here")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="magnetar-bench-repl-")
    data_dir, started = _deployment(args, pathlib.Path(tmp.name))
    rows: list[dict] = []
    try:
        topo = json.loads((data_dir / "topology.json").read_text())
        regions = list(topo["regions"])
        if len(regions) < 2:
            raise SystemExit(f"{data_dir} runs one region; replication needs two")
        origin, remote = args.origin or regions[0], args.remote or regions[1]
        urls = {r: topo["regions"][r]["brokers"][0] for r in (origin, remote)}
        replicate_namespace(AdminClient(urls[origin]["http"]), [origin, remote], NAMESPACE)
        for rate in (float(r) for r in args.rates.split(",")):
            rows.append(run_step(urls, origin, remote, rate, args))
    finally:
        if started:
            from clusters.commands import down

            _say(f"stopping the deployment in {data_dir}")
            down(data_dir)
        tmp.cleanup()

    _say(f"\n{'target':>8} {'achieved':>9} {'procs':>5} {'consumed':>9} | {'delay p50':>9} {'p99':>7} {'max':>7} | "
         f"{'publish p50':>11} {'p99':>7} | {'max backlog':>11} {'growth/s':>9} {'drain s':>7}  backlog")
    for r in rows:
        d, pub = r["delay_ms"], r["publish_latency_ms"]
        drain = "-" if r["drain_s"] is None else (f"<{args.sample_s:g}" if r["drain_s"] == 0 else f"{r['drain_s']:.2f}")
        _say(f"{r['rate_target']:>8,.0f} {r['rate_achieved']:>9,.0f} {r['producer_processes']:>5} "
             f"{r['consumed']:>9,} | {_fmt(d['p50']):>9} {_fmt(d['p99']):>7} {_fmt(d['max']):>7} | "
             f"{_fmt(pub['p50']):>11} {_fmt(pub['p99']):>7} | {r['backlog_max_msgs']:>11,} "
             f"{r['backlog_growth_msgs_per_s']:>+9,.0f} {drain:>7}  {'flat' if r['flat'] else 'NOT flat'}"
             + ("  (origin-limited)" if r["origin_limited"] else ""))
    _say("(ms; delay = origin publish time to receipt in the remote region; publish = send call to receipt in "
         "the origin; backlog = messages published and not yet replicated)")
    highest = None
    for r in rows:
        if not r["flat"]:
            break
        if highest is None or r["rate_achieved"] > highest["rate_achieved"]:
            highest = r
    first = rows[0] if rows else None
    summary = {
        "delay_at_first_rate": {"rate_target": first["rate_target"], "rate_achieved": first["rate_achieved"],
                                **first["delay_ms"]} if first else None,
        "highest_flat_rate_target": highest["rate_target"] if highest else None,
        "highest_flat_rate_achieved": highest["rate_achieved"] if highest else None,
        "highest_flat_rate_origin_limited": highest["origin_limited"] if highest else None,
    }
    if first:
        _say(f"\nreplication delay {origin} -> {remote} at {first['rate_target']:,.0f} msg/s (achieved "
             f"{first['rate_achieved']:,.0f}): p50 {_fmt(first['delay_ms']['p50'])} ms, "
             f"p99 {_fmt(first['delay_ms']['p99'])} ms")
    _say("highest rate with a flat replication backlog: " + (
        f"{highest['rate_achieved']:,.0f} msg/s achieved ({highest['rate_target']:,.0f} asked)" if highest
        else "none of the steps")
        + ("; the origin region could not publish faster, so replication was not the limit there"
           if highest and highest["origin_limited"] else ""))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"steps": rows, "summary": summary}, indent=2))
    return 0 if rows and not any(r["errors"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
