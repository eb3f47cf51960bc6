"""How the binary-protocol service asks who owns a topic (the interface; implementations live in
``broker/ownership.py`` (ZooKeeper namespace bundles) and, for tests of one broker, ``SelfOwnership``).

Topics are owned through namespace bundles: hash ranges of a namespace, each acquired by one broker as an
ephemeral node ``/namespace/<tenant>/<ns>/<bundle>`` in the region's ZooKeeper. A LOOKUP for an unowned
bundle picks the least loaded broker; the owner serves the topic, everyone else redirects to it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass


@dataclass(frozen=True)
class LookupResult:
    """Where a topic is served.

    Attributes:
        is_self: this broker owns (or has just acquired) the topic's bundle.
        broker_service_url: ``pulsar://host:port`` of the owner.
        broker_service_url_tls: ``pulsar+ssl://...`` of the owner, or "".
        http_url: ``http://host:port`` of the owner's admin/lookup HTTP server.
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


class Ownership(abc.ABC):
    """Topic → owner broker, with acquisition of unowned bundles."""

    @abc.abstractmethod
    async def lookup(self, topic: str, *, authoritative: bool = False) -> LookupResult:
        """Finds (or assigns) the owner of ``topic``'s bundle."""

    @abc.abstractmethod
    async def is_owned_by_me(self, topic: str) -> bool:
        """True when this broker owns ``topic``'s bundle right now (checked before serving a topic)."""


class SelfOwnership(Ownership):
    """Every topic belongs to this broker: for a single broker (tests of the service, standalone use)."""

    def __init__(self, broker_service_url: str, http_url: str = "") -> None:
        self.broker_service_url = broker_service_url
        self.http_url = http_url

    async def lookup(self, topic: str, *, authoritative: bool = False) -> LookupResult:
        return LookupResult(True, self.broker_service_url, http_url=self.http_url)

    async def is_owned_by_me(self, topic: str) -> bool:
        return True
