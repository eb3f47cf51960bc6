"""Admitting producers by access mode, shared by persistent and non-persistent topics (as Pulsar's
``AbstractTopic`` serves both).

Pulsar's rules: a producer whose name is taken replaces the holder only with a higher ``epoch`` (a client
reconnecting) or when the holder's connection is gone, else ProducerBusy; a producer whose topic epoch is
older than the topic's was fenced by a newer exclusive one. By mode: Shared is refused while an exclusive
producer holds the topic; Exclusive is refused while any other producer is connected; ExclusiveWithFencing
closes the others; WaitForExclusive queues (its future completes when it is granted). Each exclusive grant
takes the topic epoch: the producer's own when it brings one not older than the topic's (a reconnect),
else the next one.

:class:`ProducerAccess` is a mixin over ``producers``, ``topic_epoch``, ``_waiting_exclusive``, ``name``,
``state``; the topic decides what a granted waiting producer still needs (:meth:`_waiting_granted`: a
persistent topic stores the epoch first, a non-persistent one grants at once).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Optional

from ..errors import NotAllowedError, ProducerBusyError, ProducerFencedError
from ..session.producer import AccessMode, Producer

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
        if producer.topic_epoch is not None and self.topic_epoch is not None and \
                producer.topic_epoch < self.topic_epoch:
            raise ProducerFencedError(f"topic epoch {producer.topic_epoch} of producer {producer.name!r} is older "
                                      f"than the topic's {self.topic_epoch}: a newer exclusive producer fenced it")
        mode = producer.access_mode
        others = [p for p in self.producers.values() if p is not producer]
        holder = next((p for p in others if p.exclusive), None)
        if mode == AccessMode.Shared:
            if holder is not None:
                raise ProducerBusyError(f"topic {self.name} has an exclusive producer ({holder.name!r})")
        elif mode == AccessMode.Exclusive:
            if others:
                raise ProducerBusyError(f"topic {self.name} already has {len(others)} connected producer(s); "
                                        "exclusive access refused")
            self._grant_epoch(producer)
        elif mode == AccessMode.ExclusiveWithFencing:
            for other in others:
                other.notify_closed()
                self.remove_producer(other)
            self._grant_epoch(producer, fence=True)
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

    def _grant_epoch(self, producer: Producer, *, fence: bool = False) -> None:
        if producer.topic_epoch is not None and not fence and (self.topic_epoch is None
                                                              or producer.topic_epoch >= self.topic_epoch):
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
