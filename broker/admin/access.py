"""Who may call which admin REST and lookup route: authentication of every request, then Pulsar's authorization
rule for the route (``PulsarWebResource``'s ``validateSuperUserAccess`` / tenant and namespace operations /
topic lookups).

Theory of operation
-------------------
With authentication on, a request proves a role with ``Authorization: Bearer <token>`` or, on the HTTPS port,
a client certificate the handshake verified (``BrokerSecurity.authentication.authenticate_http``); otherwise
it is answered **401** with the reason (and counted by reason). A proxy passes the client it acts for in
``X-Original-Principal``; only a proxy role (or a superuser) may (else 401, as Pulsar's proxy-role check).

With authorization on, :func:`rule_for` (pure, from the route's canonical path) says what the route needs:

* superuser: clusters (but listing them), creating, updating, deleting and listing tenants, brokers and
  bookies, unloading or splitting a namespace or bundle;
* tenant admin (or superuser): a tenant's own record, its namespaces, their policies and permissions, topic
  administration;
* a lookup right (``produce`` or ``consume`` on the topic or its namespace): ``/lookup/v2`` and what a client
  reads to find a topic (partitions, stats, schemas);
* a namespace right (``produce`` or ``consume`` on the namespace): listing its topics;
* nothing more than authentication: listing clusters, unknown routes (which answer 404 / 405).

A role without the right is answered **403**. ``/metrics`` and ``/health`` are open (probes and scrapers
carry no credentials; Pulsar's ``authenticateMetricsEndpoint`` is off by default).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from aiohttp import web

from magnetar.auth.errors import AuthenticationError
from magnetar.topic_name import InvalidTopicNameError, TopicName, decode_local_name

from .errors import Handler, bad_request, error_response

log = logging.getLogger("broker.admin.access")

ORIGINAL_PRINCIPAL_HEADER = "X-Original-Principal"
ROLE_KEY = "magnetar.role"
ORIGINAL_PRINCIPAL_KEY = "magnetar.original_principal"

_OPEN = frozenset(("/metrics", "/health"))
_TOPIC_READS = ("/partitions", "/stats", "/partitioned-stats", "/internalStats")
_SCHEMA_READS = ("/schema", "/schemas", "/schema/{version}")
_TOPIC_ROUTE = "/admin/v2/{domain}/{tenant}/{namespace}"  # canonical: without the pattern
_SUPERUSER_PREFIXES = ("/admin/v2/clusters", "/admin/v2/brokers", "/admin/v2/broker-stats", "/admin/v2/bookies")


class Need(enum.Enum):
    OPEN = "open"
    AUTHENTICATED = "authenticated"
    SUPERUSER = "superuser"
    TENANT_ADMIN = "tenant_admin"
    NAMESPACE = "namespace"
    TOPIC_LOOKUP = "topic_lookup"


@dataclass(frozen=True)
class Rule:
    """What a route needs. ``topic_segment``: where the topic's local name is in the raw path (TOPIC_LOOKUP)."""

    need: Need
    tenant: str = ""
    namespace: str = ""
    topic_segment: int = 0


def rule_for(method: str, canonical: Optional[str], match_info: Mapping[str, str]) -> Rule:
    """The rule of a route (see the module docstring); ``canonical`` is None for a request no route matched."""
    if canonical in _OPEN:
        return Rule(Need.OPEN)
    if canonical is None:
        return Rule(Need.AUTHENTICATED)
    tenant, namespace = match_info.get("tenant", ""), match_info.get("namespace", "")
    read = method in ("GET", "HEAD")
    if canonical.startswith("/lookup/v2/topic/"):
        return Rule(Need.TOPIC_LOOKUP, tenant, namespace, topic_segment=7)
    if canonical == "/admin/v2/clusters" and read:
        return Rule(Need.AUTHENTICATED)
    if canonical.startswith(_SUPERUSER_PREFIXES) or canonical == "/admin/v2/tenants":
        return Rule(Need.SUPERUSER)
    if canonical == "/admin/v2/tenants/{tenant}":
        return Rule(Need.TENANT_ADMIN, tenant) if read else Rule(Need.SUPERUSER)
    if canonical.startswith("/admin/v2/namespaces/{tenant}/{namespace}") and \
            (canonical.endswith("/unload") or canonical.endswith("/split")):
        return Rule(Need.SUPERUSER)
    if canonical == "/admin/v2/namespaces/{tenant}/{namespace}/topics" and read:
        return Rule(Need.NAMESPACE, tenant, namespace)
    if canonical.startswith(_TOPIC_ROUTE) and read:
        rest = canonical[len(_TOPIC_ROUTE):]
        if rest in ("", "/partitioned"):
            return Rule(Need.NAMESPACE, tenant, namespace)
        if rest.startswith("/{topic}") and rest[len("/{topic}"):] in _TOPIC_READS:
            return Rule(Need.TOPIC_LOOKUP, tenant, namespace, topic_segment=6)
    if canonical.startswith("/admin/v2/schemas/{tenant}/{namespace}/{topic}") and read and \
            canonical[len("/admin/v2/schemas/{tenant}/{namespace}/{topic}"):] in _SCHEMA_READS:
        return Rule(Need.TOPIC_LOOKUP, tenant, namespace, topic_segment=6)
    if tenant:
        return Rule(Need.TENANT_ADMIN, tenant, namespace)
    return Rule(Need.SUPERUSER)


def _peer_certificate(request: web.Request) -> Optional[dict]:
    transport = request.transport
    if transport is None:
        return None
    return transport.get_extra_info("peercert") or None


def _unauthorized(reason: str) -> web.Response:
    return error_response(401, reason, headers={"WWW-Authenticate": 'Bearer realm="magnetar"'})


def access_middleware(security: Any) -> Any:
    """Authentication and authorization of every request (see the module docstring); a pass-through when
    ``security`` is None or authentication is off."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if security is None or not security.authentication_enabled:
            return await handler(request)
        resource = request.match_info.route.resource
        rule = rule_for(request.method, resource.canonical if resource is not None else None, request.match_info)
        if rule.need is Need.OPEN:
            return await handler(request)
        try:
            who = security.authentication.authenticate_http(request.headers.get("Authorization"),
                                                            _peer_certificate(request))
        except AuthenticationError as exc:
            security.count_failure(exc.reason)
            log.info("%s %s: 401 (%s) %s", request.method, request.rel_url.path, exc.reason, exc)
            return _unauthorized(str(exc))
        original = request.headers.get(ORIGINAL_PRINCIPAL_HEADER) or None
        if original and not security.is_valid_original_principal(who.role, original):
            security.count_denial("original_principal")
            return _unauthorized(f"role {who.role!r} may not act for {original!r}: only proxy_roles may send "
                                 f"{ORIGINAL_PRINCIPAL_HEADER}")
        request[ROLE_KEY] = who.role
        request[ORIGINAL_PRINCIPAL_KEY] = original
        if security.authorization_enabled and not await _allowed(security, request, rule, who.role, original):
            security.count_denial(rule.need.value)
            acting = f"role {original!r} (through {who.role!r})" if original else f"role {who.role!r}"
            log.info("%s %s: 403 for %s", request.method, request.rel_url.path, acting)
            return error_response(403, f"{acting} is not authorized to {request.method} {request.rel_url.path}"
                                       f" ({_needs(rule)})")
        return await handler(request)

    return middleware


async def _allowed(security: Any, request: web.Request, rule: Rule, role: str, original: Optional[str]) -> bool:
    need = rule.need
    if need is Need.AUTHENTICATED:
        return True
    if need is Need.SUPERUSER:
        return security.can_administer_cluster(role, original)
    if need is Need.TENANT_ADMIN:
        return await security.can_administer_tenant(role, original, rule.tenant)
    if need is Need.NAMESPACE:
        return await security.can_list_namespace(role, original, rule.tenant, rule.namespace)
    if need is Need.TOPIC_LOOKUP:
        return await security.can_lookup(role, original, _topic(request, rule))
    return False


def _topic(request: web.Request, rule: Rule) -> TopicName:
    """The topic a lookup-like route names (schemas routes name persistent topics without a domain); a
    malformed name is the handler's 400, answered here first."""
    raw_parts = request.rel_url.raw_path.split("/")
    domain = request.match_info.get("domain", "persistent")
    try:
        local = decode_local_name(raw_parts[rule.topic_segment])
        return TopicName.parse(f"{domain}://{rule.tenant}/{rule.namespace}/{local}")
    except (IndexError, UnicodeDecodeError, InvalidTopicNameError) as exc:
        raise bad_request(f"malformed topic in {request.rel_url.raw_path!r}: {exc}") from None


def _needs(rule: Rule) -> str:
    return {Need.SUPERUSER: "needs a superuser role",
            Need.TENANT_ADMIN: f"needs an admin role of tenant {rule.tenant}",
            Need.NAMESPACE: f"needs produce or consume on namespace {rule.tenant}/{rule.namespace}",
            Need.TOPIC_LOOKUP: "needs produce or consume on the topic or its namespace"}.get(rule.need, "")
