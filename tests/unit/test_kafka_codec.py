"""Kafka framing (broker/kafka/codec.py), names, structs and settings: pure, with hypothesis for the header
reader (any bytes: a header or FrameError, nothing else)."""

from __future__ import annotations

import pytest
from aiokafka.protocol.admin import ApiVersionRequest_v0
from aiokafka.protocol.fetch import FetchRequest_v11
from aiokafka.protocol.metadata import MetadataRequest_v5, MetadataResponse_v0, MetadataResponse_v5
from hypothesis import given
from hypothesis import strategies as st

from broker.kafka import codec, names
from broker.kafka.config import KafkaConfig, parse_kafka_listeners
from broker.kafka.schemas import ApiVersionRequest_v3
from broker.kafka.structs import make
from magnetar.errors import ConfigError
from magnetar.topic_name import InvalidTopicNameError, TopicName


def frame_of(request, correlation_id=7, client_id="cid") -> bytes:
    return request.build_request_header(correlation_id, client_id).encode() + request.encode()


def test_a_request_is_read_back() -> None:
    request = MetadataRequest_v5(["orders"], True)
    frame = frame_of(request)
    header, offset = codec.parse_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 5, 7, "cid")
    assert codec.decode_request(header, frame, offset).topics == ["orders"]


def test_api_versions_v3_is_flexible_and_its_answer_header_is_v0() -> None:
    request = ApiVersionRequest_v3("aiokafka", "0.14", {})
    frame = frame_of(request)
    header, offset = codec.parse_header(frame)
    assert header.flexible and codec.decode_request(header, frame, offset).client_software_name == "aiokafka"
    answer = codec.encode_response(header, ApiVersionRequest_v3.RESPONSE_TYPE(0, [(18, 0, 3, {})], 0, {}))
    assert answer[4:8] == (7).to_bytes(4, "big")
    assert ApiVersionRequest_v3.RESPONSE_TYPE.decode(answer[8:]).api_versions == [(18, 0, 3, {})]


def test_unknown_keys_versions_and_bodies_are_frame_errors() -> None:
    header, offset = codec.parse_header(b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff")  # key 999
    with pytest.raises(codec.FrameError):
        codec.decode_request(header, b"", offset)
    frame = frame_of(FetchRequest_v11(-1, 100, 1, 1000, 0, 0, -1, [("t", [(0, -1, 0, 0, 100)])], [], ""))
    header, offset = codec.parse_header(frame)
    with pytest.raises(codec.FrameError):
        codec.decode_request(header, frame[:-5], offset)  # truncated body


@given(st.binary(max_size=64))
def test_any_bytes_give_a_header_or_a_frame_error(data: bytes) -> None:
    try:
        header, offset = codec.parse_header(data)
    except codec.FrameError:
        return
    assert 0 <= offset <= len(data)
    try:
        codec.decode_request(header, data, offset)
    except codec.FrameError:
        pass


def test_make_fills_each_version_from_one_description() -> None:
    description = {"brokers": [{"node_id": 1, "host": "h", "port": 9}], "cluster_id": "c", "controller_id": 1,
                   "topics": [{"error_code": 0, "topic": "t", "partitions": [
                       {"error_code": 0, "partition": 0, "leader": 1, "replicas": [1], "isr": [1]}]}]}
    v0 = MetadataResponse_v0.decode(make(MetadataResponse_v0, description).encode())
    v5 = MetadataResponse_v5.decode(make(MetadataResponse_v5, description).encode())
    assert v0.brokers == [(1, "h", 9)] and v5.brokers == [(1, "h", 9, None)]
    assert v5.topics[0][3][0][5] == []  # offline replicas: absent from the description, zero


def test_topic_names_map_both_ways() -> None:
    assert str(names.pulsar_name("orders", tenant="t", namespace="ns")) == "persistent://t/ns/orders"
    assert str(names.pulsar_name("persistent://a/b/c", tenant="t", namespace="ns")) == "persistent://a/b/c"
    assert str(names.pulsar_name("a/b/c", tenant="t", namespace="ns")) == "persistent://a/b/c"
    for bad in ("", "a/b", "orders-partition-1", "a/b/c/d"):
        with pytest.raises(InvalidTopicNameError):
            names.pulsar_name(bad, tenant="t", namespace="ns")
    assert names.kafka_name(TopicName.parse("persistent://t/ns/x"), tenant="t", namespace="ns") == "x"
    assert names.kafka_name(TopicName.parse("persistent://o/ns/x"), tenant="t", namespace="ns") == "persistent://o/ns/x"
    base = TopicName.parse("persistent://t/ns/x")
    assert names.partition_topic(base, 0, 0) == "persistent://t/ns/x"
    assert names.partition_topic(base, 0, 1) is None
    assert names.partition_topic(base, 3, 2) == "persistent://t/ns/x-partition-2"
    assert names.partition_topic(base, 3, 3) is None


def test_listener_settings_are_checked() -> None:
    parsed = parse_kafka_listeners("PLAINTEXT://127.0.0.1:9092, sasl_plaintext://[::1]:9093")
    assert [(l.name, l.host, l.port) for l in parsed] == [("PLAINTEXT", "127.0.0.1", 9092), ("SASL_PLAINTEXT", "::1", 9093)]
    assert [l.url() for l in parsed] == ["PLAINTEXT://127.0.0.1:9092", "SASL_PLAINTEXT://[::1]:9093"]
    for bad in ("127.0.0.1:9092", "SSL://h:1", "PLAINTEXT://h:70000", "PLAINTEXT://h:1,PLAINTEXT://h:2"):
        with pytest.raises(ConfigError):
            parse_kafka_listeners(bad)
    with pytest.raises(ConfigError):
        KafkaConfig(listeners="", advertised_listeners="PLAINTEXT://h:1").validate()
    with pytest.raises(ConfigError):
        KafkaConfig(listeners="PLAINTEXT://h:0", advertised_listeners="PLAINTEXT://h:0").validate()
    with pytest.raises(ConfigError):
        KafkaConfig(listeners="PLAINTEXT://h:0", tenant="a/b").validate()
    KafkaConfig(listeners="PLAINTEXT://h:0", advertised_listeners="PLAINTEXT://public:9092").validate()
