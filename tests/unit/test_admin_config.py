"""BrokerConfig: TOML with typed, documented keys; unknown keys, wrong types and inconsistencies refused."""

from __future__ import annotations

import pathlib

import pytest

from broker.config import BrokerConfig
from magnetar.errors import ConfigError


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


def test_minimal_file_takes_defaults_and_resolves_data_dir(tmp_path) -> None:
    config = BrokerConfig.load(write(tmp_path, 'data_dir = "data"\nzookeeper = "127.0.0.1:2181/r"\n'))
    assert config.data_dir == tmp_path / "data"
    assert config.configuration_store_connect == "127.0.0.1:2181/r"
    assert (config.port, config.http_port, config.default_namespace_bundles) == (6650, 8080, 4)
    assert config.deduplication_enabled is False and config.delayed_delivery_enabled is True
    assert config.effective_broker_id(8081) == "127.0.0.1:8081"
    assert config.endpoints_path == tmp_path / "data" / "endpoints.json"


def test_every_setting_round_trips(tmp_path) -> None:
    config = BrokerConfig.load(write(tmp_path, """
data_dir = "/var/b"
zookeeper = "zk:2181"
configuration_store = "global:2181"
cluster = "us-east"
broker_id = "b-1"
port = 0
http_port = 0
managed_ledger_ensemble_size = 2
managed_ledger_write_quorum = 2
managed_ledger_ack_quorum = 1
deduplication_enabled = true
delayed_delivery_enabled = false
"""))
    assert config.deduplication_enabled is True and config.delayed_delivery_enabled is False
    assert config.cluster == "us-east" and config.broker_id == "b-1" and config.effective_broker_id(1) == "b-1"
    assert config.configuration_store_connect == "global:2181"
    assert (config.managed_ledger_ensemble_size, config.managed_ledger_ack_quorum) == (2, 1)


@pytest.mark.parametrize("text, message", [
    ('zookeeper = "z"\n', "data_dir is required"),
    ('data_dir = "d"\n', "zookeeper is required"),
    ('data_dir = "d"\nzookeeper = "z"\nprot = 1\n', "unknown broker setting(s) prot"),
    ('data_dir = "d"\nzookeeper = "z"\nport = "6650"\n', "port must be an integer"),
    ('data_dir = "d"\nzookeeper = "z"\nport = true\n', "port must be an integer"),
    ('data_dir = "d"\nzookeeper = "z"\nbootstrap = 1\n', "bootstrap must be true or false"),
    ('data_dir = "d"\nzookeeper = "z"\nport = 70000\n', "port must be in 0..65535"),
    ('data_dir = "d"\nzookeeper = "z"\nport = 7000\nhttp_port = 7000\n', "must differ"),
    ('data_dir = "d"\nzookeeper = "z"\ncluster = "a/b"\n', "cluster 'a/b' is not a valid name"),
    ('data_dir = "d"\nzookeeper = "z"\ndefault_namespace_bundles = 0\n', "default_namespace_bundles must be positive"),
    ('data_dir = "d"\nzookeeper = "z"\nmanaged_ledger_ack_quorum = 3\n', "ack_quorum <= write_quorum"),
    ('data_dir = "d"\nzookeeper = " "\n', "zookeeper must name"),
    ('data_dir = "d"\nzookeeper = "z"\nadvertised_host = "a b"\n', "advertised_host is not a host"),
    ('data_dir = "d"\nzookeeper = "z"\nshutdown_grace_ms = -1\n', "shutdown_grace_ms must not be negative"),
    ('data_dir = \n', "not valid TOML"),
])
def test_mistakes_are_config_errors_naming_the_key(tmp_path, text, message) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(write(tmp_path, text))
    assert message in str(info.value) and str(tmp_path / "broker.toml") in str(info.value)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        BrokerConfig.load(tmp_path / "nope.toml")
