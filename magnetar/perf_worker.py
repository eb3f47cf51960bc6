"""One ``magnetar perf`` worker process: its workload, and the figures it reports to the parent.

A worker runs one :class:`PerfSpec` (produce or consume, through pulsar-client or Magnetar's asyncio
client) and puts a :class:`Report` on the parent's queue every second: message and byte counts, errors,
and an HdrHistogram of the latencies (µs) since the previous report. The parent (:mod:`magnetar.perf`)
splits the work between workers and adds their reports up.

The module is what a spawned worker process imports, so it stays light: only the standard library at
module level; each client is imported by the workload that uses it.
"""

from __future__ import annotations

import collections
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["Pacer", "PerfSpec", "REPORT_EVERY_S", "Report", "new_histogram", "worker_main"]

_HIST_MAX_US = 3_600_000_000  # one hour
REPORT_EVERY_S = 1.0
# How often pulsar-client workers move noted samples into the histogram. Draining holds the GIL ~0.3 µs a
# sample; once a second at 10,000 msg/s that was ~13 ms, during which pulsar-client's I/O thread could not run
# a send callback nor the main thread send: the meter itself put ~1 % of the messages several ms late (p99 of
# a producer against a broker that answers at once: 12-15 ms drained once a second, 5-8 ms every 20 ms;
# `bench/latency_probes.py null-broker`).
DRAIN_EVERY_S = 0.02


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
    pin: bool = True  # pulsar-client workers: each on one CPU (see pin_worker)
    tls_trust_certs_file: str = ""  # pulsar+ssl://: the CA the server's certificate chains to ("": the system's)
    tls_validate_hostname: bool = False  # pulsar+ssl://: the certificate must name the host connected to
    auth_token: str = ""  # a JWT sent in CONNECT (AuthenticationToken); "": no credentials
    open_loop: bool = False  # with a rate: latency from each message's scheduled send time (see Pacer)


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


def new_histogram():
    """An empty histogram of latencies in µs (1 µs .. 1 hour, 3 significant digits)."""
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
        self.hist = new_histogram()
        self.last_report = time.monotonic()
        # Client callbacks' fast path (see :meth:`sampler`): latencies in ns, -1 for a failed send.
        self.samples: collections.deque[int] = collections.deque()
        self.sample_bytes = 0

    def begin(self) -> None:
        """The workload starts now: reports cover whole seconds of it from here on."""
        with self.lock:
            self.last_report = time.monotonic()

    def record(self, latency_us: int, count: int, size_bytes: int) -> None:
        with self.lock:
            self.messages += count
            self.bytes += size_bytes
            self.hist.record_value(min(max(latency_us, 1), _HIST_MAX_US), count)

    def sampler(self, size_bytes: int):
        """A ``note(latency_ns)`` for client callbacks, one message of ``size_bytes`` each (-1 = failed).

        pulsar-client runs callbacks on its I/O thread holding the GIL, so whatever they do delays every
        receipt behind them: a note is one deque append (atomic, no lock); :meth:`maybe_report` counts.
        """
        self.sample_bytes = size_bytes
        return self.samples.append

    def _drain_samples(self) -> None:
        """Moves noted samples into the counters and histogram (lock held); values rounded down by under
        0.1 % first (as fine as the histogram's 3 digits), so that equal ones are recorded once."""
        samples = self.samples
        taken = [samples.popleft() for _ in range(len(samples))]
        if not taken:
            return
        failed = taken.count(-1)
        counts = collections.Counter(_coarse_us(ns) for ns in taken if ns >= 0)
        self.errors += failed
        self.messages += len(taken) - failed
        self.bytes += (len(taken) - failed) * self.sample_bytes
        record = self.hist.record_value
        for us, n in counts.items():
            record(min(max(us, 1), _HIST_MAX_US), n)

    def error(self, count: int = 1) -> None:
        with self.lock:
            self.errors += count

    def maybe_report(self, *, force: bool = False, done: bool = False) -> None:
        """Moves the noted samples into the histogram (every call: see ``DRAIN_EVERY_S``) and, once a
        second (or when forced), sends a report."""
        now = time.monotonic()
        with self.lock:
            self._drain_samples()
            if not force and now - self.last_report < REPORT_EVERY_S:
                return
            self.last_report = now
            hist, self.hist = self.hist, new_histogram()
            report = Report(self.worker, self.messages, self.bytes, self.errors, done=done)
            self.messages = self.bytes = self.errors = 0
        report.histogram = hist.encode().decode() if hist.get_total_count() else ""
        self.out.put(report)


def _coarse_us(ns: int) -> int:
    """``ns`` in µs, keeping its top 11 bits (rounded down by under 0.1 %)."""
    us = ns // 1000
    drop = us.bit_length() - 11
    return us if drop <= 0 else (us >> drop) << drop


class Pacer:
    """An open-loop schedule: message ``k`` (from 0) is due ``(k + 1) / rate`` seconds after the start.

    The schedule is fixed: a sender that falls behind owes every message it missed and sends them as soon
    as it can, so the load asked for is the load offered. :meth:`scheduled_ns` is when a message *should*
    have been sent; latency measured from it (``--open-loop``) counts the time a message waited behind a
    stalled sender or a full queue, which latency measured from the send call hides ("coordinated
    omission": a stalled system that makes its client wait is otherwise credited with fewer slow samples).

    Args:
        rate: messages per second; 0 or less: unlimited (everything is due at once, no schedule).
        clock_ns: a monotonic clock in ns (swappable for tests).
    """

    def __init__(self, rate: float, *, clock_ns=time.perf_counter_ns) -> None:
        self.rate = rate
        self.clock_ns = clock_ns
        self.start_ns = clock_ns()
        self.sent = 0

    def due(self, cap: int) -> int:
        """How many messages are owed now (at most ``cap``); the caller adds what it sends to ``sent``."""
        if self.rate <= 0:
            return cap
        owed = int((self.clock_ns() - self.start_ns) * self.rate / 1e9) - self.sent
        return max(0, min(owed, cap))

    def scheduled_ns(self, k: int) -> int:
        """When message ``k`` is due on the schedule (the clock's ns); with no rate, now."""
        if self.rate <= 0:
            return self.clock_ns()
        return self.start_ns + int((k + 1) * 1e9 / self.rate)

    def wait_s(self) -> float:
        """How long to sleep before the next message is due (0.5 ms .. 50 ms)."""
        if self.rate <= 0:
            return 0.0
        next_at = self.scheduled_ns(self.sent)
        return min(max((next_at - self.clock_ns()) / 1e9, 0.0005), 0.05)


def _payload(size_bytes: int) -> bytes:
    return os.urandom(size_bytes)


def _pulsar_client(spec: PerfSpec):
    import pulsar

    # The C++ core's own console logger: a Python ``logging.Logger`` here was handed every DEBUG line (one
    # per received message from a multi-topic consumer), each crossing into Python: 5x fewer msg/s consumed.
    return pulsar.Client(spec.service_url, io_threads=max(1, len(spec.topics) // 4 or 1),
                         operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
                         authentication=pulsar.AuthenticationToken(spec.auth_token) if spec.auth_token else None,
                         tls_trust_certs_file_path=spec.tls_trust_certs_file or None,
                         tls_validate_hostname=spec.tls_validate_hostname)


def _magnetar_client(spec: PerfSpec):
    from magnetar.auth.tls import TlsSettings, client_context
    from magnetar.protocol.client import Auth, Client

    ssl_context = None
    if spec.service_url.startswith("pulsar+ssl://"):
        ssl_context = client_context(TlsSettings(trust_certs_file=spec.tls_trust_certs_file),
                                     verify_hostname=spec.tls_validate_hostname)
    return Client(spec.service_url, ssl_context=ssl_context,
                  auth=Auth.token(spec.auth_token) if spec.auth_token else None)


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
        note = meter.sampler(size)

        def sent(t0: int, result, _msg_id) -> None:
            note(perf_ns() - t0 if result == ok else -1)

        pacer = Pacer(spec.rate)
        scheduled = pacer.scheduled_ns if spec.open_loop and spec.rate > 0 else None
        meter.begin()
        deadline = time.monotonic() + spec.duration_s if spec.duration_s else None
        count = len(producers)
        i = 0
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            due = pacer.due(1000)
            if not due:
                time.sleep(pacer.wait_s())
            for k in range(pacer.sent, pacer.sent + due):
                t0 = scheduled(k) if scheduled else perf_ns()
                producers[i % count].send_async(payload, functools.partial(sent, t0))
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
    cumulative = spec.subscription_type in ("Exclusive", "Failover")
    try:
        # Messages come a receive queue at a time (batch_receive) and, where the subscription type allows,
        # are acknowledged cumulatively, as an application that keeps up with a fast stream would: one
        # crossing into pulsar-client per batch of messages instead of two per message.
        consumer = client.subscribe(
            spec.topics[0] if len(spec.topics) == 1 else spec.topics,  # one topic: no multi-topic consumer
            spec.subscription,
            consumer_type=getattr(pulsar.ConsumerType, spec.subscription_type.replace("_", "")),
            receiver_queue_size=spec.receiver_queue_size,
            initial_position=(pulsar.InitialPosition.Earliest if spec.initial_position == "earliest"
                              else pulsar.InitialPosition.Latest),
            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(spec.receiver_queue_size, -1, 100),
        )
        meter.begin()
        deadline = time.monotonic() + spec.duration_s if spec.duration_s else None
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            msgs = consumer.batch_receive()
            if not msgs:
                continue
            now_ms = time.time_ns() // 1_000_000
            # Messages of one entry share a publish time: record them as one histogram value.
            run_time, run_count, run_bytes = msgs[0].publish_timestamp(), 0, 0
            for msg in msgs:
                t = msg.publish_timestamp()
                if t != run_time:
                    meter.record((now_ms - run_time) * 1000, run_count, run_bytes)
                    run_time, run_count, run_bytes = t, 0, 0
                run_count += 1
                run_bytes += len(msg.data())
                if not cumulative:
                    consumer.acknowledge(msg)
            meter.record((now_ms - run_time) * 1000, run_count, run_bytes)
            if cumulative:
                consumer.acknowledge_cumulative(msgs[-1])
        consumer.close()
        meter.maybe_report(force=True)
    finally:
        client.close()


async def _produce_magnetar(spec: PerfSpec, meter: _Meter, stop: Any) -> None:
    import asyncio

    from magnetar.protocol import encode_single_message, pb

    payload = _payload(spec.size_bytes)
    if spec.batching:
        item = encode_single_message(pb.SingleMessageMetadata(payload_size=len(payload)), payload)
        per_batch = max(1, min(spec.batch_max_messages, spec.batch_max_bytes // len(item)))
        bodies = {per_batch: item * per_batch}
    else:
        item, per_batch, bodies = payload, 1, {1: payload}
    max_pending_sends = max(2, spec.max_pending_messages // per_batch)
    async with _magnetar_client(spec) as client:
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

        pacer = Pacer(spec.rate)
        scheduled = pacer.scheduled_ns if spec.open_loop and spec.rate > 0 else None
        meter.sampler(size)  # open loop: samples noted one per message, each of this size
        note_all = meter.samples.extend

        def done_open_loop(first_k: int, count: int, fut: asyncio.Future) -> None:
            # Each message of the entry from its own scheduled time: one sample per message (-1: failed).
            if fut.cancelled() or fut.exception() is not None:
                note_all(-1 for _ in range(count))
                return
            now = perf_ns()
            note_all(max(0, now - scheduled(k)) for k in range(first_k, first_k + count))

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
                first_k = pacer.sent
                fut = await producer.send_entry(md, body, num_messages=n,
                                                highest_sequence_id=first + n - 1 if n > 1 else None)
                if scheduled:
                    fut.add_done_callback(lambda f, k=first_k, n=n: done_open_loop(k, n, f))
                else:
                    fut.add_done_callback(lambda f, t0=t0, n=n: done(t0, n, f))
                due -= n
                pacer.sent += n
            meter.maybe_report()
        for producer in producers:
            await producer.flush()


async def _consume_magnetar(spec: PerfSpec, meter: _Meter, stop: Any) -> None:
    import asyncio

    from magnetar.protocol.client import InitialPosition, SubscriptionType

    sub_type = SubscriptionType[spec.subscription_type.upper()]
    position = InitialPosition.EARLIEST if spec.initial_position == "earliest" else InitialPosition.LATEST
    cumulative = sub_type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER)
    async with _magnetar_client(spec) as client:
        consumers = []
        for topic in spec.topics:
            for name in await client.get_partitioned_topic_names(topic):
                # Entries are taken whole and counted by their batch size, as the producer side sends
                # pre-built batches: what is measured is the broker's dispatch, not a Python batch split.
                consumers.append(await client.subscribe(name, spec.subscription, subscription_type=sub_type,
                                                        initial_position=position,
                                                        receiver_queue_size=spec.receiver_queue_size,
                                                        whole_entries=True))
        meter.begin()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + spec.duration_s if spec.duration_s else None

        async def drain(consumer) -> None:
            while not stop.is_set() and (deadline is None or loop.time() < deadline):
                entries = await consumer.receive_batch(max_messages=1000, timeout_s=0.2)
                if not entries:
                    continue
                now_ms = time.time_ns() // 1_000_000
                for m in entries:
                    meter.record((now_ms - m.metadata.publish_time) * 1000, m.num_messages, len(m.payload))
                    if not cumulative:
                        consumer.ack(m)
                if cumulative:
                    consumer.ack_cumulative(entries[-1])

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


def pin_worker(worker: int, *, from_last: bool = False) -> Optional[int]:
    """Pins this process to one of the CPUs it may use (worker i on the i-th, round robin); returns it.
    ``from_last`` counts from the last CPU down: consume workers do, so that a ``perf produce`` and a
    ``perf consume`` run side by side on a small machine start on different cores.

    pulsar-client runs the application's calls on the Python thread and completes them (send callbacks,
    received messages) on its own I/O thread, and both need the GIL. On two cores the GIL then bounces
    between cores with every hand-over; on one core the two threads take turns cheaply. Measured here:
    about 31,000 msg/s pinned against 20,000 unpinned (1 KiB, one process), which is why pulsar-perf's
    figures for one Python process are taken pinned. None where affinity is not available.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
        cpu = cpus[(-1 - worker if from_last else worker) % len(cpus)]
        os.sched_setaffinity(0, {cpu})
        return cpu
    except (AttributeError, OSError):
        return None


def worker_main(spec: PerfSpec, out: Any, stop: Any) -> None:
    """Entry point of a worker process: runs the workload, reports every second, then ``done``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    from observability.runtime import keep_large_blocks

    # As in brokers and bookies: batch buffers (pulsar-client's 128 KiB ones too) come from the heap instead
    # of a fresh mmap each, whose first touch of every page is a fault.
    keep_large_blocks()
    interval = os.environ.get("MAGNETAR_SWITCH_INTERVAL_S")
    if interval:
        sys.setswitchinterval(float(interval))
    if spec.client == "pulsar" and spec.pin:
        pin_worker(spec.worker, from_last=spec.mode == "consume")
    meter = _Meter(spec.worker, out)
    try:
        if spec.client == "pulsar":
            # pulsar-client blocks the calling thread (a full queue, a receive): report from another one.
            import threading

            finished = threading.Event()

            def report() -> None:
                while not finished.wait(DRAIN_EVERY_S):
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
