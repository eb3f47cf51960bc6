"""pulsar-client pattern consumers that poll as often as they are asked to.

pulsar-client 3.13's ``Client.subscribe`` type-checks ``pattern_auto_discovery_period`` and then never hands it to
the C++ core (apache/pulsar-client-python#171, seen here on the wire: GET_TOPICS_OF_NAMESPACE every 60 s
whatever was asked), so a pattern consumer finds topics created after it subscribed only after a minute. The
C++ core itself honours the setting. :func:`honour_discovery_period` makes every consumer configuration the
wrapper builds carry the period the test passes, so tests about discovery take seconds; everything else in the
client stays as shipped.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import _pulsar
import pulsar


@contextlib.contextmanager
def honour_discovery_period(period_s: int) -> Iterator[None]:
    """Within the block, pattern consumers made by ``pulsar.Client.subscribe`` poll every ``period_s`` seconds."""
    shipped = _pulsar.ConsumerConfiguration

    class ConsumerConfiguration(shipped):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.pattern_auto_discovery_period(period_s)

    pulsar._pulsar.ConsumerConfiguration = ConsumerConfiguration
    try:
        yield
    finally:
        pulsar._pulsar.ConsumerConfiguration = shipped
