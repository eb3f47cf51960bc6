"""Automatic compaction without servers: which threshold applies, the uncompacted-size estimate, the trigger
decision, one monitor pass over fake topics, the stored JSON (Pulsar's names), the broker.toml check, the CLI
size syntax and the REST API (namespace and topic round trips, 400s with nothing changed, 404)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import typer

from broker.config import BrokerConfig
from broker.service.policies.auto_compaction import (CompactionMonitor, effective_threshold, should_compact,
                                               uncompacted_bytes)
from config_store import Policies, TopicPolicies
from magnetar.admin_namespace_policies_cli import parse_size_bytes
from magnetar.errors import ConfigError
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)


def test_topic_threshold_overrides_the_namespace_and_none_means_never() -> None:
    assert effective_threshold() == 0
    assert effective_threshold(Policies()) == 0
    assert effective_threshold(Policies(compaction_threshold=100)) == 100
    assert effective_threshold(Policies(compaction_threshold=100), TopicPolicies()) == 100
    assert effective_threshold(Policies(compaction_threshold=100), TopicPolicies(compaction_threshold=0)) == 0
    assert effective_threshold(None, TopicPolicies(compaction_threshold=7)) == 7


def test_uncompacted_size_is_the_compaction_cursor_backlog_or_the_whole_topic() -> None:
    assert uncompacted_bytes(total_size_bytes=1000, number_of_entries=10, compaction_backlog_entries=None) == 1000
    assert uncompacted_bytes(total_size_bytes=1000, number_of_entries=10, compaction_backlog_entries=3) == 300
    assert uncompacted_bytes(total_size_bytes=1000, number_of_entries=10, compaction_backlog_entries=0) == 0
    assert uncompacted_bytes(total_size_bytes=0, number_of_entries=0, compaction_backlog_entries=5) == 0


def test_compaction_starts_strictly_above_a_positive_threshold_when_none_runs() -> None:
    assert should_compact(threshold_bytes=100, uncompacted_size_bytes=101, running=False)
    assert not should_compact(threshold_bytes=100, uncompacted_size_bytes=100, running=False)  # Pulsar's ">"
    assert not should_compact(threshold_bytes=100, uncompacted_size_bytes=10_000, running=True)
    assert not should_compact(threshold_bytes=0, uncompacted_size_bytes=10_000, running=False)
    assert not should_compact(threshold_bytes=-1, uncompacted_size_bytes=10_000, running=False)


class _FakeCompaction:
    def __init__(self, running: bool = False, fail: bool = False, backlog_entries=None) -> None:
        self.running = running
        self.fail = fail
        self.triggers = 0
        self._backlog_entries = backlog_entries

    def backlog_entries(self):
        return self._backlog_entries

    def trigger(self) -> None:
        if self.fail:
            raise RuntimeError("no bookies")
        self.triggers += 1
        self.running = True


def _topic(name: str, *, threshold=None, own=None, size=1000, entries=10, compaction_backlog=None, persistent=True,
           running=False, fail=False):
    return SimpleNamespace(
        name=name, topic_name=SimpleNamespace(persistent=persistent), serving=True,
        policies=Policies(compaction_threshold=threshold), own_topic_policies=own,
        ml=SimpleNamespace(total_size=size, number_of_entries=entries),
        compaction=_FakeCompaction(running, fail, compaction_backlog))


async def test_one_monitor_pass_triggers_only_the_topics_over_their_threshold() -> None:
    topics = [_topic("never-compacted", threshold=500),
              _topic("caught-up", threshold=500, compaction_backlog=2),
              _topic("behind", threshold=500, compaction_backlog=6),
              _topic("no-policy"),
              _topic("topic-says-never", threshold=500, own=TopicPolicies(compaction_threshold=0)),
              _topic("running", threshold=500, running=True),
              _topic("failing", threshold=500, fail=True),
              _topic("non-persistent", threshold=500, persistent=False)]
    monitor = CompactionMonitor(lambda: topics, interval_s=60)
    assert await monitor.check_all() == ["never-compacted", "behind"]
    assert monitor.checks == 1 and monitor.triggered == 2
    assert await monitor.check_all() == []  # both are running now
    assert [t.compaction.triggers for t in topics] == [1, 0, 1, 0, 0, 0, 0, 0]
    await monitor.close()


def test_stored_with_pulsars_names() -> None:
    p = Policies(compaction_threshold=1 << 20)
    assert json.loads(p.to_json())["compaction_threshold"] == 1 << 20
    assert Policies.from_json(p.to_json()) == p
    assert Policies.from_json(Policies().to_json()).compaction_threshold is None
    t = TopicPolicies(compaction_threshold=42)
    assert json.loads(t.to_json())["compactionThreshold"] == 42
    assert TopicPolicies.from_json(t.to_json()) == t and not t.is_empty()


def test_broker_config_checks_the_interval() -> None:
    base = {"data_dir": "/tmp/x", "zookeeper": "127.0.0.1:2181"}
    assert BrokerConfig.from_mapping(base).compaction_monitor_interval_ms == 60_000
    with pytest.raises(ConfigError, match="compaction_monitor_interval_ms"):
        BrokerConfig.from_mapping({**base, "compaction_monitor_interval_ms": 0})


def test_cli_size_syntax() -> None:
    assert parse_size_bytes("100", "-t") == 100
    assert parse_size_bytes("10k", "-t") == 10 * 1024
    assert parse_size_bytes("10M", "-t") == 10 * 1024 * 1024
    assert parse_size_bytes("1g", "-t") == 1 << 30
    for bad in ("-1", "1.5M", "10 MB", ""):
        with pytest.raises(typer.BadParameter):
            parse_size_bytes(bad, "-t")


async def test_namespace_threshold_round_trip_and_bad_bodies_change_nothing(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    url = f"{a.url}/admin/v2/namespaces/t/ns/compactionThreshold"
    assert await call(http, "GET", url) == (200, None)
    assert await call(http, "PUT", url, 10 * 1024 * 1024) == (204, None)
    assert await call(http, "GET", f"{b.url}/admin/v2/namespaces/t/ns/compactionThreshold") == (200, 10 * 1024 * 1024)
    for bad, fragment in [(-1, "must be >= 0"), ("10M", "must be an integer"), (1.5, "must be an integer"),
                          (True, "must be an integer"), ({"threshold": 1}, "must be an integer")]:
        status, answer = await call(http, "PUT", url, bad)
        assert status == 400 and fragment in answer["reason"], (bad, answer)
    status, _ = await call(http, "PUT", url, raw=b"")
    assert status == 400
    assert await call(http, "GET", url) == (200, 10 * 1024 * 1024)
    assert await call(http, "DELETE", url) == (204, None)
    assert await call(http, "GET", url) == (200, None)
    assert (await call(http, "PUT", f"{a.url}/admin/v2/namespaces/t/nope/compactionThreshold", 5))[0] == 404
    assert (await call(http, "GET", f"{a.url}/admin/v2/namespaces/t/nope/compactionThreshold"))[0] == 404


async def test_topic_threshold_round_trip_and_applied(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    ns_url = f"{a.url}/admin/v2/namespaces/t/ns/compactionThreshold"
    url = f"{a.url}/admin/v2/persistent/t/ns/not-yet/compactionThreshold"
    assert await call(http, "GET", url) == (204, None)
    assert await call(http, "GET", url + "?applied=true") == (200, 0)
    assert await call(http, "PUT", ns_url, 1000) == (204, None)
    assert await call(http, "GET", url + "?applied=true") == (200, 1000)
    assert await call(http, "POST", url, 50) == (204, None)
    assert await call(http, "GET", url) == (200, 50)
    assert await call(http, "GET", url + "?applied=true") == (200, 50)
    status, answer = await call(http, "POST", url, -5)
    assert status == 400 and "must be >= 0" in answer["reason"]
    assert await call(http, "GET", url) == (200, 50)
    assert await call(http, "DELETE", url) == (204, None)
    assert await call(http, "GET", url) == (204, None)
    assert await call(http, "GET", url + "?applied=true") == (200, 1000)
    assert (await call(http, "POST", f"{a.url}/admin/v2/persistent/t/nope/x/compactionThreshold", 5))[0] == 404
