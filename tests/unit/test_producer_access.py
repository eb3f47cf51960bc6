"""Producer admission by access mode (``broker/service/producer_access.py``) against Pulsar's
``AbstractTopic.incrementTopicEpochIfNeeded``: which mode meets which holder with ProducerBusy or
ProducerFenced, what ExclusiveWithFencing does to waiting producers, and which epoch a grant takes. The topic
is a minimal host of the mixin; connections are stand-ins (pure logic, no I/O)."""

from __future__ import annotations

import asyncio
import collections
import types
from typing import Optional

import pytest

from broker.service.errors import ProducerBusyError, ProducerFencedError
from broker.service.session.producer import AccessMode, Producer
from broker.service.topics.producer_access import ProducerAccess


class Host(ProducerAccess):
    def __init__(self, topic_epoch: Optional[int] = None) -> None:
        self.name = "persistent://public/default/t"
        self.producers: dict[str, Producer] = {}
        self.topic_epoch = topic_epoch
        self._waiting_exclusive = collections.deque()

    def _accepting_producers(self) -> bool:
        return True

    def _waiting_granted(self, producer: Producer, fut: asyncio.Future) -> None:
        fut.set_result(None)


def make(host: Host, name: str, mode: int = AccessMode.Shared, *, topic_epoch: Optional[int] = None) -> Producer:
    conn = types.SimpleNamespace(closed=False, producers={}, remote_address="127.0.0.1:1")
    return Producer(host, conn, 1, name, access_mode=mode, topic_epoch=topic_epoch)


@pytest.mark.parametrize("holder_mode", [AccessMode.Exclusive, AccessMode.WaitForExclusive,
                                         AccessMode.ExclusiveWithFencing, AccessMode.Shared])
def test_exclusive_meeting_any_producer_is_fenced(holder_mode: int) -> None:
    host = Host()
    assert host._admit(make(host, "a", holder_mode)) is None
    with pytest.raises(ProducerFencedError):
        host._admit(make(host, "b", AccessMode.Exclusive))
    assert list(host.producers) == ["a"]


def test_shared_meeting_an_exclusive_holder_is_busy() -> None:
    host = Host()
    host._admit(make(host, "a", AccessMode.Exclusive))
    with pytest.raises(ProducerBusyError):
        host._admit(make(host, "b"))
    assert list(host.producers) == ["a"] and host.topic_epoch == 1


def test_a_waiting_exclusive_producer_refuses_shared_busy_and_exclusive_fenced() -> None:
    async def main() -> None:
        host = Host()
        shared = make(host, "s")
        host._admit(shared)
        fut = host._admit(make(host, "w", AccessMode.WaitForExclusive))
        assert fut is not None and not fut.done()
        with pytest.raises(ProducerBusyError, match="waiting"):
            host._admit(make(host, "s2"))
        with pytest.raises(ProducerFencedError, match="waiting"):
            host._admit(make(host, "x", AccessMode.Exclusive))
        host.remove_producer(shared)
        assert fut.done() and list(host.producers) == ["w"] and host.topic_epoch == 1
    asyncio.run(main())


def test_exclusive_with_fencing_fails_waiting_producers_before_closing_the_holder() -> None:
    async def main() -> None:
        host = Host()
        holder = make(host, "a", AccessMode.Exclusive)
        host._admit(holder)
        waits = [host._admit(make(host, f"w{i}", AccessMode.WaitForExclusive)) for i in range(2)]
        host._admit(make(host, "f", AccessMode.ExclusiveWithFencing))
        assert all(isinstance(w.exception(), ProducerFencedError) for w in waits)  # none granted meanwhile
        assert holder.closed and list(host.producers) == ["f"] and not host._waiting_exclusive
        assert host.topic_epoch == 2
    asyncio.run(main())


def test_a_reconnecting_exclusive_producer_keeps_its_epoch_and_a_stale_one_is_fenced() -> None:
    host = Host(topic_epoch=3)
    host._admit(make(host, "f", AccessMode.ExclusiveWithFencing, topic_epoch=3))
    assert host.topic_epoch == 3  # a reconnect keeps its epoch (Pulsar's setTopicEpoch)
    host.remove_producer(host.producers["f"])
    for mode in (AccessMode.Exclusive, AccessMode.ExclusiveWithFencing, AccessMode.WaitForExclusive):
        with pytest.raises(ProducerFencedError, match="older"):
            host._admit(make(host, "old", mode, topic_epoch=2))
    host._admit(make(host, "s", topic_epoch=2))  # a Shared producer's epoch is not checked, as Pulsar
    assert list(host.producers) == ["s"]
