"""Whether a client's role may have its lookups answered: Pulsar's rules (``magnetar.auth.authorization``) over
the grants in the configuration store.

A LOOKUP, PARTITIONED_METADATA or GET_SCHEMA of a topic needs ``produce`` or ``consume`` on the topic (its
partitioned topic's grants count for a partition) or on its namespace; GET_TOPICS_OF_NAMESPACE needs one of
them on the namespace. Superusers and the tenant's admins may do all of it. Namespace policies come from a
:class:`config_store.PoliciesCache` (watched: a grant or revoke applies within a watch round trip); a tenant's
admin roles are read at most once per ``tenant_ttl_s``.

What the role then does on a forwarded connection (produce, subscribe) the broker decides, from the
``original_principal`` the proxy sends it.
"""

from __future__ import annotations

import time
from typing import Collection, Optional

from config_store import ConfigurationStore, InvalidMetadataError, NotFoundError, Policies, PoliciesCache
from magnetar.auth import authorization as rules
from magnetar.topic_name import InvalidTopicNameError, TopicName

__all__ = ["LookupAuthorizer"]

_TENANTS_MAX = 10_000


class LookupAuthorizer:
    """Answers "may ``role`` look this up?" (see the module docstring). ``close()`` stops its watches."""

    def __init__(self, configuration: ConfigurationStore, *, superusers: Collection[str],
                 tenant_ttl_s: float = 1.0) -> None:
        self._configuration = configuration
        self._policies = PoliciesCache(configuration)
        self.superusers = frozenset(superusers)
        self.tenant_ttl_s = tenant_ttl_s
        self._tenant_admins: dict[str, tuple[float, frozenset[str]]] = {}

    def close(self) -> None:
        self._policies.close()

    async def _admins(self, tenant: str) -> frozenset[str]:
        cached = self._tenant_admins.get(tenant)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.tenant_ttl_s:
            return cached[1]
        try:
            admins = frozenset((await self._configuration.get_tenant(tenant)).value.admin_roles)
        except NotFoundError:
            admins = frozenset()
        if len(self._tenant_admins) >= _TENANTS_MAX:
            self._tenant_admins.clear()
        self._tenant_admins[tenant] = (now, admins)
        return admins

    async def can_lookup_topic(self, role: Optional[str], topic: str) -> bool:
        """LOOKUP, PARTITIONED_METADATA, GET_SCHEMA of ``topic`` (a malformed name: no, the broker would refuse it
        anyway)."""
        if not role:
            return False
        if rules.is_superuser(role, self.superusers):
            return True
        try:
            name = TopicName.parse(topic)
        except InvalidTopicNameError:
            return False
        return await self._allowed(role, name.tenant, name.namespace_portion, str(name))

    async def can_list_namespace(self, role: Optional[str], namespace: str) -> bool:
        """GET_TOPICS_OF_NAMESPACE of ``tenant/namespace``."""
        if not role:
            return False
        if rules.is_superuser(role, self.superusers):
            return True
        tenant, _, local = namespace.partition("/")
        if not tenant or not local or "/" in local:
            return False
        return await self._allowed(role, tenant, local, None)

    async def _allowed(self, role: str, tenant: str, namespace: str, topic: Optional[str]) -> bool:
        """Raises MetadataError when the configuration store cannot be read (not a refusal: the client retries)."""
        try:
            admins = await self._admins(tenant)
            if rules.can_administer_tenant(role, superusers=self.superusers, tenant_admin_roles=admins):
                return True
            policies: Optional[Policies] = await self._policies.get(tenant, namespace)
        except InvalidMetadataError:  # a name the store refuses: nothing is granted on it
            return False
        if policies is None:
            return False
        topic_auth = rules.topic_auth_for(policies.destination_auth, topic) if topic else None
        return rules.can_lookup(role, superusers=self.superusers, tenant_admin_roles=admins,
                                namespace_auth=policies.auth_roles, topic_auth=topic_auth)
