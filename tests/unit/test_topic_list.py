"""The pure parts of topic lists (``broker/service/session/topic_list.py``): Pulsar's topic-list hash, pattern matching as
Pulsar's broker does it, the patterns the broker declines to evaluate, and the namespace's topic set."""

from __future__ import annotations

import re

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.service.errors import InvalidTopicNameError, NotAllowedError
from broker.service.session.topic_list import (TopicsPatternError, compile_topics_pattern, diff, match_name,
                                       namespace_topic_names, parse_namespace, topics_hash, try_compile_topics_pattern)

NS = "persistent://public/default"


# ------------------------------------------------------------------------------------------ hash


def test_hash_is_crc32c_of_the_sorted_names_comma_separated_least_significant_byte_first() -> None:
    # CRC32C("123456789") is the standard check value 0xE3069283; Guava's HashCode.toString writes an int hash
    # little-endian, so Pulsar's string for it is "839206e3".
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    assert topics_hash(["123456789"]) == "839206e3"
    assert topics_hash([]) == "00000000"
    both = crc32c.crc32c(b"persistent://a/b/x,persistent://a/b/y")
    assert topics_hash(["persistent://a/b/y", "persistent://a/b/x"]) == both.to_bytes(4, "little").hex()
    assert topics_hash(["ab"]) != topics_hash(["a", "b"])  # the separator tells these apart
    assert topics_hash(["é"]) == crc32c.crc32c("é".encode()).to_bytes(4, "little").hex()  # UTF-8


@given(st.lists(st.text(min_size=1, max_size=20), max_size=8), st.randoms())
def test_hash_does_not_depend_on_order(names: list[str], rnd) -> None:
    shuffled = list(names)
    rnd.shuffle(shuffled)
    assert topics_hash(shuffled) == topics_hash(names)
    assert re.fullmatch(r"[0-9a-f]{8}", topics_hash(names))


# ------------------------------------------------------------------------------------------ patterns


def test_a_pattern_matches_the_name_without_scheme_and_partition_suffix_as_a_whole() -> None:
    p = compile_topics_pattern(f"{NS}/orders-.*")
    assert p.matches(f"{NS}/orders-a")
    assert p.matches(f"{NS}/orders-p-partition-3")  # its partitioned topic's name matches
    assert not p.matches(f"{NS}/other-orders-a")  # a whole match, not a search
    assert not p.matches("persistent://public/other/orders-a")
    assert p.matches("non-persistent://public/default/orders-a")  # as Pulsar: the scheme is removed from both
    exact = compile_topics_pattern(f"{NS}/orders-[a-z]")
    assert exact.matches(f"{NS}/orders-p-partition-12")
    assert not exact.matches(f"{NS}/orders-ab")
    assert compile_topics_pattern("public/default/orders-.*").matches(f"{NS}/orders-a")  # no scheme given
    assert compile_topics_pattern("^persistent://public/default/x$").matches(f"{NS}/x")
    assert not p.matches("not a topic name")
    assert match_name(f"{NS}/orders-p-partition-3") == "public/default/orders-p"


def test_filter_keeps_the_order_given() -> None:
    p = compile_topics_pattern(f"{NS}/(?:orders|payments)-.*")
    topics = [f"{NS}/payments-1", f"{NS}/audit", f"{NS}/orders-2-partition-0", f"{NS}/orders-1"]
    assert p.filter(topics) == [f"{NS}/payments-1", f"{NS}/orders-2-partition-0", f"{NS}/orders-1"]


@pytest.mark.parametrize("pattern, why", [
    ("", "empty"),
    (f"{NS}/orders-(", "not a valid regular expression"),
    (f"{NS}/(a+)+b", "repetition inside a repetition"),
    (f"{NS}/(ab|a)*c", "alternation inside a repetition"),
    (r"(a)\1", "back-reference"),
    (".*a.*b.*c.*d", "more than 3 unbounded repetitions"),
    (f"{NS}/" + "x" * 40, "at most 50"),
])
def test_patterns_the_broker_does_not_evaluate(pattern: str, why: str) -> None:
    with pytest.raises(TopicsPatternError, match=re.escape(why)) as caught:
        compile_topics_pattern(pattern)
    assert isinstance(caught.value, NotAllowedError)  # answered NotAllowedError to a watcher
    assert try_compile_topics_pattern(pattern) is None  # a poll answers unfiltered instead


def test_the_length_limit_is_configurable_and_ordinary_patterns_pass() -> None:
    long = f"{NS}/" + "x" * 40
    assert compile_topics_pattern(long, max_length=200).matches(f"{NS}/" + "x" * 40)
    for ok in (f"{NS}/.*", f"{NS}/orders-.*-v[0-9]+", f"{NS}/(a|b)*", f"{NS}/(ab){{3}}", f"{NS}/x.*y.*z"):
        assert try_compile_topics_pattern(ok) is not None, ok


# ------------------------------------------------------------------------------------------ namespaces and sets


def test_parse_namespace() -> None:
    assert parse_namespace("public/default") == ("public", "default")
    for bad in ("public", "public/", "/default", "a/b/c", "pub lic/default", ""):
        with pytest.raises(InvalidTopicNameError, match="invalid namespace"):
            parse_namespace(bad)


def test_namespace_topic_names_unites_stored_topics_and_every_declared_partition() -> None:
    names = namespace_topic_names(
        "public", "default", "persistent",
        managed_ledgers=["public/default/persistent/a", "public/default/persistent/b%20c",
                         "public/default/persistent/p-partition-0", "not/a/topic/path/at-all"],
        partitioned={"p": 2, "q": 0})
    assert names == {f"{NS}/a", f"{NS}/b c", f"{NS}/p-partition-0", f"{NS}/p-partition-1"}


def test_diff() -> None:
    assert diff({"a", "b", "c"}, ["d", "b", "a"]) == (["d"], ["c"])
    assert diff([], []) == ([], [])
