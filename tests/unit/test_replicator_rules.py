"""What a replicator carries and how: pure rules (no servers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.managed_ledger.api import Position
from broker.service.topics.dedup import SOURCE_POSITION_PROPERTY, origin_sequence_id
from magnetar.protocol import pb
from replicator.replicator import cursor_name, producer_name, replicated_metadata, should_replicate


def md(**fields) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, **fields)


def test_names_follow_pulsar():
    assert cursor_name("eu-west") == "pulsar.repl.eu-west"
    assert producer_name("us-east") == "pulsar.repl.us-east"


def test_what_is_replicated_where():
    assert should_replicate(md(), "eu-west")
    assert not should_replicate(md(replicated_from="ap-south"), "eu-west")  # no loops
    assert should_replicate(md(replicate_to=["eu-west", "ap-south"]), "eu-west")
    assert not should_replicate(md(replicate_to=["ap-south"]), "eu-west")
    assert not should_replicate(md(replicate_to=["__local__"]), "eu-west")  # disable_replication


def test_the_copy_keeps_the_origin_metadata():
    origin = md(partition_key="k", event_time=9, num_messages_in_batch=3)
    origin.properties.add(key="a", value="b")
    copy = replicated_metadata(origin, "us-east", Position(12, 34))
    assert copy.replicated_from == "us-east"
    assert (copy.producer_name, copy.sequence_id, copy.publish_time, copy.partition_key, copy.event_time,
            copy.num_messages_in_batch) == ("p", 1, 2, "k", 9, 3)
    assert {p.key: p.value for p in copy.properties} == {"a": "b", SOURCE_POSITION_PROPERTY: "12:34"}
    assert not origin.HasField("replicated_from")  # the stored original is untouched


@given(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1)),
       st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1)))
def test_origin_sequence_ids_order_as_positions(a, b):
    assert (origin_sequence_id(*a) < origin_sequence_id(*b)) == (a < b)
    assert origin_sequence_id(*a) < 2**63
