"""Planning a read: which regions and topics, which ledgers, and the splits (driver side of the source).

A region's admin API names it (its cluster name, unless the ``region`` option does), says how many
partitions a topic has and lists a namespace's topics for ``topicsPattern``. Its ZooKeeper holds each
topic's managed-ledger record (the ledger list, ``config_store.managed_ledgers``) and each ledger's metadata;
the bookies tell an open ledger's last add confirmed. Nothing here goes through (or loads) a broker's topics.

Ledger extents: a ledger the managed-ledger record lists with an entry count was closed at a rollover, so its
last entry is known without asking; any other (the open one, or one whose count was not recorded) is opened
without recovery, which gives its last entry when closed, else the LAC the bookies report.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Optional

from bookie.client import LedgerNotFoundError
from bookie.errors import BookieError
from config_store import MetadataError
from magnetar.admin_client import AdminClient, AdminCredentials, AdminError
from magnetar.topic_name import TopicName

from .errors import SourceOptionError, SourceUnavailableError
from .offsets import EARLIEST, OffsetSpec, Position, RegionOffsets
from .options import RegionSpec, SourceOptions, TopicSelection, pattern_matches
from .planning import LedgerExtent, Split, latest_position, plan_topic
from .runtime import RegionConnection, runtime
from .values import ValueSchema, parse_schema_answer

__all__ = ["Region", "plan_batch", "initial_offsets", "latest_offsets", "plan_stream", "value_schema"]

log = logging.getLogger("spark.source")

_ADMIN_TIMEOUT_S = 30.0


@dataclass
class Region:
    """A region being read: how to reach it and its name (resolved once)."""

    spec: RegionSpec
    name: str

    @classmethod
    def resolve(cls, spec: RegionSpec) -> "Region":
        name = spec.name or _cluster_name(spec)
        return cls(spec, name)

    def admin(self) -> AdminClient:
        return _admin(self.spec)

    def topics(self, selection: TopicSelection) -> list[str]:
        """The topics (partitions of partitioned topics) to read, sorted."""
        admin = self.admin()
        if selection.pattern is not None:
            names = _admin_get(self.spec, admin, f"/admin/v2/namespaces/{selection.namespace}/topics",
                               "topicsPattern")
            found = {str(TopicName.parse(n)) for n in names or [] if str(n).startswith("persistent://")}
            return sorted(t for t in found if pattern_matches(selection.pattern, t))
        out: list[str] = []
        for topic in selection.topics:
            name = TopicName.parse(topic)
            if name.is_partition:
                out.append(topic)
                continue
            meta = _admin_get(self.spec, admin, f"/admin/v2/{name.rest_path}/partitions", "topic") or {}
            count = int(meta.get("partitions", 0))
            out += [name.partition_name(i) for i in range(count)] if count > 0 else [topic]
        return sorted(dict.fromkeys(out))


def _admin(spec: RegionSpec) -> AdminClient:
    credentials = AdminCredentials(token=spec.token, tls_trust_certs_file=spec.tls_trust_certs_file) \
        if spec.explicit else None
    try:
        return AdminClient(spec.admin_url, timeout_s=_ADMIN_TIMEOUT_S, credentials=credentials)
    except AdminError as e:
        raise SourceOptionError("tls.trust.certs.file", str(e)) from None


def _admin_get(spec: RegionSpec, admin: AdminClient, path: str, option: str):
    try:
        return admin.get(path)
    except AdminError as e:
        if e.status == 0 or e.status >= 500:
            raise SourceUnavailableError(f"the admin API at {spec.admin_url} did not answer GET {path}: {e}") from None
        if e.status in (401, 403):
            raise SourceOptionError("auth.token", f"{spec.admin_url} refused GET {path}: {e}") from None
        raise SourceOptionError(option, f"{spec.admin_url} answered GET {path}: {e}") from None


def _topic_schema(region: Region, admin: AdminClient, base: TopicName) -> Optional[ValueSchema]:
    path = f"/admin/v2/schemas/{base.tenant}/{base.namespace_portion}/{base.encoded_local_name}/schema"
    try:
        answer = admin.get(path)
    except AdminError as e:
        if e.status == 404:
            return None  # no schema: bytes
        return _admin_get(region.spec, admin, path, "topic")  # raises the mapped error
    return parse_schema_answer(answer if isinstance(answer, dict) else None)


def value_schema(options: SourceOptions) -> Optional[ValueSchema]:
    """The JSON/Avro schema whose fields the read returns as columns; None: the ``value`` bytes.

    Asked of the first region's admin API (a deployment's schema registry is global). Every topic read must
    have that same schema; topics with different schemas, or some with and some without, are refused (read
    them separately, or with ``decodeSchema`` false).
    """
    if not options.decode_schema:
        return None
    region = resolve_regions(options)[0]
    admin = region.admin()
    bases = sorted({str(TopicName.parse(t).base) for t in region.topics(options.selection)})
    found = {base: _topic_schema(region, admin, TopicName.parse(base)) for base in bases}
    kinds = {s for s in found.values()}
    if len(kinds) <= 1:
        return next(iter(kinds), None)
    described = {b: (s.kind if s else "none") for b, s in found.items()}
    raise SourceOptionError("decodeSchema", f"the topics read have different schemas ({described}): read them "
                                            "separately, or set decodeSchema to false to read the value bytes")


def _cluster_name(spec: RegionSpec) -> str:
    report = _admin_get(spec, _admin(spec), "/admin/v2/broker-stats/load-report", "admin.url")
    name = report.get("cluster") if isinstance(report, dict) else None
    if not name:
        raise SourceOptionError("region", f"the region at {spec.admin_url} does not report its cluster name; "
                                          "set the 'region' option")
    return str(name)


# --------------------------------------------------------------------------------------------- ledgers


async def _extent(conn: RegionConnection, ledger_id: int) -> Optional[LedgerExtent]:
    try:
        handle = await conn.open_ledger(ledger_id)
    except LedgerNotFoundError:
        return None  # deleted by retention since the list was read
    return LedgerExtent(ledger_id, handle.last_add_confirmed, handle.is_closed)


async def topic_extents(conn: RegionConnection, topic: str) -> list[LedgerExtent]:
    """The ledgers of ``topic`` in this region, ascending (none when it has no managed ledger here)."""
    record = await conn.managed_ledgers.get(TopicName.parse(topic).path)
    if record is None:
        return []
    infos = record.value.ledgers
    known = {i.ledger_id: LedgerExtent(i.ledger_id, i.entries - 1, True)
             for n, i in enumerate(infos) if i.entries > 0 and n < len(infos) - 1}
    asked = await asyncio.gather(*(_extent(conn, i.ledger_id) for i in infos if i.ledger_id not in known))
    return sorted([*known.values(), *(e for e in asked if e is not None)], key=lambda e: e.ledger_id)


async def _all_extents(metadata_url: str, topics: list[str], region: str) -> dict[str, list[LedgerExtent]]:
    rt = runtime()
    conn = await rt.connection(metadata_url)
    try:
        found = await asyncio.gather(*(topic_extents(conn, t) for t in topics))
    except (MetadataError, BookieError) as e:
        raise SourceUnavailableError(f"region {region}: cannot read the ledger lists: {e}") from None
    return dict(zip(topics, found))


def extents(region: Region, topics: list[str]) -> dict[str, list[LedgerExtent]]:
    return runtime().run(_all_extents(region.spec.metadata_url, topics, region.name))


# ------------------------------------------------------------------------------------------- offsets


def _position(spec: OffsetSpec, region: str, topic: str) -> Optional[Position]:
    if isinstance(spec, str):
        return None
    return (spec.get(region) or spec.get("") or {}).get(topic)


def resolve_regions(options: SourceOptions) -> list[Region]:
    regions = [Region.resolve(spec) for spec in options.regions]
    names = [r.name for r in regions]
    if len(set(names)) != len(names):
        raise SourceOptionError("regions", f"two regions report the same name: {names}")
    return regions


def plan_batch(options: SourceOptions) -> list[Split]:
    """Every split of a bounded read, ordered by region, topic, ledger, entry."""
    splits: list[Split] = []
    for region in resolve_regions(options):
        topics = region.topics(options.selection)
        for topic, exts in extents(region, topics).items():
            start = _position(options.starting, region.name, topic) or EARLIEST
            end = _position(options.ending, region.name, topic)
            splits += plan_topic(region.name, region.spec.metadata_url, topic, TopicName.parse(topic).partition_index,
                                 exts, start=start, end=end, max_entries_per_split=options.max_entries_per_split)
    log.info("planned %d splits", len(splits))
    return splits


def initial_offsets(options: SourceOptions, regions: list[Region]) -> RegionOffsets:
    """Where a new streaming query starts: ``earliest`` is every topic from its start (an empty offset
    map); ``latest`` what is readable now; explicit positions as given."""
    if options.starting == "earliest":
        return {r.name: {} for r in regions}
    if options.starting == "latest":
        return latest_offsets(options, regions, {})
    out: RegionOffsets = {}
    for region in regions:
        given = options.starting.get(region.name) or options.starting.get("") or {}
        out[region.name] = dict(given)
    return out


def latest_offsets(options: SourceOptions, regions: list[Region], start: RegionOffsets) -> RegionOffsets:
    """Each topic's end of what is readable now (never before ``start``, never past an unclosed ledger);
    topics found since (``topicsPattern``, new partitions) join."""
    out: RegionOffsets = {}
    for region in regions:
        before = start.get(region.name, {})
        topics = sorted(set(region.topics(options.selection)) | set(before))
        current = extents(region, topics)
        out[region.name] = {t: latest_position(current[t], before.get(t, EARLIEST)) for t in topics}
    return out


def plan_stream(options: SourceOptions, regions: list[Region], start: RegionOffsets,
                end: RegionOffsets) -> list[Split]:
    """The splits of one micro-batch: each topic's entries in ``[start, end)``."""
    splits: list[Split] = []
    for region in regions:
        ends = end.get(region.name, {})
        starts = start.get(region.name, {})
        topics = [t for t, e in sorted(ends.items()) if starts.get(t, EARLIEST) < e]
        if not topics:
            continue
        for topic, exts in extents(region, topics).items():
            splits += plan_topic(region.name, region.spec.metadata_url, topic, TopicName.parse(topic).partition_index,
                                 exts, start=starts.get(topic, EARLIEST), end=ends[topic],
                                 max_entries_per_split=options.max_entries_per_split)
    return splits

