"""The pure load-balancing decisions: split points and boundaries, scores and placement, which bundles to
split and which to shed (ThresholdShedder), the load report's JSON and its measurement from topics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.bundles import (FULL_UPPER_BOUND, NamespaceBundle, NamespaceBundles, default_boundaries,
                            parse_bundle_range, rendezvous, split_boundaries, split_point_range_equally,
                            split_point_topic_count, topic_hash)
from broker.load_balance import (ResourceWeights, SplitThresholds, bundles_to_shed, bundles_to_split, choose_broker,
                                 scores)
from broker.load_report import measure_load
from config_store.brokers import BrokerLoad, BrokerRegistration, BundleStats

MIB = 1024 * 1024


def bundle(lo: int, hi: int) -> NamespaceBundle:
    return NamespaceBundle("t", "ns", lo, hi)


# ---------------------------------------------------------------------------------------------- splitting


def test_range_equally_divide_cuts_in_the_middle_as_pulsar() -> None:
    assert split_point_range_equally(bundle(0, 0x40000000)) == 0x20000000
    assert split_point_range_equally(bundle(0xC0000000, FULL_UPPER_BOUND)) == 0xDFFFFFFF
    assert split_point_range_equally(bundle(5, 6)) is None  # nothing between


def test_topic_count_equally_divide_cuts_between_the_middle_hashes() -> None:
    b = bundle(0, 0x1000)
    assert split_point_topic_count(b, [0x100, 0x300, 0x500, 0x700]) == 0x400
    assert split_point_topic_count(b, [0x100, 0x300, 0x500]) == 0x100 + (0x300 - 0x100) // 2
    assert split_point_topic_count(b, [0x100]) is None
    assert split_point_topic_count(b, [0x0, 0x0]) is None  # would leave an empty lower half
    assert split_point_topic_count(b, [0x100, 0x5000]) is None  # only one of them is in the bundle
    # adjacent hashes: the lower one stays below the cut (found by the property test below: the cut used to
    # fall on the lower hash, which then went to the upper half with the other)
    assert split_point_topic_count(b, [0x200, 0x201]) == 0x201


@given(st.lists(st.integers(0, FULL_UPPER_BOUND), min_size=2, max_size=40, unique=True))
def test_topic_count_split_puts_about_half_of_the_topics_on_each_side(hashes: list[int]) -> None:
    b = bundle(0, FULL_UPPER_BOUND)
    point = split_point_topic_count(b, hashes)
    if point is None:
        return
    lower = sum(1 for h in hashes if h < point)
    assert abs(lower - (len(hashes) - lower)) <= 1 or lower == len(hashes) // 2


@given(st.integers(1, 64), st.data())
def test_split_boundaries_keep_every_hash_in_exactly_one_bundle(n: int, data) -> None:
    bounds = default_boundaries(n)
    ns = NamespaceBundles("t", "ns", bounds)
    victim = data.draw(st.sampled_from(ns.bundles))
    point = split_point_range_equally(victim)
    if point is None:
        return
    new = split_boundaries(bounds, victim, point)
    assert len(new) == len(bounds) + 1 and new == sorted(set(new))
    after = NamespaceBundles("t", "ns", new)
    h = data.draw(st.integers(0, FULL_UPPER_BOUND))
    before_bundle, after_bundle = ns.find(h), after.find(h)
    if before_bundle != victim:
        assert after_bundle == before_bundle  # other bundles are untouched
    else:
        assert after_bundle.lower == (victim.lower if h < point else point)
    assert after.get(victim.name) is None


def test_split_boundaries_refuses_a_bundle_that_is_gone_or_a_point_outside() -> None:
    bounds = default_boundaries(4)
    with pytest.raises(ValueError, match="not a bundle"):
        split_boundaries(bounds, bundle(0, 0x20000000), 0x10000000)
    with pytest.raises(ValueError, match="not inside"):
        split_boundaries(bounds, bundle(0, 0x40000000), 0x40000000)


def test_bundle_names_parse() -> None:
    assert parse_bundle_range("0x00000000_0x40000000") == (0, 0x40000000)
    for bad in ("0x0_0x4", "00000000_40000000", "0x40000000_0x00000000", "0x0000000g_0x40000000", "x"):
        with pytest.raises(ValueError):
            parse_bundle_range(bad)


# ---------------------------------------------------------------------------------------------- placement


def load(rate_in: float = 0, rate_out: float = 0, tin: float = 0, tout: float = 0, *, bundles: int = 0,
         topics: int = 0, stats: tuple[BundleStats, ...] = ()) -> BrokerLoad:
    return BrokerLoad(num_bundles=bundles, num_topics=topics, msg_rate_in=rate_in, msg_rate_out=rate_out,
                      msg_throughput_in=tin, msg_throughput_out=tout, bundle_stats=stats)


def test_scores_are_weighted_shares_of_the_region_with_a_floor() -> None:
    s = scores({"a": load(300, 0, 3 * MIB), "b": load(100, 0, 1 * MIB)})
    assert s == pytest.approx({"a": 0.75, "b": 0.25})
    assert scores({"a": load(3), "b": load(0)}) == pytest.approx({"a": 0.3, "b": 0.0})  # 3 msg/s of a 10 floor
    weighted = scores({"a": load(300, 0, 0, 0), "b": load(0, 0, 0, 1 * MIB)},
                      ResourceWeights(msg_rate_in=0.5))
    assert weighted == pytest.approx({"a": 0.5, "b": 1.0})


def test_placement_picks_the_least_loaded_broker() -> None:
    b = bundle(0, 0x40000000)
    assert choose_broker({"a": load(1000, 1000, MIB, MIB, bundles=1), "b": load(10, 0, 1024, bundles=5)}, b) == "b"


def test_placement_of_an_idle_region_falls_back_to_fewest_bundles_then_the_hash() -> None:
    b = bundle(0, 0x40000000)
    assert choose_broker({"a": load(bundles=2), "b": load(bundles=1)}, b) == "b"
    assert choose_broker({"a": load(bundles=1, topics=3), "b": load(bundles=1, topics=2)}, b) == "b"
    expected = min(("a", "b"), key=lambda x: rendezvous(b, x))
    assert choose_broker({"a": load(bundles=1), "b": load(bundles=1)}, b) == expected
    # a near tie in load is a tie
    assert choose_broker({"a": load(1000, bundles=0), "b": load(1010, bundles=3)}, b) == "a"


# ---------------------------------------------------------------------------------------------- auto split


def stats(name: str, **kw) -> BundleStats:
    return BundleStats(bundle=f"t/ns/{name}", **kw)


def test_bundles_over_a_threshold_are_split_busiest_first_up_to_the_maximum() -> None:
    th = SplitThresholds(max_topics=10, max_sessions=10, max_msg_rate=100, max_bandwidth_mbytes=1)
    data = [stats("0x00000000_0x40000000", topics=11),
            stats("0x40000000_0x80000000", topics=2, producer_count=6, consumer_count=5),
            stats("0x80000000_0xc0000000", topics=2, msg_rate_in=60, msg_rate_out=50),
            stats("0xc0000000_0xffffffff", topics=2, msg_throughput_in=2 * MIB),
            stats("0x00000000_0x10000000", topics=1, msg_rate_in=1000)]  # a single topic: never
    chosen = bundles_to_split(data, bundle_counts={"t/ns": 4}, thresholds=th, max_bundles=128)
    assert [b for b, _ in chosen] == ["t/ns/0xc0000000_0xffffffff", "t/ns/0x80000000_0xc0000000",
                                      "t/ns/0x00000000_0x40000000", "t/ns/0x40000000_0x80000000"]
    assert "topics" in dict(chosen)["t/ns/0x00000000_0x40000000"]
    capped = bundles_to_split(data, bundle_counts={"t/ns": 6}, thresholds=th, max_bundles=8)
    assert len(capped) == 2
    assert bundles_to_split(data, bundle_counts={"t/ns": 8}, thresholds=th, max_bundles=8) == []
    assert bundles_to_split(data, bundle_counts={}, thresholds=SplitThresholds(0, 0, 0, 0), max_bundles=128) == []


# ---------------------------------------------------------------------------------------------- shedding


def shed(loads, **kw):
    args = dict(history={}, threshold=0.1, history_fraction=0.0, min_throughput_bytes_s=0.0, recently_unloaded=())
    args.update(kw)
    return bundles_to_shed(loads, **args)


def hot_broker() -> dict[str, BrokerLoad]:
    a_stats = (stats("0x00000000_0x40000000", topics=1, msg_rate_in=100, msg_throughput_in=100 * 1024),
               stats("0x40000000_0x80000000", topics=1, msg_rate_in=300, msg_throughput_in=300 * 1024),
               stats("0x80000000_0xc0000000", topics=1, msg_rate_in=50, msg_throughput_in=50 * 1024))
    return {"a": load(450, 0, 450 * 1024, stats=a_stats, bundles=3),
            "b": load(0, stats=(stats("0xc0000000_0xffffffff"),), bundles=1)}


def test_an_overloaded_broker_sheds_its_largest_bundles_until_enough_moves() -> None:
    chosen, history = shed(hot_broker())
    # a's score 1.0, average 0.5: it sheds 1.0 - 0.5 - 0.1 + 0.05 = 45% of 450 KB/s: the 300 KB/s bundle is enough
    assert chosen == {"a": ["t/ns/0x40000000_0x80000000"]}
    assert history == pytest.approx({"a": 1.0, "b": 0.0})


def test_shedding_respects_grace_min_throughput_threshold_and_last_bundle() -> None:
    loads = hot_broker()
    chosen, _ = shed(loads, recently_unloaded={"t/ns/0x40000000_0x80000000"})
    assert chosen == {"a": ["t/ns/0x00000000_0x40000000", "t/ns/0x80000000_0xc0000000"]}
    assert shed(loads, min_throughput_bytes_s=10 * MIB)[0] == {}
    assert shed(loads, threshold=0.6)[0] == {}
    single = {"a": load(450, 0, 450 * 1024, stats=(stats("0x00000000_0xffffffff", topics=3, msg_rate_in=450),)),
              "b": load(0)}
    assert shed(single)[0] == {}  # never a broker's last bundle
    assert shed({"a": loads["a"]})[0] == {}  # nobody to take it


def test_history_smooths_a_sudden_change() -> None:
    chosen, history = shed(hot_broker(), history={"a": 0.5, "b": 0.5}, history_fraction=0.9)
    assert history == pytest.approx({"a": 0.55, "b": 0.45}) and chosen == {}


@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 1e7), st.integers(1, 6)), min_size=2, max_size=6))
def test_shedding_never_takes_a_brokers_last_bundle_nor_unknown_bundles(spec) -> None:
    loads = {}
    for i, (rate, throughput, n) in enumerate(spec):
        per = tuple(stats(f"b{i}-{j}", topics=1, msg_rate_in=rate / n, msg_throughput_in=throughput / n)
                    for j in range(n))
        loads[f"broker-{i}"] = load(rate, 0, throughput, stats=per, bundles=n)
    chosen, _ = shed(loads)
    for broker, picked in chosen.items():
        own = {s.bundle for s in loads[broker].bundle_stats}
        assert set(picked) <= own and len(picked) < len(own) and len(set(picked)) == len(picked)


# ---------------------------------------------------------------------------------------------- load report


def test_the_load_report_round_trips_with_pulsars_names() -> None:
    report = load(1.5, 2.5, 3.5, 4.5, bundles=1, topics=2,
                  stats=(stats("0x00000000_0xffffffff", topics=2, producer_count=1, msg_rate_in=1.5),))
    reg = BrokerRegistration(broker_id="a", pulsar_service_url="pulsar://a:1", web_service_url="http://a:2",
                             load=report)
    data = reg.to_json()
    assert b'"msgRateIn":1.5' in data and b'"lastStats"' in data and b'"msgThroughputOut":4.5' in data
    assert BrokerRegistration.from_json(data).load == report
    legacy = BrokerRegistration.from_json(b'{"version":1,"brokerId":"a","pulsarServiceUrl":"p","webServiceUrl":"w"}')
    assert legacy.load == BrokerLoad()


class _Meter:
    def __init__(self, r: float) -> None:
        self.r = r

    def rate(self) -> float:
        return self.r


def _topic(rate_in: float, bytes_in: float, consumers: list[tuple[float, float]], producers: int = 1):
    subs = {"s": SimpleNamespace(consumers=[SimpleNamespace(msg_out=_Meter(m), bytes_out=_Meter(b))
                                            for m, b in consumers])}
    return SimpleNamespace(msg_in=_Meter(rate_in), bytes_in=_Meter(bytes_in), subscriptions=subs,
                           producers={f"p{i}": object() for i in range(producers)})


def test_load_is_measured_per_bundle_from_the_topics_meters() -> None:
    ns = NamespaceBundles("t", "ns", default_boundaries(2))
    names = [f"persistent://t/ns/x{i}" for i in range(40)]
    lo = [n for n in names if topic_hash(n) < 0x80000000][:2]
    hi = [n for n in names if topic_hash(n) >= 0x80000000][:1]
    topics = {lo[0]: _topic(10, 100, [(5, 50), (5, 50)]), lo[1]: _topic(1, 10, []), hi[0]: _topic(2, 20, [(2, 20)])}
    measured = measure_load(topics, lambda name: ns.find(topic_hash(name)),
                            connections=3)
    assert (measured.num_topics, measured.num_producers, measured.num_consumers, measured.connections) == (3, 3, 3, 3)
    assert (measured.msg_rate_in, measured.msg_rate_out) == (13, 12)
    assert (measured.msg_throughput_in, measured.msg_throughput_out) == (130, 120)
    by = {s.bundle: s for s in measured.bundle_stats}
    first = by["t/ns/0x00000000_0x80000000"]
    assert (first.topics, first.producer_count, first.consumer_count, first.msg_rate_in, first.msg_rate_out) == \
        (2, 2, 2, 11, 10)
    assert by["t/ns/0x80000000_0xffffffff"].msg_throughput_out == 20
