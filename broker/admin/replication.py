"""Checks shared by the namespace and topic routes that set replication clusters."""

from __future__ import annotations

from typing import Any

from config_store import NotFoundError

from .body import expect_str_list
from .context import AdminContext
from .errors import RestError, bad_request, not_found, precondition_failed


def replication_clusters(body: Any) -> list[str]:
    """A list of cluster names: not empty (412, as Pulsar answers), no name twice (400)."""
    clusters = expect_str_list(body, "the replication clusters")
    if not clusters:
        raise precondition_failed("the replication clusters must not be empty")
    if len(set(clusters)) != len(clusters):
        raise bad_request(f"the replication clusters repeat a cluster: {clusters}")
    return clusters


async def check_clusters(ctx: AdminContext, tenant: str, clusters: list[str]) -> None:
    """Replication clusters must exist (412) and be allowed for the tenant (403), as Pulsar checks."""
    known = set(await ctx.configuration.list_clusters())
    missing = sorted(set(clusters) - known)
    if missing:
        raise precondition_failed(f"Invalid cluster id(s): {missing} do not exist")
    try:
        allowed = set((await ctx.configuration.get_tenant(tenant)).value.allowed_clusters)
    except NotFoundError:
        raise not_found(f"Tenant {tenant} does not exist") from None
    refused = sorted(set(clusters) - allowed)
    if refused:
        raise RestError(403, f"Cluster(s) {refused} are not in the list of allowed clusters of tenant {tenant}")
