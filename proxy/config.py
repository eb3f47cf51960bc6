"""A proxy's settings: one typed, documented dataclass, loaded from TOML (``magnetar proxy --config proxy.toml``).

Names are Pulsar's ``proxy.conf`` keys in snake_case where Pulsar has one (``maxConcurrentInboundConnections`` is
``max_concurrent_inbound_connections``), units last (``_ms``, ``_bytes``). Unknown keys are an error; loading
is :mod:`magnetar.config`'s, shared by every process kind.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

from magnetar.config import TomlSettings
from magnetar.errors import ConfigError

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-=:]+")
_MiB = 1024 * 1024
_TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
_BROKER_AUTH_METHODS = ("", "token", "tls")
_PROVIDERS = ("tls", "token")


@dataclass(frozen=True)
class ProxyConfig(TomlSettings):
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
        tls_cert_file, tls_key_file: the proxy's certificate chain and private key (PEM), for both TLS ports.
        tls_trust_certs_file: CA certificates (PEM) client certificates must chain to.
        tls_require_trusted_client_cert: refuse TLS clients without a certificate from ``tls_trust_certs_file``
            (Pulsar ``tlsRequireTrustedClientCertOnConnect``).
        tls_min_protocol: ``TLSv1.2`` or ``TLSv1.3``.
        tls_ciphers: an OpenSSL cipher string for TLS 1.2 ("": OpenSSL's default).
        tls_enabled_with_broker: connect to brokers over TLS, to their registered ``pulsar+ssl://`` URLs
            (Pulsar ``tlsEnabledWithBroker``); a broker registered without one is then not a target. Off:
            plain ``pulsar://`` URLs only.
        tls_hostname_verification_enabled: check a broker's certificate names the host connected to, during
            the TLS handshake, before any credential is sent (Pulsar ``tlsHostnameVerificationEnabled``).
        authentication_enabled: clients must authenticate (Pulsar ``authenticationEnabled``): CONNECT's
            credentials, or the client certificate of the TLS handshake, give the client's role; refused clients
            get ERROR AuthenticationError and are closed.
        authentication_providers: ``"tls"`` (role = CN of the verified client certificate) and/or ``"token"``
            (a JWT in CONNECT's auth data or ``Authorization: Bearer``).
        token_secret_key, token_public_key: the key tokens are verified with (HS256 secret, or RS256/ES256
            public key), as ``data:;base64,<b64>`` or ``file:///path`` (Pulsar ``tokenSecretKey``,
            ``tokenPublicKey``).
        token_auth_claim: the claim naming the role ("sub"; Pulsar ``tokenAuthClaim``).
        token_audience_claim, token_audience: when ``token_audience`` is set, the token's audience claim must
            contain it (Pulsar ``tokenAudienceClaim``, ``tokenAudience``).
        authentication_refresh_check_ms: how often the proxy looks for lookup connections whose credentials
            expired; such a connection is sent AUTH_CHALLENGE and closed if the next look finds it still
            expired (Pulsar ``authenticationRefreshCheckSeconds``).
        forward_authorization_credentials: also pass the client's credentials to the broker
            (``original_auth_data``, Pulsar ``forwardAuthorizationCredentials``), so the broker can refresh
            them on a forwarded connection; off, the proxy closes a forwarded connection whose credentials
            expire and pulsar-client reconnects with fresh ones.
        authorization_enabled: lookups (LOOKUP, PARTITIONED_METADATA, GET_SCHEMA: ``produce`` or ``consume`` on
            the topic or its namespace; GET_TOPICS_OF_NAMESPACE: on the namespace) are checked against the grants
            in the configuration store; a refused one is answered AuthorizationError (Pulsar
            ``authorizationEnabled``). Needs authentication.
        superuser_roles: roles allowed everything (Pulsar ``superUserRoles``).
        broker_client_trust_certs_file: CA certificates (PEM) broker certificates must chain to ("": the
            system's).
        broker_client_auth_method: how the proxy authenticates to brokers: ``token``, ``tls`` or "" (none).
        broker_client_auth_params: token: ``token:<jwt>`` or ``file:///path``; tls: ``cert_file,key_file``.
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
    """

    kind = "proxy"  # names it in error messages (not a setting: no annotation)

    data_dir: pathlib.Path
    zookeeper: str
    configuration_store: str = ""
    cluster: str = "standalone"
    bind_host: str = "127.0.0.1"
    advertised_host: str = "127.0.0.1"
    port: int = 0
    tls_port: int = 6651
    web_port: int = 8080
    web_tls_port: int = 0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_trust_certs_file: str = ""
    tls_require_trusted_client_cert: bool = False
    tls_min_protocol: str = "TLSv1.2"
    tls_ciphers: str = ""
    tls_enabled_with_broker: bool = False
    tls_hostname_verification_enabled: bool = True
    authentication_enabled: bool = False
    authentication_providers: tuple[str, ...] = ()
    token_secret_key: str = ""
    token_public_key: str = ""
    token_auth_claim: str = "sub"
    token_audience_claim: str = "aud"
    token_audience: str = ""
    authentication_refresh_check_ms: int = 60_000
    forward_authorization_credentials: bool = False
    authorization_enabled: bool = False
    superuser_roles: tuple[str, ...] = ()
    broker_client_trust_certs_file: str = ""
    broker_client_auth_method: str = ""
    broker_client_auth_params: str = ""
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", pathlib.Path(self.data_dir))
        self.validate()

    # -- derived ---------------------------------------------------------------------------------------

    @property
    def endpoints_path(self) -> pathlib.Path:
        return self.data_dir / "endpoints.json"

    @property
    def configuration_store_connect(self) -> str:
        """The global store's connect string (the region's ZooKeeper when none is configured)."""
        return self.configuration_store or self.zookeeper

    @property
    def serves_tls(self) -> bool:
        return bool(self.tls_port or self.web_tls_port)

    def validate(self) -> None:
        """Raises ConfigError naming the first inconsistent setting."""
        if str(self.data_dir) in ("", "."):
            raise ConfigError("data_dir must not be empty")
        if not self.zookeeper.strip():
            raise ConfigError("zookeeper must name the region's ZooKeeper (host:port[/chroot]): the proxy "
                              "forwards only to the brokers registered there")
        for name in ("zookeeper", "configuration_store"):
            if any(c.isspace() for c in getattr(self, name)):
                raise ConfigError(f"{name} must not contain spaces: {getattr(self, name)!r}")
        if not _NAME_RE.fullmatch(self.cluster):
            raise ConfigError(f"cluster {self.cluster!r} is not a valid name (letters, digits, '-_.=:')")
        for name in ("bind_host", "advertised_host"):
            value = getattr(self, name)
            if not value or any(c.isspace() for c in value) or "/" in value:
                raise ConfigError(f"{name} is not a host name or address: {value!r}")
        self._validate_ports()
        self._validate_tls()
        self._validate_authentication()
        positive = ("authentication_refresh_check_ms", "max_concurrent_inbound_connections", "max_concurrent_lookup_requests", "handshake_timeout_ms",
                    "keep_alive_interval_ms", "lookup_timeout_ms", "broker_connect_timeout_ms",
                    "max_lookup_redirects", "relay_buffer_bytes", "zk_session_timeout_ms",
                    "http_request_body_max_bytes", "http_timeout_ms", "shutdown_grace_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        if self.max_concurrent_inbound_connections_per_ip < 0:
            raise ConfigError(f"max_concurrent_inbound_connections_per_ip must be 0 (no limit) or more, "
                              f"not {self.max_concurrent_inbound_connections_per_ip}")

    def _validate_ports(self) -> None:
        names = ("port", "tls_port", "web_port", "web_tls_port")
        for name in names:
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                raise ConfigError(f"{name} must be in 0..65535 (0: not served), not {value}")
        if not self.port and not self.tls_port:
            raise ConfigError("port and tls_port are both 0: the proxy would serve no client (set tls_port)")
        used = [(getattr(self, n), n) for n in names if getattr(self, n)]
        seen: dict[int, str] = {}
        for value, name in used:
            if value in seen:
                raise ConfigError(f"{seen[value]} and {name} must differ (both {value})")
            seen[value] = name

    def _validate_authentication(self) -> None:
        unknown = [p for p in self.authentication_providers if p not in _PROVIDERS]
        if unknown:
            raise ConfigError(f"authentication_providers: unknown provider(s) {', '.join(map(repr, unknown))}; "
                              f"known: {', '.join(_PROVIDERS)}")
        if self.authentication_enabled and not self.authentication_providers:
            raise ConfigError("authentication_enabled needs authentication_providers (\"tls\", \"token\" or both)")
        if self.authentication_enabled and "token" in self.authentication_providers and not (
                self.token_secret_key or self.token_public_key):
            raise ConfigError("the token provider needs token_secret_key or token_public_key")
        if self.authentication_enabled and "tls" in self.authentication_providers and not self.tls_trust_certs_file:
            raise ConfigError("the tls provider needs tls_trust_certs_file (the CA client certificates chain to)")
        if self.authorization_enabled and not self.authentication_enabled:
            raise ConfigError("authorization_enabled needs authentication_enabled (roles come from authentication)")

    def _validate_tls(self) -> None:
        if self.serves_tls and not (self.tls_cert_file and self.tls_key_file):
            raise ConfigError("tls_port / web_tls_port need tls_cert_file and tls_key_file (PEM)")
        if self.tls_require_trusted_client_cert and not self.tls_trust_certs_file:
            raise ConfigError("tls_require_trusted_client_cert needs tls_trust_certs_file (the CA clients chain to)")
        if self.tls_min_protocol not in _TLS_PROTOCOLS:
            raise ConfigError(f"tls_min_protocol must be one of {', '.join(_TLS_PROTOCOLS)}, "
                              f"not {self.tls_min_protocol!r}")
        if self.broker_client_auth_method not in _BROKER_AUTH_METHODS:
            raise ConfigError(f"broker_client_auth_method must be \"token\", \"tls\" or \"\" (none), "
                              f"not {self.broker_client_auth_method!r}")
        if self.broker_client_auth_method and not self.broker_client_auth_params:
            raise ConfigError(f"broker_client_auth_method {self.broker_client_auth_method!r} needs "
                              f"broker_client_auth_params")
        if self.broker_client_auth_method == "tls":
            if len(self.broker_client_auth_params.split(",")) != 2:
                raise ConfigError("broker_client_auth_params of method tls must be \"cert_file,key_file\"")
            if not self.tls_enabled_with_broker:
                raise ConfigError("broker_client_auth_method \"tls\" needs tls_enabled_with_broker (a client "
                                  "certificate travels only in a TLS handshake)")
