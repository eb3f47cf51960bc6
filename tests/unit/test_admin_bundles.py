"""Namespace bundles, pure: Pulsar's boundaries and names, strict parsing, lookup by hash, even spreading."""

from __future__ import annotations

import zlib
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.bundles import (FULL_UPPER_BOUND, NamespaceBundle, NamespaceBundles, bundles_data,
                            default_boundaries, parse_bundles_data, rendezvous, topic_hash)
from magnetar.topic_name import TopicName


def test_default_bundles_are_pulsars() -> None:
    assert bundles_data(default_boundaries(4)) == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], "numBundles": 4}
    assert default_boundaries(1) == [0, FULL_UPPER_BOUND]
    assert len(default_boundaries(1024)) == 1025


@pytest.mark.parametrize("bad", [0, -1, 1025, True, 2.0, "4"])
def test_default_boundaries_refuses_bad_counts(bad) -> None:
    with pytest.raises(ValueError):
        default_boundaries(bad)


def test_bundle_names_and_ranges() -> None:
    bundles = NamespaceBundles("t", "ns", default_boundaries(4))
    assert [b.name for b in bundles.bundles] == ["0x00000000_0x40000000", "0x40000000_0x80000000",
                                                 "0x80000000_0xc0000000", "0xc0000000_0xffffffff"]
    assert str(bundles.bundles[1]) == "t/ns/0x40000000_0x80000000"
    assert bundles.find(0) is bundles.bundles[0]
    assert bundles.find(0x3FFFFFFF) is bundles.bundles[0]
    assert bundles.find(0x40000000) is bundles.bundles[1]
    assert bundles.find(FULL_UPPER_BOUND) is bundles.bundles[3]  # the last range includes the top
    assert bundles.get("0x80000000_0xc0000000") is bundles.bundles[2]
    assert bundles.get("0x0_0x1") is None


def test_topic_hash_is_crc32_of_the_complete_name() -> None:
    name = TopicName.parse("my-topic")
    assert topic_hash(str(name)) == zlib.crc32(b"persistent://public/default/my-topic")
    bundles = NamespaceBundles("public", "default", default_boundaries(4))
    assert bundles.for_topic(name).contains(topic_hash(str(name)))


@given(st.integers(min_value=0, max_value=FULL_UPPER_BOUND), st.integers(min_value=1, max_value=64))
def test_every_hash_has_exactly_one_bundle(h: int, n: int) -> None:
    bundles = NamespaceBundles("t", "ns", default_boundaries(n))
    owners = [b for b in bundles.bundles if b.contains(h)]
    assert owners == [bundles.find(h)]


def test_parse_accepts_boundaries_or_a_count() -> None:
    assert parse_bundles_data({"numBundles": 2}) == [0, 0x80000000, FULL_UPPER_BOUND]
    assert parse_bundles_data({"boundaries": ["0x00000000", "0x10000000", "0xffffffff"]}) == \
        [0, 0x10000000, FULL_UPPER_BOUND]
    assert parse_bundles_data(bundles_data(default_boundaries(8))) == default_boundaries(8)


@pytest.mark.parametrize("bad", [
    None, [], {}, {"numBundles": 0}, {"numBundles": "4"}, {"numBundles": True},
    {"boundaries": "0x0"}, {"boundaries": [0, 1]}, {"boundaries": ["0x00000000"]},
    {"boundaries": ["0x00000001", "0xffffffff"]}, {"boundaries": ["0x00000000", "0xfffffffe"]},
    {"boundaries": ["0x00000000", "0x80000000", "0x80000000", "0xffffffff"]},
    {"boundaries": ["0x00000000", "zz", "0xffffffff"]}, {"boundaries": ["0x00000000", "12", "0xffffffff"]},
    {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 2},
])
def test_parse_refuses_malformed_bundles(bad) -> None:
    with pytest.raises(ValueError):
        parse_bundles_data(bad)


def test_rendezvous_spreads_bundles_evenly_between_equal_brokers() -> None:
    bundles = NamespaceBundles("t", "ns", default_boundaries(64)).bundles
    winners = Counter(min(("a", "b"), key=lambda broker: rendezvous(b, broker)) for b in bundles)
    assert 20 <= winners["a"] <= 44, winners


def test_bundles_order_and_hash_as_values() -> None:
    a = NamespaceBundle("t", "ns", 0, 10)
    assert a == NamespaceBundle("t", "ns", 0, 10) and len({a, NamespaceBundle("t", "ns", 0, 10)}) == 1
    assert sorted([NamespaceBundle("t", "ns", 10, 20), a]) == [a, NamespaceBundle("t", "ns", 10, 20)]
