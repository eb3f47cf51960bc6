"""Regions really apart (issue 18): each region in its own network namespace, 40 ms ± 5 ms between regions
through the wan relay, producers and consumers in every region running through a fault.

One deployment (two regions, two bookies and one broker each) serves every fault in turn, each on its own
replicated namespace. After each: no acknowledged message lost, none duplicated, per-producer order kept in
every region (read back in full), replication drained after healing, the replicated subscription settled;
and what the fault must leave working or stop:

* link-cut: the relay resets and refuses every connection between the two regions, then lets them again;
* link-silent: a partition as the ends see it: nothing passes between the regions and nothing is closed, for
  longer than the brokers' keep-alive takes to give up on a silent peer (2 s here: PING, then close), so the
  replicators' connections are closed by the keep-alive and their reconnections hang until healed;
* config-store-paused: SIGSTOP of the global configuration store: a policy change fails, messaging goes on
  (every region's producer is acknowledged while it lasts); once it resumes, a policy change succeeds;
* zookeeper-paused: SIGSTOP of one region's ZooKeeper (shorter than the broker's session): a topic of a fresh
  namespace gets no owner there, the owned topic keeps serving; once it resumes, the new topic is owned;
* brokers-killed: SIGKILL of every broker of one region, restarted on the same ports;
* bookie-disk-full: one bookie's data directory (a 128 MiB tmpfs) filled to ENOSPC; with E = Qw = Qa = 2
  of two bookies the region cannot store (its producers wait); healed by freeing the space and restarting
  the bookie (a journal that failed a write refuses every later one until a restart).

Each fault's topic is then audited by ``magnetar audit``'s Spark job, reading every region's bookies directly
(the last test): no violation. The module prints the table of issue 18 at its end. Needs root (``ip netns``).
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from spark.audit.runner import audit_deployment
from tests.kit import netns
from tests.kit.chaos_report import table
from tests.kit.chaos_run import FAULTS, fault_actions, run_fault
from tests.kit.disk import SmallDisk
from tests.kit.netns_regions import start_netns_regions
from tests.kit.regions import write_topology

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _namespaces_can_be_made() -> None:
    """make test runs as root on Linux (CI too): network namespaces are part of the suite, not optional."""
    why_not = netns.available()  # "" when network namespaces can be made here
    assert not why_not, f"regions apart need network namespaces (run as root on Linux): {why_not}"

EAST, WEST = "east", "west"
ROWS: list[tuple] = []
AUDITED: list[str] = []  # each fault's topic, for the audit at the end
KEEP_ALIVE_MS = 2_000  # the brokers' keep-alive (30 s by default): a silent link is noticed within 4-6 s
HOLD_S = {"link-silent": 8.0}  # how long each fault lasts (default 3 s)


@pytest.fixture(scope="module")
def apart(tmp_path_factory):
    base = tmp_path_factory.mktemp("apart")
    disk = SmallDisk(base / "east-bookie-1-disk", size_bytes=128 << 20)
    try:
        disk.mount()
    except subprocess.CalledProcessError:
        disk = None  # no tmpfs here: the disk-full fault is skipped
    try:
        dep = start_netns_regions([EAST, WEST], base,
                                  bookie_data_dirs={"east-bookie-1": disk.path / "data"} if disk else None,
                                  keep_alive_interval_ms=KEEP_ALIVE_MS)
        dep.disk = disk
        try:
            yield dep
        finally:
            dep.stop()
            if ROWS:
                print("\n" + table(ROWS))
    finally:
        if disk is not None:
            disk.umount()


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_between_regions_apart(apart, fault, tmp_path: pathlib.Path):
    if fault == "bookie-disk-full" and apart.disk is None:
        pytest.fail("no tmpfs could be mounted for the bookie's disk (make test runs as root: it should be)")
    seen, faults = fault_actions(apart, EAST, WEST)
    start, end = faults[fault]
    try:
        result = run_fault(apart, fault, start=start, end=end, tmp=tmp_path, hold_s=HOLD_S.get(fault, 3.0))
    except BaseException:
        print(apart.log_tails(2000))
        raise
    ROWS.append(result.row)
    AUDITED.append(result.topic)
    print(f"\n{fault}: {result.row} delay p50 {result.p50_delay_ms} ms p99 {result.p99_delay_ms} ms")
    for check in result.checks:
        assert check.lost == 0, check
        assert check.duplicated == 0, check
        assert check.out_of_order == 0, check
        assert check.messages >= result.acked, check
    assert all(seen.values()), seen
    assert result.acked > 0
    if fault in ("config-store-paused", "zookeeper-paused", "link-cut", "link-silent"):
        # messaging goes on: the region's own topic keeps taking publishes (an owned topic needs neither)
        assert all(n > 0 for n in result.acked_during_fault.values()), result.acked_during_fault


def test_the_spark_audit_finds_no_violation_after_the_faults(apart, spark_session, tmp_path: pathlib.Path):
    """The issue's end-of-run check of every region's contents: the audit (missing, duplicated, order, payload,
    stray, replicated-subscription divergence) over every fault's topic, its executors reading the bookies."""
    if not AUDITED:  # this test alone (-k): one fault first, so there is something to audit
        _, faults = fault_actions(apart, EAST, WEST)
        AUDITED.append(run_fault(apart, "link-cut", start=faults["link-cut"][0], end=faults["link-cut"][1],
                                 tmp=tmp_path / "fault", hold_s=1.0).topic)
    topology = write_topology(apart.regions, [EAST, WEST], tmp_path / "topology.json")
    report = audit_deployment(spark_session, topology, topics=AUDITED, out_dir=tmp_path / "audit", reader="source")
    print("\naudit:", {t: report["rows"]["by_topic"].get(t) for t in AUDITED}, "violations", report["violations"])
    assert report["inputs"]["reader"] == "source"
    assert report["violations"] == 0, report["checks"]
    assert sorted(report["topics"]) == sorted(AUDITED)
    for topic in AUDITED:  # both regions hold every message of both producers
        rows = report["rows"]["by_topic"][topic]
        assert rows[EAST] == rows[WEST] > 0, (topic, rows)


def test_namespaces_are_removed_after_stop(tmp_path):
    dep = start_netns_regions([EAST], tmp_path, bookies=1)
    names = [dep.wan.netns, *(r.netns for r in dep.wan.regions.values())]
    dep.stop()
    assert not set(names) & set(netns.leftover_namespaces())
