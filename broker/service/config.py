"""Settings of the binary-protocol service (one typed dataclass; the broker process fills it from its TOML)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServiceConfig:
    """What the binary-protocol service needs to know. Units are in the names.

    Attributes:
        host: interface to listen on.
        port: TCP port for ``pulsar://`` (0: any free port; ``BrokerService.port`` tells which).
        advertised_address: host name clients are told to connect to ("" = ``host``).
        extra_listen_addresses: more ``(host, port)`` to serve the same protocol on (the ports of advertised
            listeners other than ``port``; see broker/listeners.py).
        max_message_size_bytes: advertised in CONNECTED (clients chunk or refuse bigger messages); a SEND
            whose entry exceeds it is refused.
        keep_alive_interval_s: PING after this long without traffic; close when the next interval passes
            without an answer.
        dispatcher_max_read_batch: most entries a dispatcher reads from a cursor at once.
        dispatcher_max_round_robin_batch: most messages a Shared dispatcher gives one consumer per turn.
        max_unacked_messages_per_consumer: a Shared/Key_Shared consumer stops receiving when it holds this
            many unacknowledged messages (0 = no limit).
        max_pending_publish_per_connection: stop reading a connection while this many SENDs await storage.
        max_redelivery_replay_entries: bound on positions a Shared dispatcher holds for redelivery before it
            stops reading new entries.
        dedup_snapshot_interval_entries: persist the deduplication state (``pulsar.dedup`` cursor) after
            this many entries.
        dedup_recent_positions_max: how many (producer, sequence id) -> position answers are remembered
            for duplicate receipts.
        stats_update_interval_s: how often rates (msg/s, bytes/s) are recomputed.
        subscription_ack_flush_interval_s: cursor state is flushed at least this often by the service
            (the managed ledger may persist more often).
        reader_seek_reconnect_grace_s: a reader (non-durable) subscription whose consumers a seek disconnected
            is kept this long, at its new position, for them to reconnect to (``Subscription.reset``).
        require_namespace: refuse topics whose namespace is absent from the configuration store.
        deduplication_enabled: the broker-wide default for namespaces whose policy leaves it unset.
        delayed_delivery_enabled: hold messages whose ``deliver_at_time`` is in the future on Shared and
            Key_Shared subscriptions until that time (Pulsar ``delayedDeliveryEnabled``); off: deliver at once.
        delayed_delivery_max_held_entries: most entries one subscription holds for delayed delivery (about
            350 bytes each); when full, it reads no new entries until held ones come due (``topics/delayed_tracker.py``).
        delayed_delivery_tick_time_ms: the delayed-delivery timer of a subscription fires at most this often
            (Pulsar ``delayedDeliveryTickTimeMillis``, 1000 there); 0: at each deliver time exactly.
        delayed_delivery_max_delay_ms: > 0: a message whose deliver time is further than this past its publish
            time is refused with NotAllowedError (Pulsar ``delayedDeliveryMaxDelayInMillis``); 0: no limit.
            Namespace and topic policies override these three (``policies/delayed_delivery.py``).
        delete_inactive_topics_enabled: delete persistent topics left idle (Pulsar
            ``brokerDeleteInactiveTopicsEnabled``, on there; off here unless a namespace policy says so).
        delete_inactive_topics_frequency_s: how often the owner looks for them
            (``brokerDeleteInactiveTopicsFrequencySeconds``).
        delete_inactive_topics_mode: ``delete_when_no_subscriptions`` or ``delete_when_subscriptions_caught_up``
            (``brokerDeleteInactiveTopicsMode``).
        delete_inactive_topics_max_inactive_duration_s: how long a topic must have been idle
            (``brokerDeleteInactiveTopicsMaxInactiveDurationSeconds``; Pulsar's default is the frequency).
        backlog_quota_check_enabled: check topics' backlog quotas periodically (Pulsar
            ``backlogQuotaCheckEnabled``); producers are still checked against them when they connect.
        backlog_quota_check_interval_s: how often (Pulsar ``backlogQuotaCheckIntervalInSeconds``).
        backlog_quota_default_limit_bytes: the size quota of topics whose namespace and topic set none
            (-1: none; Pulsar ``backlogQuotaDefaultLimitBytes``).
        backlog_quota_default_limit_s: the age quota of such topics (-1: none; ``backlogQuotaDefaultLimitSecond``).
        backlog_quota_default_policy: what the default quotas do when exceeded (``producer_request_hold``,
            ``producer_exception`` or ``consumer_backlog_eviction``).
        compaction_monitor_interval_s: how often the owner compacts topics whose namespace or topic policy
            sets a ``compaction_threshold`` their uncompacted backlog exceeds (Pulsar
            ``brokerServiceCompactionMonitorIntervalInSeconds``; ``policies/auto_compaction.py``).
        dispatch_throttling_rate_per_topic_in_msg, dispatch_throttling_rate_per_topic_in_byte,
        dispatch_throttling_rate_per_subscription_in_msg, dispatch_throttling_rate_per_subscribe_in_byte,
        max_publish_rate_per_topic_in_messages, max_publish_rate_per_topic_in_bytes: the broker's default rate
            limits per second (Pulsar's names; 0: off), for topics whose topic and namespace policies set
            none (``rate_policy.py``).
        subscription_pattern_max_length: the longest topics pattern the broker evaluates (Pulsar
            ``subscriptionPatternMaxLength``, 50 there too): a longer one in GET_TOPICS_OF_NAMESPACE is answered
            unfiltered (the client filters), in WATCH_TOPIC_LIST refused (``topic_list.py``).
        topic_list_watchers_enabled: serve WATCH_TOPIC_LIST to clients that announce it in CONNECT (Pulsar
            ``enableBrokerTopicListWatcher``); advertised in CONNECTED only when on (``topic_list_watch.py``).
        exposing_broker_entry_metadata_to_client_enabled: MESSAGE frames keep the stored broker entry metadata
            for clients whose CONNECT set ``supports_broker_entry_metadata`` (Pulsar
            ``exposingBrokerEntryMetadataToClientEnabled``); otherwise it is stripped (``session/consumer_endpoints.py``).
        server_version: announced in CONNECTED.
        tls_port: the same protocol over TLS (``pulsar+ssl://``); 0: off. The TLS handshake is done per
            connection (``session/server.py``) so refused handshakes are counted by reason.
        tls_cert_file, tls_key_file, tls_trust_certs_file, tls_require_trusted_client_cert, tls_min_protocol,
        tls_ciphers: the TLS port's certificate and policy (files reloaded when they change).
        tls_handshake_timeout_s: a TLS client must finish its handshake within this long.
        authentication_enabled, authentication_providers, authorization_enabled, superuser_roles, proxy_roles,
        authenticate_original_auth_data, token_secret_key, token_public_key, token_auth_claim, token_audience_claim, token_audience: who may
            connect and what it may do (``broker/security.py``; CONNECT and the commands: ``session/auth.py``).
        authentication_refresh_check_s: how often connections' credentials are checked (AUTH_CHALLENGE before
            they expire; closed when they expired without a refresh).

    The security settings are the broker's (``broker.security.SecuritySettings``, documented and checked there),
    copied by ``derive`` like the rest; the service turns them back into those settings with ``derive`` to build
    its TLS context and, when the process gives it none, its ``BrokerSecurity``. They are copies, not inherited:
    this dataclass is mutable and the broker's settings are frozen, and tests build it field by field.
    """

    host: str = "127.0.0.1"
    port: int = 0
    advertised_address: str = ""
    extra_listen_addresses: tuple[tuple[str, int], ...] = ()
    max_message_size_bytes: int = 5 * 1024 * 1024
    keep_alive_interval_s: float = 30.0
    dispatcher_max_read_batch: int = 100
    dispatcher_max_round_robin_batch: int = 20
    max_unacked_messages_per_consumer: int = 50_000
    max_pending_publish_per_connection: int = 1000
    max_redelivery_replay_entries: int = 10_000
    dedup_snapshot_interval_entries: int = 1000
    dedup_recent_positions_max: int = 10_000
    stats_update_interval_s: float = 10.0
    subscription_ack_flush_interval_s: float = 1.0
    reader_seek_reconnect_grace_s: float = 60.0
    require_namespace: bool = True
    deduplication_enabled: bool = False
    delayed_delivery_enabled: bool = True
    delayed_delivery_max_held_entries: int = 100_000
    delayed_delivery_tick_time_ms: int = 0
    delayed_delivery_max_delay_ms: int = 0
    delete_inactive_topics_enabled: bool = False
    delete_inactive_topics_frequency_s: float = 60.0
    delete_inactive_topics_mode: str = "delete_when_no_subscriptions"
    delete_inactive_topics_max_inactive_duration_s: float = 60.0
    backlog_quota_check_enabled: bool = True
    backlog_quota_check_interval_s: float = 60.0
    backlog_quota_default_limit_bytes: int = -1
    backlog_quota_default_limit_s: int = -1
    backlog_quota_default_policy: str = "producer_request_hold"
    compaction_monitor_interval_s: float = 60.0
    dispatch_throttling_rate_per_topic_in_msg: int = 0
    dispatch_throttling_rate_per_topic_in_byte: int = 0
    dispatch_throttling_rate_per_subscription_in_msg: int = 0
    dispatch_throttling_rate_per_subscribe_in_byte: int = 0
    max_publish_rate_per_topic_in_messages: int = 0
    max_publish_rate_per_topic_in_bytes: int = 0
    subscription_pattern_max_length: int = 50
    topic_list_watchers_enabled: bool = True
    exposing_broker_entry_metadata_to_client_enabled: bool = False
    server_version: str = "Magnetar 0.1"
    tls_port: int = 0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_trust_certs_file: str = ""
    tls_require_trusted_client_cert: bool = False
    tls_min_protocol: str = "TLSv1.2"
    tls_ciphers: str = ""
    tls_handshake_timeout_s: float = 10.0
    authentication_enabled: bool = False
    authentication_providers: tuple[str, ...] = ()
    authorization_enabled: bool = False
    superuser_roles: tuple[str, ...] = ()
    proxy_roles: tuple[str, ...] = ()
    authenticate_original_auth_data: bool = False
    token_secret_key: str = ""
    token_public_key: str = ""
    token_auth_claim: str = "sub"
    token_audience_claim: str = "aud"
    token_audience: str = ""
    authentication_refresh_check_s: float = 60.0
