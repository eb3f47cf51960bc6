"""A broker's settings: one typed, documented dataclass, loaded from TOML.

Units are the last word of every name (``_ms``, ``_bytes``). Unknown keys are an error (a typo must not
silently fall back to a default); missing keys take the defaults below. Settings named after Pulsar's
``broker.conf`` keep Pulsar's meaning (``managedLedgerDefaultEnsembleSize`` is
``managed_ledger_ensemble_size`` here). Loading is :mod:`magnetar.config`'s, shared by every process kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from bookie.client.ledger_client import ADD_TRANSPORTS
from config_store.models import BACKLOG_QUOTA_POLICIES as _BACKLOG_QUOTA_POLICIES
from config_store.models import INACTIVE_TOPIC_DELETE_MODES as _INACTIVE_TOPIC_DELETE_MODES
from magnetar.config import RegionServerSettings, TomlSettings, check_name, check_ports, derive
from magnetar.errors import ConfigError

from .kafka.config import KafkaConfig
from .listeners import AdvertisedListener, internal_listener, parse_advertised_listeners
from .security import SecuritySettings

_MiB = 1024 * 1024
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_RATE_LIMIT_SETTINGS = (  # broker-wide default rates (Pulsar's int messages, long bytes)
    "dispatch_throttling_rate_per_topic_in_msg", "dispatch_throttling_rate_per_topic_in_byte",
    "dispatch_throttling_rate_per_subscription_in_msg", "dispatch_throttling_rate_per_subscribe_in_byte",
    "max_publish_rate_per_topic_in_messages", "max_publish_rate_per_topic_in_bytes",
)


@dataclass(frozen=True)
class BrokerConfig(TomlSettings, RegionServerSettings, SecuritySettings):
    """Settings of one broker.

    Attributes:
        data_dir: holds ``endpoints.json`` (the bound addresses, written once the broker serves).
        zookeeper: the region's local ZooKeeper (``host:port[,host:port]/chroot``): broker registrations,
            bundle ownership, ledgers, managed ledgers and cursors.
        configuration_store: the global configuration store (clusters, tenants, namespaces); empty means
            the same ZooKeeper as ``zookeeper`` (one region).
        cluster: the region (Pulsar: cluster) this broker serves; registered in the configuration store.
        broker_id: the identity registered under ``/brokers/``; default ``"<advertised_host>:<http port>"``.
        bind_host: address the binary-protocol and HTTP servers bind.
        port: binary-protocol port (``pulsar://``); 0 picks a free one (see ``endpoints.json``).
        http_port: admin REST, lookup, ``/metrics`` and ``/health`` port; 0 picks a free one.
        advertised_host: the host clients are told to connect to.
        advertised_listeners: named addresses of this broker, Pulsar's ``advertisedListeners`` format
            ``name:pulsar://host:port[,name:pulsar+ssl://host:port,...]``: a client that gives a listener name
            (pulsar-client ``listener_name``) is answered with that listener's URLs; a ``pulsar://`` URL on a
            local host and another port is served too (see broker/listeners.py). Empty: none.
        internal_listener_name: the listener whose ``pulsar://`` URL is this broker's default (registered,
            answered to clients that give no listener name); empty: the first (Pulsar ``internalListenerName``).
        zk_session_timeout_ms: ZooKeeper session timeout: a dead broker's bundles are re-assigned after it.
        managed_ledger_ensemble_size, managed_ledger_write_quorum, managed_ledger_ack_quorum: E/Qw/Qa of
            the ledgers topics write.
        managed_ledger_max_entries_per_ledger: a topic's ledger rolls over after this many entries...
        managed_ledger_max_ledger_size_bytes: ...or this many bytes...
        managed_ledger_max_ledger_rollover_time_ms: ...or this long after it was created.
        managed_ledger_cursor_persist_interval_ms: cursor positions are persisted at most this often.
        managed_ledger_add_transport: ``"tcp"``: entries go to each bookie's add port (AddEntries over plain
            TCP) when the bookie registered one, over gRPC otherwise; ``"grpc"``: always over gRPC (for
            comparison). Reads and every other bookie call use gRPC.
        default_namespace_bundles: bundles (hash ranges) of a namespace created without explicit ones.
        deduplication_enabled: broker default of namespace deduplication (Pulsar ``brokerDeduplicationEnabled``).
        delayed_delivery_enabled: hold messages with a deliver-at time on Shared / Key_Shared subscriptions until
            that time (Pulsar ``delayedDeliveryEnabled``); off: delivered at once.
        delayed_delivery_tick_time_ms: a subscription's delayed-delivery timer fires at most this often (Pulsar
            ``delayedDeliveryTickTimeMillis``, 1000 there; 0: at each deliver time exactly, never early).
        delayed_delivery_max_delay_ms: > 0: messages delayed further than this are refused (Pulsar
            ``delayedDeliveryMaxDelayInMillis``; 0: no limit). Namespace and topic policies override all three.
        delete_inactive_topics_enabled: delete persistent topics left idle (Pulsar
            ``brokerDeleteInactiveTopicsEnabled``: on there, off here; a namespace policy may turn it on).
        delete_inactive_topics_frequency_ms: how often an owner looks for idle topics (Pulsar 60 s).
        delete_inactive_topics_mode: ``delete_when_no_subscriptions`` or ``delete_when_subscriptions_caught_up``.
        delete_inactive_topics_max_inactive_duration_ms: how long a topic must have been idle (Pulsar: the
            frequency).
        compaction_monitor_interval_ms: how often an owner compacts the topics whose ``compaction_threshold``
            policy (namespace or topic) their uncompacted backlog exceeds (Pulsar
            ``brokerServiceCompactionMonitorIntervalInSeconds``, 60 s).
        subscription_pattern_max_length: the longest topics pattern the broker evaluates for pattern consumers
            (Pulsar ``subscriptionPatternMaxLength``, 50): a longer one is answered unfiltered in topic lists
            (the client filters) and refused for topic-list watchers.
        topic_list_watchers_enabled: serve topic-list watchers (WATCH_TOPIC_LIST) to clients that announce them
            (Pulsar ``enableBrokerTopicListWatcher``); off, they are not advertised and clients poll.
        dispatch_throttling_rate_per_topic_in_msg, dispatch_throttling_rate_per_topic_in_byte: the dispatch
            rate (per second) of each topic's subscriptions together when neither the topic nor its namespace
            sets one (Pulsar ``dispatchThrottlingRatePerTopicInMsg`` / ``...InByte``; 0: off, the default).
        dispatch_throttling_rate_per_subscription_in_msg, dispatch_throttling_rate_per_subscribe_in_byte: the
            same for each subscription (``dispatchThrottlingRatePerSubscriptionInMsg`` /
            ``dispatchThrottlingRatePerSubscribeInByte``).
        max_publish_rate_per_topic_in_messages, max_publish_rate_per_topic_in_bytes: the publish rate (per
            second) of each topic whose topic and namespace set none (``maxPublishRatePerTopicInMessages`` /
            ``...InBytes``; 0: off). Topic policies beat namespace policies, which beat these six.
        max_message_size_bytes: larger messages are refused (Pulsar ``maxMessageSize``).
        max_partitions_per_topic: the largest partition count a partitioned topic may have.
        load_report_interval_ms: how often the load report under ``/brokers/<id>`` is refreshed (when it
            changed; acquiring or releasing a bundle republishes it at once).
        bootstrap: on start, create the cluster entry, tenant ``public`` and namespace ``public/default``
            when missing (as Pulsar standalone does).
        http_request_body_max_bytes: larger REST bodies are refused with 413.
        shutdown_grace_ms: on SIGTERM, how long unloading bundles and closing topics may take in total.
        keep_alive_interval_ms: Pulsar's ``keepAliveIntervalSeconds``, on both sides of the binary protocol: a
            connection that received nothing for this long is sent a PING and closed if the next interval passes
            without an answer (so a silent peer is noticed within two to three intervals); applies to clients'
            connections and to this broker's replication connections to other clusters.
        cluster_service_url, cluster_broker_service_url: what ``bootstrap`` registers for the cluster
            (``http://h1:p1,h2:p2`` and ``pulsar://h1:p1,h2:p2``: every broker of the region, so other
            regions' replicators reach whichever answers); empty: this broker's own URLs.
        replication_enabled: run replicators for topics whose namespace (or topic) names other clusters.
        replication_read_batch_max: entries a replicator reads from its cursor at a time.
        replication_pending_max: entries a replicator has in flight to its remote cluster at most.
        replication_backoff_max_ms: longest wait between attempts to reach a remote cluster.
        replicated_subscriptions_snapshot_interval_ms: how often a topic with replicated subscriptions takes
            a cross-cluster snapshot (Pulsar ``replicatedSubscriptionsSnapshotFrequencyMillis``).
        replicated_subscriptions_snapshot_timeout_ms: a snapshot not completed within this long is dropped.
        backlog_quota_check_enabled: check topics against their backlog quotas periodically (Pulsar
            ``backlogQuotaCheckEnabled``); a producer is checked when it connects either way.
        backlog_quota_check_interval_ms: how often (Pulsar ``backlogQuotaCheckIntervalInSeconds``, 60 s).
        backlog_quota_default_limit_bytes: size quota of topics whose namespace and topic set none (-1: none;
            Pulsar ``backlogQuotaDefaultLimitBytes``).
        backlog_quota_default_limit_s: age quota of such topics (-1: none; ``backlogQuotaDefaultLimitSecond``).
        backlog_quota_default_policy: ``producer_request_hold``, ``producer_exception`` or
            ``consumer_backlog_eviction`` (``backlogQuotaDefaultRetentionPolicy``).
        load_balancer_namespace_maximum_bundles: a namespace is never split past this many bundles (Pulsar
            ``loadBalancerNamespaceMaximumBundles``, 128; admin splits too).
        load_balancer_auto_bundle_split_enabled: each broker splits the bundles it owns that are over one of
            the ``load_balancer_namespace_bundle_max_*`` thresholds (``loadBalancerAutoBundleSplitEnabled``).
        load_balancer_auto_unload_split_bundles_enabled: unload both halves of an automatic split, so
            lookups place them by load (``loadBalancerAutoUnloadSplitBundlesEnabled``).
        load_balancer_bundle_split_interval_ms: how often the automatic split looks at the owned bundles.
        load_balancer_namespace_bundle_max_topics, load_balancer_namespace_bundle_max_sessions (producers +
            consumers), load_balancer_namespace_bundle_max_msg_rate (msg/s in + out),
            load_balancer_namespace_bundle_max_bandwidth_mbytes (MB/s in + out): a bundle over any of them
            is split (Pulsar ``loadBalancerNamespaceBundleMax*``; 0 turns one off).
        load_balancer_shedding_enabled: the leader broker unloads bundles of brokers loaded above the
            average (Pulsar ``loadBalancerSheddingEnabled``, ThresholdShedder).
        load_balancer_shedding_interval_ms: how often (``loadBalancerSheddingIntervalMinutes``, 1 min).
        load_balancer_shedding_grace_period_ms: a shed bundle is not shed again within this long
            (``loadBalancerSheddingGracePeriodMinutes``, 30 min).
        load_balancer_broker_threshold_shedder_percentage: how far (percentage points) above the average
            score a broker may be (``loadBalancerBrokerThresholdShedderPercentage``, 10).
        load_balancer_history_resource_percentage: weight of the past in a broker's smoothed score
            (``loadBalancerHistoryResourcePercentage``, 0.9).
        load_balancer_bundle_unload_min_throughput_threshold_mbytes: a broker that would shed less than this
            (MB/s) sheds nothing (``loadBalancerBundleUnloadMinThroughputThreshold``, 10).
        load_balancer_msg_rate_in_resource_weight, load_balancer_msg_rate_out_resource_weight,
        load_balancer_bandwidth_in_resource_weight, load_balancer_bandwidth_out_resource_weight: how much
            each resource counts in a broker's score (placement and shedding; see broker/load_balance.py).
        tls_port: the binary protocol over TLS (``pulsar+ssl://``, Pulsar ``brokerServicePortTls``); 0: off.
        web_tls_port: the admin REST API, lookups and ``/metrics`` over HTTPS (``webServicePortTls``); 0: off.
        tls_handshake_timeout_ms: a client on ``tls_port`` must finish its TLS handshake within this long.
        broker_client_tls_enabled: reach other brokers and regions at their TLS URLs when they registered one
            (Pulsar ``brokerClientTlsEnabled``; ``broker/client_credentials.py``).
        cluster_service_url_tls, cluster_broker_service_url_tls: the TLS URLs ``bootstrap`` registers for the
            cluster (``https://h1:p1,h2:p2``, ``pulsar+ssl://h1:p1,h2:p2``); empty: this broker's own, if any.
        kafka_listeners: the Kafka protocol listener, ``PLAINTEXT://host:port[,SASL_PLAINTEXT://host:port]``
            (e.g. ``PLAINTEXT://127.0.0.1:9092``; port 0 picks a free one); empty: none (docs/kafka.md).
        kafka_advertised_listeners: what Kafka clients are told (Metadata, the broker's registration); empty:
            the bound listeners, a wildcard host replaced by ``advertised_host``.
        kafka_tenant, kafka_namespace: where short Kafka topic names live (``orders`` is
            ``persistent://public/default/orders``).
        kafka_allow_auto_create_topics, kafka_num_partitions: a missing topic named by a Kafka client is created
            with this many partitions (Kafka ``auto.create.topics.enable``, ``num.partitions``).
        kafka_max_request_size_bytes: a larger Kafka request closes its connection.
        kafka_max_in_flight_requests: requests one Kafka connection may have in progress.
        kafka_fetch_max_wait_ms: the longest a Kafka Fetch long poll is held.

    The other security settings are :class:`broker.security.SecuritySettings`'s: those every server shares
    (:class:`magnetar.auth.settings.SecuritySettings`: ``tls_*``, the certificate and policy of both TLS ports;
    ``authentication_*``, ``authorization_enabled``, ``superuser_roles``, ``token_*``, who may connect and what a
    role may do; ``broker_client_*``, what this broker presents to other brokers and regions for its admin calls
    and replicators), ``proxy_roles`` and ``authenticate_original_auth_data``. See docs/security.md.
    """

    kind = "broker"  # names it in error messages (not a setting: no annotation)

    broker_id: str = ""
    port: int = 6650
    http_port: int = 8080
    advertised_listeners: str = ""
    internal_listener_name: str = ""
    zk_session_timeout_ms: int = 10_000
    managed_ledger_ensemble_size: int = 3
    managed_ledger_write_quorum: int = 2
    managed_ledger_ack_quorum: int = 2
    managed_ledger_max_entries_per_ledger: int = 50_000
    managed_ledger_max_ledger_size_bytes: int = 2048 * _MiB
    managed_ledger_max_ledger_rollover_time_ms: int = 4 * 3600 * 1000
    managed_ledger_cursor_persist_interval_ms: int = 1000
    managed_ledger_add_transport: str = "tcp"
    default_namespace_bundles: int = 4
    broker_entry_metadata_interceptors: tuple[str, ...] = ("timestamp", "index")
    exposing_broker_entry_metadata_to_client_enabled: bool = False
    deduplication_enabled: bool = False
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_time_ms: int = 0
    delayed_delivery_max_delay_ms: int = 0
    delete_inactive_topics_enabled: bool = False
    delete_inactive_topics_frequency_ms: int = 60_000
    delete_inactive_topics_mode: str = "delete_when_no_subscriptions"
    delete_inactive_topics_max_inactive_duration_ms: int = 60_000
    compaction_monitor_interval_ms: int = 60_000
    subscription_pattern_max_length: int = 50
    topic_list_watchers_enabled: bool = True
    dispatch_throttling_rate_per_topic_in_msg: int = 0
    dispatch_throttling_rate_per_topic_in_byte: int = 0
    dispatch_throttling_rate_per_subscription_in_msg: int = 0
    dispatch_throttling_rate_per_subscribe_in_byte: int = 0
    max_publish_rate_per_topic_in_messages: int = 0
    max_publish_rate_per_topic_in_bytes: int = 0
    max_message_size_bytes: int = 5 * _MiB
    max_partitions_per_topic: int = 4096
    load_report_interval_ms: int = 5000
    bootstrap: bool = True
    http_request_body_max_bytes: int = 1 * _MiB
    shutdown_grace_ms: int = 8_000
    keep_alive_interval_ms: int = 30_000
    cluster_service_url: str = ""
    cluster_broker_service_url: str = ""
    replication_enabled: bool = True
    replication_read_batch_max: int = 100
    replication_pending_max: int = 500
    replication_backoff_max_ms: int = 5_000
    replicated_subscriptions_snapshot_interval_ms: int = 1_000
    replicated_subscriptions_snapshot_timeout_ms: int = 30_000
    backlog_quota_check_enabled: bool = True
    backlog_quota_check_interval_ms: int = 60_000
    backlog_quota_default_limit_bytes: int = -1
    backlog_quota_default_limit_s: int = -1
    backlog_quota_default_policy: str = "producer_request_hold"
    load_balancer_namespace_maximum_bundles: int = 128
    load_balancer_auto_bundle_split_enabled: bool = True
    load_balancer_auto_unload_split_bundles_enabled: bool = True
    load_balancer_bundle_split_interval_ms: int = 60_000
    load_balancer_namespace_bundle_max_topics: int = 1000
    load_balancer_namespace_bundle_max_sessions: int = 1000
    load_balancer_namespace_bundle_max_msg_rate: int = 30_000
    load_balancer_namespace_bundle_max_bandwidth_mbytes: int = 100
    load_balancer_shedding_enabled: bool = True
    load_balancer_shedding_interval_ms: int = 60_000
    load_balancer_shedding_grace_period_ms: int = 30 * 60_000
    load_balancer_broker_threshold_shedder_percentage: int = 10
    load_balancer_history_resource_percentage: float = 0.9
    load_balancer_bundle_unload_min_throughput_threshold_mbytes: float = 10.0
    load_balancer_msg_rate_in_resource_weight: float = 1.0
    load_balancer_msg_rate_out_resource_weight: float = 1.0
    load_balancer_bandwidth_in_resource_weight: float = 1.0
    load_balancer_bandwidth_out_resource_weight: float = 1.0
    tls_port: int = 0
    web_tls_port: int = 0
    tls_handshake_timeout_ms: int = 10_000
    broker_client_tls_enabled: bool = False
    cluster_service_url_tls: str = ""
    cluster_broker_service_url_tls: str = ""
    kafka_listeners: str = ""
    kafka_advertised_listeners: str = ""
    kafka_tenant: str = "public"
    kafka_namespace: str = "default"
    kafka_allow_auto_create_topics: bool = True
    kafka_num_partitions: int = 1
    kafka_max_request_size_bytes: int = 100 * _MiB
    kafka_max_in_flight_requests: int = 64
    kafka_fetch_max_wait_ms: int = 30_000

    # -- derived ---------------------------------------------------------------------------------------

    @property
    def listeners(self) -> tuple[AdvertisedListener, ...]:
        """``advertised_listeners`` parsed (validated at construction)."""
        return parse_advertised_listeners(self.advertised_listeners)

    def kafka_config(self) -> KafkaConfig:
        """The ``kafka_*`` settings as the Kafka listener's :class:`~broker.kafka.config.KafkaConfig`."""
        return derive(KafkaConfig, self, prefix="kafka_", renames={
            "advertised_host": "advertised_host", "max_partitions_per_topic": "max_partitions_per_topic",
            "max_message_size_bytes": "max_message_size_bytes"})

    def effective_broker_id(self, http_port: int) -> str:
        """The configured id, or ``advertised_host:http_port`` (Pulsar's lookup service address)."""
        return self.broker_id or f"{self.advertised_host}:{http_port}"

    def validate(self) -> None:
        """Raises ConfigError naming the first inconsistent setting."""
        self.validate_region_server()
        if self.broker_id:
            check_name("broker_id", self.broker_id)
        check_ports(self, ("port", "http_port", "tls_port", "web_tls_port"))
        internal_listener(self.listeners, self.internal_listener_name)  # raises ConfigError
        positive = (
            "zk_session_timeout_ms", "managed_ledger_ensemble_size", "managed_ledger_write_quorum",
            "managed_ledger_ack_quorum", "managed_ledger_max_entries_per_ledger",
            "managed_ledger_max_ledger_size_bytes", "managed_ledger_max_ledger_rollover_time_ms",
            "managed_ledger_cursor_persist_interval_ms", "default_namespace_bundles", "max_message_size_bytes",
            "max_partitions_per_topic", "load_report_interval_ms", "http_request_body_max_bytes",
            "replication_read_batch_max", "replication_pending_max", "replication_backoff_max_ms",
            "keep_alive_interval_ms",
            "replicated_subscriptions_snapshot_interval_ms", "replicated_subscriptions_snapshot_timeout_ms",
            "backlog_quota_check_interval_ms", "load_balancer_bundle_split_interval_ms",
            "load_balancer_shedding_interval_ms", "load_balancer_namespace_maximum_bundles",
            "delete_inactive_topics_frequency_ms", "delete_inactive_topics_max_inactive_duration_ms",
            "compaction_monitor_interval_ms", "subscription_pattern_max_length", "tls_handshake_timeout_ms",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        if self.managed_ledger_add_transport not in ADD_TRANSPORTS:
            raise ConfigError(f"managed_ledger_add_transport must be one of {', '.join(ADD_TRANSPORTS)}, "
                              f"not {self.managed_ledger_add_transport!r}")
        if self.managed_ledger_max_entries_per_ledger >= 1 << 32:
            # a replicator's sequence id is ledger_id << 32 | entry_id (broker.service.topics.dedup)
            raise ConfigError(f"managed_ledger_max_entries_per_ledger must be below 2**32, "
                              f"not {self.managed_ledger_max_entries_per_ledger}")
        for name, scheme in (("cluster_service_url", "http"), ("cluster_broker_service_url", "pulsar"),
                             ("cluster_service_url_tls", "http"), ("cluster_broker_service_url_tls", "pulsar")):
            value = getattr(self, name)
            if value and (not value.startswith(f"{scheme}://") and not value.startswith(f"{scheme}s://")
                          and not value.startswith(f"{scheme}+ssl://") or any(c.isspace() for c in value)):
                raise ConfigError(f"{name} must be a {scheme}:// URL (host:port[,host:port...]), not {value!r}")
        for name in ("backlog_quota_default_limit_bytes", "backlog_quota_default_limit_s"):
            if getattr(self, name) < -1:
                raise ConfigError(f"{name} must be -1 (no limit) or more, not {getattr(self, name)}")
        if self.backlog_quota_default_limit_s >= 1 << 31:
            raise ConfigError(f"backlog_quota_default_limit_s must be below 2**31, "
                              f"not {self.backlog_quota_default_limit_s}")
        if self.backlog_quota_default_policy not in _BACKLOG_QUOTA_POLICIES:
            raise ConfigError(f"backlog_quota_default_policy must be one of {', '.join(_BACKLOG_QUOTA_POLICIES)}, "
                              f"not {self.backlog_quota_default_policy!r}")
        for name in ("delayed_delivery_tick_time_ms", "delayed_delivery_max_delay_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")
        if self.delete_inactive_topics_mode not in _INACTIVE_TOPIC_DELETE_MODES:
            raise ConfigError(f"delete_inactive_topics_mode must be one of {', '.join(_INACTIVE_TOPIC_DELETE_MODES)}, "
                              f"not {self.delete_inactive_topics_mode!r}")
        self._validate_rate_limits()
        self._validate_load_balancer()
        self.kafka_config().validate()
        from broker.managed_ledger.interceptor import parse_interceptor_names  # lazily: it loads the protocol
        try:
            parse_interceptor_names(self.broker_entry_metadata_interceptors)
        except ValueError as e:
            raise ConfigError(f"broker_entry_metadata_interceptors: {e}") from None
        self.validate_security()
        if self.shutdown_grace_ms < 0:
            raise ConfigError(f"shutdown_grace_ms must not be negative, not {self.shutdown_grace_ms}")
        e, qw, qa = (self.managed_ledger_ensemble_size, self.managed_ledger_write_quorum,
                     self.managed_ledger_ack_quorum)
        if not qa <= qw <= e:
            raise ConfigError(f"managed ledger quorums need ack_quorum <= write_quorum <= ensemble_size, "
                              f"got E={e} Qw={qw} Qa={qa}")
        if self.default_namespace_bundles > 1024:
            raise ConfigError(f"default_namespace_bundles must be at most 1024, not {self.default_namespace_bundles}")
        if self.max_partitions_per_topic > 1 << 20:
            raise ConfigError(f"max_partitions_per_topic must be at most {1 << 20}")

    def _validate_rate_limits(self) -> None:
        for name in _RATE_LIMIT_SETTINGS:
            value = getattr(self, name)
            maximum = _INT64_MAX if name.endswith(("_byte", "_bytes")) else _INT32_MAX
            if not 0 <= value <= maximum:
                raise ConfigError(f"{name} must be 0 (off) or a positive rate per second up to {maximum}, "
                                  f"not {value}")

    def _validate_load_balancer(self) -> None:
        if self.load_balancer_namespace_maximum_bundles > 1024:
            raise ConfigError(f"load_balancer_namespace_maximum_bundles must be at most 1024, "
                              f"not {self.load_balancer_namespace_maximum_bundles}")
        non_negative = (
            "load_balancer_namespace_bundle_max_topics", "load_balancer_namespace_bundle_max_sessions",
            "load_balancer_namespace_bundle_max_msg_rate", "load_balancer_namespace_bundle_max_bandwidth_mbytes",
            "load_balancer_shedding_grace_period_ms", "load_balancer_broker_threshold_shedder_percentage",
            "load_balancer_bundle_unload_min_throughput_threshold_mbytes",
            "load_balancer_msg_rate_in_resource_weight", "load_balancer_msg_rate_out_resource_weight",
            "load_balancer_bandwidth_in_resource_weight", "load_balancer_bandwidth_out_resource_weight",
        )
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")
        if not 0 <= self.load_balancer_history_resource_percentage < 1:
            raise ConfigError(f"load_balancer_history_resource_percentage must be in [0, 1), "
                              f"not {self.load_balancer_history_resource_percentage}")

