"""Delayed-delivery policies with pulsar-client, as a Pulsar user meets them: a namespace whose policy is
inactive delivers ``deliver_after`` messages at once on a Shared subscription; switched back on, they are held
again; switching it off releases what is held; a topic's own policy beats its namespace's; a message delayed
beyond ``maxDeliveryDelayInMillis`` is refused. Policy changes reach loaded topics at once."""

from __future__ import annotations

import time
from datetime import timedelta

import pulsar
import pytest

from broker.service.policies.delayed_delivery import settings_of
from config_store import DelayedDeliveryPolicies, Policies, TopicPolicies
from magnetar.protocol import encode_payload_command, pb, wrap
from magnetar.topic_name import TopicName
from tests.integration.test_broker_protocol import RawConnection, make_producer
from tests.kit.broker_thread import broker, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

pytestmark = pytest.mark.parametrize("storage", ["memory"])

NAMESPACE = "public/default"
HOUR = timedelta(hours=1)
RECEIVE_MS = 5_000


@pytest.fixture
def client(new_client):
    return new_client(logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def set_namespace(broker, policies: DelayedDeliveryPolicies | None) -> None:
    broker.set_policies(NAMESPACE, Policies(delayed_delivery_policies=policies))


def set_topic(broker, topic: str, policies: TopicPolicies) -> None:
    name = TopicName.parse(topic)
    broker.run(broker.config_store.set_topic_policies, name.tenant, name.namespace_portion, name.domain.value,
               name.local_name, policies)


def wait_active(broker, topic: str, active: bool) -> None:
    """Policies reach a loaded topic through the store's watches: wait until it runs with them."""
    wait_for(lambda: broker.call(lambda: settings_of(broker.service.topics()[topic]).active) is active, 10,
             what=f"delayed delivery {'on' if active else 'off'} on the topic")


def delayed_count(broker, topic: str) -> int:
    return broker.stats(topic)["subscriptions"]["s"]["msgDelayed"]


def test_inactive_namespace_delivers_at_once_and_reactivating_holds_again(broker, client):
    topic = unique_topic("ns-inactive")
    set_namespace(broker, DelayedDeliveryPolicies(active=False))
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    wait_active(broker, topic, False)
    started = time.monotonic()
    producer.send(b"an hour early", deliver_after=HOUR)
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"an hour early" and time.monotonic() - started < 5
    consumer.acknowledge(m)

    set_namespace(broker, DelayedDeliveryPolicies(active=True))
    wait_active(broker, topic, True)
    producer.send(b"held", deliver_after=HOUR)
    producer.send(b"now")
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"now"
    consumer.acknowledge(m)
    wait_for(lambda: delayed_count(broker, topic) == 1, 10, what="the delayed message held")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)

    set_namespace(broker, DelayedDeliveryPolicies(active=False))  # switched off: what is held comes now
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"held"
    consumer.acknowledge(m)
    wait_for(lambda: delayed_count(broker, topic) == 0, 10, what="nothing held any more")


def test_topic_policy_beats_the_namespace_policy(broker, client):
    held_topic = unique_topic("topic-on")
    other_topic = unique_topic("topic-plain")
    set_namespace(broker, DelayedDeliveryPolicies(active=False))
    set_topic(broker, held_topic, TopicPolicies(delayed_delivery_enabled=True))
    consumers = {t: client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared)
                 for t in (held_topic, other_topic)}
    producers = {t: client.create_producer(t) for t in (held_topic, other_topic)}
    wait_active(broker, held_topic, True)
    wait_active(broker, other_topic, False)
    for t in (held_topic, other_topic):
        producers[t].send(b"later", deliver_after=HOUR)
    assert consumers[other_topic].receive(RECEIVE_MS).data() == b"later"
    wait_for(lambda: delayed_count(broker, held_topic) == 1, 10, what="the topic-level policy holding it")
    with pytest.raises(pulsar.Timeout):
        consumers[held_topic].receive(300)

    set_topic(broker, held_topic, TopicPolicies())  # removed: the namespace's (off) applies again
    assert consumers[held_topic].receive(RECEIVE_MS).data() == b"later"


def send_delayed(conn: RawConnection, name: str, seq: int, delay_ms: int) -> pb.BaseCommand:
    now = int(time.time() * 1000)
    md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=now, deliver_at_time=now + delay_ms)
    conn.send_raw(encode_payload_command(wrap(pb.CommandSend(producer_id=1, sequence_id=seq)), md, b"x"))
    while True:
        frame = conn.recv()
        assert frame is not None, "connection closed"
        if frame.command.type in (pb.BaseCommand.SEND_RECEIPT, pb.BaseCommand.SEND_ERROR):
            return frame.command


def test_messages_delayed_beyond_the_maximum_are_refused(broker):
    # pulsar-client re-sends after any SEND_ERROR but a checksum error (as against Pulsar), so the refusal is
    # seen on a bare protocol connection.
    topic = unique_topic("max-delay")
    set_namespace(broker, DelayedDeliveryPolicies(active=True, max_delay_ms=60_000))
    conn = RawConnection(broker.url)
    try:
        conn.connect()
        name = make_producer(conn, topic)
        wait_for(lambda: broker.call(lambda: settings_of(broker.service.topics()[topic]).max_delay_ms) == 60_000,
                 10, what="the max delay applied")
        assert send_delayed(conn, name, 0, 1_000).type == pb.BaseCommand.SEND_RECEIPT
        answer = send_delayed(conn, name, 1, 3_600_000)
        assert answer.type == pb.BaseCommand.SEND_ERROR and answer.send_error.error == pb.NotAllowedError
        assert "Exceeds max allowed delivery delay of 60000 milliseconds" in answer.send_error.message
        set_namespace(broker, DelayedDeliveryPolicies(active=False, max_delay_ms=60_000))  # off: no limit
        wait_for(lambda: not broker.call(lambda: settings_of(broker.service.topics()[topic]).active), 10,
                 what="delayed delivery off")
        assert send_delayed(conn, name, 2, 3_600_000).type == pb.BaseCommand.SEND_RECEIPT
        assert broker.stats(topic)["msgInCounter"] == 2
    finally:
        conn.close()
