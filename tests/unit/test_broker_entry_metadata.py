"""Broker entry metadata: the interceptor's index arithmetic and names (pure, property-tested)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.managed_ledger import ManagedLedgerConfig
from broker.managed_ledger.interceptor import (BrokerEntryMetadataInterceptor, entry_base_index, messages_in_entry,
                                               parse_interceptor_names, read_broker_entry_metadata, stored_index)
from magnetar.protocol import pb
from magnetar.protocol.frames import encode_entry, parse_entry


def entry(n: int | None, payload: bytes = b"x", marker: bool = False) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    if n is not None:
        md.num_messages_in_batch = n
    if marker:
        md.marker_type = 12
    return encode_entry(md, payload)


def test_names_accept_pulsar_classes_short_names_and_comma_lists():
    assert parse_interceptor_names(["timestamp", "index"]) == {"timestamp", "index"}
    assert parse_interceptor_names([
        "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
        "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"]) == {"timestamp", "index"}
    assert parse_interceptor_names(["AppendIndexMetadataInterceptor"]) == {"index"}
    assert parse_interceptor_names([]) == frozenset()
    with pytest.raises(ValueError, match="unknown broker entry metadata interceptor 'offset'"):
        parse_interceptor_names(["timestamp", "offset"])
    with pytest.raises(ValueError, match="unknown"):
        ManagedLedgerConfig(broker_entry_metadata_interceptors=("nope",))
    assert BrokerEntryMetadataInterceptor.from_names(()) is None


def test_message_count_follows_pulsar():
    assert messages_in_entry(entry(None)) == 1  # a single message
    assert messages_in_entry(entry(7)) == 7  # a batch
    assert messages_in_entry(entry(None, marker=True)) == 1  # markers count as one, as Pulsar adds them
    assert messages_in_entry(b"not an entry") == 1


def test_first_message_gets_index_zero_and_the_entry_stores_its_last():
    icpt = BrokerEntryMetadataInterceptor(timestamp=True, index=True)
    stored, base = icpt.intercept(entry(None), now_ms=1234)
    assert base == 0 and stored_index(stored) == 0 and icpt.next_index == 1
    stored, base = icpt.intercept(entry(5), now_ms=1235)
    assert base == 1 and stored_index(stored) == 5 and entry_base_index(stored) == 1
    bem = read_broker_entry_metadata(stored)
    assert bem.broker_timestamp == 1235
    parsed = parse_entry(stored)  # checks the CRC: the producer's entry is intact behind the section
    assert parsed.broker_entry_metadata.index == 5 and parsed.metadata.num_messages_in_batch == 5


def test_timestamp_only_and_replacing_an_existing_section():
    icpt = BrokerEntryMetadataInterceptor(timestamp=True, index=False)
    once, base = icpt.intercept(entry(3), now_ms=10)
    assert base is None and stored_index(once) is None and read_broker_entry_metadata(once).broker_timestamp == 10
    twice, _ = icpt.intercept(once, now_ms=20)  # a section already there is replaced, not stacked
    assert read_broker_entry_metadata(twice).broker_timestamp == 20 and len(twice) == len(once)
    assert read_broker_entry_metadata(entry(1)) is None


@given(st.one_of(st.none(), st.integers(0, 2**64 - 1)), st.one_of(st.none(), st.integers(0, 2**64 - 1)))
def test_the_hand_encoded_section_is_protobufs(timestamp, index):
    from broker.managed_ledger.interceptor import _section
    bem = pb.BrokerEntryMetadata()
    if timestamp is not None:
        bem.broker_timestamp = timestamp
    if index is not None:
        bem.index = index
    body = bem.SerializeToString()
    assert _section(timestamp, index) == b"\x0e\x02" + len(body).to_bytes(4, "big") + body


def test_a_count_the_caller_parsed_is_used():
    icpt = BrokerEntryMetadataInterceptor(timestamp=False, index=True)
    stored, base = icpt.intercept(entry(None), now_ms=0, num_messages=4)
    assert (base, stored_index(stored), icpt.next_index) == (0, 3, 4)
    assert icpt.intercept(entry(None), now_ms=0, num_messages=0)[1] == 4 and icpt.next_index == 5  # at least 1


@given(st.lists(st.one_of(st.none(), st.integers(1, 500)), max_size=60), st.integers(0, 10**12))
def test_indexes_are_continuous(counts, start):
    icpt = BrokerEntryMetadataInterceptor(timestamp=False, index=True, next_index=start)
    expected = start
    for n in counts:
        stored, base = icpt.intercept(entry(n), now_ms=0)
        assert base == expected == entry_base_index(stored)
        expected += n or 1
        assert stored_index(stored) == expected - 1
    assert icpt.next_index == expected


@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.data())
def test_rollback_gives_unsent_indexes_out_again(counts, data):
    icpt = BrokerEntryMetadataInterceptor(timestamp=False, index=True)
    bases = [icpt.intercept(entry(n), now_ms=0)[1] for n in counts]
    failed_from = data.draw(st.integers(0, len(counts) - 1))
    icpt.rollback(bases[failed_from])  # the last appends failed before reaching a ledger
    assert icpt.next_index == bases[failed_from]
    _, again = icpt.intercept(entry(1), now_ms=0)
    assert again == bases[failed_from]
    icpt.rollback(10**9)  # nonsense (beyond the counter) changes nothing
    assert icpt.next_index == bases[failed_from] + 1


def test_broker_settings_default_on_accept_pulsar_names_and_refuse_unknown_ones(tmp_path):
    import dataclasses

    from broker.config import BrokerConfig
    from broker.managed_ledger.config import ManagedLedgerConfig
    from broker.process import _MANAGED_LEDGER_RENAMES
    from magnetar.config import derive
    from magnetar.errors import ConfigError

    config = BrokerConfig(data_dir=tmp_path, zookeeper="z:1")
    config.validate()
    assert config.broker_entry_metadata_interceptors == ("timestamp", "index")
    assert config.exposing_broker_entry_metadata_to_client_enabled is False
    ml = derive(ManagedLedgerConfig, config, prefix="managed_ledger_", renames=_MANAGED_LEDGER_RENAMES)
    assert ml.broker_entry_metadata_interceptors == ("timestamp", "index")
    pulsar_names = dataclasses.replace(config, broker_entry_metadata_interceptors=(
        "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",))
    pulsar_names.validate()
    with pytest.raises(ConfigError, match="broker_entry_metadata_interceptors: unknown"):
        dataclasses.replace(config, broker_entry_metadata_interceptors=("stamp",)).validate()
