"""Topic names: Pulsar's accepted forms, partitions, and the storage-path encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.topic_name import InvalidTopicNameError, TopicDomain, TopicName, decode_local_name, encode_local_name

PARSE_TABLE = [
    # input, complete name, namespace, local name, partition index
    ("my-topic", "persistent://public/default/my-topic", "public/default", "my-topic", -1),
    ("t/ns/topic", "persistent://t/ns/topic", "t/ns", "topic", -1),
    ("persistent://t/ns/topic", "persistent://t/ns/topic", "t/ns", "topic", -1),
    ("non-persistent://t/ns/topic", "non-persistent://t/ns/topic", "t/ns", "topic", -1),
    ("persistent://t/ns/topic-partition-0", "persistent://t/ns/topic-partition-0", "t/ns", "topic-partition-0", 0),
    ("t/ns/topic-partition-12", "persistent://t/ns/topic-partition-12", "t/ns", "topic-partition-12", 12),
    ("a-partition-1-partition-2", "persistent://public/default/a-partition-1-partition-2", "public/default",
     "a-partition-1-partition-2", 2),
    ("topic-partition-01", "persistent://public/default/topic-partition-01", "public/default",
     "topic-partition-01", -1),
    ("topic-partition-", "persistent://public/default/topic-partition-", "public/default", "topic-partition-", -1),
    ("topic-partition-x", "persistent://public/default/topic-partition-x", "public/default", "topic-partition-x", -1),
    ("t-1/ns.2:=x/top ic", "persistent://t-1/ns.2:=x/top ic", "t-1/ns.2:=x", "top ic", -1),
    ("persistent://t/ns/émoji✓", "persistent://t/ns/émoji✓", "t/ns", "émoji✓", -1),
]


@pytest.mark.parametrize(("text", "full", "namespace", "local", "partition"), PARSE_TABLE)
def test_parse_table(text, full, namespace, local, partition):
    name = TopicName.parse(text)
    assert (str(name), name.namespace, name.local_name, name.partition_index) == (full, namespace, local, partition)
    assert TopicName.parse(full) == name
    assert name.is_partition == (partition >= 0)


INVALID = [
    ("", "local name is empty"),
    ("t/ns", "expected"),
    ("t/ns/", "local name is empty"),
    ("persistent://t/ns", "expected"),
    ("persistent://t/c/ns/topic", "cluster segment"),
    ("a/b/c/d/e", "expected"),
    ("kafka://t/ns/topic", "invalid topic domain 'kafka'"),
    ("persistent://t!/ns/topic", "invalid tenant"),
    ("persistent://t/n s/topic", "invalid namespace"),
    ("persistent:///ns/topic", "invalid tenant"),
    ("persistent://t/ns/   ", "local name is empty"),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_names(text, message):
    with pytest.raises(InvalidTopicNameError, match=message):
        TopicName.parse(text)


def test_not_a_string() -> None:
    with pytest.raises(InvalidTopicNameError, match="must be a string, not bytes"):
        TopicName.parse(b"persistent://t/ns/topic")
    with pytest.raises(ValueError):
        TopicName.parse(["x"])


def test_partitions() -> None:
    topic = TopicName.parse("persistent://t/ns/orders")
    assert topic.partition_name(3) == "persistent://t/ns/orders-partition-3"
    partition = topic.partition(3)
    assert partition.partition_index == 3 and partition.base == topic and topic.base is topic
    assert partition.partition(5) == topic.partition(5)
    with pytest.raises(InvalidTopicNameError):
        topic.partition(-1)
    assert TopicName.parse("np").domain is TopicDomain.PERSISTENT and TopicName.parse("np").persistent
    assert not TopicName.parse("non-persistent://t/ns/x").persistent



def test_path_encoding_like_java_url_encoder() -> None:
    # Java: URLEncoder.encode("a b~c*d_e.f-g/h%é", "UTF-8") == "a+b%7Ec*d_e.f-g%2Fh%25%C3%A9"
    assert encode_local_name("a b~c*d_e.f-g/h%é") == "a+b%7Ec*d_e.f-g%2Fh%25%C3%A9"
    name = TopicName.parse("persistent://t/ns/my topic~é")
    assert name.path == "t/ns/persistent/my+topic%7E%C3%A9"
    assert name.rest_path == "persistent/t/ns/my+topic%7E%C3%A9"
    assert TopicName.from_path(name.path) == name
    assert TopicName.parse("non-persistent://t/ns/x-partition-1").path == "t/ns/non-persistent/x-partition-1"
    with pytest.raises(InvalidTopicNameError):
        TopicName.from_path("t/ns/persistent")
    with pytest.raises(InvalidTopicNameError):
        TopicName.from_path("t/ns/persistent/a%2Fb")  # an encoded slash cannot be a local name


@given(st.text(min_size=1).filter(lambda s: "/" not in s and s.strip()))
def test_any_local_name_round_trips_through_paths(local):
    name = TopicName.parse(f"persistent://tenant/ns/{local}")
    assert decode_local_name(name.encoded_local_name) == local
    assert TopicName.from_path(name.path) == name
    assert TopicName.parse(str(name)) == name
