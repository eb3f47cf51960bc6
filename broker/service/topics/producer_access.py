"""Admitting producers by access mode, shared by persistent and non-persistent topics (as Pulsar's
``AbstractTopic`` serves both).

Pulsar's rules: a producer whose name is taken replaces the holder only with a higher ``epoch`` (a client
reconnecting) or when the holder's connection is gone, else ProducerBusy; an exclusive producer (any mode but
Shared) whose topic epoch is older than the topic's was fenced by a newer exclusive one (ProducerFenced). By
mode, with the codes Pulsar's ``incrementTopicEpochIfNeeded`` answers:

* Shared is refused while an exclusive producer holds the topic or waits for it (ProducerBusy);
* Exclusive is refused while any other producer is connected or waiting, exclusive or shared
  (ProducerFenced: the client must not retry);
* ExclusiveWithFencing fails every waiting producer (ProducerFenced), then closes every connected one, and
  takes the topic;
* WaitForExclusive queues while another producer is connected or waiting (its future completes when it is
  granted, in arrival order).

Each exclusive grant takes the topic epoch: the producer's own when it brings one not older than the topic's
(a reconnect), else the next one. The name check comes before the mode (unlike Pulsar), so a client
reconnecting before the broker has noticed its old connection is gone hears the retriable ProducerBusy, not
a final ProducerFenced.

:class:`ProducerAccess` is a mixin over ``producers``, ``topic_epoch``, ``_waiting_exclusive``, ``name``,
``state``; the topic decides what a granted waiting producer still needs (:meth:`_waiting_granted`: a
persistent topic stores the epoch first, a non-persistent one grants at once).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, Optional

from ..errors import NotAllowedError, ProducerBusyError, ProducerFencedError
from .model import AccessMode

if TYPE_CHECKING:
    from .api import TopicProducer as Producer

log = logging.getLogger("broker.service.topics.producer_access")


class ProducerAccess:
    producers: dict[str, Producer]
    topic_epoch: Optional[int]
    _waiting_exclusive: collections.deque[tuple[Producer, asyncio.Future]]
    name: str

    def _admit(self, producer: Producer) -> Optional[asyncio.Future]:
        """Applies the rules above; registers ``producer``, or returns the future of its wait.

        Raises:
            ProducerBusyError, ProducerFencedError, NotAllowedError.
        """
        existing = self.producers.get(producer.name)
        if existing is not None and existing is not producer:
            if producer.epoch > existing.epoch or existing.connection.closed:
                log.info("[%s] producer %s replaces %s (epoch %d > %d)", self.name, producer, existing,
                         producer.epoch, existing.epoch)
                existing.notify_closed()
                self.remove_producer(existing)
            else:
                raise ProducerBusyError(f"producer with name {producer.name!r} is already connected to {self.name}")
        mode = producer.access_mode
        if mode != AccessMode.Shared and producer.topic_epoch is not None and self.topic_epoch is not None \
                and producer.topic_epoch < self.topic_epoch:
            raise ProducerFencedError(f"topic epoch {producer.topic_epoch} of producer {producer.name!r} is older "
                                      f"than the topic's {self.topic_epoch}: a newer exclusive producer fenced it")
        others = [p for p in self.producers.values() if p is not producer]
        holder = next((p for p in others if p.exclusive), None)
        if mode == AccessMode.Shared:
            if holder is not None:
                raise ProducerBusyError(f"topic {self.name} has an exclusive producer ({holder.name!r})")
            if self._waiting_exclusive:
                raise ProducerBusyError(f"topic {self.name} has {len(self._waiting_exclusive)} producer(s) "
                                        "waiting for exclusive access")
        elif mode == AccessMode.Exclusive:
            if holder is not None:
                raise ProducerFencedError(f"topic {self.name} has an exclusive producer ({holder.name!r})")
            if others or self._waiting_exclusive:
                raise ProducerFencedError(f"topic {self.name} has {len(others)} shared producer(s) and "
                                          f"{len(self._waiting_exclusive)} waiting for exclusive access: "
                                          "exclusive access refused")
            self._grant_epoch(producer)
        elif mode == AccessMode.ExclusiveWithFencing:
            self._fence_out(others, by=producer)
            self._grant_epoch(producer)
        elif mode == AccessMode.WaitForExclusive:
            if others or self._waiting_exclusive:
                fut = asyncio.get_running_loop().create_future()
                self._waiting_exclusive.append((producer, fut))
                return fut
            self._grant_epoch(producer)
        else:
            raise NotAllowedError(f"unknown producer access mode {mode}")
        self.producers[producer.name] = producer
        return None

    def _fence_out(self, others: list[Producer], *, by: Producer) -> None:
        """ExclusiveWithFencing: the waiting producers fail first (else removing the connected ones would
        grant the topic to the first of them), then the connected ones are closed."""
        waiting = list(self._waiting_exclusive)
        self._waiting_exclusive.clear()
        for waiter, fut in waiting:
            log.info("[%s] waiting producer %s fenced out by %s", self.name, waiter, by)
            if not fut.done():
                fut.set_exception(ProducerFencedError(f"producer {by.name!r} took topic {self.name} with "
                                                      "ExclusiveWithFencing"))
        for other in others:
            log.info("[%s] producer %s fenced out by %s", self.name, other, by)
            other.notify_closed()
            self.remove_producer(other)

    def _grant_epoch(self, producer: Producer) -> None:
        """A producer reconnecting keeps its epoch (not older than the topic's: checked on admission), as
        Pulsar's ``setTopicEpoch``; any other grant takes the next epoch."""
        if producer.topic_epoch is not None and (self.topic_epoch is None or producer.topic_epoch >= self.topic_epoch):
            self.topic_epoch = producer.topic_epoch
        else:
            self.topic_epoch = (self.topic_epoch or 0) + 1
        producer.topic_epoch = self.topic_epoch

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        for i, (p, fut) in enumerate(self._waiting_exclusive):
            if p is producer:
                del self._waiting_exclusive[i]
                if not fut.done():
                    fut.cancel()
                break
        self._grant_waiting()

    def _grant_waiting(self) -> None:
        while self._waiting_exclusive and not self.producers and self._accepting_producers():
            producer, fut = self._waiting_exclusive.popleft()
            if fut.done() or producer.closed:
                continue
            self._grant_epoch(producer)
            self.producers[producer.name] = producer
            self._waiting_granted(producer, fut)

    def _accepting_producers(self) -> bool:
        raise NotImplementedError

    def _waiting_granted(self, producer: Producer, fut: asyncio.Future) -> None:
        raise NotImplementedError
