"""Rate limits without servers: the pure token buckets (burst, debt, refill, retuning, off when <= 0), the
stored JSON (Pulsar's names, per cluster), and the REST API over an in-memory ZooKeeper (round trips,
``null`` when unset, 400 with nothing changed, 404 for an unknown namespace)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.service.policies.rate_limit import RateLimiter, TokenBucket
from config_store import DispatchRate, InvalidMetadataError, Policies, PublishRate
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

# ---------------------------------------------------------------------------------------------- token buckets


def test_a_new_bucket_holds_one_period_and_refills_at_the_rate() -> None:
    b = TokenBucket(permits_per_period=200, period_s=1.0, now_s=0.0)
    assert b.available(0.0) == 200 and not b.exhausted(0.0)
    b.consume(200, 0.0)
    assert b.available(0.0) == 0 and b.exhausted(0.0)
    assert b.available(0.5) == 100
    assert b.available(10.0) == 200  # never more than one period's worth


def test_work_charged_after_the_fact_goes_into_debt_and_is_paid_back() -> None:
    b = TokenBucket(permits_per_period=200, period_s=1.0, now_s=0.0)
    b.consume(1000, 0.0)  # one batch of 1,000 messages is let through...
    assert b.wait_s(0.0, refill_fraction=0.1) == pytest.approx((800 + 20) / 200)
    assert b.exhausted(3.9)  # ...and the next four seconds pay for it
    assert not b.exhausted(4.01)


def test_a_period_longer_than_a_second_spreads_the_permits() -> None:
    b = TokenBucket(permits_per_period=100, period_s=10.0, now_s=0.0)
    b.consume(100, 0.0)
    assert b.wait_s(0.0, refill_fraction=0.5) == pytest.approx(5.0)
    assert b.available(5.0) == 50
    with pytest.raises(ValueError):
        TokenBucket(permits_per_period=0, period_s=1.0, now_s=0.0)


def test_limits_at_or_below_zero_are_off() -> None:
    for off in (0, -1):
        lim = RateLimiter(msgs_per_period=off, bytes_per_period=off, now_s=0.0)
        assert not lim.enabled
        lim.consume(10**9, 10**12, 0.0)
        assert not lim.exhausted(0.0) and lim.wait_s(0.0) == 0.0 and lim.available_msgs(0.0) is None


def test_bytes_and_messages_are_limited_independently() -> None:
    lim = RateLimiter(msgs_per_period=-1, bytes_per_period=1000, now_s=0.0)
    assert lim.available_msgs(0.0) is None  # bytes are enforced by debt only
    lim.consume(1, 1500, 0.0)
    assert lim.exhausted(0.0) and lim.wait_s(0.0) == pytest.approx((500 + 100) / 1000)
    lim = RateLimiter(msgs_per_period=10, bytes_per_period=10**9, now_s=0.0)
    lim.consume(10, 10, 0.0)
    assert lim.exhausted(0.0) and lim.available_msgs(0.0) == 0


def test_retuning_keeps_the_debt_and_turning_a_limit_off_forgets_it() -> None:
    lim = RateLimiter(msgs_per_period=100, now_s=0.0)
    lim.consume(300, 0, 0.0)
    lim.set_rate(msgs_per_period=1000, bytes_per_period=-1, period_s=1.0, now_s=0.0)
    assert lim.exhausted(0.0) and not lim.exhausted(0.21)  # the debt of 200 at the new rate
    lim.set_rate(msgs_per_period=50, bytes_per_period=-1, period_s=1.0, now_s=10.0)
    assert lim.available_msgs(10.0) == 50  # capped at the new capacity
    lim.consume(500, 0, 10.0)
    lim.set_rate(msgs_per_period=-1, bytes_per_period=-1, period_s=1.0, now_s=10.0)
    assert not lim.exhausted(10.0)
    lim.set_rate(msgs_per_period=5, bytes_per_period=-1, period_s=1.0, now_s=10.0)
    assert lim.available_msgs(10.0) == 5  # turned on again: starts full


@settings(max_examples=200, deadline=None)
@given(rate=st.integers(1, 10_000), charges=st.lists(st.tuples(st.floats(0, 2), st.integers(0, 5000)), max_size=50))
def test_what_goes_through_never_beats_the_rate_by_more_than_a_burst_and_one_charge(rate, charges) -> None:
    """A flow that charges only while the bucket is not exhausted gets at most burst + rate * time (+ the
    last charge, which may overdraw)."""
    b = TokenBucket(permits_per_period=rate, period_s=1.0, now_s=0.0)
    now = 0.0
    passed = 0
    largest = 0
    for dt, n in charges:
        now += dt
        if not b.exhausted(now):
            b.consume(n, now)
            passed += n
            largest = max(largest, n)
    assert passed <= rate + rate * now + largest + 1e-6


# ---------------------------------------------------------------------------------------------- stored JSON


def test_policies_store_rates_per_cluster_under_pulsar_names() -> None:
    p = Policies(publish_max_message_rate={"us": PublishRate(200, -1)},
                 topic_dispatch_rate={"us": DispatchRate(100, 1 << 20, True, 5)},
                 subscription_dispatch_rate={"eu": DispatchRate(10)})
    stored = json.loads(p.to_json())
    assert stored["publishMaxMessageRate"] == {"us": {"publishThrottlingRateInMsg": 200,
                                                      "publishThrottlingRateInByte": -1}}
    assert stored["topicDispatchRate"] == {"us": {"dispatchThrottlingRateInMsg": 100,
                                                  "dispatchThrottlingRateInByte": 1 << 20,
                                                  "relativeToPublishRate": True, "ratePeriodInSecond": 5}}
    assert Policies.from_json(p.to_json()) == p
    assert Policies.from_json(b'{"version": 1}').publish_max_message_rate == {}


@pytest.mark.parametrize("raw", [
    b'{"version": 1, "publishMaxMessageRate": {"c": {"publishThrottlingRateInMsg": "5"}}}',
    b'{"version": 1, "publishMaxMessageRate": {"c": 5}}',
    b'{"version": 1, "topicDispatchRate": {"c": {"ratePeriodInSecond": 0}}}',
    b'{"version": 1, "subscriptionDispatchRate": {"c": {"relativeToPublishRate": 1}}}',
])
def test_malformed_stored_rates_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        Policies.from_json(raw)


# ---------------------------------------------------------------------------------------------- REST


async def test_rates_round_trip_over_rest(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns"
    for path in ("publishRate", "dispatchRate", "subscriptionDispatchRate"):
        assert await call(http, "GET", f"{ns}/{path}") == (200, None)
    publish = {"publishThrottlingRateInMsg": 200, "publishThrottlingRateInByte": -1}
    assert await call(http, "POST", f"{ns}/publishRate", publish) == (204, None)
    assert await call(http, "GET", f"{b.url}/admin/v2/namespaces/t/ns/publishRate") == (200, publish)
    dispatch = {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": 4096,
                "relativeToPublishRate": False, "ratePeriodInSecond": 2}
    assert await call(http, "POST", f"{ns}/dispatchRate", dispatch) == (204, None)
    assert await call(http, "POST", f"{ns}/subscriptionDispatchRate",
                      {"dispatchThrottlingRateInMsg": 7}) == (204, None)  # the rest: Pulsar's defaults
    assert await call(http, "GET", f"{ns}/dispatchRate") == (200, dispatch)
    assert await call(http, "GET", f"{ns}/subscriptionDispatchRate") == (200, {
        "dispatchThrottlingRateInMsg": 7, "dispatchThrottlingRateInByte": -1, "relativeToPublishRate": False,
        "ratePeriodInSecond": 1})
    policies = (await call(http, "GET", ns))[1]
    (cluster,) = policies["publishMaxMessageRate"]
    assert policies["publishMaxMessageRate"][cluster] == publish and policies["topicDispatchRate"][cluster] == dispatch
    for path in ("publishRate", "dispatchRate", "subscriptionDispatchRate"):
        assert await call(http, "DELETE", f"{ns}/{path}") == (204, None)
        assert await call(http, "DELETE", f"{ns}/{path}") == (204, None)
        assert await call(http, "GET", f"{ns}/{path}") == (200, None)


async def test_bad_rate_bodies_are_400_and_change_nothing(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/ns"
    publish = {"publishThrottlingRateInMsg": 50, "publishThrottlingRateInByte": -1}
    assert await call(http, "POST", f"{ns}/publishRate", publish) == (204, None)
    for bad, field in (([], "object"), (5, "object"),
                       ({"publishThrottlingRateInMsg": "5"}, "publishThrottlingRateInMsg"),
                       ({"publishThrottlingRateInMsg": 1.5}, "publishThrottlingRateInMsg"),
                       ({"publishThrottlingRateInMsg": True}, "publishThrottlingRateInMsg"),
                       ({"publishThrottlingRateInByte": -2}, "publishThrottlingRateInByte"),
                       ({"publishThrottlingRateInMsg": 1 << 31}, "publishThrottlingRateInMsg"),
                       ({"publishRateInMsg": 5}, "publishRateInMsg")):
        status, answer = await call(http, "POST", f"{ns}/publishRate", bad)
        assert status == 400 and field in answer["reason"], (bad, answer)
    status, answer = await call(http, "POST", f"{ns}/publishRate", raw=b"{not json")
    assert status == 400
    assert await call(http, "GET", f"{ns}/publishRate") == (200, publish)
    for path in ("dispatchRate", "subscriptionDispatchRate"):
        for bad, field in (({"ratePeriodInSecond": 0}, "ratePeriodInSecond"),
                           ({"relativeToPublishRate": "yes"}, "relativeToPublishRate"),
                           ({"dispatchThrottlingRateInByte": "1"}, "dispatchThrottlingRateInByte"),
                           ({"dispatchThrottlingRateInMsg": 5, "extra": 1}, "extra")):
            status, answer = await call(http, "POST", f"{ns}/{path}", bad)
            assert status == 400 and field in answer["reason"], (path, bad, answer)
        assert await call(http, "GET", f"{ns}/{path}") == (200, None)


async def test_rates_of_an_unknown_namespace_are_404(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns = f"{a.url}/admin/v2/namespaces/t/nope"
    for path in ("publishRate", "dispatchRate", "subscriptionDispatchRate"):
        assert (await call(http, "GET", f"{ns}/{path}"))[0] == 404
        assert (await call(http, "POST", f"{ns}/{path}", {}))[0] == 404
        assert (await call(http, "DELETE", f"{ns}/{path}"))[0] == 404
