"""Non-persistent dispatch decisions (``broker/service/topics/nonpersistent/dispatch.py``), with plain stand-ins for
consumers: who takes a message, who is active, and when a message is dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pytest
from hypothesis import given, strategies as st

from broker.service.topics.dispatch.active_consumer import choose_active
from broker.service.errors import ConsumerAssignError
from broker.service.topics.dispatch.key_ranges import key_hash
from broker.service.topics.nonpersistent.dispatch import (KeySharedDispatch, Offer, SharedDispatch, SingleActiveDispatch,
                                                   new_dispatch)
from broker.service.topics.model import KeySharedMode, KeySharedSpec, SubType
from magnetar.protocol import encode_entry, pb



@dataclass(eq=False)
class FakeConsumer:
    name: str
    consumer_id: int = 0
    priority_level: int = 0
    permits: int = 10
    key_shared_meta: Optional[KeySharedSpec] = None
    notes: list = field(default_factory=list)


def ready(c: FakeConsumer) -> bool:
    return c.permits > 0


def entry_with_key(key: str) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key=key)
    return encode_entry(md, b"payload")


def test_exclusive_gives_everything_to_its_consumer_while_it_has_permits():
    d = new_dispatch(SubType.Exclusive, ready)
    a = FakeConsumer("a")
    assert d.add(a) == []  # no ACTIVE_CONSUMER_CHANGE for Exclusive
    offer = Offer(b"x", 1)
    assert d.select(offer) is a
    a.permits = 0
    assert d.select(offer) is None  # dropped, not queued


def test_failover_active_by_priority_then_name_and_notifications():
    d = new_dispatch(SubType.Failover, ready)
    b, a, low = FakeConsumer("b"), FakeConsumer("a"), FakeConsumer("z", priority_level=-1)
    assert d.add(b) == [(b, True)]
    assert d.add(a) == [(b, False), (a, True)]  # a sorts first: it takes over, both are told
    assert d.select(Offer(b"x", 1)) is a
    c = FakeConsumer("c")
    assert d.add(c) == [(c, False)]  # no change: only the newcomer hears it is inactive
    assert d.add(low)[-1] == (low, True)
    assert d.active_consumer_name() == "z"
    d.remove(low)
    assert d.active_consumer_name() == "a"
    low.permits = 0
    a.permits = 0
    assert d.select(Offer(b"x", 1)) is None  # the active one cannot take it: nobody else gets it


def test_failover_on_a_partition_spreads_the_active_consumer():
    consumers = [FakeConsumer(n) for n in ("a", "b", "c")]
    assert [choose_active(consumers, p).name for p in range(4)] == ["a", "b", "c", "a"]
    d = SingleActiveDispatch(ready, SubType.Failover, partition_index=1)
    for c in consumers:
        d.add(c)
    assert d.active_consumer_name() == "b"


def test_shared_round_robin_over_ready_consumers_of_the_best_priority():
    d = SharedDispatch(ready)
    a, b, spare = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("spare", priority_level=1)
    for c in (a, b, spare):
        d.add(c)
    picks = [d.select(Offer(b"x", 1)) for _ in range(6)]
    assert picks.count(a) == 3 and picks.count(b) == 3
    a.permits = 0
    assert {d.select(Offer(b"x", 1)) for _ in range(4)} == {b}
    b.permits = 0
    assert d.select(Offer(b"x", 1)) is spare
    spare.permits = 0
    assert d.select(Offer(b"x", 1)) is None


@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_shared_picks_only_ready_consumers(flags):
    d = SharedDispatch(ready)
    consumers = [FakeConsumer(f"c{i}", permits=1 if f else 0) for i, f in enumerate(flags)]
    for c in consumers:
        d.add(c)
    chosen = d.select(Offer(b"x", 1))
    assert (chosen is None) == (not any(flags))
    assert chosen is None or chosen.permits > 0


def test_key_shared_keeps_a_key_with_its_owner_and_drops_when_it_cannot_take_it():
    d = KeySharedDispatch(ready, None)
    consumers = [FakeConsumer(f"c{i}", consumer_id=i) for i in range(3)]
    for c in consumers:
        d.add(c)
    owners = {}
    for i in range(50):
        offer = Offer(entry_with_key(f"k{i}"), 1)
        owners[f"k{i}"] = d.select(offer)
        assert d.select(Offer(entry_with_key(f"k{i}"), 1)) is owners[f"k{i}"]
    assert len(set(owners.values())) == 3
    victim = owners["k0"]
    victim.permits = 0
    assert d.select(Offer(entry_with_key("k0"), 1)) is None  # never handed to another consumer


def test_key_shared_sticky_ranges_and_mode_mismatch():
    meta = KeySharedSpec(KeySharedMode.STICKY, ((0, 32767),))
    d = new_dispatch(SubType.Key_Shared, ready, key_shared_meta=meta)
    low = FakeConsumer("low", key_shared_meta=meta)
    d.add(low)
    with pytest.raises(ConsumerAssignError):  # overlapping range
        d.add(FakeConsumer("again", key_shared_meta=meta))
    with pytest.raises(ConsumerAssignError):  # AUTO_SPLIT on a STICKY subscription
        d.add(FakeConsumer("auto"))
    key = next(f"k{i}" for i in range(1000) if key_hash(f"k{i}".encode()) > 32767)
    assert d.select(Offer(entry_with_key(key), 1)) is None  # no consumer covers that hash
    key = next(f"k{i}" for i in range(1000) if key_hash(f"k{i}".encode()) <= 32767)
    assert d.select(Offer(entry_with_key(key), 1)) is low


def test_offer_hashes_the_sticky_key_once():
    offer = Offer(entry_with_key("abc"), 3)
    assert offer.key_hash == key_hash(b"abc")
    offer.entry = b"garbage"
    assert offer.key_hash == key_hash(b"abc")


def test_removing_the_last_consumer_leaves_nobody_active():
    d = new_dispatch(SubType.Failover, ready)
    a = FakeConsumer("a")
    d.add(a)
    assert d.remove(a) == []
    assert d.active_consumer_name() is None and d.select(Offer(b"x", 1)) is None
