"""Which brokers a proxy may forward to, decided without I/O (Pulsar's ``BrokerProxyValidator``, narrowed).

A client that CONNECTs with ``proxy_to_broker_url`` names the broker it wants, as ``host:port`` (what
pulsar-client sends: the host and port of the URL the proxy's LOOKUP answer gave it). The proxy must not be an
open relay: it forwards only to the binary-protocol endpoints that the brokers of its own region registered
under ``/brokers/<id>`` (their ``pulsarServiceUrl``, ``pulsarServiceUrlTls`` and advertised listeners' URLs).
Anything else, an unregistered host, another port of a registered host, a malformed value, is refused.

With ``tls_enabled_with_broker`` only ``pulsar+ssl://`` endpoints are targets, so a client cannot make the proxy
downgrade to plain text by naming a broker's plain port.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from config_store.brokers import BrokerRegistration

from .errors import TargetDeniedError

__all__ = ["BrokerEndpoint", "allowed_endpoints", "binary_url", "parse_target", "web_url"]

_SCHEMES = {"pulsar": False, "pulsar+ssl": True}
_MAX_TARGET_CHARS = 300


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One registered binary-protocol endpoint of a broker.

    Attributes:
        host, port: where it listens (as registered; hosts compared in lower case).
        tls: whether it speaks TLS (a ``pulsar+ssl://`` URL).
        broker_id: whose it is.
    """

    host: str
    port: int
    tls: bool
    broker_id: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'pulsar+ssl' if self.tls else 'pulsar'}://{host}:{self.port}"


def _split_host_port(text: str, what: str) -> tuple[str, int]:
    parsed = urllib.parse.urlsplit(f"//{text}")
    try:
        port = parsed.port
    except ValueError:
        raise TargetDeniedError(f"{what} {text!r} has a bad port") from None
    host = parsed.hostname
    if not host or port is None or parsed.path or parsed.query or parsed.username or parsed.password:
        raise TargetDeniedError(f"{what} {text!r} is not host:port")
    return host.lower(), port


def parse_target(value: str) -> tuple[str, int]:
    """``(host, port)`` of a CONNECT's ``proxy_to_broker_url``: ``host:port`` as pulsar-client sends it, or a
    whole ``pulsar://`` / ``pulsar+ssl://`` URL naming one host.

    Raises:
        TargetDeniedError: anything else (several hosts, no port, another scheme, garbage).
    """
    if not value or len(value) > _MAX_TARGET_CHARS or any(c.isspace() for c in value) or "," in value:
        raise TargetDeniedError(f"proxy_to_broker_url {value[:_MAX_TARGET_CHARS]!r} is not one broker's host:port")
    scheme, sep, rest = value.partition("://")
    if sep:
        if scheme.lower() not in _SCHEMES:
            raise TargetDeniedError(f"proxy_to_broker_url {value!r}: only pulsar:// and pulsar+ssl:// brokers")
        value = rest.rstrip("/")
    return _split_host_port(value, "proxy_to_broker_url")


def _endpoint(url: str, tls: bool, broker_id: str) -> Optional[BrokerEndpoint]:
    """The endpoint a registered URL names, or None when it is empty, of the other kind, or malformed."""
    if not url:
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or _SCHEMES.get(scheme.lower()) is not tls:
        return None
    try:
        host, port = _split_host_port(rest.rstrip("/"), "registered URL")
    except TargetDeniedError:
        return None
    return BrokerEndpoint(host, port, tls, broker_id)


def endpoints_of(reg: BrokerRegistration) -> list[BrokerEndpoint]:
    """Every binary-protocol endpoint a broker registered (default URLs and advertised listeners)."""
    candidates = [(reg.pulsar_service_url, False), (reg.pulsar_service_url_tls, True)]
    for listener in reg.advertised_listeners:
        candidates += [(listener.broker_service_url, False), (listener.broker_service_url_tls, True)]
    found = (_endpoint(url, tls, reg.broker_id) for url, tls in candidates)
    return [e for e in found if e is not None]


def allowed_endpoints(registrations: Iterable[BrokerRegistration], *, tls_only: bool
                      ) -> Mapping[tuple[str, int], BrokerEndpoint]:
    """``(host, port) -> endpoint`` of every target the proxy may forward to (see the module docstring)."""
    allowed: dict[tuple[str, int], BrokerEndpoint] = {}
    for reg in registrations:
        for endpoint in endpoints_of(reg):
            if endpoint.tls or not tls_only:
                allowed.setdefault(endpoint.key, endpoint)
    return allowed


def binary_url(reg: BrokerRegistration, *, tls: bool) -> str:
    """The URL the proxy asks ``reg`` on (its default ``pulsar+ssl://`` or ``pulsar://`` URL), or ""."""
    return reg.pulsar_service_url_tls if tls else reg.pulsar_service_url


def web_url(reg: BrokerRegistration, *, tls: bool) -> str:
    """The base URL of ``reg``'s admin and lookup REST API (``https://`` when ``tls`` and registered), or ""."""
    return (reg.web_service_url_tls if tls else reg.web_service_url).rstrip("/")
