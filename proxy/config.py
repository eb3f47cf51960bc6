"""A proxy's settings: one typed, documented dataclass, loaded from TOML (``magnetar proxy --config proxy.toml``).

Names are Pulsar's ``proxy.conf`` keys in snake_case where Pulsar has one (``maxConcurrentInboundConnections`` is
``max_concurrent_inbound_connections``), units last (``_ms``, ``_bytes``). Unknown keys are an error; loading
is :mod:`magnetar.config`'s, shared by every process kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.auth.settings import BrokerClientSettings, SecuritySettings
from magnetar.config import RegionServerSettings, TomlSettings, check_ports, derive
from magnetar.errors import ConfigError

from .scheduling import SLICE_US_MAX, SLICE_US_MIN

_MiB = 1024 * 1024


@dataclass(frozen=True)
class ProxyConfig(TomlSettings, RegionServerSettings, SecuritySettings):
    """Settings of one proxy.

    Attributes:
        data_dir: holds ``endpoints.json`` (the bound addresses, written once the proxy serves).
        zookeeper: the region's ZooKeeper (``host:port[,host:port]/chroot``): the proxy reads the brokers
            registered under ``/brokers`` there, which are the only brokers it forwards to.
        configuration_store: the global configuration store; empty means the same ZooKeeper as ``zookeeper``.
        cluster: the region this proxy fronts (logs; authorization reads its tenants' policies).
        bind_host: address every listener binds.
        advertised_host: the host this proxy is reached at (written to ``endpoints.json``).
        port: plain ``pulsar://`` binary protocol (Pulsar ``servicePort``), for development; 0: not served.
        tls_port: ``pulsar+ssl://`` binary protocol (Pulsar ``servicePortTls``); 0: not served.
        web_port: plain HTTP: ``/admin/v2``, ``/lookup/v2`` forwarded to brokers, ``/metrics``, ``/health``
            (Pulsar ``webServicePort``); 0: not served.
        web_tls_port: the same over HTTPS (Pulsar ``webServicePortTls``); 0: not served.
        tls_enabled_with_broker: connect to brokers over TLS, to their registered ``pulsar+ssl://`` URLs
            (Pulsar ``tlsEnabledWithBroker``); a broker registered without one is then not a target. Off:
            plain ``pulsar://`` URLs only.
        tls_hostname_verification_enabled: check a broker's certificate names the host connected to, during
            the TLS handshake, before any credential is sent (Pulsar ``tlsHostnameVerificationEnabled``).
        forward_authorization_credentials: also pass the client's credentials to the broker
            (``original_auth_data``, Pulsar ``forwardAuthorizationCredentials``), so the broker can refresh
            them on a forwarded connection; off, the proxy closes a forwarded connection whose credentials
            expire and pulsar-client reconnects with fresh ones.
        max_concurrent_inbound_connections: client connections open at once; more are closed at accept
            (Pulsar ``maxConcurrentInboundConnections``).
        max_concurrent_inbound_connections_per_ip: the same per client address; 0: no limit
            (Pulsar ``maxConcurrentInboundConnectionsPerIp``).
        max_concurrent_lookup_requests: LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE and GET_SCHEMA
            being answered at once over all connections; more are answered TooManyRequests (Pulsar
            ``maxConcurrentLookupRequests``).
        handshake_timeout_ms: a client must finish TLS and CONNECT (and the proxy its connection to the
            broker) within this long after it connected, or it is closed.
        keep_alive_interval_ms: a lookup connection quiet this long is sent PING, and closed when another
            interval passes in silence (Pulsar ``keepAliveIntervalSeconds``). Forwarded connections carry the
            client's and the broker's own PINGs.
        lookup_timeout_ms: how long a broker may take to answer one lookup the proxy asks it.
        broker_connect_timeout_ms: TCP, TLS and CONNECT towards a broker.
        max_lookup_redirects: Redirect answers the proxy follows for one lookup (Pulsar: 10).
        relay_buffer_bytes: bytes queued towards a slow reader (client or broker) before the proxy stops
            reading from the other side.
        zk_session_timeout_ms: ZooKeeper session timeout.
        http_request_body_max_bytes: larger admin REST bodies are refused with 413.
        http_timeout_ms: how long a broker may take to answer a forwarded HTTP request.
        shutdown_grace_ms: on SIGTERM, how long open connections get to finish before they are cut.
        heap_trim_after_closed_connections: once this many client connections closed since the last time, the
            proxy gives the heap they freed back to the system (glibc's ``malloc_trim``, when at least 16 MiB
            of it is free; see :mod:`proxy.memory`); 0: never.
        heap_trim_check_interval_ms: how often that is checked.
        event_loop_slice_us: the CPU slice the proxy's event-loop thread asks Linux's scheduler for (Linux
            6.12+, 100 to 100,000): a short one gets the loop running sooner after it wakes on a busy machine,
            which is most of what the proxy adds to latency there (see :mod:`proxy.scheduling`); 0: the
            kernel's default.

    The other security settings are :class:`magnetar.auth.settings.SecuritySettings`'s, shared with brokers:
    ``tls_*`` (the certificate and policy of both TLS ports), ``authentication_*`` and ``token_*`` (who may connect:
    lookups and forwarded connections; ``authentication_refresh_check_ms`` is how often lookup connections whose
    credentials expired are challenged, then closed), ``authorization_enabled`` and ``superuser_roles`` (lookups
    LOOKUP, PARTITIONED_METADATA, GET_SCHEMA need ``produce`` or ``consume`` on the topic or its namespace,
    GET_TOPICS_OF_NAMESPACE on the namespace; a refused one is answered AuthorizationError), ``broker_client_*``
    (how the proxy authenticates to brokers, and the CA their certificates chain to).
    """

    kind = "proxy"  # names it in error messages (not a setting: no annotation)

    port: int = 0
    tls_port: int = 6651
    web_port: int = 8080
    web_tls_port: int = 0
    tls_enabled_with_broker: bool = False
    tls_hostname_verification_enabled: bool = True
    forward_authorization_credentials: bool = False
    max_concurrent_inbound_connections: int = 10_000
    max_concurrent_inbound_connections_per_ip: int = 0
    max_concurrent_lookup_requests: int = 50_000
    handshake_timeout_ms: int = 10_000
    keep_alive_interval_ms: int = 30_000
    lookup_timeout_ms: int = 30_000
    broker_connect_timeout_ms: int = 10_000
    max_lookup_redirects: int = 10
    relay_buffer_bytes: int = 1 * _MiB
    zk_session_timeout_ms: int = 10_000
    http_request_body_max_bytes: int = 5 * _MiB
    http_timeout_ms: int = 30_000
    shutdown_grace_ms: int = 5_000
    heap_trim_after_closed_connections: int = 1_000
    heap_trim_check_interval_ms: int = 10_000
    event_loop_slice_us: int = 100

    # -- derived ---------------------------------------------------------------------------------------

    def broker_client_settings(self) -> BrokerClientSettings:
        """``broker_client_*``; brokers are reached over TLS with ``tls_enabled_with_broker`` (Pulsar's name)."""
        return derive(BrokerClientSettings, self, prefix="broker_client_",
                      renames={"tls_enabled": "tls_enabled_with_broker"})

    def validate(self) -> None:
        """Raises ConfigError naming the first inconsistent setting."""
        self.validate_region_server()
        check_ports(self, ("port", "tls_port", "web_port", "web_tls_port"), zero=" (0: not served)")
        if not self.port and not self.tls_port:
            raise ConfigError("port and tls_port are both 0: the proxy would serve no client (set tls_port)")
        self.validate_security()
        if self.broker_client_auth_method == "tls" and not self.tls_enabled_with_broker:
            raise ConfigError("broker_client_auth_method \"tls\" needs tls_enabled_with_broker (a client "
                              "certificate travels only in a TLS handshake)")
        positive = ("max_concurrent_inbound_connections", "max_concurrent_lookup_requests", "handshake_timeout_ms",
                    "keep_alive_interval_ms", "lookup_timeout_ms", "broker_connect_timeout_ms",
                    "max_lookup_redirects", "relay_buffer_bytes", "zk_session_timeout_ms",
                    "http_request_body_max_bytes", "http_timeout_ms", "shutdown_grace_ms",
                    "heap_trim_check_interval_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        if self.event_loop_slice_us and not SLICE_US_MIN <= self.event_loop_slice_us <= SLICE_US_MAX:
            raise ConfigError(f"event_loop_slice_us must be 0 (the kernel's default) or {SLICE_US_MIN}.."
                              f"{SLICE_US_MAX}, not {self.event_loop_slice_us}")
        if self.heap_trim_after_closed_connections < 0:
            raise ConfigError(f"heap_trim_after_closed_connections must be 0 (never) or more, "
                              f"not {self.heap_trim_after_closed_connections}")
        if self.max_concurrent_inbound_connections_per_ip < 0:
            raise ConfigError(f"max_concurrent_inbound_connections_per_ip must be 0 (no limit) or more, "
                              f"not {self.max_concurrent_inbound_connections_per_ip}")
