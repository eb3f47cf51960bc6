"""Topic-level rate limits and broker defaults without servers: the precedence (topic, else namespace for this
cluster, else broker; a rate without a positive limit counts as unset), the stored JSON (Pulsar's
``TopicPolicies`` names), broker.toml checks, the throttling-event counts, and the topic REST calls over an
in-memory ZooKeeper (round trips, ``applied``, a partition reaching its partitioned topic's, 400 with nothing
changed, 404 for an unknown topic or namespace)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from broker.config import BrokerConfig
from broker.service.config import ServiceConfig
from broker.service.policies.rate_policy import Rates, applied, rates_of, resolve
from broker.service.policies.throttle import TopicRateLimits
from config_store import DispatchRate, InvalidMetadataError, Policies, PublishRate, TopicPolicies
from magnetar.errors import ConfigError
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

US = "us"
BROKER = ServiceConfig(max_publish_rate_per_topic_in_messages=1000, dispatch_throttling_rate_per_topic_in_msg=500,
                       dispatch_throttling_rate_per_topic_in_byte=1 << 20,
                       dispatch_throttling_rate_per_subscription_in_msg=50)

# ---------------------------------------------------------------------------------------------- precedence


def test_without_policies_the_broker_defaults_apply_and_zero_is_off() -> None:
    assert resolve(BROKER, None, None, US) == Rates(
        publish=PublishRate(1000, 0), topic_dispatch=DispatchRate(500, 1 << 20),
        subscription_dispatch=DispatchRate(50, 0))
    assert resolve(ServiceConfig(), Policies(), TopicPolicies(), US) == Rates(None, None, None)


def test_the_namespace_rate_of_this_cluster_beats_the_broker_default() -> None:
    ns = Policies(publish_max_message_rate={US: PublishRate(200)},
                  subscription_dispatch_rate={"eu": DispatchRate(7)})  # another cluster's: not ours
    rates = resolve(BROKER, ns, None, US)
    assert rates.publish == PublishRate(200)
    assert rates.subscription_dispatch == DispatchRate(50, 0) and rates.topic_dispatch == DispatchRate(500, 1 << 20)


def test_the_topic_rate_beats_the_namespace_rate_each_rate_on_its_own() -> None:
    ns = Policies(publish_max_message_rate={US: PublishRate(200)}, topic_dispatch_rate={US: DispatchRate(300)})
    own = TopicPolicies(publish_rate=PublishRate(20, 4096), subscription_dispatch_rate=DispatchRate(5, -1, True, 2))
    rates = resolve(BROKER, ns, own, US)
    assert rates == Rates(publish=PublishRate(20, 4096), topic_dispatch=DispatchRate(300),
                          subscription_dispatch=DispatchRate(5, -1, True, 2))


@pytest.mark.parametrize("unset", [PublishRate(-1, -1), PublishRate(0, 0), PublishRate(0, -1)])
def test_a_rate_without_a_positive_limit_counts_as_unset(unset) -> None:
    """Pulsar's normalize: posting -1/-1 on a topic does not lift its namespace's limit."""
    ns = Policies(publish_max_message_rate={US: PublishRate(200)})
    assert resolve(BROKER, ns, TopicPolicies(publish_rate=unset), US).publish == PublishRate(200)
    assert resolve(BROKER, Policies(publish_max_message_rate={US: unset}), None, US).publish == PublishRate(1000, 0)
    off = ServiceConfig()
    assert resolve(off, Policies(publish_max_message_rate={US: unset}), TopicPolicies(publish_rate=unset),
                   US).publish is None


def test_applied_shows_the_broker_rate_even_when_off() -> None:
    """As Pulsar's ``applied=true``: the broker's values (zeros when off), never null."""
    assert applied("publish", ServiceConfig(), Policies(), None, US) == PublishRate(0, 0)
    assert applied("subscription_dispatch", BROKER, None, None, US) == DispatchRate(50, 0)


def test_rates_of_reads_a_topic_duck_typed() -> None:
    topic = SimpleNamespace(service=SimpleNamespace(config=BROKER, cluster_name=US), policies=None,
                            own_topic_policies=TopicPolicies(dispatch_rate=DispatchRate(9)))
    assert rates_of(topic).topic_dispatch == DispatchRate(9)


# ---------------------------------------------------------------------------------------------- stored JSON


def test_topic_rates_are_stored_under_pulsar_topic_policies_names() -> None:
    own = TopicPolicies(publish_rate=PublishRate(10, -1), dispatch_rate=DispatchRate(100, 1 << 20, True, 5),
                        subscription_dispatch_rate=DispatchRate(3))
    stored = json.loads(own.to_json())
    assert stored["publishRate"] == {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1}
    assert stored["dispatchRate"] == {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": 1 << 20,
                                      "relativeToPublishRate": True, "ratePeriodInSecond": 5}
    assert stored["subscriptionDispatchRate"]["dispatchThrottlingRateInMsg"] == 3
    assert TopicPolicies.from_json(own.to_json()) == own
    assert "publishRate" not in json.loads(TopicPolicies().to_json())
    assert TopicPolicies(publish_rate=PublishRate(1)).is_empty() is False


@pytest.mark.parametrize("raw", [b'{"publishRate": 5}', b'{"dispatchRate": {"ratePeriodInSecond": 0}}',
                                 b'{"subscriptionDispatchRate": {"dispatchThrottlingRateInMsg": "5"}}'])
def test_malformed_stored_topic_rates_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        TopicPolicies.from_json(raw)


# ---------------------------------------------------------------------------------------------- broker.toml


def test_broker_default_rates_load_from_toml(tmp_path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('data_dir = "d"\nzookeeper = "127.0.0.1:2181"\n'
                    "dispatch_throttling_rate_per_topic_in_msg = 500\n"
                    "dispatch_throttling_rate_per_topic_in_byte = 1048576\n"
                    "dispatch_throttling_rate_per_subscription_in_msg = 50\n"
                    "dispatch_throttling_rate_per_subscribe_in_byte = 4096\n"
                    "max_publish_rate_per_topic_in_messages = 1000\n"
                    "max_publish_rate_per_topic_in_bytes = 8192\n")
    c = BrokerConfig.load(path)
    assert (c.dispatch_throttling_rate_per_topic_in_msg, c.dispatch_throttling_rate_per_topic_in_byte,
            c.dispatch_throttling_rate_per_subscription_in_msg, c.dispatch_throttling_rate_per_subscribe_in_byte,
            c.max_publish_rate_per_topic_in_messages, c.max_publish_rate_per_topic_in_bytes) == (
        500, 1 << 20, 50, 4096, 1000, 8192)
    assert BrokerConfig(data_dir=tmp_path, zookeeper="z:1").dispatch_throttling_rate_per_topic_in_msg == 0


@pytest.mark.parametrize("line, message", [
    ("dispatch_throttling_rate_per_topic_in_msg = -1", "dispatch_throttling_rate_per_topic_in_msg must be 0"),
    ("dispatch_throttling_rate_per_subscribe_in_byte = -5", "dispatch_throttling_rate_per_subscribe_in_byte"),
    ("dispatch_throttling_rate_per_subscription_in_msg = 2147483648", "up to 2147483647"),
    ("max_publish_rate_per_topic_in_messages = 1.5", "must be an integer"),
    ("dispatch_throttling_rate_per_topic_in_byte = true", "must be an integer"),
    ("dispatch_throttling_rate_per_subscription_in_byte = 5", "unknown broker setting"),  # Pulsar's spelling: Subscribe
])
def test_bad_default_rates_are_config_errors_naming_the_key(tmp_path, line, message) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(f'data_dir = "d"\nzookeeper = "127.0.0.1:2181"\n{line}\n')
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.load(path)


# ---------------------------------------------------------------------------------------------- throttling events


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def limits_for(rates: Rates) -> tuple[TopicRateLimits, Clock]:
    clock = Clock()
    limits = TopicRateLimits(SimpleNamespace(subscriptions={}, producers={}), clock=clock)
    limits.apply(rates)
    return limits, clock


def test_dispatch_throttling_is_counted_by_limit_and_dimension() -> None:
    limits, clock = limits_for(Rates(None, DispatchRate(-1, 1000), DispatchRate(10)))
    assert limits.dispatch_allowance("s", 5) == 5 and limits.throttle_stats("s").msg_events_by_subscription_limit == 0
    assert limits.dispatch_allowance("s", 50) == 10  # the subscription's 10 messages cut the read short
    limits.dispatched("s", 10, 2000)  # both limits spent (the byte limit in debt)
    assert limits.dispatch_wait_s("s") > 0
    stats = limits.throttle_stats("s")
    assert stats.to_json() == {
        "dispatchThrottledMsgEventsBySubscriptionLimit": 2, "dispatchThrottledBytesEventsBySubscriptionLimit": 0,
        "dispatchThrottledMsgEventsByTopicLimit": 0, "dispatchThrottledBytesEventsByTopicLimit": 1,
        "dispatchThrottledMsgEventsByBrokerLimit": 0, "dispatchThrottledBytesEventsByBrokerLimit": 0}
    assert limits.throttle_stats("other").msg_events_by_subscription_limit == 0
    clock.now = 5.0  # refilled: nothing held back, nothing counted
    assert limits.dispatch_wait_s("s") == 0.0 and limits.throttle_stats("s") == stats
    limits.forget("s")
    assert limits.throttle_stats("s").msg_events_by_subscription_limit == 0


def test_lifting_the_limits_stops_the_counting() -> None:
    limits, _ = limits_for(Rates(None, None, DispatchRate(1)))
    limits.dispatched("s", 5, 0)
    assert limits.dispatch_wait_s("s") > 0
    limits.apply(Rates(None, None, None))
    assert not limits.dispatch_limited and limits.dispatch_wait_s("s") == 0.0
    assert limits.dispatch_allowance("s", 7) == 7


# ---------------------------------------------------------------------------------------------- REST


TOPIC_PATHS = ("publishRate", "dispatchRate", "subscriptionDispatchRate")


async def test_topic_rates_round_trip_and_override_the_namespace(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    assert await call(http, "PUT", f"{a.url}/admin/v2/persistent/t/ns/orders") == (204, None)
    t = f"{a.url}/admin/v2/persistent/t/ns/orders"
    for path in TOPIC_PATHS:
        assert await call(http, "GET", f"{t}/{path}") == (204, None)
    assert await call(http, "GET", f"{t}/publishRate?applied=true") == (200, {
        "publishThrottlingRateInMsg": 0, "publishThrottlingRateInByte": 0})  # the broker's: off
    ns_rate = {"publishThrottlingRateInMsg": 300, "publishThrottlingRateInByte": -1}
    assert await call(http, "POST", f"{a.url}/admin/v2/namespaces/t/ns/publishRate", ns_rate) == (204, None)
    assert await call(http, "GET", f"{t}/publishRate?applied=true") == (200, ns_rate)

    publish = {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": 4096}
    dispatch = {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1,
                "relativeToPublishRate": True, "ratePeriodInSecond": 3}
    assert await call(http, "POST", f"{t}/publishRate", publish) == (204, None)
    assert await call(http, "POST", f"{t}/dispatchRate", dispatch) == (204, None)
    assert await call(http, "POST", f"{t}/subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 7}) == (204, None)
    t_b = f"{b.url}/admin/v2/persistent/t/ns/orders"  # any broker answers: the policies are global
    assert await call(http, "GET", f"{t_b}/publishRate") == (200, publish)
    assert await call(http, "GET", f"{t_b}/publishRate?applied=true") == (200, publish)
    assert await call(http, "GET", f"{t_b}/dispatchRate") == (200, dispatch)
    assert await call(http, "GET", f"{t_b}/subscriptionDispatchRate") == (200, {
        "dispatchThrottlingRateInMsg": 7, "dispatchThrottlingRateInByte": -1, "relativeToPublishRate": False,
        "ratePeriodInSecond": 1})
    for path in TOPIC_PATHS:
        assert await call(http, "DELETE", f"{t}/{path}") == (204, None)
        assert await call(http, "DELETE", f"{t}/{path}") == (204, None)
        assert await call(http, "GET", f"{t}/{path}") == (204, None)
    assert await call(http, "GET", f"{t}/publishRate?applied=true") == (200, ns_rate)  # the namespace's again


async def test_a_partitioned_topics_rate_covers_its_partitions(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    base = f"{a.url}/admin/v2/persistent/t/ns/events"
    assert await call(http, "PUT", f"{base}/partitions", 3) == (204, None)
    rate = {"publishThrottlingRateInMsg": 50, "publishThrottlingRateInByte": -1}
    assert (await call(http, "POST", f"{base}-partition-3/publishRate", rate))[0] == 404  # no such partition
    assert await call(http, "POST", f"{base}/publishRate", rate) == (204, None)
    for i in range(3):
        assert await call(http, "GET", f"{base}-partition-{i}/publishRate") == (200, rate)
    other = {"publishThrottlingRateInMsg": 60, "publishThrottlingRateInByte": -1}
    assert await call(http, "POST", f"{base}-partition-1/publishRate", other) == (204, None)  # reaches the base
    assert await call(http, "GET", f"{base}/publishRate") == (200, other)


async def test_bad_topic_rate_bodies_are_400_and_change_nothing(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    assert await call(http, "PUT", f"{a.url}/admin/v2/persistent/t/ns/orders") == (204, None)
    t = f"{a.url}/admin/v2/persistent/t/ns/orders"
    publish = {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}
    assert await call(http, "POST", f"{t}/publishRate", publish) == (204, None)
    for bad, field in (([], "object"), ({"publishThrottlingRateInMsg": "5"}, "publishThrottlingRateInMsg"),
                       ({"publishThrottlingRateInMsg": -7}, "publishThrottlingRateInMsg"),
                       ({"publishThrottlingRateInByte": 2.5}, "publishThrottlingRateInByte"),
                       ({"publishThrottlingRateInMsg": 1, "rate": 2}, "rate")):
        status, answer = await call(http, "POST", f"{t}/publishRate", bad)
        assert status == 400 and field in answer["reason"], (bad, answer)
    assert (await call(http, "POST", f"{t}/publishRate", raw=b"{oops"))[0] == 400
    assert await call(http, "GET", f"{t}/publishRate") == (200, publish)
    for path in ("dispatchRate", "subscriptionDispatchRate"):
        for bad, field in (({"ratePeriodInSecond": 0}, "ratePeriodInSecond"),
                           ({"dispatchThrottlingRateInMsg": True}, "dispatchThrottlingRateInMsg"),
                           ({"dispatchThrottlingRateInByte": -3}, "dispatchThrottlingRateInByte"),
                           ({"relativeToPublishRate": "no"}, "relativeToPublishRate")):
            status, answer = await call(http, "POST", f"{t}/{path}", bad)
            assert status == 400 and field in answer["reason"], (path, bad, answer)
        assert await call(http, "GET", f"{t}/{path}") == (204, None)


async def test_rates_of_an_unknown_topic_or_namespace_are_404(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    for t in (f"{a.url}/admin/v2/persistent/t/ns/ghost", f"{a.url}/admin/v2/persistent/t/nope/x"):
        for path in TOPIC_PATHS:
            for method, body in (("GET", None), ("POST", {}), ("DELETE", None)):
                status, answer = await call(http, method, f"{t}/{path}", body)
                assert status == 404 and answer["reason"], (t, path, method)
    assert await call(http, "PUT", f"{a.url}/admin/v2/persistent/t/ns/ghost") == (204, None)  # now it exists
    assert await call(http, "GET", f"{a.url}/admin/v2/persistent/t/ns/ghost/publishRate") == (204, None)
