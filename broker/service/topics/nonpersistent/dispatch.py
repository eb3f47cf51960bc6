"""Non-persistent dispatch decisions, pure: which consumer of a subscription takes a message now, if any.

Theory of operation
-------------------

A non-persistent topic keeps nothing. Each published entry is offered once to every subscription, and the
subscription's dispatch names the one consumer that takes it, or None: the entry is then dropped for that
subscription (counted in its ``msgDropRate``). Nothing is queued, replayed or redelivered, so a broker's
memory never grows with a slow consumer; the consumer loses messages instead, as in Pulsar.

A consumer can take an entry when ``ready(consumer)`` says so: it has permits (an entry of n messages may
drive them negative, as for persistent topics) and its connection is not write-blocked (Pulsar's
``isWritable``). The caller supplies ``ready``; these classes never touch a socket.

* Exclusive / Failover (:class:`SingleActiveDispatch`): the active consumer only, chosen as for persistent
  topics (``active_consumer.choose_active``); every change of the active consumer is reported so the caller
  can send ACTIVE_CONSUMER_CHANGE (true to the new one, false to the others).
* Shared (:class:`SharedDispatch`): round robin over the ready consumers of the best priority level.
* Key_Shared (:class:`KeySharedDispatch`): the consumer owning the entry's sticky-key hash, through the same
  selectors as the persistent dispatcher (``dispatch/key_ranges.py``). If that consumer is not ready the entry is
  dropped, never handed to another consumer, so each key stays with one consumer.

``add`` / ``remove`` return the ACTIVE_CONSUMER_CHANGE notifications to send, as ``(consumer, is_active)``.
"""

from __future__ import annotations

from typing import Callable, Generic, Optional, Protocol, TypeVar

from ..dispatch.active_consumer import choose_active
from ..entries import sticky_key
from ...errors import ConsumerAssignError
from ..dispatch.key_ranges import AutoSplitSelector, SelectorError, StickySelector, key_hash
from ..model import KeySharedMode, KeySharedSpec, SubType


class Receiver(Protocol):
    """What dispatch needs of a consumer (``consumer.Consumer`` has it)."""

    name: str
    consumer_id: int
    priority_level: int
    key_shared_meta: Optional[KeySharedSpec]


C = TypeVar("C", bound=Receiver)
Notifications = list[tuple[C, bool]]


class Offer:
    """One published entry as dispatch sees it; the sticky-key hash is computed once, on first need."""

    __slots__ = ("entry", "messages", "_hash")

    def __init__(self, entry: bytes, messages: int) -> None:
        self.entry = entry
        self.messages = messages
        self._hash: Optional[int] = None

    @property
    def key_hash(self) -> int:
        if self._hash is None:
            self._hash = key_hash(sticky_key(self.entry))
        return self._hash


class Dispatch(Generic[C]):
    """Base: the consumer list. ``select`` is what each subscription type decides."""

    sub_type: int = SubType.Shared

    def __init__(self, ready: Callable[[C], bool]) -> None:
        self.ready = ready
        self.consumers: list[C] = []

    def add(self, consumer: C) -> "Notifications":
        self.consumers.append(consumer)
        return []

    def remove(self, consumer: C) -> "Notifications":
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        return []

    def select(self, offer: Offer) -> Optional[C]:
        raise NotImplementedError

    def consumer_flow(self, consumer: C) -> None:
        """FLOW arrived (the FLOW handler calls it on every dispatcher): nothing waits for permits here."""

    def active_consumer_name(self) -> Optional[str]:
        return None


class SingleActiveDispatch(Dispatch[C]):
    def __init__(self, ready: Callable[[C], bool], sub_type: int, *, partition_index: int = -1) -> None:
        super().__init__(ready)
        self.sub_type = sub_type
        self.partition_index = partition_index
        self.active: Optional[C] = None

    def add(self, consumer: C) -> "Notifications":
        self.consumers.append(consumer)
        return self._pick(new=consumer)

    def remove(self, consumer: C) -> "Notifications":
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if not self.consumers:
            self.active = None
            return []
        return self._pick()

    def _pick(self, *, new: Optional[C] = None) -> "Notifications":
        chosen = choose_active(self.consumers, self.partition_index)
        changed = chosen is not self.active
        self.active = chosen
        if self.sub_type != SubType.Failover:
            return []
        if changed:
            return [(c, c is chosen) for c in self.consumers]
        return [(new, False)] if new is not None else []

    def select(self, offer: Offer) -> Optional[C]:
        active = self.active
        return active if active is not None and self.ready(active) else None

    def active_consumer_name(self) -> Optional[str]:
        return self.active.name if self.active is not None else None


class SharedDispatch(Dispatch[C]):
    sub_type = SubType.Shared

    def __init__(self, ready: Callable[[C], bool]) -> None:
        super().__init__(ready)
        self._turn = 0

    def select(self, offer: Offer) -> Optional[C]:
        candidates = [c for c in self.consumers if self.ready(c)]
        if not candidates:
            return None
        best = min(c.priority_level for c in candidates)
        level = [c for c in candidates if c.priority_level == best]
        self._turn = (self._turn + 1) % (1 << 30)
        return level[self._turn % len(level)]


class KeySharedDispatch(Dispatch[C]):
    sub_type = SubType.Key_Shared

    def __init__(self, ready: Callable[[C], bool], meta: Optional[KeySharedSpec]) -> None:
        super().__init__(ready)
        self.mode = meta.mode if meta is not None else KeySharedMode.AUTO_SPLIT
        self.selector = StickySelector() if self.mode == KeySharedMode.STICKY else AutoSplitSelector()

    def add(self, consumer: C) -> "Notifications":
        """Raises ConsumerAssignError: another Key_Shared mode, or STICKY ranges that overlap."""
        meta = consumer.key_shared_meta
        mode = meta.mode if meta is not None else KeySharedMode.AUTO_SPLIT
        if mode != self.mode:
            raise ConsumerAssignError(f"subscription uses Key_Shared mode {KeySharedMode(self.mode).name}, "
                                      f"not {KeySharedMode(mode).name}")
        try:
            if isinstance(self.selector, StickySelector):
                self.selector.add(consumer, list(meta.hash_ranges))
            else:
                self.selector.add(consumer, f"{consumer.name}#{consumer.consumer_id}@{id(consumer)}")
        except SelectorError as exc:
            raise ConsumerAssignError(str(exc)) from None
        return super().add(consumer)

    def remove(self, consumer: C) -> "Notifications":
        self.selector.remove(consumer)
        return super().remove(consumer)

    def select(self, offer: Offer) -> Optional[C]:
        if not self.consumers:
            return None
        owner = self.selector.select(offer.key_hash)
        return owner if owner is not None and self.ready(owner) else None

    def hash_ranges(self, consumer: C) -> list[tuple[int, int]]:
        return self.selector.ranges(consumer)


def new_dispatch(sub_type: int, ready: Callable[[C], bool], *, partition_index: int = -1,
                 key_shared_meta: Optional[KeySharedSpec] = None) -> Dispatch[C]:
    """The dispatch for a subscription whose first consumer asked for ``sub_type``. A Failover subscription
    on a topic that is not a partition counts as partition 0, as Pulsar's non-persistent one does (the
    same choice as -1: the first consumer by priority and name)."""
    if sub_type in (SubType.Exclusive, SubType.Failover):
        return SingleActiveDispatch(ready, sub_type, partition_index=partition_index)
    if sub_type == SubType.Shared:
        return SharedDispatch(ready)
    if sub_type == SubType.Key_Shared:
        return KeySharedDispatch(ready, key_shared_meta)
    raise ValueError(f"unknown subscription type {sub_type}")
