"""ZooKeeper's ``mntr`` answer translated into the names ZooKeeper's Prometheus provider serves (pure), and
``promtool check metrics`` on the result: it parses, and its only lint is about names ZooKeeper itself chose."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from observability.zookeeper import metric_families, parse_mntr, state_families
from tests.kit.promtool import check_metrics

# Lines of a real ZooKeeper 3.8 mntr answer (Debian's package), and a per-namespace summary as it prints one.
MNTR = """zk_version\t3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC
zk_server_state\tstandalone
zk_ephemerals_count\t2
zk_num_alive_connections\t3
zk_avg_latency\t0.5
zk_outstanding_requests\t0
zk_znode_count\t17
zk_packets_sent\t30
zk_packets_received\t31
zk_watch_count\t4
zk_min_latency\t0
zk_max_latency\t7
zk_last_client_response_size\t-1
zk_open_file_descriptor_count\t41
zk_approximate_data_size\t844
zk_uptime\t5758
zk_bytes_received_count\t1600
zk_commit_count\t12
zk_avg_fsynctime\t1.5
zk_min_fsynctime\t1
zk_max_fsynctime\t2
zk_cnt_fsynctime\t2
zk_sum_fsynctime\t3
zk_avg_readlatency\t0.0
zk_min_readlatency\t0
zk_max_readlatency\t1
zk_cnt_readlatency\t9
zk_sum_readlatency\t1
zk_p50_readlatency\t0
zk_p95_readlatency\t1
zk_p99_readlatency\t1
zk_p999_readlatency\t1
zk_avg_prep_processor_queue_time_ms\t0.0
zk_min_prep_processor_queue_time_ms\t0
zk_max_prep_processor_queue_time_ms\t0
zk_cnt_prep_processor_queue_time_ms\t4
zk_sum_prep_processor_queue_time_ms\t0
zk_p50_prep_processor_queue_time_ms\t0
zk_p95_prep_processor_queue_time_ms\t0
zk_p99_prep_processor_queue_time_ms\t0
zk_p999_prep_processor_queue_time_ms\t0
zk_avg_my_tenant_write_per_namespace\t12.0
zk_min_my_tenant_write_per_namespace\t10
zk_max_my_tenant_write_per_namespace\t14
zk_cnt_my_tenant_write_per_namespace\t2
zk_sum_my_tenant_write_per_namespace\t24
"""


def exposition(values: dict[str, str] | None) -> str:
    class Collector:
        def collect(self):
            yield from state_families(values)
            yield from metric_families(values or {})

    registry = CollectorRegistry()
    registry.register(Collector())
    return generate_latest(registry).decode()


def samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def types(text: str) -> dict[str, str]:
    return {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")}


def test_mntr_lines_are_read_and_anything_else_ignored() -> None:
    values = parse_mntr(MNTR + "garbage line\nzk_\tx\n")
    assert values["znode_count"] == "17" and values["server_state"] == "standalone"
    assert values["version"].startswith("3.8.0")
    assert parse_mntr("This ZooKeeper instance is not currently serving requests\n") == {}


def test_gauges_keep_zookeepers_names_and_pulsars_server_names_are_added() -> None:
    text = exposition(parse_mntr(MNTR))
    got, kinds = samples(text), types(text)
    for name, value in (("znode_count", 17), ("watch_count", 4), ("num_alive_connections", 3),
                        ("outstanding_requests", 0), ("approximate_data_size", 844), ("ephemerals_count", 2),
                        ("avg_latency", 0.5), ("max_latency", 7), ("min_latency", 0), ("packets_received", 31),
                        ("packets_sent", 30), ("open_file_descriptor_count", 41), ("last_client_response_size", -1)):
        assert got[name] == value and kinds[name] == "gauge", name
    assert got["zookeeper_server_znode_count"] == 17 and got["zookeeper_server_data_size_bytes"] == 844
    assert got["zookeeper_server_connections"] == 3 and got["zookeeper_server_watches_count"] == 4
    assert got["zookeeper_server_ephemerals_count"] == 2
    assert got["magnetar_zookeeper_up"] == 1
    assert got['magnetar_zookeeper_server_state{state="standalone"}'] == 1
    assert got['magnetar_zookeeper_server_state{state="leader"}'] == 0
    assert "version" not in got and "server_state" not in got


def test_summaries_counters_and_namespace_sets_take_the_providers_shape() -> None:
    text = exposition(parse_mntr(MNTR))
    got, kinds = samples(text), types(text)
    assert kinds["readlatency"] == "summary"
    assert {q: got[f'readlatency{{quantile="{q}"}}'] for q in ("0.5", "0.95", "0.99", "0.999")} == {
        "0.5": 0, "0.95": 1, "0.99": 1, "0.999": 1}
    assert got["readlatency_count"] == 9 and got["readlatency_sum"] == 1
    # A basic summary has no percentiles in mntr: count and sum only; mntr's avg/min/max are not series.
    assert kinds["fsynctime"] == "summary" and got["fsynctime_count"] == 2 and got["fsynctime_sum"] == 3
    assert not any(name.startswith(("avg_fsynctime", "min_fsynctime", "max_fsynctime", "cnt_", "sum_", "p50_"))
                   for name in got)
    assert kinds["bytes_received_count_total"] == "counter" and got["bytes_received_count_total"] == 1600
    assert got["commit_count_total"] == 12
    assert kinds["write_per_namespace"] == "summary"
    assert got['write_per_namespace_count{key="my_tenant"}'] == 2
    assert got['write_per_namespace_sum{key="my_tenant"}'] == 24


def test_a_zookeeper_that_does_not_answer_is_up_0_with_no_other_numbers() -> None:
    got = samples(exposition(None))
    assert got["magnetar_zookeeper_up"] == 0
    assert all(v == 0 for k, v in got.items() if k.startswith("magnetar_zookeeper_server_state"))
    assert "znode_count" not in got


def test_promtool_parses_it_and_lints_only_names_zookeeper_chose() -> None:
    for values in (parse_mntr(MNTR), None):
        check = check_metrics(exposition(values))
        assert check.parsed, check.output
        for name, problem in check.problems:
            assert not name.startswith("magnetar_"), (name, problem)
            assert problem in ('non-histogram and non-summary metrics should not have "_count" suffix',
                               "metric names should not contain abbreviated units"), (name, problem)
