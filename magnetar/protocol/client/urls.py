"""Service URLs: ``pulsar://host:port[,host:port...]`` and ``pulsar+ssl://...``, parsed without I/O."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from .errors import InvalidServiceUrlError

__all__ = ["ServiceUrl", "parse_service_url"]

_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651}


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    """A parsed service URL.

    Attributes:
        scheme: ``pulsar`` or ``pulsar+ssl``.
        hosts: ``(host, port)`` pairs, tried in order when connecting.
    """

    scheme: str
    hosts: tuple[tuple[str, int], ...]

    @property
    def tls(self) -> bool:
        return self.scheme == "pulsar+ssl"

    def __str__(self) -> str:
        return f"{self.scheme}://" + ",".join(_join_host(h, p) for h, p in self.hosts)

    def single(self, index: int = 0) -> ServiceUrl:
        """The URL naming only host ``index`` (wrapping around)."""
        return ServiceUrl(self.scheme, (self.hosts[index % len(self.hosts)],))

    @property
    def host_port(self) -> str:
        """``host:port`` of the first host, as CONNECT's ``proxy_to_broker_url`` spells a broker."""
        return _join_host(*self.hosts[0])


def _join_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_service_url(url: str | ServiceUrl) -> ServiceUrl:
    """Parses ``pulsar://h1:p1,h2:p2`` (port defaults: 6650, and 6651 for ``pulsar+ssl``).

    Raises:
        InvalidServiceUrlError: another scheme (``http://`` lookups are not served by this client), no host,
            or a bad port.
    """
    if isinstance(url, ServiceUrl):
        return url
    scheme, sep, rest = url.strip().partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _DEFAULT_PORTS:
        raise InvalidServiceUrlError(
            f"service URL {url!r} must start with pulsar:// or pulsar+ssl:// (this client speaks only the binary protocol)"
        )
    rest = rest.split("/", 1)[0]
    hosts: list[tuple[str, int]] = []
    for part in rest.split(","):
        part = part.strip()
        if not part:
            continue
        parsed = urllib.parse.urlsplit(f"//{part}")
        try:
            port = parsed.port or _DEFAULT_PORTS[scheme]
        except ValueError:
            raise InvalidServiceUrlError(f"bad port in service URL {url!r}") from None
        if not parsed.hostname:
            raise InvalidServiceUrlError(f"no host in {part!r} of service URL {url!r}")
        hosts.append((parsed.hostname, port))
    if not hosts:
        raise InvalidServiceUrlError(f"service URL {url!r} names no host")
    return ServiceUrl(scheme, tuple(hosts))
