"""Topology files: which processes a local deployment runs, parsed and validated into frozen dataclasses.

A topology is plain TOML. Every table is optional except ``name`` and at least one region::

    name = "standalone"            # names the deployment: [a-z0-9-], starts and ends alphanumeric

    [supervisor]                   # how `magnetar up` waits and stops
    startup_timeout_s = 60.0       # each tier (all ZooKeepers, then all bookies, ...) healthy within this
    stop_grace_s = 10.0            # SIGTERM, then SIGKILL of the process group after this

    [global_zookeeper]             # the configuration store every region shares (same keys as a region's)
    port = 0

    [[regions]]
    name = "us-east"               # process names are "<region>-<kind>[-<n>]", e.g. "us-east-bookie-2"
    [regions.zookeeper]            # every region has one local ZooKeeper (defaults if the table is absent)
    host = "127.0.0.1"
    port = 0                       # 0: pick a free port at the first `up`, remembered in the data dir
    metrics_port = 0               # /metrics: ZooKeeper's own numbers (`mntr`) in Prometheus's format
    tick_time_ms = 500
    heap_mb = 256
    [regions.bookies]              # absent: the region runs no bookie
    count = 3
    host = "127.0.0.1"
    grpc_port_base = 0             # non-zero: bookie n gets base + n - 1; 0: picked and remembered
    http_port_base = 0
    journal_sync = true
    # any other key is copied into every bookie's bookie.toml (e.g. disk_free_min_bytes = 1048576)
    [regions.brokers]              # absent: the region runs no broker; brokers start after the bookies
    count = 2
    host = "127.0.0.1"
    port_base = 0                  # binary protocol (pulsar://); non-zero: broker n gets base + n - 1
    http_port_base = 0             # admin REST, lookup and /metrics
    tls_port_base = 0              # pulsar+ssl:// and https://, served only in a secured topology (one
    web_tls_port_base = 0          #   with a proxy), where brokers enforce authentication and authorization
    kafka_port_base = 0            # the Kafka listener (PLAINTEXT://host:port), unsecured topologies only
    # any other key is copied into every broker's broker.toml (e.g. default_namespace_bundles = 8)
    [regions.proxy]                # absent: no proxy; present: the region's gateway, started after its brokers
    host = "127.0.0.1"
    tls_port = 0                   # pulsar+ssl:// (0: picked and remembered, like every port)
    web_tls_port = 0               # https:// (admin REST and lookups forwarded to the brokers, /metrics, /health)
    authentication_enabled = true  # clients need a token or a client certificate of the deployment's CA
    authentication_providers = ["token", "tls"]
    authorization_enabled = true   # lookups need produce or consume granted to the client's role
    tls_require_trusted_client_cert = false
    # any other key is copied into the proxy's proxy.toml (e.g. max_concurrent_inbound_connections = 5000)
    [regions.autorecovery]         # absent: no auto-recovery; present: `count` processes after the bookies, one
    count = 1                      #   of them the elected auditor, each a replication worker (docs/autorecovery.md)
    host = "127.0.0.1"
    http_port_base = 0             # /metrics and /health
    # any other key is copied into autorecovery.toml (e.g. lost_bookie_grace_ms = 60000)

    [prometheus]                   # absent: no Prometheus; present: Debian's prometheus, started last,
    host = "127.0.0.1"             #   scraping every process (its scrape config is written from the topology)
    port = 0                       # its web UI and HTTP API (0: picked at the first `up`, remembered)
    scrape_interval_s = 5.0        # also the rule evaluation interval
    retention_s = 7200             # --storage.tsdb.retention.time
    retention_size_bytes = 268435456  # --storage.tsdb.retention.size
    enable_lifecycle = false       # --web.enable-lifecycle (POST /-/reload, /-/quit)

    [network]                      # absent: every process on the host's loopback (mode = "host")
    mode = "netns"                 # each region in its own network namespace (root only; `magnetar up --netns`
                                   #   sets it too); hosts above are then the namespaces' addresses
    latency_ms = 40.0              # one way between two regions, through the wan relay (clusters.netns)
    jitter_ms = 5.0                # each chunk is delayed latency_ms ± jitter_ms, in order

A topology with a proxy gets security material at its first ``up`` (``clusters.security``): a development
CA, a server certificate for the deployment's hosts, client certificates and tokens for its roles, in
``<data-dir>/security/``; ``topology.json`` names them.

Adding a process kind means adding its settings dataclass here (one field per key, the type annotation is
the check, ``problems()`` for the rest), a line in :func:`_parse_region`, and a spec in ``clusters.kinds``.
Values are type-checked by :func:`magnetar.config.typed_value`, the rule every TOML settings file follows.
Every error is a :class:`~magnetar.errors.ConfigError` whose message starts with the file and the key path,
e.g. ``standalone.toml: regions[0].bookies.count must be an integer, not a string ("three")``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import tomllib
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping, Optional

from magnetar.config import describe, typed_value
from magnetar.errors import ConfigError

_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
_NAME_RULE = "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 40 characters"


# -- settings (one dataclass per TOML table) ----------------------------------------------------------------


@dataclass(frozen=True)
class SupervisorSettings:
    """``[supervisor]``: deadlines of the supervisor itself."""

    startup_timeout_s: float = 60.0
    stop_grace_s: float = 10.0

    def problems(self) -> Iterator[tuple[str, str]]:
        if not 0 < self.startup_timeout_s <= 3600:
            yield "startup_timeout_s", f"must be in (0, 3600], got {self.startup_timeout_s}"
        if not 0 <= self.stop_grace_s <= 600:
            yield "stop_grace_s", f"must be in [0, 600], got {self.stop_grace_s}"


@dataclass(frozen=True)
class ZooKeeperSettings:
    """``[regions.zookeeper]`` and ``[global_zookeeper]``: one standalone ZooKeeper server, and its ``/metrics``
    on ``metrics_port`` (served by its ``magnetar zookeeper`` wrapper: ``observability.zookeeper``)."""

    host: str = "127.0.0.1"
    port: int = 0
    metrics_port: int = 0
    tick_time_ms: int = 500
    heap_mb: int = 256

    def problems(self) -> Iterator[tuple[str, str]]:
        yield from _host_problems("host", self.host)
        yield from _port_problems("port", self.port)
        yield from _port_problems("metrics_port", self.metrics_port)
        if self.port and self.port == self.metrics_port:
            yield "metrics_port", f"must differ from port (both {self.port})"
        if not 10 <= self.tick_time_ms <= 60_000:
            yield "tick_time_ms", f"must be in [10, 60000], got {self.tick_time_ms}"
        if not 32 <= self.heap_mb <= 65_536:
            yield "heap_mb", f"must be in [32, 65536], got {self.heap_mb}"


@dataclass(frozen=True)
class BookiesSettings:
    """``[regions.bookies]``: ``count`` storage nodes of one region.

    Keys not declared here are not errors: they go to ``extra`` and are copied into every bookie's
    ``bookie.toml``, so a new bookie setting needs no change in this room. They must be scalars or arrays
    of scalars, and may not be a key the supervisor sets itself (:attr:`RESERVED`).
    """

    count: int = 3
    host: str = "127.0.0.1"
    grpc_port_base: int = 0
    http_port_base: int = 0
    journal_sync: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    PASSTHROUGH: ClassVar[bool] = True
    RESERVED: ClassVar[frozenset[str]] = frozenset(
        {"bookie_id", "bind_host", "advertised_host", "port", "http_port", "data_dir", "zookeeper"}
    )

    def problems(self) -> Iterator[tuple[str, str]]:
        if not 1 <= self.count <= 64:
            yield "count", f"must be in [1, 64], got {self.count}"
        yield from _host_problems("host", self.host)
        for key in ("grpc_port_base", "http_port_base"):
            base = getattr(self, key)
            yield from _port_problems(key, base)
            if base and base + self.count - 1 > 65535:
                yield key, f"{base} + count - 1 exceeds 65535"
        if self.grpc_port_base and self.http_port_base:
            grpc = set(range(self.grpc_port_base, self.grpc_port_base + self.count))
            if grpc & set(range(self.http_port_base, self.http_port_base + self.count)):
                yield "http_port_base", "the gRPC and HTTP port ranges overlap"
        yield from _passthrough_problems(self.extra, self.RESERVED, "bookie.toml", "each bookie")


@dataclass(frozen=True)
class AutoRecoverySettings:
    """``[regions.autorecovery]``: ``count`` auto-recovery processes of one region (after its bookies).

    Keys not declared here go to ``extra`` and are copied into every ``autorecovery.toml`` (e.g.
    ``lost_bookie_grace_ms``), never a key the supervisor sets (:attr:`RESERVED`).
    """

    count: int = 1
    host: str = "127.0.0.1"
    http_port_base: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    PASSTHROUGH: ClassVar[bool] = True
    RESERVED: ClassVar[frozenset[str]] = frozenset({"worker_id", "bind_host", "http_port", "data_dir", "zookeeper"})

    def problems(self) -> Iterator[tuple[str, str]]:
        if not 1 <= self.count <= 16:
            yield "count", f"must be in [1, 16], got {self.count}"
        yield from _host_problems("host", self.host)
        yield from _port_problems("http_port_base", self.http_port_base)
        if self.http_port_base and self.http_port_base + self.count - 1 > 65535:
            yield "http_port_base", f"{self.http_port_base} + count - 1 exceeds 65535"
        yield from _passthrough_problems(self.extra, self.RESERVED, "autorecovery.toml", "each auto-recovery process")


@dataclass(frozen=True)
class BrokersSettings:
    """``[regions.brokers]``: ``count`` brokers of one region (after its bookies in start order).

    Keys not declared here go to ``extra`` and are copied into every broker's ``broker.toml`` (e.g.
    ``default_namespace_bundles = 8``), scalars only, never a key the supervisor sets (:attr:`RESERVED`).
    The managed-ledger quorums default to what the region's bookies allow (E = min(3, bookies),
    Qw = Qa = min(2, E)) unless given here.

    In a secured topology (one with a proxy) every broker also serves ``pulsar+ssl://`` and ``https://``
    (``tls_port_base``, ``web_tls_port_base``) and enforces authentication and authorization with the
    deployment's material (``clusters.kinds.BrokerKind``); the security keys are then the supervisor's.
    """

    count: int = 1
    host: str = "127.0.0.1"
    port_base: int = 0
    http_port_base: int = 0
    tls_port_base: int = 0
    web_tls_port_base: int = 0
    kafka_port_base: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    PASSTHROUGH: ClassVar[bool] = True
    RESERVED: ClassVar[frozenset[str]] = frozenset(
        {"broker_id", "cluster", "bind_host", "advertised_host", "port", "http_port", "data_dir", "zookeeper",
         "kafka_listeners", "kafka_advertised_listeners",
         "configuration_store", "cluster_service_url", "cluster_broker_service_url", "tls_port", "web_tls_port",
         "cluster_service_url_tls", "cluster_broker_service_url_tls", "tls_cert_file", "tls_key_file",
         "tls_trust_certs_file", "authentication_enabled", "authentication_providers", "authorization_enabled",
         "superuser_roles", "proxy_roles", "token_secret_key", "token_public_key", "broker_client_auth_method",
         "broker_client_auth_params", "broker_client_trust_certs_file", "broker_client_tls_enabled"}
    )
    PORT_BASES: ClassVar[tuple[str, ...]] = ("port_base", "http_port_base", "tls_port_base", "web_tls_port_base",
                                             "kafka_port_base")

    def problems(self) -> Iterator[tuple[str, str]]:
        if not 1 <= self.count <= 64:
            yield "count", f"must be in [1, 64], got {self.count}"
        yield from _host_problems("host", self.host)
        ranges: dict[str, set[int]] = {}
        for key in self.PORT_BASES:
            base = getattr(self, key)
            yield from _port_problems(key, base)
            if base and base + self.count - 1 > 65535:
                yield key, f"{base} + count - 1 exceeds 65535"
            if base:
                ours = set(range(base, base + self.count))
                for other, theirs in ranges.items():
                    if ours & theirs:
                        yield key, f"the port ranges of {other} and {key} overlap"
                ranges[key] = ours
        yield from _passthrough_problems(self.extra, self.RESERVED, "broker.toml", "each broker")


_PROXY_PROVIDERS = ("tls", "token")


@dataclass(frozen=True)
class ProxySettings:
    """``[regions.proxy]``: the region's gateway proxy (``magnetar proxy``), TLS only: clients reach it at
    ``pulsar+ssl://`` and ``https://``, with the deployment's CA (``clusters.security``) behind both.

    Authentication and authorization default to on: a proxy is where credentials are checked. Keys not
    declared here go to ``extra`` and are copied into ``proxy.toml`` (scalars only, never a key the supervisor
    sets: :attr:`RESERVED`).
    """

    host: str = "127.0.0.1"
    tls_port: int = 0
    web_tls_port: int = 0
    authentication_enabled: bool = True
    authentication_providers: tuple[str, ...] = ("token", "tls")
    authorization_enabled: bool = True
    tls_require_trusted_client_cert: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    PASSTHROUGH: ClassVar[bool] = True
    RESERVED: ClassVar[frozenset[str]] = frozenset(
        {"cluster", "zookeeper", "configuration_store", "data_dir", "bind_host", "advertised_host", "port",
         "web_port", "tls_cert_file", "tls_key_file", "tls_trust_certs_file", "token_secret_key",
         "token_public_key", "superuser_roles", "broker_client_auth_method", "broker_client_auth_params",
         "broker_client_trust_certs_file", "tls_enabled_with_broker"}
    )

    def problems(self) -> Iterator[tuple[str, str]]:
        yield from _host_problems("host", self.host)
        for key in ("tls_port", "web_tls_port"):
            yield from _port_problems(key, getattr(self, key))
        if self.tls_port and self.tls_port == self.web_tls_port:
            yield "web_tls_port", f"must differ from tls_port (both {self.tls_port})"
        unknown = [p for p in self.authentication_providers if p not in _PROXY_PROVIDERS]
        if unknown:
            yield "authentication_providers", f"unknown provider {unknown[0]!r} (known: {', '.join(_PROXY_PROVIDERS)})"
        if self.authentication_enabled and not self.authentication_providers:
            yield "authentication_providers", "empty, but authentication_enabled needs at least one provider"
        if self.authorization_enabled and not self.authentication_enabled:
            yield "authorization_enabled", "needs authentication_enabled (roles come from authentication)"
        yield from _passthrough_problems(self.extra, self.RESERVED, "proxy.toml", "proxy")


@dataclass(frozen=True)
class PrometheusSettings:
    """``[prometheus]``: one Prometheus server for the whole deployment (``clusters.kinds.PrometheusKind``).

    It scrapes every process that serves ``/metrics`` (one job per process kind, a ``cluster`` label per region)
    every ``scrape_interval_s`` and evaluates the alert rules at the same interval. Its data is small on purpose
    (``retention_s``, ``retention_size_bytes``): a local deployment's history, not a monitoring archive.
    """

    host: str = "127.0.0.1"
    port: int = 0
    scrape_interval_s: float = 5.0
    retention_s: int = 7200
    retention_size_bytes: int = 256 << 20
    enable_lifecycle: bool = False

    def problems(self) -> Iterator[tuple[str, str]]:
        yield from _host_problems("host", self.host)
        yield from _port_problems("port", self.port)
        if not 0.5 <= self.scrape_interval_s <= 300:
            yield "scrape_interval_s", f"must be in [0.5, 300], got {self.scrape_interval_s}"
        if not 600 <= self.retention_s <= 366 * 86400:
            yield "retention_s", f"must be in [600, 31622400] (10 minutes to a year), got {self.retention_s}"
        if not 16 << 20 <= self.retention_size_bytes <= 1 << 40:
            yield "retention_size_bytes", f"must be in [16 MiB, 1 TiB], got {self.retention_size_bytes}"


NETWORK_MODES = ("host", "netns")


@dataclass(frozen=True)
class NetworkSettings:
    """``[network]``: where the processes of a deployment live and what links its regions.

    ``host``: every process on the host, at the hosts the topology names. ``netns``: every region in its own
    Linux network namespace, the configuration store and the wan relay in a namespace between them, every
    region ``latency_ms ± jitter_ms`` (one way) from every other (``clusters.netns``, ``clusters.network``).
    """

    mode: str = "host"
    latency_ms: float = 40.0
    jitter_ms: float = 5.0

    def problems(self) -> Iterator[tuple[str, str]]:
        if self.mode not in NETWORK_MODES:
            yield "mode", f"must be one of {', '.join(NETWORK_MODES)}, got {self.mode!r}"
        if not 0 <= self.latency_ms <= 10_000:
            yield "latency_ms", f"must be in [0, 10000], got {self.latency_ms}"
        if not 0 <= self.jitter_ms <= self.latency_ms:
            yield "jitter_ms", f"must be in [0, latency_ms = {self.latency_ms}], got {self.jitter_ms}"


@dataclass(frozen=True)
class Region:
    """One ``[[regions]]`` entry: a local ZooKeeper and the servers that use it."""

    name: str
    zookeeper: ZooKeeperSettings
    bookies: Optional[BookiesSettings] = None
    brokers: Optional[BrokersSettings] = None
    proxy: Optional[ProxySettings] = None
    autorecovery: Optional[AutoRecoverySettings] = None


@dataclass(frozen=True)
class Topology:
    """A whole topology file.

    Attributes:
        name: the deployment's name.
        path: the file it was read from (absolute).
        supervisor: deadlines.
        global_zookeeper: the shared configuration store, if the topology has one.
        regions: in file order, names unique.
        prometheus: the deployment's Prometheus, if the topology has one.
        network: host or namespaces (``[network]``; ``magnetar up --netns`` overrides its mode).
    """

    name: str
    path: pathlib.Path
    supervisor: SupervisorSettings
    global_zookeeper: Optional[ZooKeeperSettings]
    regions: tuple[Region, ...]
    prometheus: Optional[PrometheusSettings] = None
    network: NetworkSettings = NetworkSettings()

    @property
    def netns(self) -> bool:
        """Whether every region runs in its own network namespace."""
        return self.network.mode == "netns"

    def with_netns(self) -> "Topology":
        """This topology with ``[network] mode = "netns"`` (what ``magnetar up --netns`` runs)."""
        return dataclasses.replace(self, network=dataclasses.replace(self.network, mode="netns"))

    @property
    def secured(self) -> bool:
        """Whether the deployment needs security material (a CA, certificates, tokens): it has a proxy."""
        return any(region.proxy is not None for region in self.regions)

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)


# -- loading ------------------------------------------------------------------------------------------------


def load(path: pathlib.Path | str) -> Topology:
    """Reads and validates a topology file; raises ConfigError naming the file and the key at fault."""
    path = pathlib.Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: topology file not found") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the topology file: {err.strerror}") from None
    return parse(text, path=path.resolve())


def parse(text: str, *, path: pathlib.Path | str = "<topology>") -> Topology:
    """Parses topology TOML (``path`` only names the source in errors and in :attr:`Topology.path`)."""
    path = pathlib.Path(path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path.name}: not valid TOML: {err}") from None
    return _Parser(path).topology(doc)


class _Parser:
    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path.name}: {key}: {message}" if key else f"{self.path.name}: {message}")

    def topology(self, doc: dict[str, Any]) -> Topology:
        known = {"name", "supervisor", "global_zookeeper", "regions", "prometheus", "network"}
        self._no_unknown(doc, known, "")
        name = self._name(doc, "name", "")
        supervisor = self.section(SupervisorSettings, doc.get("supervisor", {}), "supervisor")
        global_zk = None
        if "global_zookeeper" in doc:
            global_zk = self.section(ZooKeeperSettings, doc["global_zookeeper"], "global_zookeeper")
        prometheus = self.section(PrometheusSettings, doc["prometheus"], "prometheus") if "prometheus" in doc else None
        network = self.section(NetworkSettings, doc.get("network", {}), "network")
        raw_regions = doc.get("regions")
        if raw_regions is None:
            raise self.error("regions", "missing: a topology needs at least one [[regions]] table")
        if not isinstance(raw_regions, list) or not all(isinstance(r, dict) for r in raw_regions):
            raise self.error("regions", f"expected an array of tables ([[regions]]), got {describe(raw_regions)}")
        if not raw_regions:
            raise self.error("regions", "empty: a topology needs at least one [[regions]] table")
        regions: list[Region] = []
        seen: dict[str, int] = {}
        for i, raw in enumerate(raw_regions):
            region = self._region(raw, f"regions[{i}]")
            if region.name in seen:
                raise self.error(
                    f"regions[{i}].name", f"duplicate region name {region.name!r} (also regions[{seen[region.name]}])"
                )
            seen[region.name] = i
            regions.append(region)
        return Topology(
            name=name,
            path=self.path,
            supervisor=supervisor,
            global_zookeeper=global_zk,
            regions=tuple(regions),
            prometheus=prometheus,
            network=network,
        )

    def _region(self, raw: dict[str, Any], where: str) -> Region:
        self._no_unknown(raw, {"name", "zookeeper", "bookies", "brokers", "proxy", "autorecovery"}, where)
        name = self._name(raw, "name", where)
        zookeeper = self.section(ZooKeeperSettings, raw.get("zookeeper", {}), f"{where}.zookeeper")
        bookies = self.section(BookiesSettings, raw["bookies"], f"{where}.bookies") if "bookies" in raw else None
        brokers = self.section(BrokersSettings, raw["brokers"], f"{where}.brokers") if "brokers" in raw else None
        proxy = self.section(ProxySettings, raw["proxy"], f"{where}.proxy") if "proxy" in raw else None
        autorecovery = None
        if "autorecovery" in raw:
            autorecovery = self.section(AutoRecoverySettings, raw["autorecovery"], f"{where}.autorecovery")
            if bookies is None:
                raise self.error(f"{where}.autorecovery", "auto-recovery repairs the region's ledgers, but the "
                                 "region has no [regions.bookies]")
        if proxy is not None and brokers is None:
            raise self.error(f"{where}.proxy", "a proxy fronts the region's brokers, but the region has no [regions.brokers]")
        return Region(name=name, zookeeper=zookeeper, bookies=bookies, brokers=brokers, proxy=proxy,
                      autorecovery=autorecovery)

    def _name(self, table: dict[str, Any], key: str, where: str) -> str:
        path = f"{where}.{key}" if where else key
        if key not in table:
            raise self.error(path, "missing (required)")
        value = typed_value(str, table[key], key=path, source=self.path.name)
        if not _NAME_RE.match(value):
            raise self.error(path, f"{value!r} is not a valid name ({_NAME_RULE})")
        return value

    def _no_unknown(self, table: dict[str, Any], known: set[str], where: str) -> None:
        for key in table:
            if key not in known:
                path = f"{where}.{key}" if where else key
                raise self.error(path, f"unknown key (expected one of: {', '.join(sorted(known))})")

    def section(self, cls: type, table: Any, where: str) -> Any:
        """Builds settings dataclass ``cls`` from ``table``: types from its annotations, then ``problems()``."""
        if not isinstance(table, dict):
            raise self.error(where, f"expected a table, got {describe(table)}")
        hints = typing.get_type_hints(cls)
        declared = {f.name: f for f in dataclasses.fields(cls) if f.name != "extra"}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in table.items():
            if key in declared:
                values[key] = typed_value(hints[key], value, key=f"{where}.{key}", source=self.path.name)
            elif getattr(cls, "PASSTHROUGH", False):
                extra[key] = value
            else:
                raise self.error(f"{where}.{key}", f"unknown key (expected one of: {', '.join(sorted(declared))})")
        for key, f in declared.items():
            if key not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise self.error(f"{where}.{key}", "missing (required)")
        if getattr(cls, "PASSTHROUGH", False):
            values["extra"] = extra
        settings = cls(**values)
        for key, message in settings.problems():
            raise self.error(f"{where}.{key}", message)
        return settings


# -- checks -------------------------------------------------------------------------------------------------


def _port_problems(key: str, port: int) -> Iterator[tuple[str, str]]:
    if not (port == 0 or 1024 <= port <= 65535):
        yield key, f"must be 0 (pick a free port) or in [1024, 65535], got {port}"


def _host_problems(key: str, host: str) -> Iterator[tuple[str, str]]:
    if not host or any(c.isspace() for c in host) or "/" in host:
        yield key, f"not a host name or address: {host!r}"


def _passthrough_problems(extra: Mapping[str, Any], reserved: frozenset[str], file: str,
                          whom: str) -> Iterator[tuple[str, str]]:
    """Keys copied into a process's config file: never one the supervisor sets, only scalars or arrays of them."""
    for key, value in extra.items():
        if key in reserved:
            yield key, f"is set by the supervisor for {whom} and cannot be given here"
        elif not _is_toml_scalar(value) and not (isinstance(value, list) and all(_is_toml_scalar(v) for v in value)):
            yield key, f"passed through to {file}, so it must be a scalar or an array of scalars, got {describe(value)}"


def _is_toml_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))
