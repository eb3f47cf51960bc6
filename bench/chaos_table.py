"""Issue 18's fault table on regions really apart, with longer faults than the test suite's.

    sudo .venv/bin/python bench/chaos_table.py                      # every fault, 10 s each, 200 msg/s per region
    sudo .venv/bin/python bench/chaos_table.py --faults link-cut,brokers-killed --hold-s 30 --rate 500

Starts two regions in network namespaces 40 ms ± 5 ms apart (tests/kit/netns_regions.py; the first region's
first bookie on a 128 MiB tmpfs for the disk-full fault, its second on a FUSE mount for the slow-disk fault,
tests/kit/slow_disk.py), runs each fault with a producer and a consumer in
every region (tests/kit/chaos_run.py), checks every region's contents after healing and prints the table:
fault, duration, messages acknowledged, lost, duplicated, out of order, max replication delay, time to drain;
then (unless ``--no-audit``) audits every fault's topic with ``magnetar audit``'s Spark job on ``local[2]``
(its executors reading the bookies) and prints its violations. Exits 1 when a message was lost, duplicated or
reordered, a fault did not do what it must, or the audit found a violation. Needs root.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.kit import netns  # noqa: E402
from tests.kit.chaos_report import table  # noqa: E402
from tests.kit.chaos_run import FAULTS, MORE_FAULTS, fault_actions, run_fault  # noqa: E402
from tests.kit.disk import SmallDisk  # noqa: E402
from tests.kit.netns_regions import start_netns_regions  # noqa: E402
from tests.kit.regions import write_topology  # noqa: E402
from tests.kit.slow_disk import SlowDisk  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = (*FAULTS, *MORE_FAULTS)
    parser.add_argument("--faults", default=",".join(known), help=f"comma-separated, of {', '.join(known)}")
    parser.add_argument("--hold-s", type=float, default=10.0, help="how long each fault lasts")
    parser.add_argument("--rate", type=float, default=200.0, help="msg/s of the producer in each region")
    parser.add_argument("--delay-ms", type=float, default=40.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--slow-fsync-ms", type=float, default=200.0,
                        help="how long each fsync of the slow disk takes (bookie-disk-slow)")
    parser.add_argument("--keep-alive-ms", type=int, default=2000,
                        help="the brokers' keep_alive_interval_ms (link-silent is noticed after 2-3 of them: hold "
                             "the fault longer)")
    parser.add_argument("--no-audit", action="store_true", help="skip the Spark audit at the end")
    args = parser.parse_args()
    chosen = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        parser.error(f"unknown faults {unknown}; known: {list(known)}")
    why = netns.available()
    if why:
        print(f"skipped: {why}")
        return 2
    base = pathlib.Path(tempfile.mkdtemp(prefix="magnetar-chaos-"))
    rows, bad, topics = [], [], []
    with SmallDisk(base / "disk", size_bytes=128 << 20) as disk, SlowDisk(base / "slow-disk") as slow_disk:
        dep = start_netns_regions(["east", "west"], base, delay_ms=args.delay_ms, jitter_ms=args.jitter_ms,
                                  bookie_data_dirs={"east-bookie-1": disk.path / "data",
                                                    "east-bookie-2": slow_disk.mount},
                                  keep_alive_interval_ms=args.keep_alive_ms)
        dep.disk, dep.slow_disk = disk, slow_disk
        try:
            for fault in chosen:
                seen, actions = fault_actions(dep, "east", "west", slow_fsync_ms=args.slow_fsync_ms)
                start, end = actions[fault]
                result = run_fault(dep, fault, start=start, end=end, tmp=base / fault, rate=args.rate,
                                   duration_s=args.hold_s + 8.0, lead_s=3.0, hold_s=args.hold_s)
                rows.append(result.row)
                topics.append(result.topic)
                print(f"{fault}: {result.row}; replication delay p50 {result.p50_delay_ms} ms, "
                      f"p99 {result.p99_delay_ms} ms; {seen}", flush=True)
                if any(c.lost or c.duplicated or c.out_of_order for c in result.checks) or not all(seen.values()):
                    bad.append(fault)
            if topics and not args.no_audit:
                violations = audit(dep, topics, base / "audit")
                if violations:
                    bad.append(f"audit: {violations} violation(s), {base / 'audit'}")
        finally:
            slow_disk.unblock()  # a bookie blocked in an fsync of the mount cannot die before it is answered
            dep.stop()
    print("\n" + table(rows))
    if bad:
        print(f"\nFAILED: {bad}")
    return 1 if bad else 0


def audit(dep, topics: list[str], out: pathlib.Path) -> int:
    """The Spark audit of ``topics`` over the deployment's regions; prints its counts, returns its violations."""
    from spark.audit.runner import audit_deployment
    from spark.session import session

    spark = session("local[2]", "magnetar-chaos-audit")
    try:
        report = audit_deployment(spark, write_topology(dep.regions, dep.regions.names, out.parent / "topology.json"),
                                  topics=topics, out_dir=out, reader="source")
    finally:
        spark.stop()
    for topic in topics:
        print(f"audit {topic}: rows {report['rows']['by_topic'].get(topic)}")
    print(f"audit: {report['violations']} violation(s) ({out / 'report.json'})", flush=True)
    return int(report["violations"])


if __name__ == "__main__":
    raise SystemExit(main())
