"""Without an installed ZooKeeper, `magnetar zookeeper` fails with an error naming the install command."""

import subprocess
import sys

import pytest

from magnetar import zookeeper as zk
from magnetar.errors import InstallError


def test_zookeeper_home_without_jars_names_the_install_command(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    with pytest.raises(InstallError) as info:
        zk.find_classpath()
    assert "apt-get install -y zookeeper" in str(info.value)


def test_cli_exits_2_with_the_hint(tmp_path) -> None:
    env = {"ZOOKEEPER_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "magnetar", "zookeeper", "--port", "1", "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert result.returncode == 2
    assert "apt-get install -y zookeeper" in result.stderr
