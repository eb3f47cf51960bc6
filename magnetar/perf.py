"""``magnetar perf produce|consume``: throughput and latency of a deployment, like ``pulsar-perf``.

Two clients, two questions:

* ``--client pulsar`` (default) uses the official pulsar-client, batching on, ``block_if_queue_full``: what
  a Python application sees. Its cost is mostly the client's own CPU (about 15 µs per message; see
  PULSAR-CLIENT-NOTES.md), so ``--processes N`` runs N worker processes and adds their figures up.
* ``--client magnetar`` uses Magnetar's asyncio protocol client and sends pre-built batches (one
  ``SingleMessageMetadata`` + payload item encoded once, repeated ``--batch-max-messages`` times; only the
  entry's metadata is encoded per send): what brokers and bookies sustain, with little client cost.

Latency is measured per message with HdrHistogram (µs precision): for ``produce`` from the send call to
its receipt, for ``consume`` from the message's publish time (the producer's clock) to its arrival. Every
worker reports each second; the parent prints one line per ``--interval`` and a summary at the end (and
``--json FILE`` writes the summary for scripts).

Only typer and the standard library are imported at module level: ``magnetar --help`` must stay fast.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import typer

__all__ = ["PerfSpec", "perf_app", "run_perf"]

perf_app = typer.Typer(
    name="perf",
    help="Throughput and latency load generators (like pulsar-perf).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_HIST_MAX_US = 3_600_000_000  # one hour
_REPORT_EVERY_S = 1.0
_SUB_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


@dataclass
class PerfSpec:
    """What one worker process does (picklable; the parent splits rate and topics between workers)."""

    mode: str  # "produce" | "consume"
    service_url: str
    topics: list[str]
    client: str = "pulsar"
    rate: float = 0.0  # msg/s for this worker, 0 = as fast as possible
    size_bytes: int = 1024
    batching: bool = True
    batch_max_messages: int = 1000
    batch_max_bytes: int = 128 * 1024
    batch_delay_ms: int = 1
    max_pending_messages: int = 10_000
    partitions: int = 0
    duration_s: float = 0.0  # 0 = until interrupted
    subscription: str = "perf"
    subscription_type: str = "Exclusive"
    initial_position: str = "latest"
    receiver_queue_size: int = 1000
    worker: int = 0
    workers: int = 1


@dataclass
class Report:
    """A worker's figures since its previous report."""

    worker: int
    messages: int = 0
    bytes: int = 0
    errors: int = 0
    histogram: str = ""  # HdrHistogram.encode() of the latencies in µs
    done: bool = False
    error: str = ""
    note: str = ""


# --------------------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------------------


def _new_histogram():
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(1, _HIST_MAX_US, 3)


class _Meter:
    """Counters and a latency histogram shared by the sending thread and client callbacks."""

    def __init__(self, worker: int, out: Any) -> None:
        import threading

        self.worker = worker
        self.out = out
        self.lock = threading.Lock()
        self.messages = 0
        self.bytes = 0
        self.errors = 0
        self.hist = _new_histogram()
        self.last_report = time.monotonic()

    def begin(self) -> None:
        """The workload starts now: reports cover whole seconds of it from here on."""
        with self.lock:
            self.last_report = time.monotonic()

    def record(self, latency_us: int, count: int, size_bytes: int) -> None:
        with self.lock:
            self.messages += count
            self.bytes += size_bytes
            self.hist.record_value(min(max(latency_us, 1), _HIST_MAX_US), count)

    def error(self, count: int = 1) -> None:
        with self.lock:
            self.errors += count

    def maybe_report(self, *, force: bool = False, done: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            if not force and now - self.last_report < _REPORT_EVERY_S:
                return
            self.last_report = now
            hist, self.hist = self.hist, _new_histogram()
            report = Report(self.worker, self.messages, self.bytes, self.errors, done=done)
            self.messages = self.bytes = self.errors = 0
        report.histogram = hist.encode().decode() if hist.get_total_count() else ""
        self.out.put(report)


class _Pacer:
    """How many messages are due now at ``rate`` msg/s (0: unlimited), and how long to wait otherwise."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.sent = 0

    def due(self, cap: int) -> int:
        if self.rate <= 0:
            return cap
        owed = int((time.monotonic() - self.start) * self.rate) - self.sent
        return max(0, min(owed, cap))

    def wait_s(self) -> float:
        if self.rate <= 0:
            return 0.0
        next_at = self.start + (self.sent + 1) / self.rate
        return min(max(next_at - time.monotonic(), 0.0005), 0.05)


def _payload(size_bytes: int) -> bytes:
    return os.urandom(size_bytes)


def _pulsar_client(spec: PerfSpec):
    import logging

    import pulsar

    logger = logging.getLogger("pulsar-perf")
    logger.setLevel(logging.WARNING)
    return pulsar.Client(spec.service_url, io_threads=max(1, len(spec.topics) // 4 or 1),
                         operation_timeout_seconds=30, logger=logger)


def _check_partitions(spec: PerfSpec, topic: str, found: int) -> str:
    if spec.partitions and found != spec.partitions:
        return f"{topic} has {found} partitions, not the {spec.partitions} asked for"
    return ""


def _produce_pulsar(spec: PerfSpec, meter: _Meter, stop: Any) -> None:
    import functools

    import pulsar

    client = _pulsar_client(spec)
    try:
        producers = []
        for topic in spec.topics:
            note = _check_partitions(spec, topic, len(client.get_topic_partitions(topic)) if spec.partitions else 0)
            if note:
                meter.out.put(Report(spec.worker, note=note))
            producers.append(client.create_producer(
                topic,
                batching_enabled=spec.batching,
                batching_max_messages=spec.batch_max_messages,
                batching_max_allowed_size_in_bytes=spec.batch_max_bytes,
                batching_max_publish_delay_ms=spec.batch_delay_ms,
                block_if_queue_full=True,
                max_pending_messages=spec.max_pending_messages,
                max_pending_messages_across_partitions=spec.max_pending_messages,
                send_timeout_millis=0,
            ))
        payload = _payload(spec.size_bytes)
        size = len(payload)
        ok = pulsar.Result.Ok
        perf_ns = time.perf_counter_ns

        def sent(t0: int, result, _msg_id) -> None:
            if result == ok:
                meter.record((perf_ns() - t0) // 1000, 1, size)
            else:
                meter.error()

        pacer = _Pacer(spec.rate)
        meter.begin()
        deadline = time.monotonic() + spec.duration_s if spec.duration_s else None
        count = len(producers)
        i = 0
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            due = pacer.due(1000)
            if not due:
                time.sleep(pacer.wait_s())
            for _ in range(due):
                producers[i % count].send_async(payload, functools.partial(sent, perf_ns()))
                i += 1
            pacer.sent += due
        for p in producers:
            p.flush()
        meter.maybe_report(force=True)  # before close: pulsar-client has been seen to abort in close()
    finally:
        client.close()


def _consume_pulsar(spec: PerfSpec, meter: _Meter, stop: Any) -> None:
    import pulsar

    client = _pulsar_client(spec)
    try:
        consumer = client.subscribe(
            spec.topics,
            spec.subscription,
            consumer_type=getattr(pulsar.ConsumerType, spec.subscription_type.replace("_", "")),
            receiver_queue_size=spec.receiver_queue_size,
            initial_position=(pulsar.InitialPosition.Earliest if spec.initial_position == "earliest"
                              else pulsar.InitialPosition.Latest),
        )
        meter.begin()
        deadline = time.monotonic() + spec.duration_s if spec.duration_s else None
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            now_ms = time.time_ns() // 1_000_000
            meter.record((now_ms - msg.publish_timestamp()) * 1000, 1, len(msg.data()))
            consumer.acknowledge(msg)
        consumer.close()
        meter.maybe_report(force=True)
    finally:
        client.close()


async def _produce_magnetar(spec: PerfSpec, meter: _Meter, stop: Any) -> None:
    import asyncio

    from magnetar.protocol import encode_single_message, pb
    from magnetar.protocol.client import Client

    payload = _payload(spec.size_bytes)
    if spec.batching:
        item = encode_single_message(pb.SingleMessageMetadata(payload_size=len(payload)), payload)
        per_batch = max(1, min(spec.batch_max_messages, spec.batch_max_bytes // len(item)))
        bodies = {per_batch: item * per_batch}
    else:
        item, per_batch, bodies = payload, 1, {1: payload}
    max_pending_sends = max(2, spec.max_pending_messages // per_batch)
    async with Client(spec.service_url) as client:
        producers = []
        for topic in spec.topics:
            note = _check_partitions(spec, topic, await client.get_partitions(topic))
            if note:
                meter.out.put(Report(spec.worker, note=note))
            for name in await client.get_partitioned_topic_names(topic):
                producers.append(await client.create_producer(name, max_pending_sends=max_pending_sends,
                                                              send_timeout_s=0))
        size = len(payload)
        perf_ns = time.perf_counter_ns

        def done(t0: int, count: int, fut: asyncio.Future) -> None:
            if fut.cancelled() or fut.exception() is not None:
                meter.error(count)
            else:
                meter.record((perf_ns() - t0) // 1000, count, size * count)

        pacer = _Pacer(spec.rate)
        meter.begin()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + spec.duration_s if spec.duration_s else None
        i = 0
        while not stop.is_set() and (deadline is None or loop.time() < deadline):
            due = pacer.due(per_batch * 8)
            if not due:
                await asyncio.sleep(pacer.wait_s())
                meter.maybe_report()
                continue
            while due > 0:
                n = min(due, per_batch)
                producer = producers[i % len(producers)]
                i += 1
                first = producer.next_sequence_ids(n)
                md = pb.MessageMetadata(producer_name=producer.producer_name, sequence_id=first,
                                        publish_time=time.time_ns() // 1_000_000)
                if spec.batching:
                    md.num_messages_in_batch = n
                    body = bodies.get(n)
                    if body is None:
                        body = bodies[n] = item * n
                else:
                    body = payload
                t0 = perf_ns()
                fut = await producer.send_entry(md, body, num_messages=n,
                                                highest_sequence_id=first + n - 1 if n > 1 else None)
                fut.add_done_callback(lambda f, t0=t0, n=n: done(t0, n, f))
                due -= n
                pacer.sent += n
            meter.maybe_report()
        for producer in producers:
            await producer.flush()


async def _consume_magnetar(spec: PerfSpec, meter: _Meter, stop: Any) -> None:
    import asyncio

    from magnetar.protocol.client import Client, InitialPosition, SubscriptionType

    sub_type = SubscriptionType[spec.subscription_type.upper()]
    position = InitialPosition.EARLIEST if spec.initial_position == "earliest" else InitialPosition.LATEST
    cumulative = sub_type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER)
    async with Client(spec.service_url) as client:
        consumers = []
        for topic in spec.topics:
            for name in await client.get_partitioned_topic_names(topic):
                consumers.append(await client.subscribe(name, spec.subscription, subscription_type=sub_type,
                                                        initial_position=position,
                                                        receiver_queue_size=spec.receiver_queue_size))
        meter.begin()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + spec.duration_s if spec.duration_s else None

        async def drain(consumer) -> None:
            while not stop.is_set() and (deadline is None or loop.time() < deadline):
                msgs = await consumer.receive_batch(max_messages=1000, timeout_s=0.2)
                if not msgs:
                    continue
                now_ms = time.time_ns() // 1_000_000
                # Messages of one entry share a publish time: record them as one histogram value.
                run_time, run_count, run_bytes = msgs[0].metadata.publish_time, 0, 0
                for m in msgs:
                    t = m.metadata.publish_time
                    if t != run_time:
                        meter.record((now_ms - run_time) * 1000, run_count, run_bytes)
                        run_time, run_count, run_bytes = t, 0, 0
                    run_count += 1
                    run_bytes += len(m.payload)
                    if not cumulative:
                        consumer.ack(m)
                meter.record((now_ms - run_time) * 1000, run_count, run_bytes)
                if cumulative:
                    consumer.ack_cumulative(msgs[-1])

        async def report() -> None:
            while True:
                await asyncio.sleep(0.25)
                meter.maybe_report()

        reporter = asyncio.create_task(report())
        try:
            await asyncio.gather(*(drain(c) for c in consumers))
        finally:
            reporter.cancel()
            await asyncio.gather(reporter, return_exceptions=True)


def _worker_main(spec: PerfSpec, out: Any, stop: Any) -> None:
    """Entry point of a worker process: runs the workload, reports every second, then ``done``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    meter = _Meter(spec.worker, out)
    try:
        if spec.client == "pulsar":
            # pulsar-client blocks the calling thread (a full queue, a receive): report from another one.
            import threading

            finished = threading.Event()

            def report() -> None:
                while not finished.wait(0.25):
                    meter.maybe_report()

            reporter = threading.Thread(target=report, name="perf-report", daemon=True)
            reporter.start()
            try:
                (_produce_pulsar if spec.mode == "produce" else _consume_pulsar)(spec, meter, stop)
            finally:
                finished.set()
                reporter.join()
        else:
            import asyncio

            asyncio.run((_produce_magnetar if spec.mode == "produce" else _consume_magnetar)(spec, meter, stop))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which exits non-zero
        meter.maybe_report(force=True)
        out.put(Report(spec.worker, done=True, error=f"{type(exc).__name__}: {exc}"))
        return
    meter.maybe_report(force=True, done=True)


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
    hist: Any = field(default_factory=_new_histogram)

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
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    stop = ctx.Event()
    specs = split_specs(spec, processes)
    workers = [ctx.Process(target=_worker_main, args=(s, out, stop), name=f"perf-{s.worker}", daemon=True)
               for s in specs]
    for w in workers:
        w.start()
    label = spec.mode
    what = (f"{spec.size_bytes} B messages, rate {'max' if spec.rate <= 0 else f'{spec.rate:,.0f} msg/s'}, "
            f"batching {'on' if spec.batching else 'off'}" if spec.mode == "produce"
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
                    started = now - _REPORT_EVERY_S if report.messages else now
                    interval_start = started
                    if spec.duration_s:
                        stop_at = started + spec.duration_s + 10 * _REPORT_EVERY_S
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
    batch_max_bytes: int = typer.Option(128 * 1024, "--batch-max-bytes", help="Most bytes per batch."),
    batch_delay_ms: int = typer.Option(1, "--batch-delay-ms", help="pulsar-client's batching delay."),
    max_pending: int = typer.Option(10_000, "--max-pending", help="Messages awaiting receipts per process."),
    topic_count: int = typer.Option(1, "--topics", help="Use N topics TOPIC-0 .. TOPIC-(N-1)."),
    partitions: int = typer.Option(0, "--partitions", help="Expect existing partitioned topics of N partitions."),
    processes: int = typer.Option(1, "--processes", help="Worker processes (their figures are added up)."),
    duration: float = typer.Option(0.0, "--duration", help="Seconds to run (0 = until Ctrl-C)."),
    client: str = typer.Option("pulsar", "--client", help="pulsar (pulsar-client) or magnetar (asyncio client, pre-built batches)."),
    interval: float = typer.Option(5.0, "--interval", help="Seconds between progress lines."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Also write the summary as JSON here."),
) -> None:
    """Publish as fast as allowed; report msg/s, MB/s and send-to-receipt latency."""
    spec = PerfSpec(
        mode="produce", service_url=service_url, topics=_expand_topics(list(topics), topic_count),
        client=_check_client(client), rate=rate, size_bytes=size, batching=batching,
        batch_max_messages=batch_max_messages, batch_max_bytes=batch_max_bytes, batch_delay_ms=batch_delay_ms,
        max_pending_messages=max_pending, partitions=partitions, duration_s=duration,
    )
    _run(spec, processes, interval, json_path)


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
        initial_position=initial_position, receiver_queue_size=receiver_queue_size,
    )
    _run(spec, processes, interval, json_path)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(perf_app())
