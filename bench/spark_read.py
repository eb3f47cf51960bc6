"""Reading a topic with Spark through the Magnetar data source: rows per second, checked exactly.

    .venv/bin/python bench/spark_read.py                         # 1,000,000 messages, one region started here
    .venv/bin/python bench/spark_read.py -n 200000 --master 'local[2]'
    .venv/bin/python bench/spark_read.py --topology .magnetar/standalone/topology.json   # a running deployment

Without ``--topology`` the bench starts one region with the test kit (a ZooKeeper, ``--bookies`` bookies and one
broker whose ledgers roll over every ``--entries-per-ledger`` entries, so the topic spans several ledgers) and
stops it at the end. It then:

1. produces ``-n`` messages of ``--size`` bytes with pulsar-client (batching, ``--batch-max`` messages per
   batch; payload ``i`` starts with ``i``), a durable subscription holding every ledger, and unloads the topic
   (its last ledger is closed, so every entry is confirmed);
2. reads the topic with ``spark.read.format("magnetar")`` on ``--master`` (``local[2]``) ``--runs`` times;
   the first run is cold (Spark's Python workers start and connect, the JVM compiles the code that turns
   Arrow into rows as it goes: its figure is a fraction of the later ones), the median of the others is the
   warm figure (a long-lived Spark application's). A run is a timed Spark job counting the rows (every
   row of every split is read from the bookies, decoded and handed to Spark as Arrow: rows/s = rows / wall
   time of the job, planning included), then a verifying job computing the row count, the number of distinct
   message ids, the sums of CRC32s of the payloads and of ``ledger:entry:batchIndex``;
3. compares them with what the producer sent (CRC32 sums over its payloads and the ids its send callbacks
   returned), and prints rows/s, Spark partitions and ledgers (approximate count of distinct ledger ids).

The exit status is 1 when a run's figures differ from what was sent. This machine is shared: say so with the
figures, and look at the load average printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import threading
import time
import uuid
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAMESPACE = "bench/spark"


def _say(line: str) -> None:
    print(line, flush=True)


def _start_region(args: argparse.Namespace, tmp: pathlib.Path):
    from tests.kit.regions import start_regions
    from tests.kit.zookeeper import start_zookeeper

    zk = start_zookeeper(tmp / "zk")
    try:
        regions = start_regions(["bench"], tmp / "regions", zk, bookies=args.bookies, brokers=1,
                                managed_ledger_max_entries_per_ledger=args.entries_per_ledger)
    except BaseException:
        zk.process.cleanup()
        raise
    region = regions["bench"]

    def stop() -> None:
        regions.stop()
        zk.process.cleanup()
    return {"name": "bench", "pulsar": region.pulsar_url, "admin": region.http_url, "zk": region.zk_connect}, stop


def _region_of_topology(path: str):
    topo_path = pathlib.Path(path)
    topo = json.loads((topo_path / "topology.json" if topo_path.is_dir() else topo_path).read_text())
    name, entry = next(iter(topo["regions"].items()))
    broker = entry["brokers"][0]
    return {"name": name, "pulsar": broker["pulsar"], "admin": broker["http"], "zk": entry["zookeeper"]["connect"]}


def _payload(i: int, size: int) -> bytes:
    head = b"%09d:" % i
    return head + bytes(97 + (i + j) % 26 for j in range(max(0, size - len(head))))


def produce(region: dict, topic: str, args: argparse.Namespace) -> dict:
    """Sends ``args.n`` messages; returns the CRC32 sums of payloads and ids the broker acknowledged."""
    import pulsar

    from magnetar.admin_client import AdminClient, AdminError

    admin = AdminClient(region["admin"])
    tenant = NAMESPACE.split("/")[0]
    try:
        admin.request("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": [region["name"]], "adminRoles": []})
    except AdminError as e:
        if e.status != 409:
            raise
    try:
        admin.request("PUT", f"/admin/v2/namespaces/{NAMESPACE}", {"replication_clusters": [region["name"]]})
    except AdminError as e:
        if e.status != 409:
            raise
    client = pulsar.Client(region["pulsar"], operation_timeout_seconds=60,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    # Brokers keep a ledger no durable cursor has passed: this subscription holds the whole topic.
    client.subscribe(topic, "bench-hold", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, producer_name="bench", batching_enabled=True,
                                      batching_max_messages=args.batch_max, batching_max_publish_delay_ms=5,
                                      batching_max_allowed_size_in_bytes=4 * 1024 * 1024,
                                      block_if_queue_full=True, max_pending_messages=20_000, send_timeout_millis=0)
    lock = threading.Lock()
    sums = {"acked": 0, "ids": 0, "failed": 0}
    done = threading.Event()

    def callback(res, msg_id) -> None:
        key = b"%d:%d:%d" % (msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())
        with lock:
            if res != pulsar.Result.Ok:
                sums["failed"] += 1
            sums["acked"] += 1
            sums["ids"] += zlib.crc32(key)
            if sums["acked"] == args.n:
                done.set()

    payload_crc = 0
    started = time.monotonic()
    for i in range(args.n):
        data = _payload(i, args.size)
        payload_crc += zlib.crc32(data)
        producer.send_async(data, callback)
        if i and i % 200_000 == 0:
            _say(f"  produced {i:,} ({i / (time.monotonic() - started):,.0f} msg/s)")
    producer.flush()
    if not done.wait(600):
        raise SystemExit(f"only {sums['acked']:,} of {args.n:,} sends were acknowledged")
    producer.close()
    client.close()
    elapsed = time.monotonic() - started
    if sums["failed"]:
        raise SystemExit(f"{sums['failed']:,} sends failed")
    _say(f"produced {args.n:,} messages in {elapsed:.1f} s ({args.n / elapsed:,.0f} msg/s)")
    admin.request("PUT", f"/admin/v2/persistent/{topic.split('://', 1)[1]}/unload")
    return {"count": args.n, "payload_crc": payload_crc, "id_crc": sums["ids"]}


def read(spark, region: dict, topic: str, args: argparse.Namespace) -> dict:
    """One timed read (a Spark job counting every row the source yields), then one verifying job."""
    from pyspark.sql import functions as F

    reader = (spark.read.format("magnetar").option("topic", topic)
              .option("maxEntriesPerSplit", args.max_entries_per_split))
    if args.topology:
        reader = reader.option("topology", args.topology).option("regions", region["name"])
    else:
        reader = reader.option("admin.url", region["admin"]).option("metadata.url", region["zk"])
    df = reader.load()
    partitions = df.rdd.getNumPartitions()
    started = time.monotonic()
    count = df.count()
    read_s = time.monotonic() - started
    started = time.monotonic()
    ids = F.concat_ws(":", "__ledgerId", "__entryId", "__batchIndex")
    row = df.agg(F.count(F.lit(1)).alias("count"), F.sum(F.crc32("value")).alias("payload_crc"),
                 F.sum(F.crc32(ids)).alias("id_crc"), F.countDistinct("__messageId").alias("distinct_ids"),
                 F.approx_count_distinct("__ledgerId").alias("ledgers")).collect()[0]
    verify_s = time.monotonic() - started
    return {**row.asDict(), "read_count": count, "partitions": partitions, "seconds": read_s,
            "verify_seconds": verify_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="messages to produce and read")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--batch-max", type=int, default=500, help="pulsar-client batching_max_messages")
    parser.add_argument("--entries-per-ledger", type=int, default=200,
                        help="the started region's managed_ledger_max_entries_per_ledger")
    parser.add_argument("--bookies", type=int, default=2)
    parser.add_argument("--max-entries-per-split", type=int, default=5000, help="the source's maxEntriesPerSplit")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=5, help="reads; the first is cold, the others give the warm "
                        "figure (their median)")
    parser.add_argument("--topology", help="a running deployment's topology.json (or data dir): its first region")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="magnetar-bench-spark-")
    stop = None
    try:
        if args.topology:
            region = _region_of_topology(args.topology)
        else:
            _say(f"starting a region ({args.bookies} bookies, ledgers of {args.entries_per_ledger} entries)")
            region, stop = _start_region(args, pathlib.Path(tmp.name))
        topic = f"persistent://{NAMESPACE}/read-{uuid.uuid4().hex[:8]}"
        expected = produce(region, topic, args)

        from spark.session import session

        # Spark's Python workers import Magnetar's modules: measure them as an installation runs them, with their
        # bytecode cached (some shells set PYTHONDONTWRITEBYTECODE, and every worker then compiles them again).
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        sys.dont_write_bytecode = False
        started = time.monotonic()
        spark = session(args.master, "bench-spark-read")
        _say(f"Spark session on {args.master} in {time.monotonic() - started:.1f} s")
        runs = []
        try:
            for run in range(1, args.runs + 1):
                got = read(spark, region, topic, args)
                ok = (got["count"] == got["read_count"] == expected["count"] == got["distinct_ids"]
                      and got["payload_crc"] == expected["payload_crc"] and got["id_crc"] == expected["id_crc"])
                got.update(run=run, ok=ok, rows_per_s=got["count"] / got["seconds"])
                runs.append(got)
                _say(f"run {run}: read {got['read_count']:,} rows in {got['seconds']:.2f} s = {got['rows_per_s']:,.0f} "
                     f"rows/s; {got['partitions']} Spark partitions, {got['ledgers']} ledgers; verified in "
                     f"{got['verify_seconds']:.2f} s: "
                     f"{'count, ids and payload CRCs match' if ok else f'MISMATCH: expected {expected}, got {got}'}")
        finally:
            spark.stop()
    finally:
        if stop is not None:
            stop()
        tmp.cleanup()
    if runs:
        warm = sorted(r["rows_per_s"] for r in runs[1:])
        _say(f"cold (run 1): {runs[0]['rows_per_s']:,.0f} rows/s" + (
            f"; warm (median of runs 2-{len(runs)}): {warm[len(warm) // 2]:,.0f} rows/s" if warm else ""))
    load = os.getloadavg()
    _say(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores (a shared machine: "
         "other work runs beside the bench)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"args": vars(args), "expected": expected, "runs": runs,
                                                       "load_average": load}, indent=2))
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
