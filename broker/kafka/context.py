"""What a Kafka request handler knows about the request beyond its body (one per request)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class RequestContext:
    """The request's header and its connection's identity.

    Attributes:
        client_id: the header's client id ("" when null).
        principal: the authenticated role (SASL), or None on an unauthenticated connection.
        correlation_id: echoed in the response.
        api_key, api_version: of this request.
        listener_name: the Kafka listener the connection came in on (``PLAINTEXT``...).
        peer: ``host:port`` of the client, for logs.
        connection_id: unique per connection in this broker (a producer name derived from it stays unique).
    """

    client_id: str
    principal: Optional[str]
    correlation_id: int
    api_version: int
    listener_name: str
    api_key: int = -1
    peer: str = ""
    connection_id: int = 0
    extra: dict = field(default_factory=dict)
