"""Regions apart, the pure parts: namespace layouts, the [network] table, and what the plan makes of them."""

from __future__ import annotations

import pathlib

import pytest

from clusters import make_plan, parse
from clusters.kinds import KINDS
from clusters.netns import Layout
from clusters.network import WanRelayKind, deployment_prefix, namespace_at, network_document
from magnetar.errors import ConfigError

TWO = """
name = "two"
[global_zookeeper]
[[regions]]
name = "east"
[regions.bookies]
count = 1
[regions.brokers]
count = 2
[regions.proxy]
[[regions]]
name = "west"
[regions.brokers]
count = 1
"""


def ports_from(start: int):
    counter = iter(range(start, start + 1000))
    return lambda host: next(counter)


def test_layout_names_and_addresses() -> None:
    layout = Layout(prefix="mgd0a1b2c", octet=120, regions=("east", "west"))
    assert layout.namespaces() == ["mgd0a1b2cw", "mgd0a1b2cn1", "mgd0a1b2cn2"]
    assert layout.netns(None) == layout.wan_netns == "mgd0a1b2cw" and layout.root_link == "mgd0a1b2cr"
    assert (layout.direct_address("west"), layout.public_address("west")) == ("10.120.2.1", "10.121.2.1")
    assert (layout.root_address, layout.wan_address, layout.direct_address(None)) == ("10.120.0.1", "10.120.0.2",
                                                                                       "10.120.0.2")
    assert layout.exec_prefix("east") == ["ip", "netns", "exec", "mgd0a1b2cn1"]
    assert Layout.from_document(layout.document()) == layout
    with pytest.raises(KeyError, match="no region 'north'"):
        layout.index("north")
    # every interface name (the prefix + "w" + a region index) fits Linux's 15 bytes
    assert len(f"{Layout(prefix='a' * 11, octet=100, regions=('r',) * 200).prefix}w200") == 15


@pytest.mark.parametrize("kwargs, message", [
    ({"prefix": "a" * 12}, "namespace prefix"),
    ({"prefix": "9abc"}, "namespace prefix"),
    ({"prefix": "mg-x"}, "namespace prefix"),
    ({"octet": 101}, "octet must be even"),
    ({"octet": 254}, "octet must be even"),
    ({"regions": ()}, "1 to 200 regions"),
    ({"regions": tuple(f"r{i}" for i in range(201))}, "1 to 200 regions"),
])
def test_layout_refuses_what_ip_could_not_make(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        Layout(**{"prefix": "mgdabc", "octet": 100, "regions": ("a",), **kwargs})


def test_deployment_prefix_is_stable_per_data_dir_and_differs_between_them(tmp_path: pathlib.Path) -> None:
    a = deployment_prefix(tmp_path / "a")
    assert a == deployment_prefix(tmp_path / "x" / ".." / "a") and a.startswith("mgd") and len(a) == 9
    assert a != deployment_prefix(tmp_path / "b")


def test_network_table_is_parsed_and_checked() -> None:
    assert parse(TWO).network.mode == "host" and not parse(TWO).netns
    topology = parse(TWO + '[network]\nmode = "netns"\nlatency_ms = 80\njitter_ms = 10\n')
    assert topology.netns and (topology.network.latency_ms, topology.network.jitter_ms) == (80, 10)
    assert parse(TWO).with_netns().netns and parse(TWO).with_netns().network.latency_ms == 40
    for table, message in [('mode = "tc"', "network.mode: must be one of host, netns"),
                           ("latency_ms = -1", "network.latency_ms"),
                           ("latency_ms = 10\njitter_ms = 20", "network.jitter_ms"),
                           ("delay = 3", "network.delay: unknown key")]:
        with pytest.raises(ConfigError, match=message):
            parse(TWO + f"[network]\n{table}\n")


def test_a_host_plan_is_unchanged() -> None:
    plan = make_plan(parse(TWO), pathlib.Path("/data"), pick_port=ports_from(20000))
    assert plan.network is None and all(i.host == "127.0.0.1" for i in plan.instances)
    assert not any(i.kind == "wan-relay" for i in plan.instances)
    broker = next(i for i in plan.instances if i.kind == "broker")
    assert (plan.bind_host(broker), plan.advertised_host(broker)) == ("127.0.0.1", "127.0.0.1")
    assert plan.exec_prefix(broker) == []
    assert network_document(plan) is None


def test_a_netns_plan_puts_every_region_in_its_namespace() -> None:
    layout = Layout(prefix="mgdabcdef", octet=140, regions=("east", "west"))
    plan = make_plan(parse(TWO).with_netns(), pathlib.Path("/data"), pick_port=ports_from(20000), network=layout)
    by_name = {i.name: i for i in plan.instances}
    assert by_name["global-zookeeper"].host == by_name["wan-relay"].host == "10.140.0.2"
    assert by_name["east-zookeeper"].host == by_name["east-bookie-1"].host == "10.140.1.1"
    assert by_name["west-broker-1"].host == "10.140.2.1"
    assert plan.exec_prefix(by_name["west-broker-1"]) == ["ip", "netns", "exec", "mgdabcdefn2"]
    assert plan.exec_prefix(by_name["global-zookeeper"]) == ["ip", "netns", "exec", "mgdabcdefw"]

    # brokers and proxies listen on every address of their namespace and advertise the public one
    east_broker, east_bookie = by_name["east-broker-1"], by_name["east-bookie-1"]
    assert (plan.bind_host(east_broker), plan.advertised_host(east_broker)) == ("0.0.0.0", "10.141.1.1")
    assert (plan.bind_host(east_bookie), plan.advertised_host(east_bookie)) == ("10.140.1.1", "10.140.1.1")
    urls = KINDS["broker"].region_urls("east", plan)
    assert urls["cluster_broker_service_url"] == "pulsar://" + ",".join(
        f"10.141.1.1:{by_name[f'east-broker-{n}'].ports['pulsar']}" for n in (1, 2))
    endpoints = plan.endpoints(east_broker)
    assert endpoints["pulsar"].startswith("pulsar://10.141.1.1:")
    assert endpoints["metrics"].startswith("http://10.140.1.1:")  # scraped undelayed, at the direct address
    assert {"10.140.1.1", "10.141.1.1"} <= set(plan.hosts())  # the server certificate names both

    # the relay forwards every port of east's brokers and proxy, and of west's broker, and nothing else
    routes = WanRelayKind().routes(plan)
    east_ports = sorted(p for i in plan.instances if i.region == "east" and i.kind in ("broker", "proxy")
                        for p in i.ports.values())
    assert routes[:2] == ["--route", "10.141.1.1=10.140.1.1:" + ",".join(map(str, east_ports))]
    assert routes[2:] == ["--route", "10.141.2.1=10.140.2.1:" + ",".join(
        map(str, sorted(by_name["west-broker-1"].ports.values())))]

    doc = network_document(plan)
    assert doc["prefix"] == "mgdabcdef" and doc["relay_control"] == "/data/wan-relay/control.sock"
    assert namespace_at(doc, "10.140.2.1") == "mgdabcdefn2" and namespace_at(doc, "10.140.0.2") == "mgdabcdefw"
    assert namespace_at(doc, "127.0.0.1") is None and namespace_at(doc, "10.141.2.1") is None
