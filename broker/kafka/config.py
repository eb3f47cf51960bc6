"""The Kafka listener's settings (``kafka_*`` in broker.toml), derived from :class:`broker.config.BrokerConfig`.

Pure: parsing and checks only. ``listeners`` uses Kafka's own format, ``NAME://host:port[,NAME://host:port]``,
where NAME is the security protocol (``PLAINTEXT``, ``SASL_PLAINTEXT``) as in Kafka's default
``listener.security.protocol.map``. ``advertised_listeners`` is the same format: what Metadata answers tell
clients (empty: the bound listeners, with ``advertised_host`` for a wildcard host).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from magnetar.errors import ConfigError

__all__ = ["KafkaConfig", "KafkaListener", "parse_kafka_listeners", "SECURITY_PROTOCOLS"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")
_LISTENER_RE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*)"
                          r":(?P<port>[0-9]{1,5})")
_MiB = 1024 * 1024


@dataclass(frozen=True)
class KafkaListener:
    """One ``NAME://host:port``; ``port`` 0 (bound listeners only) picks a free port."""

    name: str
    host: str
    port: int

    @property
    def security_protocol(self) -> str:
        return self.name.upper()

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_kafka_listeners(text: str, *, key: str = "kafka_listeners", allow_zero_port: bool = True
                          ) -> tuple[KafkaListener, ...]:
    """Parses ``NAME://host:port[,...]``; blank entries are skipped.

    Raises:
        ConfigError: naming ``key`` and the entry at fault (not a URL, an unknown security protocol, a port out
            of range, a name given twice).
    """
    listeners: list[KafkaListener] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        match = _LISTENER_RE.fullmatch(entry)
        if match is None:
            raise ConfigError(f"{key}: {entry!r} is not NAME://host:port (e.g. PLAINTEXT://127.0.0.1:9092)")
        name = match["name"].upper()
        if name not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{key}: listener {name!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        port = int(match["port"])
        if not (0 if allow_zero_port else 1) <= port <= 65535:
            raise ConfigError(f"{key}: {entry!r} needs a port in {0 if allow_zero_port else 1}..65535")
        if any(existing.name == name for existing in listeners):
            raise ConfigError(f"{key}: listener {name!r} is given twice")
        listeners.append(KafkaListener(name, match["host"].strip("[]"), port))
    return tuple(listeners)


@dataclass(frozen=True)
class KafkaConfig:
    """Settings of a broker's Kafka listener (broker.toml ``kafka_<name>``).

    Attributes:
        listeners: ``NAME://host:port[,...]`` the broker binds for Kafka clients; empty: no Kafka listener.
            Port 0 picks a free port (written to ``endpoints.json`` and the broker's registration).
        advertised_listeners: what Metadata answers give clients, same format; empty: the bound listeners
            (a wildcard or empty host replaced by the broker's ``advertised_host``).
        tenant, namespace: where a short Kafka topic name lives (``orders`` is
            ``persistent://<tenant>/<namespace>/orders``); a full Pulsar topic name is accepted as it is.
        allow_auto_create_topics: a Metadata or Produce request naming a missing topic creates it (Kafka's
            ``auto.create.topics.enable``); off: UNKNOWN_TOPIC_OR_PARTITION.
        num_partitions: partitions of a topic auto-created by a Kafka Metadata or Produce request (Kafka's
            ``num.partitions``), created as a Pulsar partitioned topic.
        max_request_size_bytes: a larger request frame closes the connection (Kafka ``socket.request.max.bytes``).
        max_in_flight_requests: requests one connection may have in progress before the broker stops reading
            from it (back-pressure; answers stay in request order).
        fetch_max_wait_ms: the longest a Fetch long poll is held, whatever the client asks.
        advertised_host, max_partitions_per_topic, max_message_size_bytes: the broker's settings of these names
            (not ``kafka_`` keys of their own).
    """

    listeners: str = ""
    advertised_listeners: str = ""
    tenant: str = "public"
    namespace: str = "default"
    allow_auto_create_topics: bool = True
    num_partitions: int = 1
    max_request_size_bytes: int = 100 * _MiB
    max_in_flight_requests: int = 64
    fetch_max_wait_ms: int = 30_000
    advertised_host: str = "127.0.0.1"
    max_partitions_per_topic: int = 4096
    max_message_size_bytes: int = 5 * _MiB

    @property
    def enabled(self) -> bool:
        return bool(self.bound_listeners())

    def bound_listeners(self) -> tuple[KafkaListener, ...]:
        return parse_kafka_listeners(self.listeners)

    def advertised(self) -> tuple[KafkaListener, ...]:
        """The advertised listeners as configured (ports of port-0 bound listeners are the caller's to fill)."""
        return parse_kafka_listeners(self.advertised_listeners, key="kafka_advertised_listeners",
                                     allow_zero_port=False)

    def validate(self) -> None:
        """Raises ConfigError naming the first bad ``kafka_*`` setting."""
        bound = self.bound_listeners()
        advertised = self.advertised()
        if advertised and not bound:
            raise ConfigError("kafka_advertised_listeners is set but kafka_listeners is empty")
        for listener in advertised:
            if listener.name not in {b.name for b in bound}:
                raise ConfigError(f"kafka_advertised_listeners: {listener.name} has no bound listener in "
                                  f"kafka_listeners")
        for key, value in (("kafka_tenant", self.tenant), ("kafka_namespace", self.namespace)):
            if not value or "/" in value or any(c.isspace() for c in value):
                raise ConfigError(f"{key} must be a name without '/' or spaces, not {value!r}")
        for key in ("num_partitions", "max_request_size_bytes", "max_in_flight_requests", "fetch_max_wait_ms"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"kafka_{key} must be positive, not {getattr(self, key)}")
