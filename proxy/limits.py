"""The proxy's admission limits, as plain counters (no I/O, no waiting).

* :class:`ConnectionLimiter` — client connections open at once, in total and per client address (Pulsar's
  ``maxConcurrentInboundConnections`` / ``maxConcurrentInboundConnectionsPerIp``). A connection over either
  limit is closed as soon as it is accepted, before any TLS handshake is paid for.
* :class:`RequestLimiter` — lookups being answered at once (``maxConcurrentLookupRequests``). It never queues:
  a request over the limit is answered TooManyRequests at once, so a flood of lookups costs the proxy no memory
  and the client backs off and retries, as pulsar-client does on that error.
"""

from __future__ import annotations

import enum
from typing import Optional

__all__ = ["ConnectionLimiter", "Refusal", "RequestLimiter"]


class Refusal(enum.Enum):
    TOTAL = "max_concurrent_inbound_connections"
    PER_IP = "max_concurrent_inbound_connections_per_ip"


class ConnectionLimiter:
    """Counts open connections in total and by address.

    Args:
        max_total: most connections open at once.
        max_per_ip: most from one address; 0: no limit.
    """

    def __init__(self, *, max_total: int, max_per_ip: int = 0) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.active = 0
        self._by_ip: dict[str, int] = {}

    def try_acquire(self, ip: str) -> Optional[Refusal]:
        """Counts a new connection from ``ip`` and returns None, or returns why it is refused (not counted)."""
        if self.active >= self.max_total:
            return Refusal.TOTAL
        held = self._by_ip.get(ip, 0)
        if self.max_per_ip and held >= self.max_per_ip:
            return Refusal.PER_IP
        self.active += 1
        self._by_ip[ip] = held + 1
        return None

    def release(self, ip: str) -> None:
        """Uncounts a connection :meth:`try_acquire` admitted (exactly once per admission)."""
        held = self._by_ip.get(ip, 0)
        if held <= 0:
            raise RuntimeError(f"release of a connection from {ip} that was never admitted")
        self.active -= 1
        if held == 1:
            del self._by_ip[ip]  # idle addresses cost nothing
        else:
            self._by_ip[ip] = held - 1

    def held_by(self, ip: str) -> int:
        return self._by_ip.get(ip, 0)


class RequestLimiter:
    """A semaphore that never waits: ``try_acquire()`` is True (and must be released) or False (refuse)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def try_acquire(self) -> bool:
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def release(self) -> None:
        if self.in_flight <= 0:
            raise RuntimeError("release of a request that was never admitted")
        self.in_flight -= 1
