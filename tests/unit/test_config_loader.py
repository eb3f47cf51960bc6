"""magnetar.config: the one TOML loader of every process kind, and settings derived from a server's by name."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import typing
from dataclasses import dataclass

import pytest

from bookie.client import LedgerClientConfig
from bookie.config import BookieConfig
from broker.config import BrokerConfig
from broker.managed_ledger.config import ManagedLedgerConfig
from broker.process import _MANAGED_LEDGER_RENAMES, _QUORUM_RENAMES, _REPLICATION_RENAMES, _SERVICE_RENAMES
from broker.service.config import ServiceConfig
from clusters import topology
from magnetar.config import TomlSettings, derive, duration_unit, typed_value
from magnetar.errors import ConfigError
from replicator import ReplicationSettings


@dataclass(frozen=True)
class ProxyConfig(TomlSettings):
    """A made-up next process kind: what it takes to be loaded like the bookie and the broker."""

    kind = "proxy"

    data_dir: pathlib.Path
    port: int = 6650
    idle_timeout_ms: int = 30_000
    connect_timeout_s: float = 10.0
    brokers: tuple[str, ...] = ()
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.port > 65535:
            raise ConfigError(f"port must be in 0..65535, not {self.port}")


def write(tmp_path: pathlib.Path, text: str, name: str = "proxy.toml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: pathlib.Path) -> str:
    with pytest.raises(ConfigError) as info:
        ProxyConfig.load(path)
    return str(info.value)


# -- loading ------------------------------------------------------------------------------------------------


def test_defaults_fill_missing_keys_and_relative_paths_follow_the_file(tmp_path) -> None:
    config = ProxyConfig.load(write(tmp_path, 'data_dir = "d"\nbrokers = ["a:6650", "b:6650"]\n'))
    assert config.data_dir == tmp_path / "d"
    assert (config.port, config.idle_timeout_ms, config.connect_timeout_s) == (6650, 30_000, 10.0)
    assert config.verbose is False
    assert config.brokers == ("a:6650", "b:6650")
    assert ProxyConfig.load(write(tmp_path, 'data_dir = "/abs"\n')).data_dir == pathlib.Path("/abs")


def test_a_field_without_default_is_required(tmp_path) -> None:
    path = write(tmp_path, "port = 1\n")
    assert error_of(path) == f"{path}: data_dir is required"


def test_unknown_keys_are_named_with_the_nearest_spelling(tmp_path) -> None:
    path = write(tmp_path, 'data_dir = "d"\nidle_timeout = 5\n')
    assert error_of(path) == f"{path}: unknown proxy setting(s) idle_timeout (did you mean idle_timeout_ms?)"
    two = error_of(write(tmp_path, 'data_dir = "d"\nidle_timeout = 5\nverbos = true\n'))
    assert two.endswith("(did you mean idle_timeout_ms for idle_timeout, verbose for verbos?)")
    far = error_of(write(tmp_path, 'data_dir = "d"\ncolour = "red"\n'))
    assert "unknown proxy setting(s) colour (known: brokers, connect_timeout_s, data_dir, " in far


@pytest.mark.parametrize("line, message", [
    ('port = "6650"', 'port must be an integer, not a string ("6650")'),
    ("port = true", "port must be an integer, not a boolean (true)"),
    ("port = 6650.0", "port must be an integer, not a number (6650.0)"),
    ('idle_timeout_ms = "30s"', 'idle_timeout_ms must be an integer (milliseconds), not a string ("30s")'),
    ("connect_timeout_s = nan", "connect_timeout_s must be a number (seconds), not a number (nan)"),
    ("verbose = 1", "verbose must be true or false, not an integer (1)"),
    ('brokers = "a:6650"', 'brokers must be an array, not a string ("a:6650")'),
    ('brokers = ["a", 7]', "brokers[1] must be a string, not an integer (7)"),
    ("data_dir = 5", "data_dir must be a path (string), not an integer (5)"),
])
def test_wrong_types_name_the_key_the_file_and_the_unit(tmp_path, line, message) -> None:
    text = line + "\n" if line.startswith("data_dir") else f'data_dir = "d"\n{line}\n'
    path = write(tmp_path, text)
    assert error_of(path) == f"{path}: {message}"


def test_an_integer_is_a_fine_number_of_seconds(tmp_path) -> None:
    config = ProxyConfig.load(write(tmp_path, 'data_dir = "d"\nconnect_timeout_s = 3\n'))
    assert config.connect_timeout_s == 3.0 and isinstance(config.connect_timeout_s, float)


def test_the_settings_own_checks_are_prefixed_with_the_file(tmp_path) -> None:
    path = write(tmp_path, 'data_dir = "d"\nport = 70000\n')
    assert error_of(path) == f"{path}: port must be in 0..65535, not 70000"


def test_file_problems(tmp_path) -> None:
    assert "no such file" in error_of(tmp_path / "missing.toml")
    assert "not valid TOML" in error_of(write(tmp_path, "port = = 1\n"))
    (tmp_path / "dir.toml").mkdir()
    assert "cannot read" in error_of(tmp_path / "dir.toml")


def test_bookie_and_broker_use_the_shared_loader(tmp_path) -> None:
    bookie = write(tmp_path, 'data_dir = "d"\nflush_interval_ms = "1s"\n', "bookie.toml")
    with pytest.raises(ConfigError, match=re.escape(f"{bookie}: flush_interval_ms must be an integer (milliseconds)")):
        BookieConfig.load(bookie)
    broker = write(tmp_path, 'data_dir = "d"\nzookeeper = "z:1"\nshutdown_grace = 5\n', "broker.toml")
    with pytest.raises(ConfigError, match="unknown broker setting.*did you mean shutdown_grace_ms"):
        BrokerConfig.load(broker)


def test_typed_value_is_the_topology_rule_too() -> None:
    with pytest.raises(ConfigError, match=re.escape('t.toml: regions[0].bookies.count must be an integer')):
        topology.parse("name = 'x'\n[[regions]]\nname = 'a'\n[regions.bookies]\ncount = '3'\n", path="t.toml")
    assert typed_value(float, 2, key="x_s") == 2.0
    with pytest.raises(TypeError):  # a settings class with a type the loader cannot check is a bug
        typed_value(dict, {}, key="x")


# -- durations ----------------------------------------------------------------------------------------------

_DURATION_WORDS = ("interval", "timeout", "grace", "delay", "tick_time", "duration", "period", "frequency",
                   "backoff", "rollover_time", "retention_time", "suspect")


@pytest.mark.parametrize("cls", [BookieConfig, BrokerConfig, ServiceConfig, ManagedLedgerConfig, LedgerClientConfig,
                                 ReplicationSettings, topology.SupervisorSettings, topology.ZooKeeperSettings])
def test_every_duration_setting_names_its_unit(cls) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if hints[f.name] in (int, float) and any(w in f.name for w in _DURATION_WORDS) and not f.name.endswith(
                "_entries"):  # a count of entries, not a time
            assert duration_unit(f.name) in ("_ms", "_s"), f"{cls.__name__}.{f.name} has no _ms/_s unit"


def test_duration_unit() -> None:
    assert [duration_unit(n) for n in ("flush_interval_ms", "stop_grace_s", "max_size_bytes", "_s", "status")] == [
        "_ms", "_s", None, None, None]


def test_derive_converts_between_duration_units() -> None:
    @dataclass(frozen=True)
    class Outer:
        poll_interval_ms: int = 1500
        wait_s: float = 2.5
        name: str = "o"
        count: int = 3

    @dataclass
    class Inner:
        poll_interval_s: float = 0.0
        wait_ms: int = 0
        name: str = ""
        count: float = 0.0
        untouched_s: float = 9.0

    inner = derive(Inner, Outer())
    assert inner == Inner(poll_interval_s=1.5, wait_ms=2500, name="o", count=3.0, untouched_s=9.0)
    assert isinstance(inner.wait_ms, int) and isinstance(inner.count, float)
    with pytest.raises(TypeError, match="no setting"):
        derive(Inner, Outer(), renames={"name": "nope"})


# -- broker.toml -> the broker's inner rooms ----------------------------------------------------------------


def test_service_settings_flow_from_broker_toml(tmp_path) -> None:
    broker = BrokerConfig.load(write(tmp_path, """
data_dir = "d"
zookeeper = "z:1"
bind_host = "0.0.0.0"
advertised_host = "broker-1.example"
port = 6651
max_message_size_bytes = 1048576
deduplication_enabled = true
delayed_delivery_enabled = false
delayed_delivery_tick_time_ms = 250
delayed_delivery_max_delay_ms = 60000
delete_inactive_topics_enabled = true
delete_inactive_topics_frequency_ms = 1500
delete_inactive_topics_mode = "delete_when_subscriptions_caught_up"
delete_inactive_topics_max_inactive_duration_ms = 2500
compaction_monitor_interval_ms = 500
backlog_quota_check_enabled = false
backlog_quota_check_interval_ms = 750
backlog_quota_default_limit_bytes = 1000
backlog_quota_default_limit_s = 60
backlog_quota_default_policy = "producer_exception"
dispatch_throttling_rate_per_topic_in_msg = 1
dispatch_throttling_rate_per_topic_in_byte = 2
dispatch_throttling_rate_per_subscription_in_msg = 3
dispatch_throttling_rate_per_subscribe_in_byte = 4
max_publish_rate_per_topic_in_messages = 5
max_publish_rate_per_topic_in_bytes = 6
""", "broker.toml"))
    service = derive(ServiceConfig, broker, renames=_SERVICE_RENAMES)
    assert service == ServiceConfig(
        host="0.0.0.0", port=6651, advertised_address="broker-1.example", max_message_size_bytes=1048576,
        deduplication_enabled=True, delayed_delivery_enabled=False, delayed_delivery_tick_time_ms=250,
        delayed_delivery_max_delay_ms=60000, delete_inactive_topics_enabled=True,
        delete_inactive_topics_frequency_s=1.5, delete_inactive_topics_mode="delete_when_subscriptions_caught_up",
        delete_inactive_topics_max_inactive_duration_s=2.5, compaction_monitor_interval_s=0.5,
        backlog_quota_check_enabled=False, backlog_quota_check_interval_s=0.75, backlog_quota_default_limit_bytes=1000,
        backlog_quota_default_limit_s=60, backlog_quota_default_policy="producer_exception",
        dispatch_throttling_rate_per_topic_in_msg=1, dispatch_throttling_rate_per_topic_in_byte=2,
        dispatch_throttling_rate_per_subscription_in_msg=3, dispatch_throttling_rate_per_subscribe_in_byte=4,
        max_publish_rate_per_topic_in_messages=5, max_publish_rate_per_topic_in_bytes=6)


def test_a_setting_added_to_broker_toml_and_the_service_flows_without_code(tmp_path) -> None:
    service_cls = dataclasses.make_dataclass(
        "NewServiceConfig", [("consumer_idle_timeout_s", float, dataclasses.field(default=1.0))],
        bases=(ServiceConfig,))
    broker_cls = dataclasses.make_dataclass(
        "NewBrokerConfig", [("consumer_idle_timeout_ms", int, dataclasses.field(default=1000))], bases=(BrokerConfig,),
        frozen=True)
    broker = broker_cls.load(write(tmp_path, 'data_dir = "d"\nzookeeper = "z:1"\nconsumer_idle_timeout_ms = 2500\n'))
    service = derive(service_cls, broker, renames=_SERVICE_RENAMES)
    assert service.consumer_idle_timeout_s == 2.5 and service.host == broker.bind_host


def test_storage_and_replication_settings_flow_from_broker_toml() -> None:
    broker = BrokerConfig.from_mapping({
        "data_dir": "/d", "zookeeper": "z:1", "managed_ledger_ensemble_size": 5, "managed_ledger_write_quorum": 3,
        "managed_ledger_ack_quorum": 2, "managed_ledger_max_entries_per_ledger": 7,
        "managed_ledger_max_ledger_size_bytes": 8, "managed_ledger_max_ledger_rollover_time_ms": 9000,
        "managed_ledger_cursor_persist_interval_ms": 10, "replication_read_batch_max": 11,
        "replication_pending_max": 12, "replication_backoff_max_ms": 1300,
        "replicated_subscriptions_snapshot_interval_ms": 1400, "replicated_subscriptions_snapshot_timeout_ms": 1500,
        "keep_alive_interval_ms": 1600})
    assert derive(ManagedLedgerConfig, broker, prefix="managed_ledger_", renames=_MANAGED_LEDGER_RENAMES) == \
        ManagedLedgerConfig(ensemble_size=5, write_quorum_size=3, ack_quorum_size=2, max_entries_per_ledger=7,
                            max_size_per_ledger_bytes=8, max_ledger_rollover_time_s=9.0, cursor_persist_interval_ms=10,
                            broker_entry_metadata_interceptors=("timestamp", "index"))  # the broker's default
    assert derive(LedgerClientConfig, broker, prefix="managed_ledger_", renames=_QUORUM_RENAMES) == \
        LedgerClientConfig(ensemble_size=5, write_quorum_size=3, ack_quorum_size=2)
    assert derive(ReplicationSettings, broker, prefix="replication_", renames=_REPLICATION_RENAMES) == \
        ReplicationSettings(read_batch_max=11, pending_max=12, backoff_max_s=1.3, snapshot_interval_s=1.4,
                            snapshot_timeout_s=1.5, keep_alive_interval_s=1.6)
    # one keep-alive for both sides: the broker's client connections and its replication connections
    assert derive(ServiceConfig, broker, renames=_SERVICE_RENAMES).keep_alive_interval_s == 1.6
