"""Topology files: the bundled ones parse, and every mistake is a ConfigError naming the file and the key."""

from __future__ import annotations

import pathlib

import pytest

from broker.config import BrokerConfig
from clusters import STANDALONE
from clusters.kinds import Plan, dumps_toml, make_plan
from clusters.topology import BookiesSettings, ZooKeeperSettings, load, parse
from magnetar.errors import ConfigError

GOOD = """
name = "two"
[supervisor]
startup_timeout_s = 30
stop_grace_s = 2.5
[global_zookeeper]
port = 2181
[[regions]]
name = "us-east"
[regions.zookeeper]
port = 0
tick_time_ms = 200
[regions.bookies]
count = 2
grpc_port_base = 4000
http_port_base = 4100
journal_sync = false
disk_free_min_bytes = 1048576
[[regions]]
name = "eu-west"
"""


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, path="topo.toml")
    return str(info.value)


def test_standalone_file_is_one_region_with_a_zookeeper_and_three_bookies() -> None:
    topology = load(STANDALONE)
    assert topology.name == "standalone"
    assert topology.path == STANDALONE.resolve()
    assert topology.global_zookeeper is None
    assert [r.name for r in topology.regions] == ["standalone"]
    region = topology.region("standalone")
    assert region.zookeeper == ZooKeeperSettings()
    assert region.bookies is not None and region.bookies.count == 3


def test_good_file_gives_typed_settings() -> None:
    topology = parse(GOOD, path="topo.toml")
    assert topology.supervisor.startup_timeout_s == 30.0 and isinstance(topology.supervisor.startup_timeout_s, float)
    assert topology.supervisor.stop_grace_s == 2.5
    assert topology.global_zookeeper == ZooKeeperSettings(port=2181)
    east, west = topology.regions
    assert east.zookeeper.tick_time_ms == 200
    assert east.bookies == BookiesSettings(
        count=2, grpc_port_base=4000, http_port_base=4100, journal_sync=False, extra={"disk_free_min_bytes": 1048576}
    )
    assert west.bookies is None and west.zookeeper == ZooKeeperSettings()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[[regions]]\nname = 'a'\n", "topo.toml: name: missing (required)"),
        ("name = 'x'\n", "topo.toml: regions: missing"),
        ("name = 'x'\nregions = []\n", "topo.toml: regions: empty"),
        ("name = 'x'\nregions = 3\n", "topo.toml: regions: expected an array of tables"),
        ("name = 'x'\n[[regions]]\nport = 1\n", "topo.toml: regions[0].port: unknown key"),
        ("name = 'x'\n[[regions]]\n", "topo.toml: regions[0].name: missing (required)"),
        ("name = 'Bad_Name'\n[[regions]]\nname = 'a'\n", "topo.toml: name: 'Bad_Name' is not a valid name"),
        ("name = 'x'\ncolour = 'red'\n[[regions]]\nname = 'a'\n", "topo.toml: colour: unknown key"),
        ("name = 'x'\n[[regions]]\nname = 'a'\n[regions.zookeeper]\nprt = 1\n", "regions[0].zookeeper.prt: unknown key"),
        ("name = 'x'\n[[regions]]\nname = 'a'\nzookeeper = 5\n", "regions[0].zookeeper: expected a table, got an integer (5)"),
    ],
)
def test_missing_and_unknown_keys_are_named(text: str, expected: str) -> None:
    assert expected in error_of(text)


@pytest.mark.parametrize(
    "table, expected",
    [
        ('[regions.bookies]\ncount = "three"', 'regions[0].bookies.count must be an integer, not a string ("three")'),
        ("[regions.bookies]\ncount = true", "regions[0].bookies.count must be an integer, not a boolean (true)"),
        ("[regions.bookies]\ncount = 2.0", "regions[0].bookies.count must be an integer, not a number (2.0)"),
        ("[regions.bookies]\njournal_sync = 1", "regions[0].bookies.journal_sync must be true or false"),
        ("[regions.bookies]\ncount = 0", "regions[0].bookies.count: must be in [1, 64]"),
        ("[regions.bookies]\nhost = 7", "regions[0].bookies.host must be a string"),
        ("[regions.zookeeper]\nport = 80", "regions[0].zookeeper.port: must be 0 (pick a free port) or in [1024, 65535]"),
        ("[regions.zookeeper]\nport = 70000", "regions[0].zookeeper.port: must be 0"),
        ("[regions.bookies]\ngrpc_port_base = 65535\ncount = 2", "regions[0].bookies.grpc_port_base: 65535 + count - 1"),
        (
            "[regions.bookies]\ngrpc_port_base = 5000\nhttp_port_base = 5001\ncount = 3",
            "regions[0].bookies.http_port_base: the gRPC and HTTP port ranges overlap",
        ),
        ("[regions.bookies]\nport = 3181", "regions[0].bookies.port: is set by the supervisor"),
        ("[regions.bookies]\nzookeeper = 'x:1'", "regions[0].bookies.zookeeper: is set by the supervisor"),
        ("[regions.bookies]\n[regions.bookies.nested]\na = 1", "regions[0].bookies.nested: passed through to bookie.toml"),
    ],
)
def test_wrong_types_and_values_are_named(table: str, expected: str) -> None:
    assert expected in error_of(f"name = 'x'\n[[regions]]\nname = 'a'\n{table}\n")


def test_supervisor_settings_are_checked() -> None:
    assert "supervisor.startup_timeout_s: must be in (0, 3600]" in error_of(
        "name = 'x'\n[supervisor]\nstartup_timeout_s = 0\n[[regions]]\nname = 'a'\n"
    )
    assert "supervisor.stop_grace_s must be a number (seconds)" in error_of(
        "name = 'x'\n[supervisor]\nstop_grace_s = 'soon'\n[[regions]]\nname = 'a'\n"
    )


def test_duplicate_region_names_are_refused() -> None:
    message = error_of("name = 'x'\n[[regions]]\nname = 'a'\n[[regions]]\nname = 'b'\n[[regions]]\nname = 'a'\n")
    assert message == "topo.toml: regions[2].name: duplicate region name 'a' (also regions[0])"


def test_invalid_toml_and_missing_file(tmp_path: pathlib.Path) -> None:
    assert error_of("name = \n").startswith("topo.toml: not valid TOML")
    with pytest.raises(ConfigError, match="nope.toml: topology file not found"):
        load(tmp_path / "nope.toml")


# -- the plan: instances and ports ---------------------------------------------------------------------------


def plan_of(text: str, tmp_path: pathlib.Path, remembered=None) -> Plan:
    ports = iter(range(20000, 30000))
    return make_plan(parse(text, path="topo.toml"), tmp_path, remembered=remembered or {}, pick_port=lambda host: next(ports))


def test_plan_names_instances_in_tier_order_with_distinct_ports(tmp_path: pathlib.Path) -> None:
    plan = plan_of(GOOD, tmp_path)
    assert [i.name for i in plan.instances] == [
        "global-zookeeper", "us-east-zookeeper", "eu-west-zookeeper", "us-east-bookie-1", "us-east-bookie-2",
    ]
    assert [[i.name for i in tier] for tier in plan.tiers()][1] == ["us-east-bookie-1", "us-east-bookie-2"]
    by_name = {i.name: i for i in plan.instances}
    assert by_name["global-zookeeper"].ports == {"client": 2181, "metrics": 20000}
    assert by_name["us-east-bookie-2"].ports == {"grpc": 4001, "http": 4101}
    ports = [p for i in plan.instances for p in i.ports.values()]
    assert len(ports) == len(set(ports)) and 0 not in ports
    assert plan.one(region="us-east", slot="zookeeper").name == "us-east-zookeeper"


def test_plan_reuses_remembered_ports_and_refuses_duplicates(tmp_path: pathlib.Path) -> None:
    text = "name = 'x'\n[[regions]]\nname = 'a'\n[regions.bookies]\ncount = 2\n"
    first = plan_of(text, tmp_path)
    remembered = {i.name: dict(i.ports) for i in first.instances}
    again = make_plan(parse(text, path="topo.toml"), tmp_path, remembered=remembered, pick_port=lambda h: 1 / 0)
    assert [i.ports for i in again.instances] == [i.ports for i in first.instances]
    clash = "name = 'x'\n[global_zookeeper]\nport = 3000\n[[regions]]\nname = 'a'\n[regions.zookeeper]\nport = 3000\n"
    with pytest.raises(ConfigError, match="port 3000 is given to both global-zookeeper client and a-zookeeper client"):
        plan_of(clash, tmp_path)
    with pytest.raises(ConfigError, match="two processes would be named 'global-zookeeper'"):
        plan_of("name = 'x'\n[global_zookeeper]\n[[regions]]\nname = 'global'\n", tmp_path)


def test_bookie_config_names_its_region_zookeeper(tmp_path: pathlib.Path) -> None:
    import tomllib

    plan = plan_of(GOOD, tmp_path)
    bookie = plan.one(region="us-east", slot="bookies")
    argv = plan.kind(bookie).command(bookie, plan)
    assert argv[-2:] == ["--config", str(tmp_path.resolve() / "us-east-bookie-1" / "bookie.toml")]
    config = tomllib.loads(pathlib.Path(argv[-1]).read_text())
    zk_port = plan.one(region="us-east", slot="zookeeper").ports["client"]
    assert config == {
        "bookie_id": "us-east-bookie-1",
        "bind_host": "127.0.0.1",
        "port": 4000,
        "http_port": 4100,
        "advertised_host": "127.0.0.1",
        "data_dir": str(tmp_path.resolve() / "us-east-bookie-1" / "data"),
        "zookeeper": f"127.0.0.1:{zk_port}",
        "journal_sync": False,
        "disk_free_min_bytes": 1048576,
    }


def test_dumps_toml_round_trips() -> None:
    import tomllib

    table = {"s": 'a "quoted"\\ line\n', "i": -3, "f": 0.25, "b": True, "l": [1, "x", False], "u": "žluť"}
    assert tomllib.loads(dumps_toml(table)) == table


TWO_REGIONS_WITH_BROKERS = """
name = "two"
[global_zookeeper]
port = 2181
[[regions]]
name = "us-east"
[regions.bookies]
count = 1
[regions.brokers]
count = 2
port_base = 6650
http_port_base = 8080
[[regions]]
name = "eu-west"
[regions.brokers]
count = 2
port_base = 7650
http_port_base = 9080
default_namespace_bundles = 8
"""


def test_broker_config_names_every_broker_of_its_region_as_the_cluster_urls(tmp_path: pathlib.Path) -> None:
    import tomllib

    plan = plan_of(TWO_REGIONS_WITH_BROKERS, tmp_path)
    by_name = {i.name: i for i in plan.instances}
    configs = {}
    for name in ("us-east-broker-1", "us-east-broker-2", "eu-west-broker-2"):
        argv = plan.kind(by_name[name]).command(by_name[name], plan)
        configs[name] = tomllib.loads(pathlib.Path(argv[-1]).read_text())
        BrokerConfig.load(argv[-1])  # every key the supervisor writes is one the broker reads
    east = configs["us-east-broker-1"]
    assert east["cluster"] == "us-east" and east["port"] == 6650 and east["http_port"] == 8080
    assert east["configuration_store"] == "127.0.0.1:2181"
    assert east["cluster_service_url"] == "http://127.0.0.1:8080,127.0.0.1:8081"
    assert east["cluster_broker_service_url"] == "pulsar://127.0.0.1:6650,127.0.0.1:6651"
    assert configs["us-east-broker-2"]["cluster_service_url"] == east["cluster_service_url"]
    west = configs["eu-west-broker-2"]
    assert west["cluster_service_url"] == "http://127.0.0.1:9080,127.0.0.1:9081"
    assert west["cluster_broker_service_url"] == "pulsar://127.0.0.1:7650,127.0.0.1:7651"
    assert west["default_namespace_bundles"] == 8
    # a region without bookies leaves the quorums to the broker's defaults
    assert "managed_ledger_ensemble_size" not in west and east["managed_ledger_ensemble_size"] == 1


@pytest.mark.parametrize("key", ["cluster_service_url", "cluster_broker_service_url", "configuration_store"])
def test_broker_keys_the_supervisor_writes_are_refused_in_the_topology(key: str) -> None:
    message = error_of(f"name = 'x'\n[[regions]]\nname = 'a'\n[regions.brokers]\n{key} = 'http://h:1'\n")
    assert f"regions[0].brokers.{key}: is set by the supervisor" in message


def test_bundled_multi_region_topologies_parse() -> None:
    root = pathlib.Path(STANDALONE).parent
    for file, regions in (("local.toml", ["us-east", "eu-west"]),
                          ("three-regions.toml", ["us-east", "eu-west", "ap-south"])):
        topology = load(root / file)
        assert [r.name for r in topology.regions] == regions, file
        assert topology.global_zookeeper is not None, file
        for region in topology.regions:
            assert region.bookies is not None and region.bookies.count == 3, (file, region.name)
            assert region.brokers is not None and region.brokers.count == 2, (file, region.name)
