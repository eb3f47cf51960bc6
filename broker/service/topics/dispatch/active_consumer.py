"""Which consumer of an Exclusive or Failover subscription is the active one. Pure.

Shared by the persistent dispatcher (``dispatcher_single.py``) and the non-persistent one
(``nonpersistent_dispatch.py``), as Pulsar's ``AbstractDispatcherSingleActiveConsumer`` serves both.
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar


class Ranked(Protocol):
    priority_level: int
    name: str


C = TypeVar("C", bound=Ranked)


def choose_active(consumers: Sequence[C], partition_index: int) -> C:
    """The active consumer among ``consumers`` (not empty): sorted by priority level (lower first) then
    name; on a partition ``partition_index % n`` among those of the best level, else the first."""
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name))
    index = 0
    if partition_index >= 0:
        top = ordered[0].priority_level
        highest = sum(1 for c in ordered if c.priority_level == top)
        index = partition_index % highest
    return ordered[index]
