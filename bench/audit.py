"""The consistency audit's speed: N messages × 2 regions on ``local[2]``, for several N.

    .venv/bin/python bench/audit.py                                   # 100k and 1M messages (synthetic Parquet)
    .venv/bin/python bench/audit.py --messages 100000,1000000,5000000 --json out.json
    .venv/bin/python bench/audit.py --topology .magnetar/demo --namespace acme/bench   # a live deployment

**Synthetic** (default): for each N, Spark writes N messages × 2 regions as Parquet with the data source's
columns (one row per copy: the origin copy and its replicated copy, ``__replicatedFrom`` set, the replicator's
``__magnetar.repl.source_position`` property added, half the messages published in each region, 100 producers
per region, batches of 10 messages sharing an entry, a 100-byte payload, a key and a property), outside the
timing. Then, timed: reading the Parquet back (a full scan of the input: what reading it costs), and the whole audit
(:func:`spark.audit.run_audit`: every check, the delay percentiles, the Parquet of violations, the report).
A healthy input: the audit must report 0 violations, which the bench checks.

**Live** (``--topology`` + ``--namespace``): the same two timings over the namespace's messages in every region,
read by :func:`spark.audit.load` (the Magnetar data source when installed, else through the brokers).

Rows/s is 2N (copies) over the audit's time. Spark's session start and a first, untimed audit of ``--warmup``
messages (the JVM's class loading and code generation) are not counted.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EAST, WEST = "us-east", "eu-west"
TOPIC = "persistent://bench/audit/orders"
PRODUCERS = 100
BATCH = 10


def synthetic(spark: Any, messages: int, path: pathlib.Path) -> None:
    """N messages × 2 regions as Parquet with the contract's columns (see the module docstring)."""
    from pyspark.sql import functions as F

    from spark.audit import columns as C

    m = spark.range(messages).select(
        F.col("id"),
        F.when(F.col("id") % 2 == 0, F.lit(EAST)).otherwise(F.lit(WEST)).alias("origin"),
    ).select(
        "id", "origin",
        F.concat(F.lit("p-"), F.col("origin"), F.lit("-"), ((F.col("id") / 2).cast("long") % PRODUCERS).cast("string"))
        .alias("producer"),
        (F.col("id") / (2 * PRODUCERS)).cast("long").alias("seq"),
        (F.col("id") / 2).cast("long").alias("n"),  # the message's rank among its origin's messages
    )
    # Within a region, entries in publish order: origin copies first, then replicated ones (another ledger).
    copies = []
    for region in (EAST, WEST):
        local = F.col("origin") == F.lit(region)
        copies.append(m.select(
            F.expr("cast(repeat(cast(id as string), 12) as binary)").substr(1, 100).alias(C.VALUE),
            F.concat(F.lit("k"), (F.col("id") % 1000).cast("string")).alias(C.KEY),
            F.lit(TOPIC).alias(C.TOPIC),
            F.lit(b"\x08\x01").alias(C.MESSAGE_ID),
            F.timestamp_millis(F.lit(1_790_000_000_000) + F.col("n")).alias(C.PUBLISH_TIME),
            F.lit(None).cast("timestamp").alias(C.EVENT_TIME),
            F.when(local, F.create_map(F.lit("i"), F.col("id").cast("string")))
            .otherwise(F.create_map(F.lit("i"), F.col("id").cast("string"),
                                    F.lit("__magnetar.repl.source_position"), F.lit("1:1"))).alias(C.PROPERTIES),
            F.lit(region).alias(C.REGION),
            F.col("producer").alias(C.PRODUCER_NAME),
            F.col("seq").alias(C.SEQUENCE_ID),
            F.when(local, F.lit(None).cast("string")).otherwise(F.col("origin")).alias(C.REPLICATED_FROM),
            F.when(local, F.lit(1)).otherwise(F.lit(2)).cast("long").alias(C.LEDGER_ID),
            (F.col("n") / BATCH).cast("long").alias(C.ENTRY_ID),
            (F.col("n") % BATCH).cast("int").alias(C.BATCH_INDEX),
        ))
    copies[0].unionByName(copies[1]).write.mode("overwrite").parquet(str(path))


def timed_audit(spark: Any, df: Any, expected: dict, topics: list[str], out: pathlib.Path) -> dict[str, Any]:
    from spark.audit import run_audit

    from pyspark.sql import functions as F

    from spark.audit import columns as C

    started = time.perf_counter()  # a full scan: every copy's payload and identity decoded
    scan = df.agg(F.count(F.lit(1)).alias("rows"), F.sum(F.length(C.VALUE)), F.max(C.SEQUENCE_ID),
                  F.count_distinct(C.REGION)).collect()[0]
    rows = scan["rows"]
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    regions = sorted({r for rs in expected.values() for r in rs})
    report = run_audit(df, expected, topics=topics, regions=regions, out_dir=out, subscriptions=None)
    audit_s = time.perf_counter() - started
    return {"rows": rows, "read_s": round(read_s, 2), "read_rows_per_s": round(rows / read_s),
            "audit_s": round(audit_s, 2), "audit_rows_per_s": round(rows / audit_s),
            "violations": report["violations"], "messages": report["messages"]["total"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", default="100000,1000000", help="Comma-separated N (messages per run).")
    parser.add_argument("--warmup", type=int, default=10_000, help="Messages of an untimed first audit (the JVM's "
                        "warm-up: class loading, code generation); 0 for none.")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--topology", help="A live deployment's topology.json (or data dir) instead of Parquet.")
    parser.add_argument("--namespace", help="With --topology: the namespace to audit.")
    parser.add_argument("--work-dir", help="Where the Parquet and the reports go (default: a temporary dir).")
    parser.add_argument("--json", help="Write the results here.")
    args = parser.parse_args()

    from spark.audit import load, session
    from spark.audit.policies import admin_clients, expected_regions, namespace_topics
    from spark.audit.topology import read_topology

    work = pathlib.Path(args.work_dir) if args.work_dir else pathlib.Path(tempfile.mkdtemp(prefix="bench-audit-"))
    spark = session(master=args.master, app_name="bench-audit", conf={"spark.driver.memory": args.driver_memory})
    results: list[dict[str, Any]] = []
    try:
        if args.topology:
            if not args.namespace:
                parser.error("--topology needs --namespace")
            topology = read_topology(args.topology)
            clients = admin_clients(topology)
            topics = namespace_topics(clients, args.namespace)
            expected = expected_regions(clients, topics)
            df = load(spark, topology, topics)
            result = {"input": "live", **timed_audit(spark, df, expected, topics, work / "live")}
            results.append(result)
            print(json.dumps(result))
        else:
            if args.warmup:
                synthetic(spark, args.warmup, work / "warmup")
                timed_audit(spark, spark.read.parquet(str(work / "warmup")), {TOPIC: [EAST, WEST]}, [TOPIC],
                            work / "report-warmup")
            for n in [int(x) for x in args.messages.split(",") if x]:
                path = work / f"input-{n}"
                started = time.perf_counter()
                synthetic(spark, n, path)
                generate_s = time.perf_counter() - started
                df = spark.read.parquet(str(path))
                result = {"input": "parquet", "messages": n, "generate_s": round(generate_s, 2),
                          **timed_audit(spark, df, {TOPIC: [EAST, WEST]}, [TOPIC], work / f"report-{n}")}
                assert result["violations"] == 0 and result["rows"] == 2 * n, result
                results.append(result)
                print(json.dumps(result), flush=True)
                shutil.rmtree(path, ignore_errors=True)
    finally:
        spark.stop()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'messages':>10} {'rows':>10} {'read s':>8} {'read rows/s':>12} {'audit s':>8} {'audit rows/s':>13}")
    for r in results:
        print(f"{r['messages']:>10,} {r['rows']:>10,} {r['read_s']:>8} {r['read_rows_per_s']:>12,} "
              f"{r['audit_s']:>8} {r['audit_rows_per_s']:>13,}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
