"""Who a client is and what it may do, for every door of the broker (binary protocol, admin REST, lookups).

Theory of operation
-------------------
A broker with ``authentication_enabled`` refuses every client that does not prove a *role*: a token
(``Authorization: Bearer`` over HTTP, CONNECT ``auth_data`` on the binary protocol) or a client certificate
verified in the TLS handshake (``magnetar.auth``). With ``authorization_enabled`` it then asks, for every
operation, whether the role may do it: Pulsar's rules (``magnetar.auth.authorization``) over the grants the
configuration store holds, read through watched caches of the namespaces' policies and the tenants
(``config_store.PoliciesCache``, ``TenantsCache``). The first question about a namespace reads it and arms a
watch; later ones cost no I/O and see every grant and revoke within a watch round trip, so permissions change
without a restart.

A proxy connects as itself (a role in ``proxy_roles``) and names the client it acts for as the *original
principal*; both must be allowed (:func:`magnetar.auth.authorization.authorize_through_proxy`). Only a proxy
role (or a superuser) may name one.

This module holds the decisions and the counters; the binary-protocol session (``broker/service/session/
auth.py``) and the admin REST API (``broker/admin/access.py``) ask it. One instance per broker process: the
counters live in the process's metrics registry.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from prometheus_client import CollectorRegistry, Counter

from magnetar.auth import authorization as rules
from magnetar.auth import settings as auth_settings
from magnetar.auth.providers import AuthenticationService
from magnetar.topic_name import TopicName

from . import metrics_names as names

if TYPE_CHECKING:
    from config_store import ConfigurationStore, PoliciesCache, TenantsCache

log = logging.getLogger("broker.security")

__all__ = ["SecuritySettings", "BrokerSecurity"]


@dataclass(frozen=True, kw_only=True)
class SecuritySettings(auth_settings.SecuritySettings):
    """The security settings of ``broker.toml``: the ones every server shares
    (:class:`magnetar.auth.settings.SecuritySettings`) and the broker's own ``proxy_roles``.

    Attributes:
        proxy_roles: roles that may act for an original principal (Pulsar ``proxyRoles``).
        authenticate_original_auth_data: when a proxy forwards its client's credentials (``original_auth_data``
            and ``original_auth_method``: a proxy with ``forward_authorization_credentials``), authenticate them
            too and require the role they prove to be the ``original_principal`` the proxy named (Pulsar
            ``authenticateOriginalAuthData``). A CONNECT without them keeps the proxy's word, as Pulsar does.
    """

    proxy_roles: tuple[str, ...] = ()
    authenticate_original_auth_data: bool = False

    def validate_authentication(self) -> None:
        super().validate_authentication()
        self._validate_roles("proxy_roles")


class BrokerSecurity:
    """Authentication and authorization of one broker (see the module docstring).

    Args:
        settings: what is enabled, and the token provider's key.
        configuration: the global configuration store (grants, tenants' admin roles); None: only superusers
            pass authorization (unit tests of the service without a store).
        registry: where ``magnetar_broker_auth_failures_total{reason}`` and
            ``magnetar_broker_authorization_denials_total{action}`` are registered (a private one if None).

    Raises:
        ConfigError: at construction, for settings that cannot work (a token key that cannot be read...).
    """

    def __init__(self, settings: SecuritySettings, *, configuration: "Optional[ConfigurationStore]" = None,
                 registry: Optional[CollectorRegistry] = None) -> None:
        settings.validate_authentication()
        self.settings = settings
        self.configuration = configuration
        self.registry = registry if registry is not None else CollectorRegistry()
        self.authentication: Optional[AuthenticationService] = settings.authentication_service()
        self.superusers = frozenset(settings.superuser_roles)
        self.proxy_roles = frozenset(settings.proxy_roles)
        self._failures = Counter(names.AUTH_FAILURES, "Refused authentications (binary protocol, TLS handshakes, "
                                 "admin REST), by reason", ["reason"], registry=self.registry)
        self._denials = Counter(names.AUTHORIZATION_DENIALS, "Operations refused to an authenticated role, by "
                                "action", ["action"], registry=self.registry)
        self._policies: "Optional[PoliciesCache]" = None
        self._tenants: "Optional[TenantsCache]" = None
        self._closed = False

    # -- what is on ------------------------------------------------------------------------------------------

    @property
    def authentication_enabled(self) -> bool:
        return self.authentication is not None

    @property
    def authorization_enabled(self) -> bool:
        return self.settings.authorization_enabled

    def count_failure(self, reason: str) -> None:
        """One refused authentication (``reason``: an ``AuthenticationError.reason``)."""
        self._failures.labels(reason).inc()

    def count_denial(self, action: str) -> None:
        """One operation refused to an authenticated role (``action``: produce, consume, lookup, admin...)."""
        self._denials.labels(action).inc()

    def failures(self, reason: str) -> float:
        """How many authentications were refused for ``reason`` so far (tests, status pages)."""
        return self.registry.get_sample_value(names.AUTH_FAILURES + "_total", {"reason": reason}) or 0.0

    def denials(self, action: str) -> float:
        return self.registry.get_sample_value(names.AUTHORIZATION_DENIALS + "_total", {"action": action}) or 0.0

    def close(self) -> None:
        """Stops the watches of the caches (idempotent)."""
        self._closed = True
        for cache in (self._policies, self._tenants):
            if cache is not None:
                cache.close()
        self._policies = self._tenants = None

    # -- roles -----------------------------------------------------------------------------------------------

    def is_superuser(self, role: Optional[str]) -> bool:
        return rules.is_superuser(role or "", self.superusers)

    def is_proxy_role(self, role: Optional[str]) -> bool:
        return bool(role) and role in self.proxy_roles

    def is_valid_original_principal(self, role: Optional[str], original_principal: Optional[str]) -> bool:
        """Whether ``role`` may act for ``original_principal`` (see ``authorization.is_valid_original_principal``)."""
        return rules.is_valid_original_principal(role or "", original_principal or None,
                                                 proxy_roles=self.proxy_roles, superusers=self.superusers)

    def _through_proxy(self, role: Optional[str], original_principal: Optional[str],
                       allowed: Callable[[str], bool]) -> bool:
        return rules.authorize_through_proxy(role or "", original_principal or None, proxy_roles=self.proxy_roles,
                                             superusers=self.superusers, allowed=allowed)

    # -- decisions -------------------------------------------------------------------------------------------
    # Each answers True when authorization is off. A role of None (authentication off) is nobody.

    async def can_produce(self, role: Optional[str], original_principal: Optional[str], topic: TopicName) -> bool:
        return await self._on_topic(rules.can_produce, role, original_principal, topic)

    async def can_consume(self, role: Optional[str], original_principal: Optional[str], topic: TopicName,
                          subscription: Optional[str]) -> bool:
        if not self.authorization_enabled:
            return True
        admins, namespace_auth, topic_auth, subscriptions = await self._grants(topic.tenant, topic.namespace_portion,
                                                                               topic)
        return self._through_proxy(role, original_principal, lambda r: rules.can_consume(
            r, superusers=self.superusers, tenant_admin_roles=admins, namespace_auth=namespace_auth,
            topic_auth=topic_auth, subscription=subscription, subscription_auth_roles=subscriptions))

    async def can_lookup(self, role: Optional[str], original_principal: Optional[str], topic: TopicName) -> bool:
        """A topic lookup, its partitioned metadata, its schema: ``produce`` or ``consume`` on it."""
        return await self._on_topic(rules.can_lookup, role, original_principal, topic)

    async def _on_topic(self, rule: Callable[..., bool], role: Optional[str], original_principal: Optional[str],
                        topic: TopicName) -> bool:
        """``rule`` (``rules.can_produce``, ``rules.can_lookup``) over the grants of ``topic`` and its namespace."""
        if not self.authorization_enabled:
            return True
        admins, namespace_auth, topic_auth, _ = await self._grants(topic.tenant, topic.namespace_portion, topic)
        return self._through_proxy(role, original_principal, lambda r: rule(
            r, superusers=self.superusers, tenant_admin_roles=admins, namespace_auth=namespace_auth,
            topic_auth=topic_auth))

    async def can_list_namespace(self, role: Optional[str], original_principal: Optional[str], tenant: str,
                                 namespace: str) -> bool:
        """A namespace's topic list (GET_TOPICS_OF_NAMESPACE, topic-list watchers, the REST listing): ``produce``
        or ``consume`` granted on the namespace itself (as Pulsar's GET_TOPICS namespace operation)."""
        if not self.authorization_enabled:
            return True
        admins, namespace_auth, _, _ = await self._grants(tenant, namespace, None)
        return self._through_proxy(role, original_principal, lambda r: rules.can_lookup(
            r, superusers=self.superusers, tenant_admin_roles=admins, namespace_auth=namespace_auth,
            topic_auth=None))

    async def can_administer_tenant(self, role: Optional[str], original_principal: Optional[str],
                                    tenant: str) -> bool:
        """A superuser or one of the tenant's ``adminRoles``: the tenant's namespaces, policies, topics."""
        if not self.authorization_enabled:
            return True
        admins = await self._tenant_admins(tenant)
        return self._through_proxy(role, original_principal, lambda r: rules.can_administer_tenant(
            r, superusers=self.superusers, tenant_admin_roles=admins))

    def can_administer_cluster(self, role: Optional[str], original_principal: Optional[str]) -> bool:
        """Clusters, tenants' creation, brokers, bookies: superusers only."""
        if not self.authorization_enabled:
            return True
        return self._through_proxy(role, original_principal, self.is_superuser)

    # -- grants ----------------------------------------------------------------------------------------------

    async def _tenant_admins(self, tenant: str) -> frozenset[str]:
        if self.configuration is None or self._closed:
            return frozenset()
        if self._tenants is None:
            self._tenants = self.configuration.tenants_cache()
        info = await self._tenants.get(tenant)
        return frozenset(info.admin_roles) if info is not None else frozenset()

    async def _grants(self, tenant: str, namespace: str, topic: Optional[TopicName]):
        """``(tenant admins, namespace grants, topic grants, subscription roles)``; nothing for a namespace
        that does not exist (only superusers pass then; the operation itself answers not found)."""
        admins = await self._tenant_admins(tenant)
        if self.configuration is None or self._closed:
            return admins, None, None, None
        if self._policies is None:
            self._policies = self.configuration.policies_cache()
        policies = await self._policies.get(tenant, namespace)
        if policies is None:
            return admins, None, None, None
        topic_auth = rules.topic_auth_for(policies.destination_auth, str(topic)) if topic is not None else None
        return admins, policies.auth_roles, topic_auth, policies.subscription_auth_roles
