"""Splitting a namespace bundle in two, at its owner (admin ``.../{bundle}/split`` and the auto split).

The arithmetic (Pulsar's ``range_equally_divide`` and ``topic_count_equally_divide``) is pure, in
:mod:`broker.bundles`; the ownership steps (acquire both halves, drop the old node, keep serving the
topics) are :meth:`broker.ownership.BundleOwnership.split`. This module picks the split point, refuses
what Pulsar refuses, and commits the new boundaries into the namespace's policies by compare-and-set:
the update function re-checks, against the policies it is about to overwrite, that the bundle still exists
and that the namespace is below its maximum number of bundles, so two splits racing on one namespace
(at two owners) both land or the loser fails cleanly with nothing changed.
"""

from __future__ import annotations

import logging
from typing import Iterable

from config_store import ConfigurationStore, NotFoundError, Policies

from .bundles import (RANGE_EQUALLY_DIVIDE, SPLIT_ALGORITHMS, TOPIC_COUNT_EQUALLY_DIVIDE, NamespaceBundle,
                      bundles_data, default_boundaries, parse_bundles_data, split_boundaries,
                      split_point_range_equally, split_point_topic_count, topic_hash)
from .ownership import BundleOwnership
from .ownership_errors import NamespaceNotFoundError, OwnershipError

__all__ = ["BundleSplitError", "split_bundle"]

log = logging.getLogger("broker.bundle_split")


class BundleSplitError(OwnershipError):
    """The bundle cannot be split as asked (unknown algorithm, nothing to cut, namespace at its maximum
    number of bundles, bundle split meanwhile): nothing changed. Pulsar answers 412 for these."""

    http_status = 412


async def split_bundle(ownership: BundleOwnership, configuration: ConfigurationStore, bundle: NamespaceBundle, *,
                       algorithm: str = RANGE_EQUALLY_DIVIDE, unload: bool = False, max_bundles: int = 128,
                       topics: Iterable[str] = ()) -> tuple[NamespaceBundle, NamespaceBundle]:
    """Splits ``bundle``, which this broker owns, and returns the two halves.

    Args:
        algorithm: ``range_equally_divide`` (the middle of the range) or ``topic_count_equally_divide``
            (between the middle ones of ``topics``' hashes).
        unload: unload both halves afterwards, so lookups may place them on other brokers.
        max_bundles: the namespace may not get more bundles than this (Pulsar
            ``loadBalancerNamespaceMaximumBundles``).
        topics: the complete names of the bundle's topics (for ``topic_count_equally_divide``).

    Raises:
        BundleSplitError: refused, nothing changed.
        ServiceUnitNotReadyError: the bundle is not served here right now (moving, or owned elsewhere).
    """
    if algorithm not in SPLIT_ALGORITHMS:
        raise BundleSplitError(f"Unsupported namespace bundle split algorithm {algorithm!r}, supported algorithms "
                               f"are {list(SPLIT_ALGORITHMS)}")
    current = await ownership.namespace_bundles(bundle.tenant, bundle.namespace)
    if len(current.bundles) >= max_bundles:
        raise BundleSplitError(f"namespace {bundle.namespace_name} already has {len(current.bundles)} bundles, the "
                               f"maximum (load_balancer_namespace_maximum_bundles = {max_bundles})")
    if algorithm == TOPIC_COUNT_EQUALLY_DIVIDE:
        point = split_point_topic_count(bundle, [topic_hash(t) for t in topics])
        if point is None:
            raise BundleSplitError(f"bundle {bundle} cannot be split by topic count: it needs at least two topics "
                                   f"with different hashes")
    else:
        point = split_point_range_equally(bundle)
        if point is None:
            raise BundleSplitError(f"bundle {bundle} is too small to be split")

    def apply(policies: Policies) -> Policies:
        bounds = (parse_bundles_data(policies.bundles) if policies.bundles is not None
                  else default_boundaries(ownership.default_bundles))
        if len(bounds) - 1 >= max_bundles:
            raise BundleSplitError(f"namespace {bundle.namespace_name} already has {len(bounds) - 1} bundles, the "
                                   f"maximum (load_balancer_namespace_maximum_bundles = {max_bundles})")
        try:
            policies.bundles = bundles_data(split_boundaries(bounds, bundle, point))
        except ValueError as e:
            raise BundleSplitError(f"namespace {bundle.namespace_name}: {e}") from None
        return policies

    async def commit() -> list[int]:
        try:
            versioned = await configuration.update_namespace_policies(bundle.tenant, bundle.namespace, apply)
        except NotFoundError:
            raise NamespaceNotFoundError(f"namespace {bundle.namespace_name} does not exist") from None
        return parse_bundles_data(versioned.value.bundles)

    halves = await ownership.split(bundle, point, commit=commit, unload=unload)
    log.info("bundle %s split (%s) at 0x%08x", bundle, algorithm, point)
    return halves
