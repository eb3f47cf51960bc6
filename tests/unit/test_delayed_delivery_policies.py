"""Delayed-delivery policies without servers: which setting applies (topic, else namespace, else broker,
field by field), the tick and max-delay decisions, the stored JSON (Pulsar's names), the REST API over an
in-memory ZooKeeper (round trips, topic overrides, 400s with nothing changed) and the CLI's durations."""

from __future__ import annotations

import json

import pytest
import typer

from broker.service import ServiceConfig
from broker.service.policies.delayed_delivery import DelayedDeliverySettings, exceeds_max_delay, resolve, timer_target_ms
from config_store import DelayedDeliveryPolicies, InvalidMetadataError, Policies, TopicPolicies
from magnetar.admin_namespace_policies_cli import parse_duration_ms
from magnetar.protocol import pb
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

# ---------------------------------------------------------------------------------------------- resolution


def test_broker_settings_apply_when_no_policy_is_set() -> None:
    assert resolve(ServiceConfig()) == DelayedDeliverySettings(True, 0, 0)
    config = ServiceConfig(delayed_delivery_enabled=False, delayed_delivery_tick_time_ms=50,
                           delayed_delivery_max_delay_ms=900)
    assert resolve(config, Policies(), TopicPolicies()) == DelayedDeliverySettings(False, 50, 900)


def test_namespace_policy_replaces_all_three_broker_settings() -> None:
    ns = Policies(delayed_delivery_policies=DelayedDeliveryPolicies(active=False, tick_time_ms=200, max_delay_ms=0))
    config = ServiceConfig(delayed_delivery_tick_time_ms=5, delayed_delivery_max_delay_ms=1000)
    assert resolve(config, ns) == DelayedDeliverySettings(False, 200, 0)


def test_topic_policy_overrides_setting_by_setting() -> None:
    ns = Policies(delayed_delivery_policies=DelayedDeliveryPolicies(active=False, tick_time_ms=200, max_delay_ms=7))
    assert resolve(ServiceConfig(), ns, TopicPolicies(delayed_delivery_enabled=True)) == (True, 200, 7)
    topic = TopicPolicies(delayed_delivery_enabled=False, delayed_delivery_tick_time_ms=1,
                          delayed_delivery_max_delay_ms=0)
    assert resolve(ServiceConfig(), ns, topic) == (False, 1, 0)
    assert resolve(ServiceConfig(), None, TopicPolicies(delayed_delivery_max_delay_ms=30)) == (True, 0, 30)


def test_timer_fires_at_the_deliver_time_but_at_most_once_a_tick() -> None:
    assert timer_target_ms(1_000, None, 500) == 1_000
    assert timer_target_ms(1_000, 900, 0) == 1_000
    assert timer_target_ms(1_000, 900, 500) == 1_400  # never early: late by at most a tick
    assert timer_target_ms(5_000, 900, 500) == 5_000


def _metadata(publish_ms: int, deliver_at_ms: int | None) -> pb.MessageMetadata:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=publish_ms)
    if deliver_at_ms is not None:
        md.deliver_at_time = deliver_at_ms
    return md


def test_max_delay_refuses_only_what_is_delayed_further_while_active() -> None:
    limit = DelayedDeliverySettings(True, 0, 1_000)
    assert not exceeds_max_delay(_metadata(10_000, 11_000), limit)
    assert exceeds_max_delay(_metadata(10_000, 11_001), limit)
    assert not exceeds_max_delay(_metadata(10_000, None), limit)
    assert not exceeds_max_delay(None, limit)
    assert not exceeds_max_delay(_metadata(10_000, 99_000), DelayedDeliverySettings(False, 0, 1_000))
    assert not exceeds_max_delay(_metadata(10_000, 99_000), DelayedDeliverySettings(True, 0, 0))


# ---------------------------------------------------------------------------------------------- stored JSON


def test_stored_with_pulsars_names_and_read_back() -> None:
    p = Policies(delayed_delivery_policies=DelayedDeliveryPolicies(active=False, tick_time_ms=250, max_delay_ms=9))
    raw = json.loads(p.to_json())
    assert raw["delayed_delivery_policies"] == {"active": False, "tickTime": 250, "maxDeliveryDelayInMillis": 9}
    assert Policies.from_json(p.to_json()) == p
    assert Policies.from_json(Policies().to_json()).delayed_delivery_policies is None
    t = TopicPolicies(delayed_delivery_enabled=True, delayed_delivery_tick_time_ms=3, delayed_delivery_max_delay_ms=0)
    raw = json.loads(t.to_json())
    assert (raw["delayedDeliveryEnabled"], raw["delayedDeliveryTickTimeMillis"],
            raw["delayedDeliveryMaxDelayInMillis"]) == (True, 3, 0)
    assert TopicPolicies.from_json(t.to_json()) == t
    assert not t.is_empty() and TopicPolicies().is_empty()


@pytest.mark.parametrize("raw", [
    b'{"version":1,"replication_clusters":[],"delayed_delivery_policies":{"active":"yes"}}',
    b'{"version":1,"replication_clusters":[],"delayed_delivery_policies":[1]}',
])
def test_corrupt_stored_policies_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        Policies.from_json(raw)
    with pytest.raises(InvalidMetadataError):
        TopicPolicies.from_json(b'{"version":1,"delayedDeliveryTickTimeMillis":"1s"}')


# ---------------------------------------------------------------------------------------------- REST


async def test_namespace_policies_round_trip(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns/delayedDelivery"
    assert await call(http, "GET", ns) == (200, None)
    body = {"active": False, "tickTime": 100, "maxDeliveryDelayInMillis": 60_000}
    assert await call(http, "POST", ns, body) == (204, None)
    assert await call(http, "GET", f"{b.url}/admin/v2/namespaces/t/ns/delayedDelivery") == (200, body)
    assert (await call(http, "GET", f"{a.url}/admin/v2/namespaces/t/ns"))[1]["delayed_delivery_policies"] == body
    assert await call(http, "POST", ns, {"active": True}) == (204, None)
    assert await call(http, "GET", ns) == (200, {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0})
    assert await call(http, "DELETE", ns) == (204, None)
    assert await call(http, "DELETE", ns) == (204, None)
    assert await call(http, "GET", ns) == (200, None)
    assert (await call(http, "GET", f"{a.url}/admin/v2/namespaces/t/nope/delayedDelivery"))[0] == 404
    assert (await call(http, "POST", f"{a.url}/admin/v2/namespaces/t/nope/delayedDelivery", body))[0] == 404


async def test_topic_policies_override_and_applied(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns/delayedDelivery"
    topic = f"{a.url}/admin/v2/persistent/t/ns/orders/delayedDelivery"
    assert await call(http, "GET", topic) == (204, None)
    assert await call(http, "GET", f"{topic}?applied=true") == (200, {"active": True, "tickTime": 0,
                                                                       "maxDeliveryDelayInMillis": 0})
    assert await call(http, "POST", ns, {"active": False, "tickTime": 100}) == (204, None)
    assert (await call(http, "GET", f"{topic}?applied=true"))[1] == {"active": False, "tickTime": 100,
                                                                      "maxDeliveryDelayInMillis": 0}
    body = {"active": True, "tickTime": 5, "maxDeliveryDelayInMillis": 10}
    assert await call(http, "POST", topic, body) == (204, None)
    assert await call(http, "GET", topic) == (200, body)
    assert await call(http, "GET", f"{topic}?applied=true") == (200, body)
    partition = f"{a.url}/admin/v2/persistent/t/ns/orders-partition-1/delayedDelivery"
    assert await call(http, "GET", partition) == (200, body)  # a partitioned topic's cover its partitions
    assert await call(http, "DELETE", topic) == (204, None)
    assert await call(http, "GET", topic) == (204, None)
    assert (await call(http, "GET", f"{topic}?applied=true"))[1]["active"] is False
    assert (await call(http, "POST", f"{a.url}/admin/v2/persistent/t/nope/x/delayedDelivery", body))[0] == 404


@pytest.mark.parametrize("body, fragment", [
    ({"active": "true"}, "active must be true or false"),
    ({"active": 1}, "active must be true or false"),
    ({"tickTime": 100}, "need active"),
    ({"active": True, "tickTime": "1s"}, "tickTime must be an integer"),
    ({"active": True, "tickTime": 1.5}, "tickTime must be an integer"),
    ({"active": True, "tickTime": -1}, "tickTime must be >= 0"),
    ({"active": True, "maxDeliveryDelayInMillis": True}, "maxDeliveryDelayInMillis must be an integer"),
    ({"active": True, "maxDeliveryDelayInMillis": -5}, "maxDeliveryDelayInMillis must be >= 0"),
    ({"active": True, "enabled": True}, "unknown field(s)"),
    ([True], "must be a JSON object"),
])
async def test_bad_bodies_are_refused_with_nothing_changed(nodes, http, body, fragment) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns/delayedDelivery"
    topic = f"{a.url}/admin/v2/persistent/t/ns/orders/delayedDelivery"
    assert await call(http, "POST", ns, {"active": True, "tickTime": 7}) == (204, None)
    for url in (ns, topic):
        status, answer = await call(http, "POST", url, body)
        assert status == 400 and fragment in answer["reason"], (url, answer)
    assert (await call(http, "POST", ns, raw=b"{nope"))[0] == 400
    assert await call(http, "GET", ns) == (200, {"active": True, "tickTime": 7, "maxDeliveryDelayInMillis": 0})
    assert await call(http, "GET", topic) == (204, None)


# ---------------------------------------------------------------------------------------------- CLI


def test_cli_durations_read_as_pulsar_admin_reads_them() -> None:
    assert parse_duration_ms("10s", "t") == 10_000
    assert parse_duration_ms("5", "t") == 5_000
    assert parse_duration_ms("250ms", "t") == 250
    assert parse_duration_ms("2m", "t") == 120_000
    assert parse_duration_ms("1H", "t") == 3_600_000
    assert parse_duration_ms("3d", "t") == 3 * 86_400_000
    with pytest.raises(typer.BadParameter):
        parse_duration_ms("soon", "t")
