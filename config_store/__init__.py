"""Typed async access to ZooKeeper: the global configuration store and each region's local metadata.

* :class:`MetadataStore` — the small async interface (get / create / compare-and-set / delete / children /
  watches / session events / self-healing ephemeral registrations); :class:`KazooMetadataStore` runs it on
  ZooKeeper through kazoo, :class:`MemoryMetadataStore` in memory for unit tests (with fault injection).
* :class:`ConfigurationStore` — clusters, tenants, namespace policies, partitioned topics, topic policies
  (``/admin/...``); :class:`PoliciesCache`, :class:`TopicPoliciesCache` and :class:`TenantsCache` follow
  policies and tenants by watches.
* :class:`SchemaStore` — topic schemas, one node per version (``/admin/schemas/...``).
* :class:`RegionStore` — bookie registrations and ledger metadata; :class:`BookieCache` follows the bookies.
* ``models`` — the stored values and their strict, versioned JSON codec; ``region_models`` — a region's
  bookie registrations and ledger metadata, in the same codec.

Every error is a :class:`MetadataError`; kazoo's never escape.
"""

from .configuration import ConfigurationStore, PoliciesCache, TenantsCache, TopicPoliciesCache
from .ephemeral import EphemeralRegistration
from .errors import (BadVersionError, InvalidMetadataError, MetadataError, MetadataUnavailableError,
                     NodeExistsError, NotEmptyError, NotFoundError, SessionLostError, StoreClosedError)
from .memory import MemoryMetadataStore, MemoryTree
from .models import (BacklogQuota, ClusterData, DelayedDeliveryPolicies, DispatchRate, InactiveTopicPolicies,
                     PartitionedTopicMetadata, Policies, PublishRate, TenantInfo, TopicPolicies, Versioned)
from .region import BookieCache, RegionStore
from .region_models import BookieRegistration, LedgerMetadata, LedgerState
from .schemas import SchemaStore, StoredSchema
from .store import KazooMetadataStore, MetadataStore, SessionEvent, StoreState
from .watches import WatchHandle

__all__ = [
    "MetadataStore", "KazooMetadataStore", "MemoryMetadataStore", "MemoryTree", "Versioned", "SessionEvent",
    "StoreState", "WatchHandle", "EphemeralRegistration",
    "MetadataError", "NotFoundError", "BadVersionError", "NodeExistsError", "NotEmptyError", "SessionLostError",
    "MetadataUnavailableError", "InvalidMetadataError", "StoreClosedError",
    "ConfigurationStore", "PoliciesCache", "TenantsCache", "TopicPoliciesCache", "RegionStore", "BookieCache",
    "ClusterData", "TenantInfo", "Policies", "TopicPolicies", "PartitionedTopicMetadata", "BookieRegistration",
    "LedgerMetadata", "LedgerState", "BacklogQuota", "SchemaStore", "StoredSchema",
    "PublishRate", "DispatchRate", "DelayedDeliveryPolicies", "InactiveTopicPolicies",
]
