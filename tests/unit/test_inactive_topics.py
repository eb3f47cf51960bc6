"""Inactive topic deletion without servers: which settings apply (topic, namespace, broker), what counts as
active, retention, the stored JSON (Pulsar's names), the broker.toml checks and the REST API, namespace and
topic level (round trip, 400s with nothing changed, 404 for unknown topics)."""

from __future__ import annotations

import json

import pytest

from broker.config import BrokerConfig
from broker.service import ServiceConfig
from broker.service.policies.inactive_topics import InactiveSettings, is_active, resolve, retained
from config_store import ConfigurationStore, InactiveTopicPolicies, InvalidMetadataError, Policies, TopicPolicies
from magnetar.errors import ConfigError
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

NO_SUBS = "delete_when_no_subscriptions"
CAUGHT_UP = "delete_when_subscriptions_caught_up"


def test_broker_default_is_off_and_a_namespace_policy_replaces_it() -> None:
    assert resolve(ServiceConfig()) == InactiveSettings(False, NO_SUBS, 60.0)
    ns = Policies(inactive_topic_policies=InactiveTopicPolicies(CAUGHT_UP, 5, True))
    assert resolve(ServiceConfig(), ns) == InactiveSettings(True, CAUGHT_UP, 5.0)
    config = ServiceConfig(delete_inactive_topics_enabled=True, delete_inactive_topics_max_inactive_duration_s=9)
    assert resolve(config, Policies()) == InactiveSettings(True, NO_SUBS, 9.0)


def test_what_counts_as_active_per_mode() -> None:
    for mode in (NO_SUBS, CAUGHT_UP):
        assert is_active(mode, clients=True, subscriptions=0, backlogged_subscriptions=0)
        assert not is_active(mode, clients=False, subscriptions=0, backlogged_subscriptions=0)
    assert is_active(NO_SUBS, clients=False, subscriptions=1, backlogged_subscriptions=0)
    assert not is_active(CAUGHT_UP, clients=False, subscriptions=1, backlogged_subscriptions=0)
    assert is_active(CAUGHT_UP, clients=False, subscriptions=2, backlogged_subscriptions=1)


def test_retention_keeps_an_idle_topic_as_pulsar_does() -> None:
    assert not retained(0, 10_000)
    assert retained(-1, 10_000)
    assert retained(10, 599) and not retained(10, 600)


def test_stored_with_pulsars_names_and_corrupt_values_refused() -> None:
    p = Policies(inactive_topic_policies=InactiveTopicPolicies(CAUGHT_UP, 30, True))
    assert json.loads(p.to_json())["inactive_topic_policies"] == {
        "inactiveTopicDeleteMode": CAUGHT_UP, "maxInactiveDurationSeconds": 30, "deleteWhileInactive": True}
    assert Policies.from_json(p.to_json()) == p
    with pytest.raises(InvalidMetadataError):
        Policies.from_json(b'{"version":1,"replication_clusters":[],'
                           b'"inactive_topic_policies":{"inactiveTopicDeleteMode":"whenever"}}')


def test_broker_config_checks_the_settings() -> None:
    base = {"data_dir": "/tmp/x", "zookeeper": "127.0.0.1:2181"}
    config = BrokerConfig.from_mapping(base)
    assert config.delete_inactive_topics_enabled is False and config.delayed_delivery_tick_time_ms == 0
    with pytest.raises(ConfigError, match="delete_inactive_topics_mode"):
        BrokerConfig.from_mapping({**base, "delete_inactive_topics_mode": "never"})
    with pytest.raises(ConfigError, match="delete_inactive_topics_frequency_ms"):
        BrokerConfig.from_mapping({**base, "delete_inactive_topics_frequency_ms": 0})
    with pytest.raises(ConfigError, match="delayed_delivery_max_delay_ms"):
        BrokerConfig.from_mapping({**base, "delayed_delivery_max_delay_ms": -1})


async def test_namespace_policies_round_trip_and_bad_bodies_change_nothing(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    url = f"{a.url}/admin/v2/namespaces/t/ns/inactiveTopicPolicies"
    assert await call(http, "GET", url) == (200, None)
    body = {"inactiveTopicDeleteMode": CAUGHT_UP, "maxInactiveDurationSeconds": 120, "deleteWhileInactive": True}
    assert await call(http, "POST", url, body) == (204, None)
    assert await call(http, "GET", f"{b.url}/admin/v2/namespaces/t/ns/inactiveTopicPolicies") == (200, body)
    for bad, fragment in [({**body, "deleteWhileInactive": "yes"}, "deleteWhileInactive must be true or false"),
                          ({**body, "maxInactiveDurationSeconds": "60"}, "must be an integer"),
                          ({**body, "maxInactiveDurationSeconds": -1}, "must be >= 0"),
                          ({**body, "inactiveTopicDeleteMode": "never"}, "inactiveTopicDeleteMode must be one of"),
                          ({"deleteWhileInactive": True}, "need inactiveTopicDeleteMode"),
                          ({**body, "extra": 1}, "unknown field(s)"),
                          ("on", "must be a JSON object")]:
        status, answer = await call(http, "POST", url, bad)
        assert status == 400 and fragment in answer["reason"], (bad, answer)
    assert await call(http, "GET", url) == (200, body)
    assert await call(http, "DELETE", url) == (204, None)
    assert await call(http, "GET", url) == (200, None)
    assert (await call(http, "POST", f"{a.url}/admin/v2/namespaces/t/nope/inactiveTopicPolicies", body))[0] == 404


# ---------------------------------------------------------------------------------------------- topic level


def test_a_topics_own_policy_replaces_its_namespaces_as_a_whole() -> None:
    ns = Policies(inactive_topic_policies=InactiveTopicPolicies(CAUGHT_UP, 5, True))
    keep = TopicPolicies(inactive_topic_policies=InactiveTopicPolicies(NO_SUBS, 60, False))
    assert resolve(ServiceConfig(), ns, keep) == InactiveSettings(False, NO_SUBS, 60.0)
    on = TopicPolicies(inactive_topic_policies=InactiveTopicPolicies(NO_SUBS, 2, True))
    assert resolve(ServiceConfig(), None, on) == InactiveSettings(True, NO_SUBS, 2.0)
    assert resolve(ServiceConfig(), ns, TopicPolicies(compaction_threshold=5)) == InactiveSettings(True, CAUGHT_UP, 5.0)
    stored = json.loads(on.to_json())["inactiveTopicPolicies"]
    assert stored == {"inactiveTopicDeleteMode": NO_SUBS, "maxInactiveDurationSeconds": 2, "deleteWhileInactive": True}
    assert TopicPolicies.from_json(on.to_json()) == on and not on.is_empty()
    with pytest.raises(InvalidMetadataError):
        TopicPolicies.from_json(b'{"version":1,"inactiveTopicPolicies":{"inactiveTopicDeleteMode":"whenever"}}')


async def test_topic_policies_over_rest_round_trip_fall_back_and_refuse_bad_bodies(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    url = f"{a.url}/admin/v2/persistent/t/ns/idle/inactiveTopicPolicies"
    body = {"inactiveTopicDeleteMode": CAUGHT_UP, "maxInactiveDurationSeconds": 30, "deleteWhileInactive": True}
    status, answer = await call(http, "POST", url, body)
    assert status == 404 and "does not exist" in answer["reason"]  # no such topic: nothing stored
    assert (await call(http, "GET", url))[0] == 404
    assert await call(http, "PUT", f"{a.url}/admin/v2/persistent/t/ns/idle") == (204, None)
    assert await call(http, "GET", url) == (204, None)
    ns_body = {**body, "inactiveTopicDeleteMode": NO_SUBS, "maxInactiveDurationSeconds": 600}
    assert await call(http, "POST", f"{a.url}/admin/v2/namespaces/t/ns/inactiveTopicPolicies", ns_body) == (204, None)
    assert await call(http, "GET", url + "?applied=true") == (200, ns_body)
    assert await call(http, "POST", url, body) == (204, None)
    other = f"{b.url}/admin/v2/persistent/t/ns/idle/inactiveTopicPolicies"
    assert await call(http, "GET", other) == (200, body)
    assert await call(http, "GET", other + "?applied=true") == (200, body)
    for bad, fragment in [({**body, "deleteWhileInactive": 1}, "deleteWhileInactive must be true or false"),
                          ({**body, "maxInactiveDurationSeconds": -5}, "must be >= 0"),
                          ({**body, "maxInactiveDurationSeconds": 1.5}, "must be an integer"),
                          ({**body, "inactiveTopicDeleteMode": "delete_always"}, "inactiveTopicDeleteMode must be"),
                          ({"maxInactiveDurationSeconds": 5}, "need inactiveTopicDeleteMode"),
                          ([body], "must be a JSON object")]:
        status, answer = await call(http, "POST", url, bad)
        assert status == 400 and fragment in answer["reason"], (bad, answer)
    assert await call(http, "GET", url) == (200, body)
    assert await call(http, "DELETE", url) == (204, None)
    assert await call(http, "GET", url) == (204, None)
    assert await call(http, "GET", url + "?applied=true") == (200, ns_body)
    status, answer = await call(http, "POST", f"{a.url}/admin/v2/non-persistent/t/ns/idle/inactiveTopicPolicies", body)
    assert status == 405 and "non-persistent" in answer["reason"]
    assert (await call(http, "POST", f"{a.url}/admin/v2/persistent/t/nope/idle/inactiveTopicPolicies", body))[0] == 404


async def test_a_partitioned_topics_policy_is_its_partitions(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    base = f"{a.url}/admin/v2/persistent/t/ns/parts"
    body = {"inactiveTopicDeleteMode": NO_SUBS, "maxInactiveDurationSeconds": 5, "deleteWhileInactive": True}
    assert await call(http, "PUT", f"{base}/partitions", 2) == (204, None)
    assert await call(http, "POST", f"{base}/inactiveTopicPolicies", body) == (204, None)
    assert await call(http, "GET", f"{base}-partition-1/inactiveTopicPolicies") == (200, body)
    assert (await call(http, "GET", f"{base}x-partition-0/inactiveTopicPolicies"))[0] == 404
    stored = await ConfigurationStore(a.store).get_topic_policies("t", "ns", "persistent", "parts")
    assert stored.value.inactive_topic_policies == InactiveTopicPolicies(NO_SUBS, 5, True)
