"""``[regions.autorecovery]`` in a topology: parsed, planned after the bookies, configured for its region."""

from __future__ import annotations

import pathlib
import tomllib

import pytest

from bookie.autorecovery import AutoRecoveryConfig
from clusters.kinds import make_plan
from clusters.topology import parse
from magnetar.errors import ConfigError

TEXT = """
name = "x"
[[regions]]
name = "a"
[regions.bookies]
count = 4
[regions.autorecovery]
count = 2
lost_bookie_grace_ms = 60000
"""


def test_autorecovery_processes_start_after_the_bookies_with_a_valid_config(tmp_path: pathlib.Path) -> None:
    ports = iter(range(20000, 30000))
    plan = make_plan(parse(TEXT, path="t.toml"), tmp_path, pick_port=lambda host: next(ports))
    tiers = [[i.name for i in tier] for tier in plan.tiers()]
    assert tiers[1] == ["a-bookie-1", "a-bookie-2", "a-bookie-3", "a-bookie-4"]
    assert tiers[2] == ["a-autorecovery-1", "a-autorecovery-2"]
    inst = plan.one(region="a", slot="autorecovery")
    argv = plan.kind(inst).command(inst, plan)
    assert argv[-3:-1] == ["autorecovery", "--config"]
    config = tomllib.loads(pathlib.Path(argv[-1]).read_text())
    zk_port = plan.one(region="a", slot="zookeeper").ports["client"]
    assert config["zookeeper"] == f"127.0.0.1:{zk_port}" and config["worker_id"] == "a-autorecovery-1"
    assert config["lost_bookie_grace_ms"] == 60000
    settings = AutoRecoveryConfig.load(argv[-1])  # what the process will load
    assert settings.http_port == inst.ports["http"] and settings.lost_bookie_grace_ms == 60000
    assert plan.endpoints(inst)["metrics"] == f"http://127.0.0.1:{inst.ports['http']}/metrics"


@pytest.mark.parametrize(("table", "expected"), [
    ("[regions.autorecovery]\ncount = 0\n", "count: must be in"),
    ("[regions.autorecovery]\nzookeeper = 'x'\n", "zookeeper"),
])
def test_bad_autorecovery_tables_are_refused(table: str, expected: str) -> None:
    text = f"name = 'x'\n[[regions]]\nname = 'a'\n[regions.bookies]\ncount = 3\n{table}"
    with pytest.raises(ConfigError, match=expected):
        parse(text, path="t.toml")


def test_autorecovery_needs_bookies() -> None:
    with pytest.raises(ConfigError, match="no \\[regions.bookies\\]"):
        parse("name = 'x'\n[[regions]]\nname = 'a'\n[regions.autorecovery]\n", path="t.toml")


def test_config_refuses_bad_settings(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="zookeeper"):
        AutoRecoveryConfig(data_dir=tmp_path, zookeeper=" ")
    with pytest.raises(ConfigError, match="throttle_bytes_per_s"):
        AutoRecoveryConfig(data_dir=tmp_path, zookeeper="h:1", throttle_bytes_per_s=-1)
