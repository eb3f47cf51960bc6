"""One chaos run on regions apart: producers and consumers in every region, a fault in the middle, then the check.

``run_fault(deployment, "link-cut", start=..., end=..., tmp=...)`` makes a namespace replicated to every region
(deduplication on), starts in each region a consumer (replicated subscription ``audit``) and a producer
(``<region>-p``, ``rate`` msg/s for ``duration_s``), calls ``start()`` after ``lead_s``, ``end()`` after
``hold_s`` more, waits for the producers, then for every replication backlog to be zero (time to drain, from
``end()``), stops the consumers, reads every region back from the earliest entry and returns a
:class:`FaultResult` (the row of the table and each region's check).
"""

from __future__ import annotations

import pathlib
import random
import signal
import socket
import subprocess
import urllib.error
import sys
import time
from dataclasses import dataclass
from typing import Callable

from .chaos_report import RegionCheck, check_region, percentile, replication_delays_ms
from .netns_regions import ApartRegions
from .regions import AdminError
from .wait import wait_for

TENANT = "chaos"
_CLIENT = [sys.executable, "-m", "tests.kit.region_client"]


@dataclass
class FaultResult:
    fault: str
    topic: str
    duration_s: float
    checks: list[RegionCheck]
    acked: int
    max_delay_ms: float
    p50_delay_ms: float
    p99_delay_ms: float
    drain_s: float
    acked_during_fault: dict[str, int]  # by region: publishes acknowledged while the fault lasted

    @property
    def row(self) -> tuple:
        return (self.fault, self.duration_s, self.acked, sum(c.lost for c in self.checks),
                sum(c.duplicated for c in self.checks), sum(c.out_of_order for c in self.checks),
                self.max_delay_ms, self.drain_s)


def run_fault(dep: ApartRegions, fault: str, *, start: Callable[[], None], end: Callable[[], None],
              tmp: pathlib.Path, rate: float = 100.0, duration_s: float = 10.0, lead_s: float = 2.0,
              hold_s: float = 4.0, drain_timeout_s: float = 120.0) -> FaultResult:
    regions = dep.regions
    names = regions.names
    ns = regions.create_replicated_namespace(TENANT, f"{fault}-{random.getrandbits(24):06x}", names)
    regions.any().admin("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    # Kept for good: the Spark audit at the end reads every stored message from the bookies, and without
    # retention a topic reloaded by a fault (a lost ZooKeeper session, a broker restart) trims the ledgers
    # its consumers had read, which the audit would report missing.
    forever = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    regions.any().admin("POST", f"/admin/v2/namespaces/{ns}/retention", forever)
    wait_for(lambda: all(regions[r].admin("GET", f"/admin/v2/namespaces/{ns}/deduplication") is True
                         and regions[r].admin("GET", f"/admin/v2/namespaces/{ns}/retention") == forever
                         for r in names), 30, what="deduplication on and retention set everywhere")
    topic = f"persistent://{ns}/t"
    tmp.mkdir(parents=True, exist_ok=True)
    consumers, producers = {}, {}
    try:
        for r in names:
            consumers[r] = dep.in_region(r, [*_CLIENT, "consume", regions[r].pulsar_url, topic, "audit",
                                             str(tmp / f"{r}.consumed")], stdout=subprocess.DEVNULL)
        for r in names:
            ready = tmp / f"{r}.consumed.ready"
            wait_for(lambda: ready.exists() or consumers[r].poll() is not None, 60, what=f"{r} consumer subscribed")
            assert ready.exists(), f"{r} consumer exited before it subscribed"
        count = int(rate * duration_s)
        for r in names:
            producers[r] = dep.in_region(r, [*_CLIENT, "produce", regions[r].pulsar_url, topic, f"{r}-p",
                                             str(count), str(rate), str(tmp / f"{r}.acked")],
                                        stdout=subprocess.DEVNULL)
        time.sleep(lead_s)  # traffic before the fault (a load phase, not a wait for a condition)
        began = time.monotonic()
        start()
        acked_at_start = _acked_counts(tmp, names)
        time.sleep(hold_s)  # the fault's duration
        during = {r: n - acked_at_start[r] for r, n in _acked_counts(tmp, names).items()}
        end()
        healed = time.monotonic()
        for r, p in producers.items():
            assert p.wait(timeout=drain_timeout_s) == 0, f"producer in {r} failed"

        def drained() -> bool:
            for r in names:
                for remote in names:
                    if remote != r:
                        stats = regions[r].replication_stats(topic, remote)
                        if stats is None or stats.get("replicationBacklog", 1) != 0:
                            return False
            return True
        wait_for(drained, drain_timeout_s, what="replication drained")
        drain_s = time.monotonic() - healed
        wait_for(lambda: all(regions[r].topic_stats(topic)["subscriptions"]["audit"]["msgBacklog"] == 0
                             for r in names), drain_timeout_s, what="replicated subscriptions settled")
    finally:
        for p in [*producers.values(), *consumers.values()]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*producers.values(), *consumers.values()]:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    acked = {f"{r}-p": [int(x) for x in (tmp / f"{r}.acked").read_text().split()] for r in names}
    checks, delays = [], []
    for r in names:
        out = tmp / f"{r}.read"
        reader = dep.in_region(r, [*_CLIENT, "read", regions[r].pulsar_url, topic, str(out)],
                               stdout=subprocess.DEVNULL)
        assert reader.wait(timeout=120) == 0, f"read-back in {r} failed"
        checks.append(check_region(r, out.read_text().split(), acked))
        delays += replication_delays_ms((tmp / f"{r}.consumed").read_text().splitlines(), [f"{r}-p"])
    return FaultResult(fault, topic, round(time.monotonic() - began, 1), checks, sum(len(v) for v in acked.values()),
                       float(max(delays, default=float("nan"))), percentile(delays, 50), percentile(delays, 99),
                       round(drain_s, 1), during)


def _acked_counts(tmp: pathlib.Path, names) -> dict[str, int]:
    """Publishes acknowledged so far by each region's producer."""
    counts = {}
    for r in names:
        try:
            counts[r] = (tmp / f"{r}.acked").read_bytes().count(b"\n")
        except FileNotFoundError:
            counts[r] = 0
    return counts


def _fails(call) -> bool:
    try:
        call()
    except (AdminError, urllib.error.URLError, socket.timeout, TimeoutError, OSError):
        return True
    return False


FAULTS = ("link-cut", "link-silent", "config-store-paused", "zookeeper-paused", "brokers-killed", "bookie-disk-full")
# Not in the test suite (time), in bench/chaos_table.py: a bookie SIGSTOPped, as a disk that stopped answering,
# and a bookie whose disk is slow (tests/kit/slow_disk.py; tests/chaos/test_slow_disk.py has it in the suite).
MORE_FAULTS = ("bookie-paused", "config-store-killed", "bookie-disk-slow", "zookeeper-killed")
SLOW_FSYNC_MS = 200.0


def fault_actions(dep: ApartRegions, local: str, remote: str, *,
                  slow_fsync_ms: float = SLOW_FSYNC_MS) -> tuple[dict[str, bool], dict[str, tuple]]:
    """(what each fault must have caused, checked while it lasts; {fault: (start, end)}) for faults hitting
    region ``local`` (and its link to ``remote``). ``bookie-disk-full`` needs ``dep.disk``: a
    :class:`~tests.kit.disk.SmallDisk` holding the data of ``local``'s first bookie; ``bookie-disk-slow``
    needs ``dep.slow_disk``: a :class:`~tests.kit.slow_disk.SlowDisk` mounted as the data folder of another
    of ``local``'s bookies (every fsync of it takes ``slow_fsync_ms`` while the fault lasts)."""
    here = dep.regions[local]
    seen: dict[str, bool] = {}

    def pause_config_store():
        dep.config_store.pause()
        seen["policy change refused"] = _fails(lambda: here.admin(
            "POST", f"/admin/v2/tenants/{TENANT}", {"allowedClusters": [local, remote], "adminRoles": ["x"]},
            timeout_s=3))

    def kill_config_store():
        dep.config_store.kill()
        seen["policy change refused"] = _fails(lambda: here.admin(
            "POST", f"/admin/v2/tenants/{TENANT}", {"allowedClusters": [local, remote], "adminRoles": ["x"]},
            timeout_s=3))

    probe = f"{TENANT}/probe-{random.getrandbits(24):06x}"  # a namespace whose bundles nobody owns yet

    def lookup_probe(timeout_s: float) -> None:
        here.admin("GET", f"/lookup/v2/topic/persistent/{probe}/t", timeout_s=timeout_s)

    def pause_zookeeper():
        here.admin("PUT", f"/admin/v2/namespaces/{probe}", {"replication_clusters": [local]})
        dep.zookeeper[local].pause()
        seen["new topic unowned"] = _fails(lambda: lookup_probe(2))

    def kill_zookeeper():
        here.admin("PUT", f"/admin/v2/namespaces/{probe}", {"replication_clusters": [local]})
        dep.zookeeper[local].kill()
        seen["new topic unowned"] = _fails(lambda: lookup_probe(2))

    def restart_zookeeper():
        dep.zookeeper[local].start(timeout_s=90)
        wait_for(lambda: not _fails(lambda: lookup_probe(5)), 90, what="the new topic owned once ZooKeeper is back")
        seen["new topic owned after"] = True

    def resume_zookeeper():
        dep.zookeeper[local].resume()
        wait_for(lambda: not _fails(lambda: lookup_probe(5)), 60, what="the new topic owned once ZooKeeper is back")
        seen["new topic owned after"] = True

    def resume_config_store():
        dep.config_store.resume()
        wait_for(lambda: not _fails(lambda: here.admin(
            "POST", f"/admin/v2/tenants/{TENANT}", {"allowedClusters": [local, remote], "adminRoles": []},
            timeout_s=5)), 60, what="a policy change once the configuration store is back")
        seen["policy change after"] = True

    bookie = here.bookies[0]

    def fill_disk():
        dep.disk.fill()

    def heal_disk():
        seen["bookie disk full"] = "No space left on device" in bookie.process.log_tail(1 << 20)
        dep.disk.free()
        bookie.restart(timeout_s=90)

    slow_delayed_at_start = [0]

    def slow_disk():
        slow_delayed_at_start[0] = dep.slow_disk.slow(fsync_ms=slow_fsync_ms)["fsyncs_delayed"]

    def normal_disk():
        delayed = dep.slow_disk.normal()["fsyncs_delayed"] - slow_delayed_at_start[0]
        seen[f"fsyncs delayed ({delayed})"] = delayed > 0

    broker = here.brokers[0]
    silenced_at_start = [0]

    def silence():
        silenced_at_start[0] = broker.process.log_tail(1 << 22).count("did not answer PING")
        dep.silence(local, remote)

    def heal_silence():
        # Noticed by the keep-alive (nothing was reset): the replication connection gave up on its silent peer.
        noticed = broker.process.log_tail(1 << 22).count("did not answer PING") - silenced_at_start[0]
        seen[f"silence noticed by the keep-alive ({noticed})"] = noticed > 0
        dep.heal(local, remote)

    return seen, {
        "link-cut": (lambda: dep.cut(local, remote), lambda: dep.heal(local, remote)),
        "link-silent": (silence, heal_silence),
        "config-store-paused": (pause_config_store, resume_config_store),
        "zookeeper-paused": (pause_zookeeper, resume_zookeeper),
        "brokers-killed": (lambda: here.stop_brokers(), lambda: here.start_brokers(timeout_s=90)),
        "bookie-disk-full": (fill_disk, heal_disk),
        "bookie-paused": (bookie.process.pause, bookie.process.resume),
        "bookie-disk-slow": (slow_disk, normal_disk),
        "config-store-killed": (kill_config_store, lambda: dep.config_store.start(timeout_s=90)),
        "zookeeper-killed": (kill_zookeeper, restart_zookeeper),
    }
