"""The committed protocol module is what the committed .proto generates, and its wire facts are Pulsar's."""

import ast
import pathlib

import pytest

from magnetar.protocol import generate
from magnetar.protocol import pulsar_api_pb2 as pb


def test_committed_module_matches_proto(tmp_path: pathlib.Path) -> None:
    generate.generate(tmp_path)
    for name in generate.GENERATED:
        committed = (generate.PROTO_DIR / name).read_text()
        fresh = (tmp_path / name).read_text()
        assert fresh == committed, f"{name} is stale: run `python -m magnetar.protocol.generate`"


def test_stub_is_valid_python() -> None:
    ast.parse((generate.PROTO_DIR / "pulsar_api_pb2.pyi").read_text())


# A sample of facts the real client depends on; the full comparison was made against pulsar-client-cpp's
# PulsarApi.proto when the file was written. Editing a number here means breaking the wire.
FIELD_NUMBERS = {
    "BaseCommand": {"type": 1, "connect": 2, "send": 6, "message": 9, "ack": 10, "flow": 11, "ping": 18,
                    "partitionMetadata": 21, "lookupTopic": 23, "ackResponse": 38, "topicMigrated": 68},
    "MessageIdData": {"ledgerId": 1, "entryId": 2, "partition": 3, "batch_index": 4, "ack_set": 5,
                      "batch_size": 6, "first_chunk_message_id": 7},
    "MessageMetadata": {"producer_name": 1, "sequence_id": 2, "publish_time": 3, "properties": 4,
                        "replicated_from": 5, "partition_key": 6, "replicate_to": 7, "compression": 8,
                        "uncompressed_size": 9, "num_messages_in_batch": 11, "event_time": 12,
                        "schema_version": 16, "ordering_key": 18, "deliver_at_time": 19, "marker_type": 20,
                        "txnid_least_bits": 22, "highest_sequence_id": 24, "null_value": 25, "uuid": 26,
                        "chunk_id": 29, "null_partition_key": 30},
    "SingleMessageMetadata": {"properties": 1, "partition_key": 2, "payload_size": 3, "compacted_out": 4,
                              "event_time": 5, "ordering_key": 7, "sequence_id": 8, "null_value": 9},
    "CommandConnect": {"client_version": 1, "auth_data": 3, "protocol_version": 4, "auth_method_name": 5,
                       "original_principal": 7, "feature_flags": 10},
    "CommandSubscribe": {"subType": 3, "durable": 8, "start_message_id": 9, "initialPosition": 13,
                         "replicate_subscription_state": 14, "keySharedMeta": 17, "consumer_epoch": 19},
    "CommandProducer": {"producer_name": 4, "epoch": 8, "user_provided_producer_name": 9,
                        "producer_access_mode": 10, "topic_epoch": 11, "initial_subscription_name": 13},
    "CommandSend": {"producer_id": 1, "sequence_id": 2, "num_messages": 3, "highest_sequence_id": 6,
                    "is_chunk": 7, "marker": 8, "message_id": 9},
    "CommandMessage": {"consumer_id": 1, "message_id": 2, "redelivery_count": 3, "ack_set": 4,
                       "consumer_epoch": 5},
    "CommandLookupTopicResponse": {"brokerServiceUrl": 1, "response": 3, "request_id": 4,
                                   "proxy_through_service_url": 8},
    "KeySharedMeta": {"keySharedMode": 1, "hashRanges": 3, "allowOutOfOrderDelivery": 4},
    "ReplicatedSubscriptionsSnapshot": {"snapshot_id": 1, "local_message_id": 2, "clusters": 3},
}


@pytest.mark.parametrize("message", sorted(FIELD_NUMBERS))
def test_field_numbers(message: str) -> None:
    fields = getattr(pb, message).DESCRIPTOR.fields_by_name
    assert {name: fields[name].number for name in FIELD_NUMBERS[message]} == FIELD_NUMBERS[message]


def test_enum_values_and_defaults() -> None:
    assert (pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY) == (0, 1, 2, 3, 4)
    assert (pb.ChecksumError, pb.TopicNotFound, pb.ProducerBusy, pb.ProducerFenced) == (9, 11, 16, 25)
    assert pb.ProtocolVersion.Value("v20") == 20
    assert (pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, pb.REPLICATED_SUBSCRIPTION_UPDATE) == (10, 13)
    assert pb.CommandSubscribe.Key_Shared == 3 and pb.CommandLookupTopicResponse.Connect == 1
    assert pb.Schema.Type.Value("None") == 0 and pb.Schema.Type.Value("AutoConsume") == 21
    # proto2 defaults the client relies on
    assert pb.MessageIdData().partition == -1 and pb.MessageIdData().batch_index == -1
    assert pb.MessageMetadata().num_messages_in_batch == 1
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.CommandProducer().user_provided_producer_name is True
    assert pb.CommandSubscribe().durable is True and pb.CommandSubscribe().force_topic_creation is True
    # every BaseCommand type has the field of the same number
    fields = {f.number for f in pb.BaseCommand.DESCRIPTOR.fields}
    assert all(value in fields for value in pb.BaseCommand.Type.values())
