"""Backlog quotas without servers: the pure decisions (which quota applies, when one is exceeded, how much to
evict, retention conflicts), the stored JSON (Pulsar's names), and the REST API over an in-memory
ZooKeeper (round trips, 400 / 412 with nothing changed, topic-level overrides)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig
from broker.service.policies.backlog_quota import (QuotaDefaults, QuotaType, age_exceeded, effective_quota, entries_to_evict,
                                          retention_conflict, size_exceeded)
from config_store import BacklogQuota, InvalidMetadataError, Policies, TopicPolicies
from magnetar.errors import ConfigError
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

HOLD = "producer_request_hold"
EVICT = "consumer_backlog_eviction"


# ---------------------------------------------------------------------------------------------- pure decisions


def test_effective_quota_is_topic_then_namespace_then_default_per_type() -> None:
    defaults = QuotaDefaults(limit_size_bytes=100, limit_time_s=60, policy="producer_exception")
    ns = {"destination_storage": BacklogQuota(10, -1, EVICT)}
    topic = {"message_age": BacklogQuota(-1, 5, HOLD)}
    assert effective_quota(QuotaType.SIZE, topic, ns, defaults) == BacklogQuota(10, -1, EVICT)
    assert effective_quota(QuotaType.AGE, topic, ns, defaults) == BacklogQuota(-1, 5, HOLD)
    assert effective_quota(QuotaType.AGE, None, ns, defaults) == BacklogQuota(100, 60, "producer_exception")
    assert effective_quota(QuotaType.SIZE, {"destination_storage": BacklogQuota(1, 1, HOLD)}, ns,
                           defaults) == BacklogQuota(1, 1, HOLD)
    with pytest.raises(ValueError):
        QuotaDefaults(policy="drop_everything")


def test_size_is_reached_at_the_limit_and_age_past_it() -> None:
    assert not size_exceeded(10**12, BacklogQuota(-1, -1, HOLD))
    assert not size_exceeded(99, BacklogQuota(100, -1, HOLD))
    assert size_exceeded(100, BacklogQuota(100, -1, HOLD))  # Pulsar: backlog >= limit
    assert size_exceeded(0, BacklogQuota(0, -1, HOLD))
    assert not age_exceeded(None, BacklogQuota(-1, 0, HOLD))  # no backlog
    assert not age_exceeded(10**6, BacklogQuota(-1, -1, HOLD))
    assert not age_exceeded(5.0, BacklogQuota(-1, 5, HOLD))
    assert age_exceeded(5.1, BacklogQuota(-1, 5, HOLD))


@settings(max_examples=300, deadline=None)
@given(entries=st.integers(0, 10_000), entry_size=st.integers(1, 5000), target=st.integers(-10, 10**8))
def test_evicting_brings_the_estimated_backlog_to_the_target(entries, entry_size, target) -> None:
    size = entries * entry_size
    n = entries_to_evict(entries, size, target)
    assert 0 <= n <= entries
    if size <= target:
        assert n == 0
    else:
        assert (entries - n) * entry_size <= max(target, 0)  # under the target after eviction...
        assert (entries - n + 1) * entry_size > target  # ...and not one entry more than needed


def test_retention_conflicts_as_pulsar_checks_them() -> None:
    assert retention_conflict(BacklogQuota(10 * 1024 * 1024, -1, HOLD), retention_time_minutes=0,
                              retention_size_mb=10) is not None
    assert retention_conflict(BacklogQuota(10 * 1024 * 1024 - 1, -1, HOLD), retention_time_minutes=0,
                              retention_size_mb=10) is None
    assert retention_conflict(BacklogQuota(-1, 600, HOLD), retention_time_minutes=10, retention_size_mb=0)
    assert retention_conflict(BacklogQuota(-1, 599, HOLD), retention_time_minutes=10, retention_size_mb=0) is None
    for unlimited in (0, -1):  # no retention, infinite retention: any quota goes
        assert retention_conflict(BacklogQuota(1 << 40, 1 << 30, HOLD), retention_time_minutes=unlimited,
                                  retention_size_mb=unlimited) is None


def test_broker_config_checks_the_defaults() -> None:
    base = {"data_dir": "/tmp/x", "zookeeper": "127.0.0.1:2181"}
    c = BrokerConfig.from_mapping({**base, "backlog_quota_check_interval_ms": 500,
                                   "backlog_quota_default_policy": "producer_exception"})
    assert c.backlog_quota_check_enabled and c.backlog_quota_default_limit_bytes == -1
    for bad in ({"backlog_quota_default_policy": "nope"}, {"backlog_quota_default_limit_bytes": -2},
                {"backlog_quota_check_interval_ms": 0}, {"backlog_quota_default_limit_s": "60"}):
        with pytest.raises(ConfigError):
            BrokerConfig.from_mapping({**base, **bad})


# ---------------------------------------------------------------------------------------------- stored JSON


def test_stored_with_pulsars_names_and_read_back() -> None:
    p = Policies(backlog_quota_map={"message_age": BacklogQuota(-1, 30, EVICT)})
    stored = json.loads(p.to_json())
    assert stored["backlog_quota_map"] == {"message_age": {"limit": -1, "limitSize": -1, "limitTime": 30,
                                                           "policy": EVICT}}
    assert Policies.from_json(p.to_json()) == p
    t = TopicPolicies(backlog_quota_map={"destination_storage": BacklogQuota(5, -1, HOLD)})
    assert json.loads(t.to_json())["backLogQuotaMap"]["destination_storage"]["limitSize"] == 5
    assert TopicPolicies.from_json(t.to_json()) == t
    assert "backLogQuotaMap" not in json.loads(TopicPolicies(replication_clusters=["a"]).to_json())
    # the older "limit" alone is read as the size limit
    old = b'{"version": 1, "backLogQuotaMap": {"destination_storage": {"limit": 7, "policy": "producer_exception"}}}'
    assert TopicPolicies.from_json(old).backlog_quota_map == {
        "destination_storage": BacklogQuota(7, -1, "producer_exception")}


@pytest.mark.parametrize("raw", [
    b'{"version": 1, "backlog_quota_map": {"message_age": {"policy": "delete_it_all"}}}',
    b'{"version": 1, "backlog_quota_map": {"storage": {"policy": "producer_exception"}}}',
    b'{"version": 1, "backlog_quota_map": {"message_age": {"limitTime": "5", "policy": "producer_exception"}}}',
    b'{"version": 1, "backlog_quota_map": {"message_age": [1]}}',
])
def test_corrupt_stored_quotas_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        Policies.from_json(raw)


# ---------------------------------------------------------------------------------------------- REST


async def test_namespace_quotas_round_trip(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns"
    assert await call(http, "GET", f"{ns}/backlogQuotaMap") == (200, {})
    assert await call(http, "POST", f"{ns}/backlogQuota", {"limitSize": 1024, "limitTime": -1,
                                                           "policy": "producer_exception"}) == (204, None)
    assert await call(http, "POST", f"{ns}/backlogQuota?backlogQuotaType=message_age",
                      {"limitTime": 60, "policy": EVICT}) == (204, None)
    expected = {"destination_storage": {"limit": 1024, "limitSize": 1024, "limitTime": -1,
                                        "policy": "producer_exception"},
                "message_age": {"limit": -1, "limitSize": -1, "limitTime": 60, "policy": EVICT}}
    assert await call(http, "GET", f"{b.url}/admin/v2/namespaces/t/ns/backlogQuotaMap") == (200, expected)
    assert (await call(http, "GET", ns))[1]["backlog_quota_map"] == expected
    assert await call(http, "POST", f"{ns}/backlogQuota", {"limit": 2048, "policy": HOLD}) == (204, None)
    assert (await call(http, "GET", f"{ns}/backlogQuotaMap"))[1]["destination_storage"]["limitSize"] == 2048
    assert await call(http, "DELETE", f"{ns}/backlogQuota") == (204, None)
    assert await call(http, "DELETE", f"{ns}/backlogQuota") == (204, None)
    assert await call(http, "GET", f"{ns}/backlogQuotaMap") == (200, {"message_age": expected["message_age"]})
    assert await call(http, "DELETE", f"{ns}/backlogQuota?backlogQuotaType=message_age") == (204, None)
    assert await call(http, "GET", f"{ns}/backlogQuotaMap") == (200, {})
    assert (await call(http, "GET", f"{a.url}/admin/v2/namespaces/t/nope/backlogQuotaMap"))[0] == 404
    assert (await call(http, "POST", f"{a.url}/admin/v2/namespaces/t/nope/backlogQuota",
                       {"limitSize": 1, "policy": HOLD}))[0] == 404


@pytest.mark.parametrize("body, query, fragment", [
    ({"limitSize": "10", "policy": HOLD}, "", "limitSize must be an integer"),
    ({"limitSize": 1.5, "policy": HOLD}, "", "limitSize must be an integer"),
    ({"limitSize": True, "policy": HOLD}, "", "limitSize must be an integer"),
    ({"limitSize": -2, "policy": HOLD}, "", "limitSize must be >= -1"),
    ({"limit": -5, "policy": HOLD}, "", "limit must be >= -1"),
    ({"limitTime": -3, "policy": HOLD}, "", "limitTime must be >= -1"),
    ({"limitTime": 1 << 31, "policy": HOLD}, "", "limitTime must be <="),
    ({"limitSize": 10, "policy": "drop_it"}, "", "policy must be one of"),
    ({"limitSize": 10, "policy": 3}, "", "policy must be one of"),
    ({"limitSize": 10}, "", "needs a policy"),
    ([10], "", "must be a JSON object"),
    ({"limitSize": 10, "policy": HOLD}, "?backlogQuotaType=disk", "backlogQuotaType must be one of"),
])
async def test_bad_quotas_are_refused_with_nothing_changed(nodes, http, body, query, fragment) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns"
    topic = f"{a.url}/admin/v2/persistent/t/ns/orders"
    for base in (ns, topic):
        status, answer = await call(http, "POST", f"{base}/backlogQuota{query}", body)
        assert status == 400 and fragment in answer["reason"], (base, answer)
    status, answer = await call(http, "POST", f"{ns}/backlogQuota", raw=b"{not json")
    assert status == 400
    assert await call(http, "GET", f"{ns}/backlogQuotaMap") == (200, {})
    assert await call(http, "GET", f"{topic}/backlogQuotaMap") == (200, {})


async def test_quotas_must_stay_below_retention_both_ways(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns"
    assert await call(http, "POST", f"{ns}/retention", {"retentionTimeInMinutes": 10,
                                                        "retentionSizeInMB": 1}) == (204, None)
    status, answer = await call(http, "POST", f"{ns}/backlogQuota", {"limitSize": 1 << 20, "policy": HOLD})
    assert status == 412 and "retention" in answer["reason"]
    status, _ = await call(http, "POST", f"{ns}/backlogQuota?backlogQuotaType=message_age",
                           {"limitTime": 600, "policy": HOLD})
    assert status == 412
    status, _ = await call(http, "POST", f"{a.url}/admin/v2/persistent/t/ns/orders/backlogQuota",
                           {"limitSize": 1 << 21, "policy": HOLD})
    assert status == 412
    assert await call(http, "GET", f"{ns}/backlogQuotaMap") == (200, {})
    assert await call(http, "POST", f"{ns}/backlogQuota", {"limitSize": 1000, "policy": HOLD}) == (204, None)
    # and retention may not shrink below a quota already set
    status, answer = await call(http, "POST", f"{ns}/retention", {"retentionTimeInMinutes": 10,
                                                                  "retentionSizeInMB": 0})
    assert status == 204
    assert await call(http, "POST", f"{ns}/backlogQuota", {"limitSize": 5 << 20, "policy": HOLD}) == (204, None)
    status, answer = await call(http, "POST", f"{ns}/retention", {"retentionTimeInMinutes": 10,
                                                                  "retentionSizeInMB": 2})
    assert status == 412 and "Retention Quota must exceed" in answer["reason"]
    assert (await call(http, "GET", f"{ns}/retention"))[1] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 0}


async def test_topic_quotas_override_the_namespace_type_by_type(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns"
    topic = f"{a.url}/admin/v2/persistent/t/ns/orders"
    assert await call(http, "POST", f"{ns}/backlogQuota", {"limitSize": 5000, "policy": HOLD}) == (204, None)
    assert await call(http, "GET", f"{topic}/backlogQuotaMap") == (200, {})
    applied = (await call(http, "GET", f"{topic}/backlogQuotaMap?applied=true"))[1]
    assert applied["destination_storage"]["limitSize"] == 5000
    assert applied["message_age"] == {"limit": -1, "limitSize": -1, "limitTime": -1, "policy": HOLD}  # default
    assert await call(http, "POST", f"{topic}/backlogQuota?backlogQuotaType=message_age",
                      {"limitTime": 30, "policy": EVICT}) == (204, None)
    own = {"message_age": {"limit": -1, "limitSize": -1, "limitTime": 30, "policy": EVICT}}
    assert await call(http, "GET", f"{b.url}/admin/v2/persistent/t/ns/orders/backlogQuotaMap") == (200, own)
    applied = (await call(http, "GET", f"{topic}/backlogQuotaMap?applied=true"))[1]
    assert applied == {"destination_storage": {"limit": 5000, "limitSize": 5000, "limitTime": -1, "policy": HOLD},
                       **own}
    assert await call(http, "DELETE", f"{topic}/backlogQuota?backlogQuotaType=message_age") == (204, None)
    assert await call(http, "GET", f"{topic}/backlogQuotaMap") == (200, {})
    # nothing left at topic level: no topic policies node at all
    assert await a.store.get("/admin/topic-policies/t/ns/persistent/orders") is None
