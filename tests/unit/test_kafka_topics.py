"""broker/kafka/topics.py's choice when a request reaches a broker that does not own the partition (stand-in
ownership and service: the decision alone)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.kafka.config import KafkaConfig
from broker.kafka.topics import KafkaTopics, NotLeaderError


class Ownership:
    def __init__(self, owned: bool, lookup_is_self: bool) -> None:
        self.owned = owned
        self.lookup_is_self = lookup_is_self
        self.lookups: list[tuple[str, bool]] = []

    async def is_owned_by_me(self, topic: str) -> bool:
        return self.owned

    async def lookup(self, topic: str, *, authoritative: bool = False):
        self.lookups.append((topic, authoritative))
        return SimpleNamespace(is_self=self.lookup_is_self)


class Service:
    def __init__(self, ownership: Ownership) -> None:
        self.ownership = ownership
        self.loaded: list[str] = []

    async def get_topic(self, name: str, *, create: bool = True):
        self.loaded.append(name)
        return name


TOPIC = "persistent://public/default/t-partition-0"


def test_an_unowned_partition_named_leader_elsewhere_is_acquired_on_first_use() -> None:
    """Regression: Metadata asked of broker A names B the leader of an unowned bundle (A's lookup chose B, as a
    Pulsar lookup redirects); B must take it at the client's first request, not answer NOT_LEADER forever."""
    ownership = Ownership(owned=False, lookup_is_self=True)
    service = Service(ownership)
    assert asyncio.run(KafkaTopics(service, KafkaConfig()).local(TOPIC)) == TOPIC
    assert ownership.lookups == [(TOPIC, True)] and service.loaded == [TOPIC]


def test_a_partition_owned_by_another_broker_is_not_led_here() -> None:
    ownership = Ownership(owned=False, lookup_is_self=False)
    service = Service(ownership)
    with pytest.raises(NotLeaderError):
        asyncio.run(KafkaTopics(service, KafkaConfig()).local(TOPIC))
    assert service.loaded == []


def test_an_owned_partition_needs_no_lookup() -> None:
    ownership = Ownership(owned=True, lookup_is_self=False)
    service = Service(ownership)
    assert asyncio.run(KafkaTopics(service, KafkaConfig()).local(TOPIC)) == TOPIC
    assert ownership.lookups == []
