"""The consistency checks as DataFrame transformations: no I/O, no Spark action; :mod:`spark.audit.job` runs them.

Theory of operation
-------------------

Input: one DataFrame with every region's copy of every message (the columns of :mod:`spark.audit.columns`).

**Identity.** A message is ``(topic, origin, producer, sequence id, batch index)``, where the origin is the
region it was first published in: ``__replicatedFrom`` for a replicated copy, else the copy's own ``__region``.
A replicator forwards each entry as stored (producer name, sequence id, batch layout), so every copy of one
publish carries the same identity in every region, and no two publishes share one while producer names are
unique or deduplication is on (the same premise Pulsar's deduplication rests on). ``topic`` is the partition's
own name for a partitioned topic, so identities never cross partitions.

**Expected regions.** A message belongs in its topic's replication clusters (an input: the namespace's
``replication_clusters`` or the topic's override). When the input carries ``__replicateTo`` (the message's own
``replicate_to``), a message that names clusters belongs in those of them that are replication clusters, plus
its origin; ``__local__`` (``disable_replication``) keeps it in its origin.

The checks, each a DataFrame of violations with ``topic``, ``origin``, ``region`` (where the fault shows),
``producer``, ``seq`` and ``batch``:

* ``missing``: an expected region has no copy. A remote region's copy is only missing once the origin's
  replicator towards it has passed the message (its cursor, read before the input); before that it is in
  flight, counted apart and not a violation. A message absent from its own origin is always missing.
* ``duplicate``: a region holds a message more than once (``copies``, first and last position).
* ``order``: within one region, the copies of one (origin, producer) in entry order (ledger, entry, batch
  index) must have increasing (sequence id, batch index); a row is a message stored after one with a higher
  id. Only each message's first copy in a region takes part, so a late duplicate is a duplicate, not also an
  order violation.
* ``payload_mismatch``: copies differ in the hash of payload, key and properties (``xxhash64``; the
  replicator's own ``__magnetar.repl.*`` properties left out). The origin's copy is the reference (else the
  smallest hash); each region whose copy differs from it is a row.
* ``stray``: a copy in a region outside the message's expected regions.

Delays: for each message, each remote copy's arrival minus the origin copy's arrival, per direction
(origin → region). Arrival is the broker's time (``__brokerPublishTime``: when that region's broker stored
the copy, from its broker entry metadata) when both copies have one, else ``__publishTime`` (the producer's
time, which a replicated copy keeps from its origin: such a delay is 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from pyspark.sql import Column, DataFrame, GroupedData, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType

from . import columns as C
from .errors import AuditInputError

__all__ = ["CHECKS", "ID", "AuditFrames", "build", "delay_stats", "delay_tables", "expected_map", "pack", "prepare"]

ID = ["topic", "origin", "producer", "seq", "batch"]
CHECKS = ("missing", "duplicate", "order", "payload_mismatch", "stray")
_PARTITION_SUFFIX = r"-partition-[0-9]+$"


@dataclass(frozen=True)
class AuditFrames:
    """The audit as lazy DataFrames (nothing computed yet).

    Attributes:
        prepared: one row per copy: identity, ``region``, position, ``arrival_us``, ``hash``, ``rt``.
        per_copy: one row per (message, region): ``copies``, ``first_pos``, ``last_pos``, hashes, arrival.
        per_message: one row per message: ``copies`` (array of per-region structs), ``expected``, ``present``.
        violations: check name -> DataFrame of violations.
        delays: one row per remote copy: ``topic``, ``origin``, ``region``, ``delay_ms``.
        arrival_column: the input column arrival times came from.
        in_flight: absent copies the replicator had not yet delivered (rows as ``missing``'s): not violations.
    """

    prepared: DataFrame
    per_copy: DataFrame
    per_message: DataFrame
    violations: dict[str, DataFrame]
    delays: DataFrame
    arrival_column: str
    in_flight: DataFrame


def _payload_columns(df: DataFrame) -> list[str]:
    """``value``, or the schema's fields of a JSON/Avro topic: every column that is not a ``__`` one."""
    if C.VALUE in df.columns:
        return [C.VALUE]
    found = [c for c in df.columns if not c.startswith("__")]
    if not found:
        raise AuditInputError("the input has no payload: neither a value column nor schema fields")
    return found


def prepare(df: DataFrame) -> tuple[DataFrame, str]:
    """The columns the checks need, one row per copy; returns it with the name of the arrival-time column.

    Raises:
        AuditInputError: a required column is missing.
    """
    missing = [c for c in C.missing_columns(df.columns) if c != C.VALUE]
    if missing:
        raise AuditInputError(f"the input lacks the column(s) {', '.join(missing)} (see spark.audit.columns)")
    arrival = C.BROKER_PUBLISH_TIME if C.BROKER_PUBLISH_TIME in df.columns else C.PUBLISH_TIME
    arrival_col = F.col(arrival) if arrival == C.PUBLISH_TIME else F.coalesce(F.col(arrival), F.col(C.PUBLISH_TIME))
    properties = F.array_sort(F.map_entries(F.map_filter(
        F.col(C.PROPERTIES), lambda k, _v: ~k.startswith(C.REPLICATOR_PROPERTY_PREFIX))))
    digest = F.xxhash64(*[F.col(c) for c in _payload_columns(df)], F.col(C.KEY), properties)
    # Unset is null (the brokers' reader) or empty (the data source): both mean "every replication cluster".
    rt = F.col(C.REPLICATE_TO)
    optional = [F.when(F.size(rt) > 0, rt).alias("rt")] if C.REPLICATE_TO in df.columns else []
    # A position packed in one long, as the replicator's deduplication packs origin positions (ledger ids and
    # entry ids stay below 2**31 and 2**32): aggregating plain longs keeps Spark on its hash aggregation.
    packed = F.shiftleft(F.col(C.LEDGER_ID).cast("long"), 32).bitwiseOR(F.col(C.ENTRY_ID).cast("long"))
    prepared = df.select(
        F.col(C.TOPIC).alias("topic"),
        F.col(C.REGION).alias("region"),
        F.coalesce(F.col(C.REPLICATED_FROM), F.col(C.REGION)).alias("origin"),
        F.col(C.PRODUCER_NAME).alias("producer"),
        F.col(C.SEQUENCE_ID).cast("long").alias("seq"),
        F.col(C.BATCH_INDEX).cast("int").alias("batch"),
        packed.alias("pos"),
        F.unix_micros(arrival_col).alias("arrival_us"),
        (F.unix_micros(F.col(C.BROKER_PUBLISH_TIME)) if arrival == C.BROKER_PUBLISH_TIME
         else F.lit(None).cast("long")).alias("broker_us"),
        F.unix_micros(F.col(C.PUBLISH_TIME)).alias("publish_us"),
        digest.alias("hash"),
        *optional,
    )
    return prepared, arrival


def expected_map(expected: Mapping[str, Sequence[str]]) -> Column:
    """The topic -> expected regions input as a literal map column, keyed by base topic (a partitioned
    topic's name stands for its partitions).

    Raises:
        AuditInputError: a topic with no region.
    """
    by_base: dict[str, set[str]] = {}
    for topic, regions in expected.items():
        if not regions:
            raise AuditInputError(f"no expected region given for {topic}")
        by_base.setdefault(re.sub(_PARTITION_SUFFIX, "", topic), set()).update(regions)
    pairs: list[Column] = []
    for base, regions in sorted(by_base.items()):
        pairs += [F.lit(base), F.array(*[F.lit(r) for r in sorted(regions)])]
    if not pairs:
        return F.create_map().cast(MapType(StringType(), ArrayType(StringType())))
    return F.create_map(*pairs)


def _position(packed: Column, batch: Column) -> Column:
    return F.struct(F.shiftright(packed, 32).alias("ledger"), packed.bitwiseAND(F.lit(0xFFFFFFFF)).alias("entry"),
                    batch.alias("batch"))


def _replicate_to(has_rt: bool) -> list[Column]:
    """The message's replicate_to, the same in every copy (``collect_set``, not ``first``, so that the
    aggregation stays hash-based)."""
    return [F.get(F.collect_set("rt"), 0).alias("rt")] if has_rt else []


def _per_copy(prepared: DataFrame) -> DataFrame:
    has_rt = "rt" in prepared.columns
    grouped = prepared.groupBy(*ID, "region").agg(
        F.count(F.lit(1)).alias("copies"),
        F.min("pos").alias("first_key"),
        F.max("pos").alias("last_key"),
        F.min("hash").alias("hash_min"),
        F.max("hash").alias("hash_max"),
        F.min("arrival_us").alias("arrival_us"),
        F.min("broker_us").alias("broker_us"),
        F.min("publish_us").alias("publish_us"),
        *_replicate_to(has_rt),
    )
    return grouped.select(
        *ID, "region", "copies", "first_key", _position(F.col("first_key"), F.col("batch")).alias("first_pos"),
        _position(F.col("last_key"), F.col("batch")).alias("last_pos"), "hash_min", "hash_max", "arrival_us",
        "broker_us", "publish_us", F.col("rt") if has_rt else F.lit(None).cast(ArrayType(StringType())).alias("rt"))


def _expected_regions(topic_regions: Column, rt: Column, origin: Column) -> Column:
    """The topic's regions, narrowed by the message's own ``replicate_to`` when it names clusters."""
    named = F.array_union(F.filter(rt, lambda c: c != F.lit(C.LOCAL_ONLY)), F.array(origin))
    narrowed = F.array_intersect(topic_regions, named)
    return F.when(rt.isNull() | (F.size(rt) == 0), topic_regions).otherwise(narrowed)


def _per_message(per_copy: DataFrame, expected: Column, default_regions: Sequence[str], has_rt: bool) -> DataFrame:
    copy = F.struct(F.col("region"), F.col("hash_min"), F.col("hash_max"), F.col("arrival_us"), F.col("first_key"),
                    F.col("broker_us"), F.col("publish_us"))
    default = F.array(*[F.lit(r) for r in sorted(set(default_regions))]).cast(ArrayType(StringType()))
    grouped = per_copy.groupBy(*ID).agg(F.collect_list(copy).alias("copies"), *_replicate_to(has_rt))
    if not has_rt:
        grouped = grouped.withColumn("rt", F.lit(None).cast(ArrayType(StringType())))
    topic_regions = F.coalesce(F.try_element_at(expected, F.regexp_replace("topic", _PARTITION_SUFFIX, "")), default)
    return grouped.select(
        *ID, "copies", "rt",
        _expected_regions(topic_regions, F.col("rt"), F.col("origin")).alias("expected"),
        F.transform("copies", lambda c: c["region"]).alias("present"),
    )


def pack(ledger_id: int, entry_id: int) -> int:
    """A position as ``prepare`` packs it (an entry id of -1, "before the ledger's first entry", included)."""
    return ledger_id * (1 << 32) + entry_id


def _absent(per_message: DataFrame, replicated_up_to: Mapping[tuple[str, str, str], int]) -> DataFrame:
    """Every (message, expected region without a copy), with ``in_flight``: the region is a remote one and
    the origin's replicator towards it had not yet passed the message's origin copy when it was looked at
    (``replicated_up_to``: (topic, origin, region) -> packed mark-delete position of that replicator's cursor).
    A message absent from its own origin, or from a region whose replicator passed it, is missing for good."""
    rows = per_message.select(*ID, "copies", F.explode(F.array_except("expected", "present")).alias("region"),
                              F.array_sort("present").alias("present_in"))
    origin_key = _origin_copy(F.col("copies"), F.col("origin"))["first_key"]
    if replicated_up_to:
        pairs: list[Column] = []
        for (topic, origin, region), key in sorted(replicated_up_to.items()):
            pairs += [F.lit(f"{topic}|{origin}|{region}"), F.lit(int(key)).cast("long")]
        watermark = F.try_element_at(F.create_map(*pairs), F.concat_ws("|", "topic", "origin", "region"))
        in_flight = (F.col("region") != F.col("origin")) & origin_key.isNotNull() & watermark.isNotNull() \
            & (origin_key > watermark)
    else:
        in_flight = F.lit(False)
    return rows.select(*ID, "region", "present_in", in_flight.alias("in_flight"))


def _missing(absent: DataFrame) -> DataFrame:
    return absent.where(~F.col("in_flight")).drop("in_flight")


def _stray(per_message: DataFrame) -> DataFrame:
    return per_message.select(*ID, F.explode(F.array_except("present", "expected")).alias("region"),
                              F.array_sort("expected").alias("expected_regions"))


def _duplicate(per_copy: DataFrame) -> DataFrame:
    return per_copy.where(F.col("copies") > 1).select(*ID, "region", "copies", "first_pos", "last_pos")


def _order(per_copy: DataFrame) -> DataFrame:
    window = Window.partitionBy("topic", "region", "origin", "producer").orderBy("first_key", "batch")
    previous = F.lag(F.struct(F.col("seq"), F.col("batch"), F.col("first_pos").alias("pos"))).over(window)
    with_previous = per_copy.select(*ID, "region", "first_pos", previous.alias("prev"))
    later_but_lower = F.struct(F.col("prev.seq"), F.col("prev.batch")) > F.struct(F.col("seq"), F.col("batch"))
    return with_previous.where(F.col("prev").isNotNull() & later_but_lower).select(
        *ID, "region", F.col("first_pos").alias("position"), F.col("prev.seq").alias("previous_seq"),
        F.col("prev.batch").alias("previous_batch"), F.col("prev.pos").alias("previous_position"))


def _origin_copy(copies: Column, origin: Column) -> Column:
    """The origin region's copy struct, or null when the origin holds none."""
    return F.get(F.filter(copies, lambda c: c["region"] == origin), 0)


def _payload_mismatch(per_message: DataFrame) -> DataFrame:
    copies, origin = F.col("copies"), F.col("origin")
    differs = F.array_min(F.transform(copies, lambda c: c["hash_min"])) != \
        F.array_max(F.transform(copies, lambda c: c["hash_max"]))
    at_origin = _origin_copy(copies, origin)
    reference = F.coalesce(at_origin["hash_min"], F.array_min(F.transform(copies, lambda c: c["hash_min"])))
    candidates = per_message.where(differs).select(
        *ID, "copies", reference.alias("reference_hash"),
        F.when(at_origin.isNotNull(), origin).alias("reference_region"))
    bad = F.filter("copies", lambda c: (c["hash_min"] != F.col("reference_hash"))
                   | (c["hash_max"] != F.col("reference_hash")))
    exploded = candidates.select(*ID, "reference_hash", "reference_region", F.explode(bad).alias("c"))
    return exploded.select(
        *ID, F.col("c.region").alias("region"),
        F.when(F.col("c.hash_min") != F.col("reference_hash"), F.col("c.hash_min"))
        .otherwise(F.col("c.hash_max")).alias("hash"),
        "reference_hash", "reference_region")


def _delays(per_message: DataFrame) -> DataFrame:
    copies, origin = F.col("copies"), F.col("origin")
    at_origin = _origin_copy(copies, origin)
    remote = F.filter(copies, lambda c: c["region"] != origin)
    pairs = per_message.where(at_origin.isNotNull()).select(
        "topic", "origin", at_origin.alias("o"), F.explode(remote).alias("c"))
    # the brokers' clocks when both copies carry one (remote broker time - origin broker time), else the
    # producer's publish time (which the copy keeps: 0), never one of each
    both = F.col("c.broker_us").isNotNull() & F.col("o.broker_us").isNotNull()
    delay_us = F.when(both, F.col("c.broker_us") - F.col("o.broker_us")) \
        .otherwise(F.col("c.publish_us") - F.col("o.publish_us"))
    return pairs.select("topic", "origin", F.col("c.region").alias("region"), (delay_us / 1000.0).alias("delay_ms"))


def delay_stats(delays: DataFrame, by: Sequence[str]) -> DataFrame:
    """Per group: copies measured, p50/p99 (``percentile_approx``), min and max delay in milliseconds."""
    return _delay_aggregates(delays.groupBy(*by), by)


def _delay_aggregates(grouped: GroupedData, by: Sequence[str], extra: Optional[Mapping[str, Column]] = None
                      ) -> DataFrame:
    extra = dict(extra or {})
    quantiles = F.percentile_approx("delay_ms", [0.5, 0.99], 10_000)
    return grouped.agg(F.count(F.lit(1)).alias("count"), quantiles.alias("q"), F.min("delay_ms").alias("min_ms"),
                       F.max("delay_ms").alias("max_ms"), *[c.alias(name) for name, c in extra.items()]) \
        .select(*by, "count", F.col("q")[0].alias("p50_ms"), F.col("q")[1].alias("p99_ms"), "min_ms", "max_ms",
                *extra)


def delay_tables(delays: DataFrame) -> tuple[list[dict], list[dict]]:
    """:func:`delay_stats` by direction (``origin``, ``region``) and by topic and direction, computed in one
    job (grouping sets); returns the rows of each as dicts."""
    grouped = delays.groupingSets([["origin", "region"], ["topic", "origin", "region"]], "topic", "origin", "region")
    stats = _delay_aggregates(grouped, ["topic", "origin", "region"], {"by_direction": F.grouping("topic")})
    by_direction: list[dict] = []
    by_topic: list[dict] = []
    for row in stats.collect():
        found = row.asDict()
        if found.pop("by_direction"):
            del found["topic"]
            by_direction.append(found)
        else:
            by_topic.append(found)
    return by_direction, by_topic


def build(df: DataFrame, expected: Mapping[str, Sequence[str]], *,
          default_regions: Optional[Sequence[str]] = None,
          replicated_up_to: Optional[Mapping[tuple[str, str, str], int]] = None) -> AuditFrames:
    """Every check over ``df`` as lazy DataFrames.

    Args:
        df: every region's copies (the contract's columns).
        expected: topic (or partitioned topic) -> the regions its messages belong in.
        default_regions: for a topic ``expected`` does not name (default: the union of ``expected``'s regions).
        replicated_up_to: (topic, origin, region) -> :func:`pack`-ed mark-delete position of the origin's
            replicator cursor towards the region, read before the input: an absent copy beyond it is in
            flight, not missing (none given: every absent copy is missing).

    Raises:
        AuditInputError: a missing column, or no region to expect anything in.
    """
    regions = list(default_regions) if default_regions is not None else \
        sorted({r for rs in expected.values() for r in rs})
    if not regions:
        raise AuditInputError("no expected regions: give the topics' replication clusters or default regions")
    prepared, arrival = prepare(df)
    per_copy = _per_copy(prepared)
    per_message = _per_message(per_copy, expected_map(expected), regions, C.REPLICATE_TO in df.columns)
    absent = _absent(per_message, replicated_up_to or {})
    violations = {
        "missing": _missing(absent),
        "duplicate": _duplicate(per_copy),
        "order": _order(per_copy),
        "payload_mismatch": _payload_mismatch(per_message),
        "stray": _stray(per_message),
    }
    in_flight = absent.where(F.col("in_flight")).drop("in_flight")
    return AuditFrames(prepared, per_copy, per_message, violations, _delays(per_message), arrival, in_flight)
