"""Real broker processes for tests: a config file, fixed ports and a data dir that survive restarts.

``start_brokers(2, tmp_path, zk_connect)`` starts two ``magnetar broker`` processes (in parallel) and returns
once every one serves. Each :class:`BrokerHandle` keeps its ports across ``restart()`` and its ``process``
is a :class:`~tests.kit.process.ManagedProcess` with the kit's faults (``kill``, ``pause``, ``terminate``...).
Healthy means: ``endpoints.json`` was written by this very process (its last start-up step), ``/health``
answers 200 and the binary port accepts connections.
"""

from __future__ import annotations

import json
import pathlib
import urllib.request
from typing import Any, Optional

from magnetar.net import free_port, is_listening

from .bookies import dumps_toml
from .process import ManagedProcess, python_command

HOST = "127.0.0.1"
# Tests kill brokers on purpose: a short session lets the survivors take their bundles over quickly.
_TEST_DEFAULTS: dict[str, Any] = {"zk_session_timeout_ms": 4000, "load_report_interval_ms": 500,
                                  "managed_ledger_ensemble_size": 2, "managed_ledger_write_quorum": 2,
                                  "managed_ledger_ack_quorum": 2}


class BrokerHandle:
    """One broker process under test control.

    Args:
        name: the broker id and the name of its folder under ``base_dir``.
        base_dir: where ``<name>/broker.toml``, ``<name>/data`` and ``logs/<name>.log`` go.
        zk_connect: the region's ZooKeeper (with chroot); also the configuration store unless overridden.
        overrides: any :class:`broker.config.BrokerConfig` setting.
    """

    def __init__(self, name: str, base_dir: pathlib.Path, zk_connect: str, **overrides: Any) -> None:
        self.broker_id = str(overrides.pop("broker_id", name))
        self.port = int(overrides.pop("port", 0)) or free_port(HOST)
        self.http_port = int(overrides.pop("http_port", 0)) or free_port(HOST)
        root = pathlib.Path(base_dir) / name
        root.mkdir(parents=True, exist_ok=True)
        self.data_dir = pathlib.Path(overrides.pop("data_dir", root / "data"))
        self.config_path = root / "broker.toml"
        self.settings = {
            "broker_id": self.broker_id,
            "cluster": "test",
            "bind_host": HOST,
            "advertised_host": HOST,
            "port": self.port,
            "http_port": self.http_port,
            "data_dir": str(self.data_dir),
            "zookeeper": zk_connect,
            **_TEST_DEFAULTS,
            **overrides,
        }
        self.write_config()
        self.process = ManagedProcess(
            name,
            python_command("broker", "--config", str(self.config_path)),
            log_path=pathlib.Path(base_dir) / "logs" / f"{name}.log",
            health=self.healthy,
        )

    def write_config(self, **changes: Any) -> None:
        """(Re)writes the config file; changes apply at the next (re)start."""
        self.settings.update(changes)
        self.config_path.write_text(dumps_toml(self.settings))

    # -- addresses and state -------------------------------------------------------------------------------

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://{HOST}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def http_address(self) -> str:
        return f"{HOST}:{self.http_port}"

    @property
    def cluster(self) -> str:
        return str(self.settings["cluster"])

    def endpoints(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "endpoints.json").read_text())

    def healthy(self) -> bool:
        try:
            if self.endpoints().get("pid") != self.process.pid:
                return False
            with urllib.request.urlopen(f"{self.http_url}/health", timeout=1) as response:
                if response.status != 200:
                    return False
        except (OSError, ValueError):
            return False
        return is_listening(HOST, self.port)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self, *, wait: bool = True, timeout_s: float = 30.0) -> "BrokerHandle":
        if wait:
            self.process.start(timeout_s=timeout_s)
        else:
            health, self.process.health = self.process.health, None
            try:
                self.process.start()
            finally:
                self.process.health = health
        return self

    def wait_healthy(self, *, timeout_s: float = 30.0) -> None:
        self.process.wait_until(self.healthy, timeout_s=timeout_s, what="healthy")

    def restart(self, *, kill: bool = True, timeout_s: float = 30.0) -> "BrokerHandle":
        """SIGKILL (or, with ``kill=False``, SIGTERM) and start again with the same ports and data."""
        self.process.restart(kill=kill, timeout_s=timeout_s)
        return self

    def kill(self) -> None:
        self.process.kill()

    def terminate(self, *, grace_s: float = 20.0) -> Optional[int]:
        return self.process.terminate(grace_s=grace_s)

    def __repr__(self) -> str:
        return f"BrokerHandle({self.broker_id} at {self.pulsar_url} {self.http_url})"


def start_brokers(
    n: int, tmp_path: pathlib.Path, zk_connect: str, *, first_index: int = 1, timeout_s: float = 60.0,
    **config_overrides: Any,
) -> list[BrokerHandle]:
    """Starts ``n`` brokers ``broker-<i>`` under ``tmp_path/brokers`` together and waits until all serve."""
    base = pathlib.Path(tmp_path) / "brokers"
    brokers = [BrokerHandle(f"broker-{i}", base, zk_connect, **config_overrides)
               for i in range(first_index, first_index + n)]
    for b in brokers:
        b.start(wait=False)
    for b in brokers:
        b.wait_healthy(timeout_s=timeout_s)
    return brokers
