"""What every namespace-scoped admin route needs: the ``{tenant}/{namespace}`` of its path, checked, and a
compare-and-set update of the namespace's policies that answers 404 for a namespace that does not exist."""

from __future__ import annotations

from typing import Callable

from aiohttp import web

from config_store import NotFoundError
from config_store.configuration import check_name
from config_store.errors import InvalidMetadataError
from config_store.models import Policies

from .context import AdminContext
from .errors import bad_request, not_found
from .tenants import tenant_name


def namespace_names(request: web.Request) -> tuple[str, str]:
    """``(tenant, namespace)`` of the request's path; 400 for a malformed name."""
    tenant = tenant_name(request)
    try:
        return tenant, check_name("namespace", request.match_info["namespace"])
    except InvalidMetadataError as e:
        raise bad_request(str(e)) from None


async def update_namespace(ctx: AdminContext, tenant: str, namespace: str,
                           fn: Callable[[Policies], Policies]) -> None:
    """Applies ``fn`` to the namespace's policies (compare-and-set, retried); 404 if it does not exist."""
    try:
        await ctx.configuration.update_namespace_policies(tenant, namespace, fn)
    except NotFoundError:
        raise not_found(f"Namespace {tenant}/{namespace} does not exist") from None
