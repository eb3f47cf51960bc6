"""``magnetar demo`` (``make demo``): bring a local deployment up, run the main job, show the result.

With the default topology (``clusters/local.toml``: regions us-east and eu-west, each with its own
ZooKeeper, three bookies, two brokers and a gateway proxy, plus the global configuration store) the main job
is geo-replication as unmodified Pulsar applications (the official ``pulsar-client``) see it, from outside:
through each region's proxy at ``pulsar+ssl://`` (the deployment's CA trusted, host names verified) with a
token of the ``demo-app`` role, and admin calls at the proxy's ``https://`` with the ``admin`` token
(``clusters.demo_access``). The demo grants ``demo-app`` produce and consume on its namespace, then:

0. **Refusals.** At each proxy, a client without credentials and a role without permission get nothing
   (refused, counted in the proxy's metrics, no topic created).

1. **Exchange.** Tenant ``acme`` and namespace ``acme/geo`` replicated to every region. In each region one
   producer sends N messages of about 1 KiB at a steady rate, each carrying its origin region, its sequence
   number and its send time (µs, property ``sent_us``; also the event time); in each region one consumer
   receives every region's messages. Checks: every message arrived in every region exactly once, in its
   producer's order, byte-identical; afterwards every replication backlog drains to 0. The replication delay
   is the send time to the receipt in another region (both regions run on this machine's clock), recorded
   in an HdrHistogram.
2. **Failover.** An application consumes a topic in the first region through a replicated subscription
   (``replicate_subscription_state_enabled``), acknowledges the first half and goes away; the same
   application subscribes in the second region. Checks: the subscription there moved (it did not restart
   from the beginning), and the application resumed at or before the first unacknowledged message and
   received everything after it once, in order: nothing skipped. What it receives twice is what was
   acknowledged after the last snapshot (one every second) the first region had passed.

With a single-region topology (``--topology clusters/standalone.toml``) two jobs run in that region: a
replicated ledger written and read back over the bookie processes, and a pulsar-client application.

A deployment already running in the data dir is reused when it runs the same topology with every process
alive; otherwise what is left of it is stopped and the topology started again. The deployment is left
running, with the commands to look at it and to stop it. ``run`` returns non-zero when any check failed.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import threading
import time
from dataclasses import asdict
from typing import Any, Callable, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from magnetar.admin_client import AdminClient, AdminError

from .demo_report import draw_replication_dashboard, print_geo_report, run_audit
from .demo_access import (Check, RegionAccess, access_of, grant_app, pulsar_client, refusals, try_it_lines,
                          wait_granted)
from .security import APP_ROLE

REPO_CLUSTERS = pathlib.Path(__file__).resolve().parent
DEFAULT_TOPOLOGY = REPO_CLUSTERS / "local.toml"
TENANT = "acme"
NAMESPACE = f"{TENANT}/geo"
AUDIT_SUBSCRIPTION = "demo-audit"
FAILOVER_SUBSCRIPTION = "orders-app"

_HIST_MAX_US = 3_600_000_000
_IDLE_TIMEOUT_S = 30.0  # a consumer that receives nothing for this long after the producers finished gives up

# Rich assumes 80 columns when not on a terminal; a log or a pipe should get whole tables instead.
console = Console(width=None if sys.stdout.isatty() else 160)


# ----------------------------------------------------------------------------------------------- deployment


def _ensure_deployment(data_dir: pathlib.Path, topology: pathlib.Path) -> int:
    """Reuses a complete deployment of ``topology`` in ``data_dir``, else stops what is left and starts it."""
    from clusters.commands import down, up
    from clusters.kinds import KINDS
    from clusters.runtime import DataDir, group_alive, is_alive
    from clusters.topology import load

    ddir = DataDir(data_dir)
    state = ddir.read_state()
    if state:
        sup = state.get("supervisor") or {}
        records = state.get("processes") or []
        # The same file, and the processes it names now (a deployment from before a proxy was added is stale).
        wanted = sorted(i.name for kind in KINDS.values() for i in kind.instances(load(topology)))
        same = (pathlib.Path(state.get("topology_file") or "").resolve() == topology.resolve()
                and sorted(r.get("name") for r in records) == wanted)
        complete = (state.get("status") == "running" and is_alive(sup.get("pid"), sup.get("start_ticks"))
                    and all(is_alive(r.get("pid"), r.get("start_ticks")) for r in records))
        if same and complete and ddir.topology_path.exists():
            console.print(f"[bold]Reusing the {state['name']} deployment already running in {data_dir}[/bold]")
            return 0
        if is_alive(sup.get("pid"), sup.get("start_ticks")) or any(
                group_alive(r.get("pid"), r.get("start_ticks")) for r in records):
            why = "is not complete any more" if same else f"runs another topology (or an older {state.get('name')})"
            console.print(f"The deployment in {data_dir} {why}: stopping it first...")
            code = down(data_dir)
            if code != 0:
                return code
    console.print(f"[bold]Starting {topology.name} in {data_dir}[/bold] (ZooKeepers, bookies, brokers, proxies)...")
    return up(topology, data_dir, detach=True)


def _new_histogram():
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(1, _HIST_MAX_US, 3)


def _latency_ms(hist) -> dict[str, float]:
    from magnetar.perf import latency_summary_ms

    out = latency_summary_ms(hist)
    out["count"] = hist.get_total_count()
    return out


# ------------------------------------------------------------------------------------- geo: the namespace


def replicate_namespace(admin: AdminClient, regions: list[str], namespace: str = NAMESPACE) -> None:
    """``namespace`` replicated to ``regions``, its tenant allowed there (created, or updated on a re-run)."""
    tenant = namespace.split("/", 1)[0]
    try:
        admin.request("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": regions})
    except AdminError as err:
        if err.status != 409:
            raise
        info = admin.get(f"/admin/v2/tenants/{tenant}") or {}
        allowed = list(dict.fromkeys([*(info.get("allowedClusters") or []), *regions]))
        admin.request("POST", f"/admin/v2/tenants/{tenant}", {**info, "allowedClusters": allowed})
    try:
        admin.request("PUT", f"/admin/v2/namespaces/{namespace}", {"replication_clusters": regions})
    except AdminError as err:
        if err.status != 409:
            raise
        admin.request("POST", f"/admin/v2/namespaces/{namespace}/replication", regions)


def stats_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/stats"


def _region_stats(admin: AdminClient, topic: str, subscription: str) -> dict[str, Any]:
    """What the report shows of one region's copy of ``topic`` (backlogs are in entries, as in Pulsar)."""
    st = admin.get(stats_path(topic)) or {}
    sub = (st.get("subscriptions") or {}).get(subscription) or {}
    return {
        "msgInCounter": st.get("msgInCounter", 0),
        "subscriptionBacklog": sub.get("msgBacklog"),
        "replication": {
            remote: {k: r.get(k) for k in ("replicationBacklog", "msgOutCounter", "connected",
                                            "replicationDelayInSeconds", "outboundConnection")}
            for remote, r in (st.get("replication") or {}).items()
        },
    }


# -------------------------------------------------------------------------------------- geo: the exchange


def _payload(origin: str, seq: int, size_bytes: int) -> bytes:
    head = f"{origin} #{seq} ".encode()
    return head + b"." * max(0, size_bytes - len(head))


def _produce(client, topic: str, region: str, messages: int, size_bytes: int, rate: float,
             sent: list[int]) -> None:
    """Sends ``messages`` at ``rate`` msg/s; ``sent[0]`` counts them (read by the progress display)."""
    import pulsar

    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True, max_pending_messages=10_000)
    failed: list[str] = []

    def done(result, _msg_id) -> None:
        if result != pulsar.Result.Ok:
            failed.append(str(result))

    start = time.monotonic()
    for seq in range(messages):
        ahead_s = start + seq / rate - time.monotonic()
        if ahead_s > 0.001:
            time.sleep(ahead_s)
        sent_us = time.time_ns() // 1000
        producer.send_async(_payload(region, seq, size_bytes), done, event_timestamp=sent_us // 1000,
                            properties={"origin": region, "seq": str(seq), "sent_us": str(sent_us)})
        sent[0] = seq + 1
    producer.flush()
    producer.close()
    if failed:
        raise RuntimeError(f"{len(failed)} sends failed in {region}, first: {failed[0]}")


def _receive(consumer, expected: int, size_bytes: int, out: list, stop: threading.Event) -> None:
    """Appends (origin, seq, sent_us, received_us, intact) per message until ``expected`` or ``stop``."""
    import pulsar

    while len(out) < expected and not stop.is_set():
        try:
            msg = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            continue
        received_us = time.time_ns() // 1000
        props = msg.properties()
        origin, seq = props.get("origin", "?"), int(props.get("seq", -1))
        out.append((origin, seq, int(props.get("sent_us", 0)), received_us,
                    msg.data() == _payload(origin, seq, size_bytes)))
        consumer.acknowledge(msg)


def _run_threads(jobs: dict[str, Callable[[], None]], progress_of: Callable[[], dict[str, int]],
                 totals: dict[str, int], stop: threading.Event, progress: Optional[Progress],
                 producers: set[str]) -> dict[str, str]:
    """Runs each job in a thread, shows their counters, stops the rest once the producers are done and
    nothing moved for ``_IDLE_TIMEOUT_S``. Returns the errors by job name."""
    errors: dict[str, str] = {}

    def guarded(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            errors[name] = f"{type(exc).__name__}: {exc}"

    threads = {n: threading.Thread(target=guarded, args=(n, fn), name=f"demo-{n}", daemon=True)
               for n, fn in jobs.items()}
    tasks = {n: progress.add_task(n, total=totals[n]) for n in jobs} if progress else {}
    for t in threads.values():
        t.start()
    last, last_move = None, time.monotonic()
    while any(t.is_alive() for t in threads.values()):
        time.sleep(0.1)
        counts = progress_of()
        for n, task in tasks.items():
            progress.update(task, completed=counts[n])
        if counts != last:
            last, last_move = counts, time.monotonic()
        producing = any(threads[p].is_alive() for p in producers)
        if not producing and time.monotonic() - last_move > _IDLE_TIMEOUT_S:
            stop.set()
    for t in threads.values():
        t.join()
    return errors


def exchange(topo: dict[str, Any], topic: str, *, messages: int, size_bytes: int, rate: float,
             client_log: Optional[pathlib.Path], progress: Optional[Progress]) -> tuple[list[Check], dict]:
    """Every region produces ``messages`` to ``topic`` and consumes every region's; checks and delays."""
    import pulsar

    regions = list(topo["regions"])
    clients = {r: pulsar_client(access_of(topo, r), client_log) for r in regions}
    received: dict[str, list] = {r: [] for r in regions}
    sent = {r: [0] for r in regions}
    stop = threading.Event()
    try:
        consumers = {r: clients[r].subscribe(topic, AUDIT_SUBSCRIPTION, receiver_queue_size=2000,
                                             initial_position=pulsar.InitialPosition.Earliest)
                     for r in regions}
        expected = messages * len(regions)
        jobs: dict[str, Callable[[], None]] = {}
        totals: dict[str, int] = {}
        for r in regions:
            jobs[f"send in {r}"] = lambda r=r: _produce(clients[r], topic, r, messages, size_bytes, rate, sent[r])
            totals[f"send in {r}"] = messages
        for r in regions:
            jobs[f"receive in {r}"] = lambda r=r: _receive(consumers[r], expected, size_bytes, received[r], stop)
            totals[f"receive in {r}"] = expected

        def counts() -> dict[str, int]:
            return {**{f"send in {r}": sent[r][0] for r in regions},
                    **{f"receive in {r}": len(received[r]) for r in regions}}

        errors = _run_threads(jobs, counts, totals, stop, progress, {f"send in {r}" for r in regions})
        for c in consumers.values():
            c.close()
    finally:
        for c in clients.values():
            c.close()

    checks = [Check(f"{name} ran", False, err) for name, err in errors.items()]
    found, delays = audit(received, regions, messages)
    return checks + found, delays


def audit(received: dict[str, list], regions: list[str], messages: int) -> tuple[list[Check], dict]:
    """Checks what each region received (rows of :func:`_receive`) against ``messages`` from each region,
    and the delays by direction (µs histograms summarised in ms)."""
    once, ordered, damaged = [], [], 0
    delays = {}
    for dest, rows in received.items():
        by_origin: dict[str, list[int]] = {r: [] for r in regions}
        for origin, seq, sent_us, received_us, ok in rows:
            by_origin.setdefault(origin, []).append(seq)
            damaged += not ok
            key = f"{origin} -> {dest}" if origin != dest else f"{dest} (local)"
            hist = delays.get(key)
            if hist is None:
                hist = delays[key] = _new_histogram()
            hist.record_value(min(max(received_us - sent_us, 1), _HIST_MAX_US))
        for origin, seqs in by_origin.items():
            distinct = set(seqs)
            missing = messages - len(distinct & set(range(messages)))
            dups = len(seqs) - len(distinct)
            if missing or dups:
                once.append(f"{dest} got {origin}'s: {missing} missing, {dups} duplicated")
            if any(a >= b for a, b in zip(seqs, seqs[1:])):
                ordered.append(f"{origin}'s messages out of order in {dest}")
    return [
        Check("every message arrived in every region exactly once", not once,
              "; ".join(once) or f"{messages:,} per producer x {len(regions)} producers, in each of "
                                 f"{len(regions)} regions"),
        Check("each producer's order kept in every region", not ordered,
              "; ".join(ordered) or "sequence numbers strictly increasing per origin"),
        Check("payloads byte-identical", not damaged,
              f"{damaged} payloads differ" if damaged else "every payload compared"),
    ], {k: _latency_ms(h) for k, h in sorted(delays.items())}


def wait_drained(topo: dict[str, Any], topic: str, timeout_s: float = 30.0) -> tuple[Check, dict]:
    """Polls each region's topic stats until every replication backlog is 0 and every replicator connected."""
    regions = list(topo["regions"])
    admins = {r: access_of(topo, r).admin() for r in regions}
    deadline = time.monotonic() + timeout_s
    while True:
        stats = {r: _region_stats(admins[r], topic, AUDIT_SUBSCRIPTION) for r in regions}
        pending = [f"{r} -> {remote}: backlog {x['replicationBacklog']}, connected {x['connected']}"
                   for r in regions for remote, x in stats[r]["replication"].items()
                   if x["replicationBacklog"] or not x["connected"]]
        pending += [f"{r} has no replicator to {remote}" for r in regions for remote in regions
                    if remote != r and remote not in stats[r]["replication"]]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    return Check("replication backlogs drained to 0", not pending, "; ".join(pending) or "in every region"), stats


def replication_via_proxies(topo: dict[str, Any], stats: dict[str, Any]) -> Check:
    """Each region's replicators reach every other region through that region's proxy, as any client from
    outside does (the topic stats' ``outboundConnection`` names the proxy the connection goes through)."""
    astray = []
    for region, st in stats.items():
        for remote, x in st["replication"].items():
            proxy = topo["regions"][remote]["proxy"]["pulsar_ssl"]
            if remote != region and not str(x.get("outboundConnection", "")).endswith(f"via {proxy}"):
                astray.append(f"{region} -> {remote}: {x.get('outboundConnection') or 'not connected'}")
    return Check("replication enters each region through its proxy", not astray,
                 "; ".join(astray) or "every replicator connects via the remote region's pulsar+ssl:// proxy")


# -------------------------------------------------------------------------------------- geo: the failover


def _subscription_backlog(admin: AdminClient, topic: str, name: str) -> Optional[int]:
    try:
        sub = ((admin.get(stats_path(topic)) or {}).get("subscriptions") or {}).get(name)
    except AdminError:
        return None
    return None if sub is None else sub.get("msgBacklog")


def _tracker(progress: Optional[Progress], description: str, total: int) -> Callable[[int], None]:
    """A progress bar, or nothing: call the result with the count done."""
    if progress is None:
        return lambda _done: None
    task = progress.add_task(description, total=total)
    return lambda done: progress.update(task, completed=done)


def _produce_then_ack_half(access: RegionAccess, region: str, topic: str, messages: int, rate: float,
                           client_log: Optional[pathlib.Path], progress: Optional[Progress]) -> int:
    """The application in ``region``: subscribes (replicated), publishes ``messages`` at ``rate`` (so that
    snapshots, one per second, fall between them as in a live application), acknowledges the first half
    and leaves. Returns the last sequence number acknowledged."""
    import pulsar

    client = pulsar_client(access, client_log)
    try:
        consumer = client.subscribe(topic, FAILOVER_SUBSCRIPTION, replicate_subscription_state_enabled=True,
                                    initial_position=pulsar.InitialPosition.Earliest)
        sent = [0]
        show = _tracker(progress, f"send in {region}", messages)
        worker = threading.Thread(target=_produce, args=(client, topic, region, messages, 64, rate, sent))
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
            show(sent[0])
        show = _tracker(progress, f"consume + ack in {region}", messages // 2)
        for i in range(messages // 2):
            msg = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(msg)
            show(i + 1)
        consumer.close()
        return int(msg.properties()["seq"])
    finally:
        client.close()


def _wait_followed(admin: AdminClient, topic: str, timeout_s: float = 20.0) -> Optional[float]:
    """Seconds until the subscription's copy in ``admin``'s region last moved: it follows once an update
    marker arrives; it is taken as settled once unchanged for two snapshot intervals."""
    started = time.monotonic()
    seen, moved_at = None, None
    while time.monotonic() - started < timeout_s:
        backlog = _subscription_backlog(admin, topic, FAILOVER_SUBSCRIPTION)
        if backlog != seen:
            seen, moved_at = backlog, time.monotonic()
        if seen is not None and time.monotonic() - moved_at >= 2.0:
            break
        time.sleep(0.1)
    return round(moved_at - started, 2) if moved_at else None


def _resume(access: RegionAccess, region: str, topic: str, messages: int, last_acked: int,
            client_log: Optional[pathlib.Path], progress: Optional[Progress]) -> list[int]:
    """The application again, in ``region``: the sequence numbers it receives up to the last one."""
    import pulsar

    client = pulsar_client(access, client_log)
    seqs: list[int] = []
    try:
        consumer = client.subscribe(topic, FAILOVER_SUBSCRIPTION, replicate_subscription_state_enabled=True,
                                    initial_position=pulsar.InitialPosition.Earliest)
        show = _tracker(progress, f"consume in {region}", messages - last_acked - 1)
        while not seqs or seqs[-1] < messages - 1:
            try:
                msg = consumer.receive(timeout_millis=10_000)
            except pulsar.Timeout:
                break
            seqs.append(int(msg.properties()["seq"]))
            consumer.acknowledge(msg)
            show(max(0, seqs[-1] - last_acked))
        consumer.close()
    finally:
        client.close()
    return seqs


def failover(topo: dict[str, Any], topic: str, *, messages: int, rate: float,
             client_log: Optional[pathlib.Path], progress: Optional[Progress]) -> tuple[list[Check], dict]:
    """Consume + acknowledge half of ``topic`` in the first region through a replicated subscription, then
    continue in the second region: where did it resume, and was anything skipped?"""
    first, second = list(topo["regions"])[:2]
    access = {r: access_of(topo, r) for r in (first, second)}
    last_acked = _produce_then_ack_half(access[first], first, topic, messages, rate, client_log, progress)
    followed_after_s = _wait_followed(access[second].admin(), topic)
    seqs = _resume(access[second], second, topic, messages, last_acked, client_log, progress)
    resumed = seqs[0] if seqs else None
    info = {"from": first, "to": second, "messages": messages, "rate": rate, "last_acked_seq": last_acked,
            "followed_after_s": followed_after_s, "resumed_at_seq": resumed, "received": len(seqs),
            "redelivered": (last_acked + 1 - resumed) if resumed is not None else None}
    expected = list(range(resumed, messages)) if resumed is not None else []
    complete = resumed is not None and resumed <= last_acked + 1 and seqs == expected
    return [
        Check(f"replicated subscription followed to {second}", resumed is not None and resumed > 0,
              f"resumed at #{resumed} after #{last_acked} was acknowledged in {first}" if resumed is not None
              else f"nothing received in {second}"),
        Check("nothing skipped after the failover", complete,
              f"#{resumed}..#{messages - 1} received once each, in order" if complete else
              f"received {len(seqs)} messages from #{resumed}; expected a start at or before #{last_acked + 1} "
              f"and then every message up to #{messages - 1} once, in order"),
    ], info


# -------------------------------------------------------------------------------------------- geo: the job


def geo_job(topo: dict[str, Any], *, messages: int = 5_000, size_bytes: int = 1024, rate: float = 1_000.0,
            failover_messages: int = 2_000, failover_rate: float = 500.0,
            client_log: Optional[pathlib.Path] = None, show_progress: bool = True) -> dict[str, Any]:
    """The multi-region job (needs at least two regions): returns a report whose ``ok`` says whether every
    check passed; ``checks`` lists them, ``delay_ms`` has the delays by direction, ``stats`` each region's
    topic stats, ``failover`` where the replicated subscription resumed."""
    regions = list(topo["regions"])
    if len(regions) < 2:
        raise ValueError("the geo-replication job needs a topology with at least two regions")
    run_id = time.strftime("%H%M%S") + f"-{os.getpid() % 10_000}"
    topic = f"persistent://{NAMESPACE}/events-{run_id}"
    failover_topic = f"persistent://{NAMESPACE}/orders-{run_id}"
    accesses = [access_of(topo, r) for r in regions]
    replicate_namespace(accesses[0].admin(), regions)
    checks: list[Check] = []
    if any(a.secured for a in accesses):
        try:
            grant_app(accesses[0].admin(), NAMESPACE)
            for access in accesses:
                wait_granted(access, topic, client_log)
            checks.append(Check(f"{APP_ROLE} granted produce and consume", True,
                                f"on {NAMESPACE}, at {accesses[0].admin_url} with the admin token; "
                                f"effective in every region"))
        except Exception as exc:  # noqa: BLE001 - a failed check, with what happened
            checks.append(Check(f"{APP_ROLE} granted produce and consume", False, f"{type(exc).__name__}: {exc}"))
        checks += refusals(accesses, NAMESPACE, client_log)
    progress = Progress(TextColumn("{task.description:>28}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, disable=not show_progress)
    delays: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    fo: dict[str, Any] = {}
    with progress:
        try:
            found, delays = exchange(topo, topic, messages=messages, size_bytes=size_bytes, rate=rate,
                                     client_log=client_log, progress=progress)
            checks += found
            drained, stats = wait_drained(topo, topic)
            checks.append(drained)
            if all(a.through_proxy for a in accesses):
                checks.append(replication_via_proxies(topo, stats))
        except Exception as exc:  # noqa: BLE001 - a failed check, with what happened
            checks.append(Check("exchange between the regions", False, f"{type(exc).__name__}: {exc}"))
        try:
            found, fo = failover(topo, failover_topic, messages=failover_messages, rate=failover_rate,
                                 client_log=client_log, progress=progress)
            checks += found
        except Exception as exc:  # noqa: BLE001
            checks.append(Check("replicated-subscription failover", False, f"{type(exc).__name__}: {exc}"))
    return {
        "namespace": NAMESPACE, "topic": topic, "failover_topic": failover_topic, "regions": regions,
        "messages_per_region": messages, "size_bytes": size_bytes, "rate_per_region": rate,
        "delay_ms": delays, "stats": stats, "failover": fo,
        "checks": [asdict(c) for c in checks], "ok": all(c.ok for c in checks),
    }


# -------------------------------------------------------------------------------------------------- run


REPORT_FILE = "demo-report.json"  # in the data dir: the geo job's report of the last `magnetar demo`


def run(data_dir: pathlib.Path, *, topology: Optional[pathlib.Path] = None, entries: int = 20_000,
        size: int = 1024) -> int:
    """``magnetar demo``: 0 when every check passed; the deployment is left running either way."""
    data_dir = pathlib.Path(data_dir)
    topology = pathlib.Path(topology or DEFAULT_TOPOLOGY)
    code = _ensure_deployment(data_dir, topology)
    if code != 0:
        return code
    topo = json.loads((data_dir / "topology.json").read_text())
    client_log = data_dir / "logs" / "demo-pulsar-client.log"
    regions = list(topo["regions"])

    if len(regions) >= 2:
        first = access_of(topo, regions[0])
        how = (f"through each region's proxy ({first.service_url}, ...) as role {APP_ROLE}" if first.through_proxy
               else "at each region's first broker")
        console.print(f"\nRegions {', '.join(regions)}: tenant {TENANT}, namespace {NAMESPACE} replicated to all; "
                      f"each region produces and consumes with pulsar-client {how} (client log: {client_log})...")
        report = geo_job(topo, client_log=client_log)
        (data_dir / REPORT_FILE).write_text(json.dumps(report, indent=2, default=str))
        print_geo_report(report, console, FAILOVER_SUBSCRIPTION)
        console.print(f"(the job's whole report: {data_dir / REPORT_FILE})", markup=False)
        ok = report["ok"]
        if "prometheus" in topo:
            ok = draw_replication_dashboard(topo, data_dir / "dashboards", console) and ok
        ok = run_audit(data_dir, topo, NAMESPACE, console) and ok
        console.print("\nTry it yourself (.venv/bin/magnetar):", markup=False)
        for line in try_it_lines(topo, data_dir, NAMESPACE, report["topic"]):
            console.print(f"  {line}", markup=False, highlight=False)
    else:
        from .demo_standalone import single_region

        ok = single_region(data_dir, topo, entries, size, client_log)

    console.print("\nThe deployment is still running:")
    console.print(f"  magnetar status --data-dir {data_dir}     # every process and endpoint", markup=False)
    console.print(f"  cat {data_dir}/topology.json", markup=False)
    if "prometheus" in topo:
        console.print(f"  Prometheus (every process scraped): {topo['prometheus']['url']}", markup=False)
    console.print(f"  magnetar down --data-dir {data_dir}       # stop everything (or: make down)", markup=False)
    console.print("[green]every check passed[/green]" if ok else "[red]some checks FAILED[/red]")
    return 0 if ok else 1
