"""Advertised listeners (Pulsar's ``advertisedListeners`` / ``internalListenerName``): parsing the setting,
choosing the URL a lookup answers, and which listener ports this broker must serve itself.

Theory of operation
-------------------
A broker reachable under several addresses (an internal network name and a public NAT address, a Docker
service name and ``localhost``) names each address set a *listener*:
``advertised_listeners = "internal:pulsar://broker-1:6650,external:pulsar://203.0.113.7:16650"``. A client
that passes ``listener_name="external"`` to pulsar-client sends it in every LOOKUP
(``advertised_listener_name``) and is answered with the owner's URLs for that listener; a client that passes
none gets the broker's default URL, which is the *internal* listener's (``internal_listener_name``, the
first listener by default), as Pulsar does. The listeners go into the broker's registration and into every
bundle-ownership record it writes, so any broker answers for a bundle owned by another.

A listener has at most one ``pulsar://`` and one ``pulsar+ssl://`` URL. The broker serves TLS on its
``tls_port`` only: a listener's ``pulsar+ssl://`` URL is advertised (``brokerServiceUrlTls``) for that port or
for a TLS terminator in front of the broker to serve. A ``pulsar://`` URL whose port is not the broker's own ``port`` is served by
an extra socket when its host is an address of this machine (``localhost``, ``127.0.0.1``, an interface's
address); a URL on another host (a NAT, a load balancer) is left to whatever forwards it to ``port``.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Iterable

from config_store.brokers import AdvertisedListener, find_listener
from magnetar.errors import ConfigError

__all__ = ["AdvertisedListener", "find_listener", "internal_listener", "is_local_host", "listen_addresses",
           "parse_advertised_listeners", "ports_to_serve"]

_LISTENER_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_URL_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+)"
                     r":(?P<port>[0-9]{1,5})/?")
_SCHEMES = {"pulsar": "broker_service_url", "pulsar+ssl": "broker_service_url_tls"}


def parse_advertised_listeners(text: str) -> tuple[AdvertisedListener, ...]:
    """Parses ``name:scheme://host:port[,name:scheme://host:port...]`` (Pulsar's format), in order of first
    appearance of each name. Blank entries are skipped (a trailing comma).

    Raises:
        ConfigError: naming the entry at fault: no listener name, a URL that is not
            ``pulsar://host:port`` or ``pulsar+ssl://host:port``, two URLs of one scheme for a listener, or
            one ``host:port`` under two listeners (a client could not tell which it reached).
    """
    urls: dict[str, dict[str, str]] = {}
    owners: dict[str, str] = {}  # "host:port" -> listener name
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not name or url.startswith("//"):
            raise ConfigError(f"advertised_listeners entry {entry!r} has no listener name "
                              f"(expected name:pulsar://host:port)")
        if not _LISTENER_NAME_RE.fullmatch(name):
            raise ConfigError(f"advertised_listeners: listener name {name!r} is not valid (letters, digits, '-_.')")
        match = _URL_RE.fullmatch(url)
        scheme = match["scheme"].lower() if match else ""
        if scheme not in _SCHEMES:
            raise ConfigError(f"advertised_listeners: {url!r} of listener {name!r} is not a pulsar://host:port or "
                              f"pulsar+ssl://host:port URL")
        port = int(match["port"])
        if not 1 <= port <= 65535:
            raise ConfigError(f"advertised_listeners: {url!r} of listener {name!r} needs a port in 1..65535")
        host = match["host"].lower()
        seen = urls.setdefault(name, {})
        if scheme in seen:
            raise ConfigError(f"advertised_listeners: listener {name!r} has more than one {scheme}:// URL")
        seen[scheme] = f"{scheme}://{match['host']}:{port}"
        other = owners.setdefault(f"{host}:{port}", name)
        if other != name:
            raise ConfigError(f"advertised_listeners: {host}:{port} is given to both listener {other!r} and {name!r}")
    return tuple(AdvertisedListener(name, **{_SCHEMES[s]: u for s, u in by_scheme.items()})
                 for name, by_scheme in urls.items())


def internal_listener(listeners: tuple[AdvertisedListener, ...], name: str) -> AdvertisedListener | None:
    """The listener whose URLs the broker advertises by default: ``name``, or the first one when ``name`` is
    empty; None when there are no listeners.

    Raises:
        ConfigError: ``name`` is not one of ``listeners``, or it has no ``pulsar://`` URL (this broker's
            default URL is its plain binary-protocol address, which other brokers and replicators use).
    """
    if not listeners:
        if name:
            raise ConfigError(f"internal_listener_name {name!r} needs advertised_listeners to name it")
        return None
    listener = find_listener(listeners, name) if name else listeners[0]
    if listener is None:
        raise ConfigError(f"internal_listener_name {name!r} is not one of advertised_listeners "
                          f"({', '.join(entry.name for entry in listeners)})")
    if not listener.broker_service_url:
        raise ConfigError(f"the internal listener {listener.name!r} needs a pulsar:// URL")
    return listener


def host_port(url: str) -> tuple[str, int]:
    """``("host", port)`` of a URL :func:`parse_advertised_listeners` accepted (IPv6 without brackets)."""
    match = _URL_RE.fullmatch(url)
    if match is None:
        raise ValueError(f"not a scheme://host:port URL: {url!r}")
    return match["host"].strip("[]"), int(match["port"])


def ports_to_serve(listeners: Iterable[AdvertisedListener], *, port: int) -> list[tuple[str, int]]:
    """``(host, port)`` of every ``pulsar://`` listener URL not on the broker's own ``port`` (0: not known
    yet, so every one), once each: the candidates for an extra socket (if the host is local)."""
    wanted: list[tuple[str, int]] = []
    for listener in listeners:
        if listener.broker_service_url:
            address = host_port(listener.broker_service_url)
            if address[1] != port and address not in wanted:
                wanted.append(address)
    return wanted


def is_wildcard(host: str) -> bool:
    """``0.0.0.0`` / ``::`` (every interface)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def is_local_host(host: str) -> bool:
    """Whether ``host`` names this machine: it resolves to a loopback address or one a socket can bind here.

    Blocking (name resolution): call it at start-up, off the event loop if the name may be slow to resolve.
    """
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, sockaddr in infos:
        address = sockaddr[0]
        try:
            if ipaddress.ip_address(address.split("%", 1)[0]).is_loopback:
                return True
        except ValueError:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, 0))
                return True
            except OSError:
                continue
    return False


def bind_address(listener_host: str, bind_host: str) -> str:
    """Where a local listener's extra socket binds: every interface when ``bind_host`` is a wildcard (as the
    main port does), else exactly the listener's host."""
    return bind_host if is_wildcard(bind_host) else listener_host


def listen_addresses(listeners: Iterable[AdvertisedListener], *, port: int, bind_host: str) -> list[tuple[str, int]]:
    """The extra ``(host, port)`` sockets the broker opens for its listeners: each ``pulsar://`` URL on
    another port than ``port`` whose host is local (see the module docstring), at :func:`bind_address`.
    Blocking (name resolution)."""
    addresses: list[tuple[str, int]] = []
    for host, listener_port in ports_to_serve(listeners, port=port):
        if is_local_host(host):
            address = (bind_address(host, bind_host), listener_port)
            if address not in addresses:
                addresses.append(address)
    return addresses
