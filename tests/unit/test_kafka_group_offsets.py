"""Pure parts of Kafka groups' storage and placement: the cursor-property codec of committed offsets and the
choice of coordination topic."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from broker.kafka.groups.offsets import METADATA_MAX_BYTES, decode_offsets, encode_offsets
from broker.kafka.groups.placement import (coordination_partition, group_of_subscription, java_string_hash,
                                           subscription_name)

topics = st.one_of(st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True),
                   st.text(min_size=1, max_size=60).map(lambda t: f"persistent://public/default/{t}"))
metadata = st.text(max_size=300).filter(lambda m: len(m.encode("utf-8")) <= METADATA_MAX_BYTES)
committed = st.dictionaries(st.tuples(topics, st.integers(0, 10_000)),
                            st.tuples(st.integers(-1, 2**62), metadata), max_size=20)


@settings(max_examples=300)
@given(committed)
def test_offsets_round_trip_through_integer_properties(offsets):
    props = encode_offsets(offsets)
    assert all(0 <= v < 2**56 for k, v in props.items() if k.startswith("m|"))  # positive Java longs
    assert decode_offsets(props) == offsets


@given(st.dictionaries(st.text(max_size=20), st.integers(-2**63, 2**63 - 1), max_size=10), committed)
def test_foreign_properties_never_raise_nor_change_the_offsets(noise, offsets):
    decode_offsets(noise)  # whatever someone else stored: no exception
    foreign = {k: v for k, v in noise.items() if not k.startswith(("o|", "n|", "m|"))}
    assert decode_offsets({**foreign, **encode_offsets(offsets)}) == offsets


def test_broken_metadata_chunks_give_empty_metadata_not_an_error():
    props = encode_offsets({("t", 0): (5, "hello world")})
    props["m|0|1|t"] = 2**70  # too wide for its 4 bytes
    assert decode_offsets(props) == {("t", 0): (5, "")}


def test_java_hash_matches_known_values():
    # String.hashCode of these strings, as the JVM computes them
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE: Kafka's abs masks it


@given(st.text(max_size=50), st.integers(1, 64))
def test_coordination_partition_is_in_range_and_stable(group, n):
    k = coordination_partition(group, n)
    assert 0 <= k < n and k == coordination_partition(group, n)


@given(st.text(min_size=1, max_size=50))
def test_subscription_names_round_trip_and_have_no_slash(group):
    name = subscription_name(group)
    assert "/" not in name and group_of_subscription(name) == group


def test_plain_group_ids_are_their_own_subscription_name():
    assert subscription_name("orders-app_1.v2~x") == "orders-app_1.v2~x"
