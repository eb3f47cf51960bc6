"""Namespace bundles, pure: how a namespace's hash space is cut and which bundle holds a topic.

A namespace is cut into *bundles*: ranges of a 32-bit hash space. A topic belongs to the bundle whose
range holds ``crc32(complete topic name)`` (Pulsar hashes with Guava's CRC32 the same way). The boundaries
live in the namespace's policies as Pulsar's ``BundlesData`` JSON (``{"boundaries": ["0x00000000", ...],
"numBundles": n}``). Who owns a bundle is :mod:`broker.ownership`'s business; nothing here does I/O.
"""

from __future__ import annotations

import bisect
import zlib
from dataclasses import dataclass
from typing import Any

from magnetar.topic_name import TopicName

__all__ = ["BUNDLES_MAX", "FULL_UPPER_BOUND", "SPLIT_ALGORITHMS", "NamespaceBundle", "NamespaceBundles",
           "bundles_data", "default_boundaries", "parse_bundle_range", "parse_bundles_data", "rendezvous",
           "split_boundaries", "split_point_range_equally", "split_point_topic_count", "topic_hash"]

FULL_UPPER_BOUND = 0xFFFFFFFF
BUNDLES_MAX = 1024
RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
SPLIT_ALGORITHMS = (RANGE_EQUALLY_DIVIDE, TOPIC_COUNT_EQUALLY_DIVIDE)  # Pulsar's names


def topic_hash(topic: str) -> int:
    """The 32-bit hash that places a topic in a bundle: CRC32 of the complete name, as Pulsar's default."""
    return zlib.crc32(topic.encode("utf-8"))


def default_boundaries(num_bundles: int) -> list[int]:
    """``num_bundles`` equal ranges over the hash space (Pulsar's ``getBundles``: 4 gives 0x00000000,
    0x40000000, 0x80000000, 0xc0000000, 0xffffffff)."""
    if type(num_bundles) is not int or not 1 <= num_bundles <= BUNDLES_MAX:
        raise ValueError(f"the number of bundles must be an integer in 1..{BUNDLES_MAX}, got {num_bundles!r}")
    seg = (1 << 32) // num_bundles
    return [i * seg for i in range(num_bundles)] + [FULL_UPPER_BOUND]


def bundles_data(boundaries: list[int]) -> dict[str, Any]:
    """Pulsar's ``BundlesData`` JSON for ``boundaries``."""
    return {"boundaries": [f"0x{b:08x}" for b in boundaries], "numBundles": len(boundaries) - 1}


def parse_bundles_data(data: Any) -> list[int]:
    """The boundaries of a ``BundlesData`` object (``boundaries`` and/or ``numBundles``); ValueError if
    malformed. Boundaries must be ``0x`` hex strings, strictly ascending from 0 to 0xffffffff."""
    if not isinstance(data, dict):
        raise ValueError("bundles must be an object with 'boundaries' and/or 'numBundles'")
    num = data.get("numBundles")
    if num is not None and (type(num) is not int or not 1 <= num <= BUNDLES_MAX):
        raise ValueError(f"bundles.numBundles must be an integer in 1..{BUNDLES_MAX}, got {num!r}")
    raw = data.get("boundaries")
    if raw is None:
        if num is None:
            raise ValueError("bundles needs 'boundaries' or 'numBundles'")
        return default_boundaries(num)
    if not isinstance(raw, list) or not all(isinstance(b, str) for b in raw):
        raise ValueError("bundles.boundaries must be a list of hex strings like \"0x40000000\"")
    try:
        bounds = [int(b, 16) if b.lower().startswith("0x") else _bad_hex(b) for b in raw]
    except ValueError:
        raise ValueError(f"bundles.boundaries must be hex strings like \"0x40000000\", got {raw}") from None
    if len(bounds) < 2 or len(bounds) - 1 > BUNDLES_MAX:
        raise ValueError(f"bundles.boundaries must hold 2..{BUNDLES_MAX + 1} values, got {len(bounds)}")
    if bounds[0] != 0 or bounds[-1] != FULL_UPPER_BOUND:
        raise ValueError("bundles.boundaries must start at 0x00000000 and end at 0xffffffff")
    if any(b >= c for b, c in zip(bounds, bounds[1:])):
        raise ValueError("bundles.boundaries must be strictly ascending")
    if num is not None and num != len(bounds) - 1:
        raise ValueError(f"bundles.numBundles ({num}) does not match the boundaries ({len(bounds) - 1} bundles)")
    return bounds


def _bad_hex(text: str) -> int:
    raise ValueError(text)


@dataclass(frozen=True, order=True)
class NamespaceBundle:
    """One hash range ``[lower, upper)`` of a namespace (the last range includes 0xffffffff)."""

    tenant: str
    namespace: str
    lower: int
    upper: int

    @property
    def name(self) -> str:
        """Pulsar's bundle name, e.g. ``0x00000000_0x40000000``."""
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def contains(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper or (self.upper == FULL_UPPER_BOUND == hash_value)

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"


class NamespaceBundles:
    """The bundles of one namespace, found by hash in O(log n)."""

    def __init__(self, tenant: str, namespace: str, boundaries: list[int]) -> None:
        self.tenant = tenant
        self.namespace = namespace
        self.boundaries = list(boundaries)
        self.bundles = [NamespaceBundle(tenant, namespace, lo, hi) for lo, hi in zip(boundaries, boundaries[1:])]

    def find(self, hash_value: int) -> NamespaceBundle:
        index = bisect.bisect_right(self.boundaries, hash_value) - 1
        return self.bundles[min(index, len(self.bundles) - 1)]

    def for_topic(self, topic: TopicName) -> NamespaceBundle:
        return self.find(topic_hash(str(topic)))

    def get(self, name: str) -> NamespaceBundle | None:
        for bundle in self.bundles:
            if bundle.name == name:
                return bundle
        return None


def rendezvous(bundle: NamespaceBundle, broker_id: str) -> int:
    """A stable per-(bundle, broker) number: among equally loaded brokers the lowest one wins, so ties
    spread bundles evenly and every broker breaks them the same way."""
    return zlib.crc32(f"{bundle}|{broker_id}".encode())


# ---------------------------------------------------------------------------------------------- splitting


def parse_bundle_range(name: str) -> tuple[int, int]:
    """``(lower, upper)`` of a bundle name like ``0x00000000_0x40000000``; ValueError if malformed."""
    parts = name.split("_")
    if len(parts) != 2 or not all(p.lower().startswith("0x") and len(p) == 10 for p in parts):
        raise ValueError(f"a bundle is named like 0x00000000_0x40000000, not {name!r}")
    try:
        lower, upper = (int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"a bundle is named like 0x00000000_0x40000000, not {name!r}") from None
    if lower >= upper:
        raise ValueError(f"bundle {name!r}: the lower bound must be below the upper one")
    return lower, upper


def split_point_range_equally(bundle: NamespaceBundle) -> int | None:
    """Pulsar's ``range_equally_divide``: the middle of the range; None when the range cannot be cut."""
    point = bundle.lower + (bundle.upper - bundle.lower) // 2
    return point if bundle.lower < point < bundle.upper else None


def split_point_topic_count(bundle: NamespaceBundle, topic_hashes: list[int]) -> int | None:
    """Pulsar's ``topic_count_equally_divide``: halfway between the two middle topic hashes, so each half
    gets half the topics. None with fewer than two topics or when the cut would leave an empty range (all
    topics hash alike)."""
    hashes = sorted(h for h in topic_hashes if bundle.contains(h))
    if len(hashes) <= 1:
        return None
    start, end = hashes[max(len(hashes) // 2 - 1, 0)], hashes[len(hashes) // 2]
    # the lower half is [lower, point): ``start`` must fall below the point and ``end`` at or above it
    point = start + 1 + (end - start - 1) // 2 if end > start else start
    return point if bundle.lower < point < bundle.upper else None


def split_boundaries(boundaries: list[int], bundle: NamespaceBundle, point: int) -> list[int]:
    """``boundaries`` with ``bundle`` cut at ``point`` into ``[lower, point)`` and ``[point, upper)``.

    Raises:
        ValueError: ``bundle`` is not one of the ranges of ``boundaries`` (e.g. split meanwhile) or
            ``point`` is not strictly inside it.
    """
    index = bisect.bisect_left(boundaries, bundle.lower)
    if index + 1 >= len(boundaries) or boundaries[index] != bundle.lower or boundaries[index + 1] != bundle.upper:
        raise ValueError(f"bundle {bundle.name} is not a bundle of the namespace any more")
    if not bundle.lower < point < bundle.upper:
        raise ValueError(f"split point 0x{point:08x} is not inside bundle {bundle.name}")
    return boundaries[:index + 1] + [point] + boundaries[index + 1:]
