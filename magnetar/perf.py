"""``magnetar perf produce|consume``: throughput and latency of a deployment, like ``pulsar-perf``.

Two clients, two questions:

* ``--client pulsar`` (default) uses the official pulsar-client, batching on, ``block_if_queue_full``: what
  a Python application sees. Its cost is mostly the client's own CPU (about 15 µs per message; see
  PULSAR-CLIENT-NOTES.md), so ``--processes N`` runs N worker processes and adds their figures up.
* ``--client magnetar`` uses Magnetar's asyncio protocol client and sends pre-built batches (one
  ``SingleMessageMetadata`` + payload item encoded once, repeated ``--batch-max-messages`` times; only the
  entry's metadata is encoded per send) with pulsar-perf's batch bounds (1,000 messages, 4 MiB), and
  consumes entries whole, counting their messages: what brokers and bookies sustain, with little client
  cost.

Latency is measured per message with HdrHistogram (µs precision): for ``produce`` from the send call to
its receipt (with ``--rate R --open-loop``: from the time the fixed schedule of R msg/s says the message is
due, so that a stalled sender's waiting is counted too), for ``consume`` from the message's publish time
(the producer's clock) to its arrival. Every worker reports each second; the parent prints one line per
``--interval`` and a summary at the end (and ``--json FILE`` writes the summary for scripts).

The workers (:mod:`magnetar.perf_worker`) run the workloads; this module splits the work between them,
adds their reports up and prints.

``pulsar+ssl://`` URLs take ``--tls-trust-certs-file`` and ``--tls-validate-hostname``; brokers or proxies with
token authentication take ``--auth-token`` (or ``$MAGNETAR_AUTH_TOKEN``, which keeps it off the command line).

Only typer and the standard library are imported at module level: ``magnetar --help`` must stay fast.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import queue as queue_module
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import typer

from magnetar.perf_worker import REPORT_EVERY_S, PerfSpec, Report, new_histogram, worker_main

__all__ = ["BATCH_MAX_BYTES_DEFAULT", "PerfSpec", "perf_app", "run_perf"]

# A batch's byte bound when --batch-max-bytes is not given: each load generator takes the default of what
# it stands for. pulsar-client (a Python application) caps a batch at 128 KiB; pulsar-perf, which measures
# what a Pulsar deployment sustains, at 4 MiB (both stop at 1,000 messages).
BATCH_MAX_BYTES_DEFAULT = {"pulsar": 128 * 1024, "magnetar": 4 * 1024 * 1024}

perf_app = typer.Typer(
    name="perf",
    help="Throughput and latency load generators (like pulsar-perf).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_SUB_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


# --------------------------------------------------------------------------------------------------------
# The parent: split, spawn, aggregate, print
# --------------------------------------------------------------------------------------------------------


def split_specs(spec: PerfSpec, processes: int) -> list[PerfSpec]:
    """One spec per worker: the rate divided evenly; topics dealt out when there are enough of them."""
    specs = []
    for worker in range(processes):
        topics = spec.topics[worker::processes] if len(spec.topics) >= processes else list(spec.topics)
        rate = spec.rate / processes if spec.rate > 0 else 0.0
        specs.append(dataclasses.replace(spec, topics=topics, rate=rate, worker=worker, workers=processes))
    return specs


@dataclass
class _Totals:
    messages: int = 0
    bytes: int = 0
    errors: int = 0
    hist: Any = field(default_factory=new_histogram)

    def add(self, report: Report) -> None:
        self.messages += report.messages
        self.bytes += report.bytes
        self.errors += report.errors
        if report.histogram:
            self.hist.decode_and_add(report.histogram)


_PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p99.9", 99.9))


def latency_summary_ms(hist: Any) -> dict[str, float]:
    """Percentiles and max of a histogram of µs, in milliseconds."""
    if not hist.get_total_count():
        return {}
    out = {name: hist.get_value_at_percentile(p) / 1000 for name, p in _PERCENTILES}
    out["max"] = hist.get_max_value() / 1000
    return out


def _format_line(label: str, elapsed_s: float, totals: _Totals, period_s: float) -> str:
    rate = totals.messages / period_s if period_s > 0 else 0.0
    mbps = totals.bytes / period_s / 1e6 if period_s > 0 else 0.0
    lat = latency_summary_ms(totals.hist)
    latency = "  ".join(f"{k} {v:.3f}" for k, v in lat.items()) if lat else "no samples"
    errors = f"  errors {totals.errors}" if totals.errors else ""
    return f"[{elapsed_s:7.1f}s] {label:8s} {rate:12,.0f} msg/s {mbps:9.2f} MB/s | latency ms {latency}{errors}"


def run_perf(spec: PerfSpec, *, processes: int = 1, interval_s: float = 5.0, json_path: Optional[str] = None,
             echo=print) -> dict[str, Any]:
    """Runs ``processes`` workers until ``spec.duration_s`` passes (or Ctrl-C); prints and returns the summary.

    Raises:
        RuntimeError: a worker failed (its error is in the message).
    """
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C (SIGINT) is how a run without --duration ends: a disposition inherited as "ignored" (a parent
        # that ignores it, nohup-like wrappers) would leave it running for good.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    stop = ctx.Event()
    specs = split_specs(spec, processes)
    workers = [ctx.Process(target=worker_main, args=(s, out, stop), name=f"perf-{s.worker}", daemon=True)
               for s in specs]
    for w in workers:
        w.start()
    label = spec.mode
    what = (f"{spec.size_bytes} B messages, rate {'max' if spec.rate <= 0 else f'{spec.rate:,.0f} msg/s'}, "
            f"batching {'on' if spec.batching else 'off'}"
            + (", latency from the schedule (open loop)" if spec.open_loop else "") if spec.mode == "produce"
            else f"subscription {spec.subscription} ({spec.subscription_type})")
    echo(f"{label}: {processes} process(es), client {spec.client}, {len(spec.topics)} topic(s), {what}")
    total = _Totals()
    interval = _Totals()
    started = None  # from the first report: client start-up (imports, connecting) is not measured
    interval_start = time.monotonic()
    finished: set[int] = set()
    errors: list[str] = []
    stop_at = None
    last_data = None
    try:
        while len(finished) < len(workers):
            try:
                report = out.get(timeout=0.2)
            except queue_module.Empty:
                report = None
                for w, s in zip(workers, specs):
                    if s.worker not in finished and not w.is_alive() and out.empty():
                        finished.add(s.worker)
                        errors.append(f"worker {s.worker} exited with code {w.exitcode} before its final report")
            now = time.monotonic()
            if report is not None:
                if report.note:
                    echo(f"note (worker {report.worker}): {report.note}")
                if report.error:
                    errors.append(f"worker {report.worker}: {report.error}")
                    stop.set()
                if started is None and (report.messages or report.done):
                    started = now - REPORT_EVERY_S if report.messages else now
                    interval_start = started
                    if spec.duration_s:
                        stop_at = started + spec.duration_s + 10 * REPORT_EVERY_S
                total.add(report)
                interval.add(report)
                if report.messages:
                    last_data = now
                if report.done:
                    finished.add(report.worker)
            if started is not None and now - interval_start >= interval_s:
                echo(_format_line(label, now - started, interval, now - interval_start))
                interval = _Totals()
                interval_start = now
            if stop_at is not None and now > stop_at:
                stop.set()
                stop_at = now + 30
    except KeyboardInterrupt:
        echo("interrupted: stopping workers")
        stop.set()
        deadline = time.monotonic() + 30
        while len(finished) < len(workers) and time.monotonic() < deadline:
            try:
                report = out.get(timeout=0.5)
            except queue_module.Empty:
                continue
            total.add(report)
            if report.done:
                finished.add(report.worker)
    finally:
        stop.set()
        for w in workers:
            w.join(10)
            if w.is_alive():
                w.kill()
    # From one report period before the first report to the last report carrying messages.
    elapsed = (last_data - started) if started is not None and last_data is not None else 0.0
    summary = {
        "mode": spec.mode,
        "client": spec.client,
        "processes": processes,
        "topics": len(spec.topics),
        "size_bytes": spec.size_bytes,
        "batching": spec.batching,
        "rate_asked": spec.rate,
        "open_loop": spec.open_loop,
        "elapsed_s": round(elapsed, 3),
        "messages": total.messages,
        "errors": total.errors,
        "msg_per_s": round(total.messages / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_s": round(total.bytes / elapsed / 1e6, 3) if elapsed > 0 else 0.0,
        "latency_ms": {k: round(v, 3) for k, v in latency_summary_ms(total.hist).items()},
        "worker_errors": errors,
    }
    echo(f"== {label} summary: {elapsed:.1f} s, {total.messages:,} msgs, {summary['msg_per_s']:,.0f} msg/s, "
         f"{summary['mb_per_s']:.2f} MB/s, errors {total.errors}")
    lat = summary["latency_ms"]
    echo("== latency ms: " + ("  ".join(f"{k} {v:.3f}" for k, v in lat.items()) if lat else "no samples"))
    for err in errors:
        echo(f"== error: {err}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(summary, f, indent=2)
    if errors:
        raise RuntimeError("; ".join(errors))
    return summary


# --------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------


def _expand_topics(topics: list[str], count: int) -> list[str]:
    if count <= 1:
        return topics
    if len(topics) != 1:
        raise typer.BadParameter("--topics N needs exactly one TOPIC (the prefix of the N topic names)")
    return [f"{topics[0]}-{i}" for i in range(count)]


def _check_client(client: str) -> str:
    if client not in ("pulsar", "magnetar"):
        raise typer.BadParameter("--client is pulsar or magnetar")
    return client


def _run(spec: PerfSpec, processes: int, interval_s: float, json_path: Optional[str]) -> None:
    if processes < 1:
        raise typer.BadParameter("--processes must be at least 1")
    try:
        run_perf(spec, processes=processes, interval_s=interval_s, json_path=json_path,
                 echo=lambda s: print(s, flush=True))
    except RuntimeError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)


@perf_app.command()
def produce(
    service_url: str = typer.Argument(..., help="pulsar://host:port (or pulsar+ssl://, http:// with --client pulsar)."),
    topics: list[str] = typer.Argument(..., help="Topic(s); with --topics N, one prefix."),
    rate: float = typer.Option(0.0, "--rate", help="Messages per second in total (0 = as fast as possible)."),
    size: int = typer.Option(1024, "--size", help="Message size in bytes."),
    batching: bool = typer.Option(True, "--batching/--no-batching", help="Batch messages into entries."),
    batch_max_messages: int = typer.Option(1000, "--batch-max-messages", help="Most messages per batch."),
    batch_max_bytes: Optional[int] = typer.Option(
        None, "--batch-max-bytes",
        help="Most bytes per batch (default: pulsar-client's 128 KiB with --client pulsar, pulsar-perf's 4 MiB with --client magnetar).",
    ),
    batch_delay_ms: int = typer.Option(1, "--batch-delay-ms", help="pulsar-client's batching delay."),
    max_pending: int = typer.Option(10_000, "--max-pending", help="Messages awaiting receipts per process."),
    topic_count: int = typer.Option(1, "--topics", help="Use N topics TOPIC-0 .. TOPIC-(N-1)."),
    partitions: int = typer.Option(0, "--partitions", help="Expect existing partitioned topics of N partitions."),
    processes: int = typer.Option(1, "--processes", help="Worker processes (their figures are added up)."),
    duration: float = typer.Option(0.0, "--duration", help="Seconds to run (0 = until Ctrl-C)."),
    client: str = typer.Option("pulsar", "--client", help="pulsar (pulsar-client) or magnetar (asyncio client, pre-built batches)."),
    interval: float = typer.Option(5.0, "--interval", help="Seconds between progress lines."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Also write the summary as JSON here."),
    pin: bool = typer.Option(True, "--pin/--no-pin", help="Pin each pulsar-client worker to one CPU."),
    tls_trust_certs_file: str = typer.Option(
        "", "--tls-trust-certs-file", envvar="MAGNETAR_TLS_TRUST_CERTS_FILE",
        help="pulsar+ssl://: the CA certificates (PEM) the server's certificate chains to (default: the system's)."),
    tls_validate_hostname: bool = typer.Option(
        False, "--tls-validate-hostname/--no-tls-validate-hostname",
        help="pulsar+ssl://: the server's certificate must name the host of the URL."),
    auth_token: str = typer.Option("", "--auth-token", envvar="MAGNETAR_AUTH_TOKEN",
                                   help="A JWT to authenticate with (token authentication)."),
    open_loop: bool = typer.Option(
        False, "--open-loop/--closed-loop",
        help="With --rate: measure each message's latency from its scheduled send time on the fixed schedule "
             "(a stalled send or a full queue counts: no coordinated omission) instead of from the send call."),
    stages_from: list[str] = typer.Option(
        [], "--stages-from",
        help="A broker's or bookie's HTTP address (repeat): at the end, print where the publish time went "
             "(broker, managed-ledger add, bookie add, journal queue/write/force wait/fsync)."),
) -> None:
    """Publish as fast as allowed; report msg/s, MB/s and send-to-receipt latency."""
    client = _check_client(client)
    if batch_max_bytes is None:
        batch_max_bytes = BATCH_MAX_BYTES_DEFAULT[client]
    spec = PerfSpec(
        mode="produce", service_url=service_url, topics=_expand_topics(list(topics), topic_count),
        client=client, rate=rate, size_bytes=size, batching=batching,
        batch_max_messages=batch_max_messages, batch_max_bytes=batch_max_bytes, batch_delay_ms=batch_delay_ms,
        max_pending_messages=max_pending, partitions=partitions, duration_s=duration, pin=pin,
        tls_trust_certs_file=tls_trust_certs_file, tls_validate_hostname=tls_validate_hostname, auth_token=auth_token,
        open_loop=open_loop,
    )
    if open_loop and rate <= 0:
        raise typer.BadParameter("--open-loop needs --rate (a schedule to measure from)")
    if not stages_from:
        _run(spec, processes, interval, json_path)
        return
    from magnetar import perf_stages
    before = perf_stages.scrape(stages_from)
    try:
        _run(spec, processes, interval, json_path)
    finally:
        for line in perf_stages.format_rows(perf_stages.stage_rows(before, perf_stages.scrape(stages_from))):
            print(line, flush=True)


@perf_app.command()
def consume(
    service_url: str = typer.Argument(..., help="pulsar://host:port (or pulsar+ssl://, http:// with --client pulsar)."),
    topics: list[str] = typer.Argument(..., help="Topic(s); with --topics N, one prefix."),
    subscription: str = typer.Option("perf", "--subscription", help="Subscription name."),
    subscription_type: str = typer.Option("Exclusive", "--subscription-type", help="/".join(_SUB_TYPES)),
    initial_position: str = typer.Option("latest", "--initial-position", help="latest or earliest."),
    receiver_queue_size: int = typer.Option(1000, "--receiver-queue-size", help="Permits per consumer."),
    topic_count: int = typer.Option(1, "--topics", help="Use N topics TOPIC-0 .. TOPIC-(N-1)."),
    partitions: int = typer.Option(0, "--partitions", help="Expect existing partitioned topics of N partitions."),
    processes: int = typer.Option(1, "--processes", help="Worker processes (their figures are added up)."),
    duration: float = typer.Option(0.0, "--duration", help="Seconds to run (0 = until Ctrl-C)."),
    client: str = typer.Option("pulsar", "--client", help="pulsar (pulsar-client) or magnetar (asyncio client)."),
    interval: float = typer.Option(5.0, "--interval", help="Seconds between progress lines."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Also write the summary as JSON here."),
    pin: bool = typer.Option(True, "--pin/--no-pin", help="Pin each pulsar-client worker to one CPU."),
    tls_trust_certs_file: str = typer.Option(
        "", "--tls-trust-certs-file", envvar="MAGNETAR_TLS_TRUST_CERTS_FILE",
        help="pulsar+ssl://: the CA certificates (PEM) the server's certificate chains to (default: the system's)."),
    tls_validate_hostname: bool = typer.Option(
        False, "--tls-validate-hostname/--no-tls-validate-hostname",
        help="pulsar+ssl://: the server's certificate must name the host of the URL."),
    auth_token: str = typer.Option("", "--auth-token", envvar="MAGNETAR_AUTH_TOKEN",
                                   help="A JWT to authenticate with (token authentication)."),
) -> None:
    """Receive and acknowledge; report msg/s, MB/s and publish-to-receive latency."""
    if subscription_type not in _SUB_TYPES:
        raise typer.BadParameter(f"--subscription-type is one of {', '.join(_SUB_TYPES)}")
    if initial_position not in ("latest", "earliest"):
        raise typer.BadParameter("--initial-position is latest or earliest")
    names = _expand_topics(list(topics), topic_count)
    if processes > 1 and len(names) < processes and subscription_type == "Exclusive":
        raise typer.BadParameter("several processes on fewer topics need --subscription-type Shared/Failover/Key_Shared")
    spec = PerfSpec(
        mode="consume", service_url=service_url, topics=names, client=_check_client(client),
        partitions=partitions, duration_s=duration, subscription=subscription, subscription_type=subscription_type,
        initial_position=initial_position, receiver_queue_size=receiver_queue_size, pin=pin,
        tls_trust_certs_file=tls_trust_certs_file, tls_validate_hostname=tls_validate_hostname, auth_token=auth_token,
    )
    _run(spec, processes, interval, json_path)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(perf_app())
