"""What the policies act on, as the policies see it: small Protocols that topics and connections satisfy.

The policies room sits below ``topics/`` and ``session/`` (imports flow session -> topics -> policies), so
it never imports a topic, subscription or connection class. The monitors here only need a few attributes of
a loaded topic; the publish throttle only needs to pause and resume a producer's connection reads.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol


class ReadPauser(Protocol):
    """A client connection whose reads a publish rate limit can hold (``session.connection.Connection``)."""

    @property
    def closed(self) -> bool: ...

    def pause_reading(self, owner: object) -> None: ...

    def resume_reading(self, owner: object) -> None: ...


class ThrottledProducer(Protocol):
    connection: ReadPauser


class PolicySubscription(Protocol):
    name: str
    durable: bool
    closed: bool
    cursor: Any  # broker.managed_ledger.api.ManagedCursor

    def backlog_size_bytes(self, entries: int) -> int: ...


class PolicyTopic(Protocol):
    """A loaded topic (persistent or not), as the periodic monitors and quotas read it."""

    name: str
    topic_name: Any  # magnetar.topic_name.TopicName
    policies: Any  # the namespace's Policies, or None
    subscriptions: Mapping[str, Any]
    producers: Mapping[int, Any]

    @property
    def serving(self) -> bool:
        """Loaded and active: not closing, closed or deleted."""
        ...
