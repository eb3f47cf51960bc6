"""Advertised listeners without servers: parsing Pulsar's ``advertisedListeners`` format, the broker settings,
the stored registrations, and lookups of two BundleOwnerships sharing an in-memory ZooKeeper answering with
the owner's (or the chosen broker's) URLs for the listener asked for."""

from __future__ import annotations

import json
import pathlib

import pytest

from broker.bundles import NamespaceBundle, bundles_data, default_boundaries
from broker.config import BrokerConfig
from broker.listeners import (AdvertisedListener, internal_listener, listen_addresses, parse_advertised_listeners,
                              ports_to_serve)
from broker.ownership import BundleOwnership
from broker.ownership_api import SelfOwnership, listener_urls
from broker.ownership_errors import UnknownListenerError
from config_store import ConfigurationStore, MemoryMetadataStore, MemoryTree, Policies, TenantInfo
from config_store.brokers import BrokerRegistration, BundleOwner
from magnetar.errors import ConfigError
from magnetar.protocol import pb
from magnetar.topic_name import TopicName

# ------------------------------------------------------------------------------------------ parsing


def test_parses_pulsars_format_with_tls_urls_in_order_of_first_appearance() -> None:
    listeners = parse_advertised_listeners(
        " internal:pulsar://broker-1:6650 ,external:pulsar://203.0.113.7:16650,"
        "external:pulsar+ssl://203.0.113.7:16651,internal:pulsar+ssl://broker-1:6651,")
    assert listeners == (
        AdvertisedListener("internal", "pulsar://broker-1:6650", "pulsar+ssl://broker-1:6651"),
        AdvertisedListener("external", "pulsar://203.0.113.7:16650", "pulsar+ssl://203.0.113.7:16651"),
    )
    assert parse_advertised_listeners("") == ()
    only_tls = AdvertisedListener("tls", "", "pulsar+ssl://h:6651")
    assert parse_advertised_listeners("tls:pulsar+ssl://h:6651") == (only_tls,)


@pytest.mark.parametrize("text, fragment", [
    ("pulsar://h:6650", "has no listener name"),
    (":pulsar://h:6650", "has no listener name"),
    ("x:http://h:8080", "is not a pulsar://host:port or pulsar+ssl://host:port URL"),
    ("x:pulsar://h", "is not a pulsar://host:port"),
    ("x:pulsar://h:0", "needs a port in 1..65535"),
    ("x:pulsar://h:70000", "needs a port in 1..65535"),
    ("x:pulsar://h:1,x:pulsar://h:2", "listener 'x' has more than one pulsar:// URL"),
    ("x:pulsar://h:1,y:pulsar://H:1", "h:1 is given to both listener 'x' and 'y'"),
    ("in side:pulsar://h:1", "listener name 'in side' is not valid"),
])
def test_bad_listeners_are_refused_naming_the_entry(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="advertised_listeners") as err:
        parse_advertised_listeners(text)
    assert fragment in str(err.value)


def test_the_internal_listener_is_the_named_one_or_the_first() -> None:
    listeners = parse_advertised_listeners("a:pulsar://h:1,b:pulsar://h:2,c:pulsar+ssl://h:3")
    assert internal_listener(listeners, "").name == "a"
    assert internal_listener(listeners, "b").name == "b"
    assert internal_listener((), "") is None
    with pytest.raises(ConfigError, match="'z' is not one of advertised_listeners"):
        internal_listener(listeners, "z")
    with pytest.raises(ConfigError, match="needs a pulsar:// URL"):
        internal_listener(listeners, "c")
    with pytest.raises(ConfigError, match="needs advertised_listeners"):
        internal_listener((), "a")


def test_broker_config_takes_and_checks_the_settings(tmp_path: pathlib.Path) -> None:
    base = {"data_dir": str(tmp_path), "zookeeper": "127.0.0.1:2181"}
    config = BrokerConfig.from_mapping({**base, "advertised_listeners": "in:pulsar://10.0.0.1:6650,out:pulsar://h:1",
                                        "internal_listener_name": "out"})
    assert [entry.name for entry in config.listeners] == ["in", "out"]
    with pytest.raises(ConfigError, match="broker.toml: .*'nope' is not one of advertised_listeners"):
        BrokerConfig.from_mapping({**base, "advertised_listeners": "in:pulsar://h:1",
                                   "internal_listener_name": "nope"}, source="broker.toml")
    with pytest.raises(ConfigError, match="has no listener name"):
        BrokerConfig.from_mapping({**base, "advertised_listeners": "pulsar://h:1"})
    with pytest.raises(ConfigError, match="advertised_listeners must be a string"):
        BrokerConfig.from_mapping({**base, "advertised_listeners": ["in:pulsar://h:1"]})


def test_only_local_listener_ports_other_than_the_main_one_are_bound() -> None:
    listeners = parse_advertised_listeners(
        "main:pulsar://127.0.0.1:6650,local:pulsar://127.0.0.1:16651,remote:pulsar://203.0.113.7:16652,"
        "unresolvable:pulsar://no-such-host.invalid:16653,tls:pulsar+ssl://127.0.0.1:16654")
    assert ports_to_serve(listeners, port=6650) == [("127.0.0.1", 16651), ("203.0.113.7", 16652),
                                                    ("no-such-host.invalid", 16653)]
    assert listen_addresses(listeners, port=6650, bind_host="127.0.0.1") == [("127.0.0.1", 16651)]
    assert listen_addresses(listeners, port=6650, bind_host="0.0.0.0") == [("0.0.0.0", 16651)]
    assert listen_addresses(listeners, port=0, bind_host="127.0.0.1") == [("127.0.0.1", 6650), ("127.0.0.1", 16651)]


# ------------------------------------------------------------------------------------------ stored records


def test_registrations_and_owner_records_carry_the_listeners_as_pulsar_names_them() -> None:
    listeners = parse_advertised_listeners("in:pulsar://b:6650,out:pulsar://h:1,out:pulsar+ssl://h:2")
    reg = BrokerRegistration("b", "pulsar://b:6650", "http://b:8080", advertised_listeners=listeners)
    stored = json.loads(reg.to_json())
    assert stored["advertisedListeners"] == {"in": {"brokerServiceUrl": "pulsar://b:6650"},
                                             "out": {"brokerServiceUrl": "pulsar://h:1",
                                                     "brokerServiceUrlTls": "pulsar+ssl://h:2"}}
    assert set(BrokerRegistration.from_json(reg.to_json()).advertised_listeners) == set(listeners)
    owner = BundleOwner("b", "pulsar://b:6650", "http://b:8080", advertised_listeners=listeners)
    assert set(BundleOwner.from_json(owner.to_json()).advertised_listeners) == set(listeners)
    # a record written without listeners (an older broker) reads as none
    plain = json.loads(BundleOwner("b", "pulsar://b:6650", "http://b:8080").to_json())
    del plain["advertisedListeners"]
    assert BundleOwner.from_json(json.dumps(plain).encode()).advertised_listeners == ()


def test_listener_urls_pick_the_listener_or_fail_naming_it() -> None:
    listeners = parse_advertised_listeners("in:pulsar://b:6650,out:pulsar+ssl://h:2")
    assert listener_urls(listeners, "", default=("pulsar://d:1", ""), broker="b") == ("pulsar://d:1", "")
    assert listener_urls(listeners, "out", default=("pulsar://d:1", ""), broker="b") == ("", "pulsar+ssl://h:2")
    with pytest.raises(UnknownListenerError) as err:
        listener_urls(listeners, "nope", default=("pulsar://d:1", ""), broker="b")
    assert str(err.value) == "broker b has no advertised listener 'nope' (its listeners: in, out)"
    assert err.value.server_error == pb.ServiceNotReady  # what Pulsar answers
    assert not getattr(err.value, "retriable", False)


async def test_self_ownership_answers_with_its_listeners() -> None:
    own = SelfOwnership("pulsar://d:1", listeners=parse_advertised_listeners("x:pulsar://h:7"))
    assert (await own.lookup("persistent://t/n/a", listener_name="x")).broker_service_url == "pulsar://h:7"
    assert (await own.lookup("persistent://t/n/a")).broker_service_url == "pulsar://d:1"
    with pytest.raises(UnknownListenerError):
        await own.lookup("persistent://t/n/a", listener_name="y")


# ------------------------------------------------------------------------------------------ ownership


def urls_of(name: str) -> str:
    return f"internal:pulsar://{name}:6650,external:pulsar://{name}.example.com:16650"


@pytest.fixture
async def world():
    tree = MemoryTree()
    admin_store = MemoryMetadataStore(tree, name="admin")
    await admin_store.start()
    config = ConfigurationStore(admin_store)
    await config.create_tenant("t", TenantInfo(allowed_clusters=["c"]))
    await config.create_namespace("t", "ns", Policies(bundles=bundles_data(default_boundaries(4))))
    brokers = []
    for name in ("a", "b"):
        store = MemoryMetadataStore(tree, name=name)
        await store.start()
        ownership = BundleOwnership(local_store=store, configuration=config, broker_id=name, cluster="c",
                                    load_report_interval_ms=60_000)
        await ownership.start(pulsar_url=f"pulsar://{name}:6650", http_url=f"http://{name}:8080",
                              listeners=parse_advertised_listeners(urls_of(name)))
        brokers.append((ownership, store))
    yield brokers[0][0], brokers[1][0], admin_store
    for ownership, store in brokers:
        await ownership.close()
        await store.close()
    await admin_store.close()


async def topic_in(ownership: BundleOwnership, index: int) -> tuple[str, NamespaceBundle]:
    bundles = await ownership.namespace_bundles("t", "ns")
    for i in range(10_000):
        name = f"persistent://t/ns/topic-{i}"
        if bundles.for_topic(TopicName.parse(name)) == bundles.bundles[index]:
            return name, bundles.bundles[index]
    raise AssertionError("no topic found")


async def test_any_broker_answers_with_the_owners_url_for_the_listener(world) -> None:
    a, b, store = world
    topic, bundle = await topic_in(a, 0)
    mine = await a.lookup(topic, authoritative=True, listener_name="external")
    assert mine.is_self and mine.broker_service_url == "pulsar://a.example.com:16650"
    record = json.loads((await store.get(f"/namespace/t/ns/{bundle.name}")).value)
    assert record["advertisedListeners"]["external"] == {"brokerServiceUrl": "pulsar://a.example.com:16650"}
    for listener, url in (("external", "pulsar://a.example.com:16650"), ("internal", "pulsar://a:6650"),
                          ("", "pulsar://a:6650")):
        answer = await b.lookup(topic, listener_name=listener)
        assert (answer.is_self, answer.redirect, answer.broker_service_url) == (False, False, url)


async def test_a_redirect_names_the_chosen_brokers_url_for_the_listener(world) -> None:
    a, b, _ = world
    await a.lookup((await topic_in(a, 0))[0], authoritative=True)  # a carries a bundle: b is chosen next
    topic, _ = await topic_in(a, 1)
    answer = await a.lookup(topic, listener_name="external")
    assert answer.redirect and answer.broker_service_url == "pulsar://b.example.com:16650"
    assert answer.http_url == "http://b:8080"
    taken = await b.lookup(topic, authoritative=True, listener_name="external")
    assert taken.is_self and taken.broker_service_url == "pulsar://b.example.com:16650"


async def test_an_unknown_listener_fails_and_acquires_nothing(world) -> None:
    a, b, store = world
    topic, bundle = await topic_in(a, 2)
    with pytest.raises(UnknownListenerError, match="broker a has no advertised listener 'nope'"):
        await a.lookup(topic, authoritative=True, listener_name="nope")
    assert await store.get(f"/namespace/t/ns/{bundle.name}") is None and a.owned_bundles() == []
    await a.lookup(topic, authoritative=True)
    with pytest.raises(UnknownListenerError, match="broker a has no advertised listener 'nope'"):
        await b.lookup(topic, listener_name="nope")  # answered from a's owner record
