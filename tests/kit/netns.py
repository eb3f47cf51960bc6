"""Regions that are really apart, for tests: the product's namespaces (``clusters.netns``), re-exported.

The kit's namespaces are named ``mgt`` + 6 random hex digits (``magnetar up --netns`` deployments: ``mgd`` + 6),
so a test can find its own leftovers without touching a deployment's.
"""

from __future__ import annotations

from clusters.netns import Layout, RegionNet, Wan, available, namespaces_with_prefix

KIT_PREFIX = "mgt"

__all__ = ["KIT_PREFIX", "Layout", "RegionNet", "Wan", "available", "leftover_namespaces"]


def leftover_namespaces() -> list[str]:
    """Namespaces of this kit still present (a test asserts there are none after cleanup)."""
    return namespaces_with_prefix(KIT_PREFIX)
