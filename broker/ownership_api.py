"""How the binary-protocol service asks who owns a topic (the interface; implementations live in
``broker/ownership.py`` (ZooKeeper namespace bundles) and, for tests of one broker, ``SelfOwnership``).

Topics are owned through namespace bundles: hash ranges of a namespace, each acquired by one broker as an
ephemeral node ``/namespace/<tenant>/<ns>/<bundle>`` in the region's ZooKeeper. A LOOKUP for an unowned
bundle picks the least loaded broker; the owner serves the topic, everyone else redirects to it.

A lookup may name an advertised listener (``listener_name``, see :mod:`broker.listeners`): the answer then
carries that listener's URLs of the owner (or of the broker it redirects to) instead of its default ones.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from config_store.brokers import AdvertisedListener, find_listener

from .ownership_errors import UnknownListenerError


@dataclass(frozen=True)
class LookupResult:
    """Where a topic is served.

    Attributes:
        is_self: this broker owns (or has just acquired) the topic's bundle.
        broker_service_url: ``pulsar://host:port`` of the owner.
        broker_service_url_tls: ``pulsar+ssl://...`` of the owner, or "".
        http_url: ``http://host:port`` of the owner's admin/lookup HTTP server.
        http_url_tls: ``https://host:port`` of the same server, or "" (no ``web_tls_port``).
        authoritative: the answer comes from the owner or from the broker that just assigned it.
        redirect: the client must look up again at ``broker_service_url`` (LOOKUP Redirect) rather than
            connect (Connect).
    """

    is_self: bool
    broker_service_url: str
    broker_service_url_tls: str = ""
    http_url: str = ""
    authoritative: bool = True
    redirect: bool = False
    http_url_tls: str = ""


def listener_urls(listeners: tuple[AdvertisedListener, ...], name: str, *, default: tuple[str, str],
                  broker: str) -> tuple[str, str]:
    """``(pulsar://, pulsar+ssl://)`` URLs of ``broker`` to answer a lookup for listener ``name``: its
    ``default`` ones when ``name`` is empty (what pulsar-client sends unless told a listener name).

    Raises:
        UnknownListenerError: ``broker`` has no listener ``name``.
    """
    if not name:
        return default
    listener = find_listener(listeners, name)
    if listener is None:
        known = ", ".join(entry.name for entry in listeners) or "none"
        raise UnknownListenerError(f"broker {broker} has no advertised listener {name!r} (its listeners: {known})")
    return listener.broker_service_url, listener.broker_service_url_tls


class Ownership(abc.ABC):
    """Topic → owner broker, with acquisition of unowned bundles."""

    @abc.abstractmethod
    async def lookup(self, topic: str, *, authoritative: bool = False, listener_name: str = "") -> LookupResult:
        """Finds (or assigns) the owner of ``topic``'s bundle; its URLs for ``listener_name`` ("" = default).

        Raises:
            UnknownListenerError: the answering broker has no such listener.
        """

    @abc.abstractmethod
    async def is_owned_by_me(self, topic: str) -> bool:
        """True when this broker owns ``topic``'s bundle right now (checked before serving a topic)."""


class SelfOwnership(Ownership):
    """Every topic belongs to this broker: for a single broker (tests of the service, standalone use)."""

    def __init__(self, broker_service_url: str, http_url: str = "", *,
                 listeners: tuple[AdvertisedListener, ...] = (), broker_service_url_tls: str = "") -> None:
        self.broker_service_url = broker_service_url
        self.broker_service_url_tls = broker_service_url_tls
        self.http_url = http_url
        self.listeners = listeners

    async def lookup(self, topic: str, *, authoritative: bool = False, listener_name: str = "") -> LookupResult:
        url, url_tls = listener_urls(self.listeners, listener_name,
                                     default=(self.broker_service_url, self.broker_service_url_tls), broker="self")
        return LookupResult(True, url, url_tls, http_url=self.http_url)

    async def is_owned_by_me(self, topic: str) -> bool:
        return True
