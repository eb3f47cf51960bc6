"""``python -m magnetar SERVER --config FILE`` skips the CLI's imports: which command lines take that path."""

import subprocess
import sys

import pytest

from magnetar.__main__ import server_config


@pytest.mark.parametrize("argv, expected", [
    (["bookie", "--config", "b.toml"], ("bookie.server", "b.toml")),
    (["broker", "--config=x/broker.toml"], ("broker.process", "x/broker.toml")),
    (["proxy", "--config", "p.toml"], ("proxy.process", "p.toml")),
    (["autorecovery", "--config", "a.toml"], ("bookie.autorecovery.process", "a.toml")),
])
def test_a_server_with_only_its_config_goes_straight_to_the_server(argv, expected):
    assert server_config(argv) == expected


@pytest.mark.parametrize("argv", [
    [], ["bookie"], ["bookie", "--help"], ["bookie", "--config"], ["bookie", "--config="],
    ["bookie", "--config", "--help"], ["bookie", "--config", "b.toml", "--help"], ["zookeeper", "--config", "z"],
    ["admin", "--config", "x"], ["up", "--config", "t.toml"],
])
def test_anything_else_is_the_clis(argv):
    assert server_config(argv) is None


def test_a_bad_config_on_the_fast_path_is_the_clis_error_and_exit_code(tmp_path):
    config = tmp_path / "bookie.toml"
    config.write_text('data_dir = "d"\nzookeeper = "127.0.0.1:1"\nport = -5\n')
    result = subprocess.run([sys.executable, "-m", "magnetar", "bookie", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {config}"), result.stderr
    assert "Traceback" not in result.stderr
    missing = subprocess.run([sys.executable, "-m", "magnetar", "bookie", "--config", str(tmp_path / "nope.toml")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.toml" in missing.stderr, missing.stderr
