"""Inactive topic deletion with pulsar-client, as a Pulsar user meets it once a namespace turns it on: a topic
left alone past the max inactive duration disappears from the namespace's topic list; one with a
subscription stays (``delete_when_no_subscriptions``); with ``delete_when_subscriptions_caught_up`` a
subscription keeps it only while it has a backlog. The broker default (off, unlike Pulsar) deletes nothing."""

from __future__ import annotations

import pulsar
import pytest

from broker.service import ServiceConfig
from config_store import InactiveTopicPolicies, Policies
from tests.kit.broker_thread import broker, new_client, storage, unique_topic  # noqa: F401 (fixtures)
from tests.kit.wait import wait_for

FAST_CHECKS = {"config": ServiceConfig(stats_update_interval_s=1.0, delete_inactive_topics_frequency_s=0.1,
                                       delete_inactive_topics_max_inactive_duration_s=0.5)}
pytestmark = [pytest.mark.parametrize("storage", ["memory"]),
              pytest.mark.parametrize("broker", [FAST_CHECKS], indirect=True)]

NAMESPACE = "public/default"


@pytest.fixture
def client(new_client):
    return new_client(logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def turn_on(broker, mode: str = "delete_when_no_subscriptions") -> None:
    broker.set_policies(NAMESPACE, Policies(inactive_topic_policies=InactiveTopicPolicies(
        delete_mode=mode, max_inactive_duration_s=1, delete_while_inactive=True)))


def listed(broker) -> set[str]:
    return set(broker.run(broker.service.topics_of_namespace, "public", "default"))


def checks(broker) -> int:
    return broker.call(lambda: broker.service.inactive_topic_monitor.checks)


def wait_checks(broker, n: int) -> None:
    start = checks(broker)
    wait_for(lambda: checks(broker) >= start + n, 10, what=f"{n} more inactive-topic checks")


def test_an_idle_topic_is_deleted_and_one_with_a_subscription_stays(broker, client):
    turn_on(broker)
    idle, subscribed = unique_topic("idle"), unique_topic("subscribed")
    client.subscribe(subscribed, "keep").close()
    for topic in (idle, subscribed):
        producer = client.create_producer(topic)
        producer.send(b"m")
        producer.close()
    assert {idle, subscribed} <= listed(broker)
    wait_for(lambda: idle not in listed(broker), 10, what="the idle topic deleted")
    wait_checks(broker, 3)
    assert subscribed in listed(broker) and broker.stats(subscribed)["subscriptions"]["keep"]["msgBacklog"] == 1
    # a deleted topic is created afresh, empty, by its next producer
    client.create_producer(idle).send(b"again")
    assert broker.stats(idle)["msgInCounter"] == 1


def test_caught_up_mode_keeps_a_topic_only_while_a_subscription_has_a_backlog(broker, client):
    turn_on(broker, "delete_when_subscriptions_caught_up")
    topic = unique_topic("caught-up")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"m")
    producer.close()
    consumer.close()  # one unacknowledged message: a backlog
    wait_checks(broker, 15)  # 1.5 s, past the 1 s max inactive duration
    assert topic in listed(broker)
    consumer = client.subscribe(topic, "s")
    consumer.acknowledge(consumer.receive(5_000))
    consumer.close()
    wait_for(lambda: topic not in listed(broker), 10, what="the caught-up topic deleted")


def test_nothing_is_deleted_by_default(broker, client):
    topic = unique_topic("kept")
    producer = client.create_producer(topic)
    producer.send(b"m")
    producer.close()
    wait_checks(broker, 10)  # 1 s, twice the broker's 0.5 s max inactive duration
    assert topic in listed(broker)
