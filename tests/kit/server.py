"""What every Magnetar server process under test has in common: fixed ports and a data dir that survive
restarts, a TOML config file, ``endpoints.json`` written by the process, and the kit's faults.

Subclasses (``BookieProcess``, ``BrokerHandle``, ``ProxyHandle``) name the process kind and its id key, add
their own settings and say when the process is healthy.
"""

from __future__ import annotations

import json
import pathlib
import time
import urllib.request
from typing import Any, Optional

from clusters.toml_out import dumps_toml as _dumps_toml
from magnetar.net import free_port

from .process import ManagedProcess, python_command

HOST = "127.0.0.1"


def dumps_toml(values: dict[str, Any]) -> str:
    """The supervisor's TOML writer, with paths written as strings."""
    return _dumps_toml({k: str(v) if isinstance(v, pathlib.PurePath) else v for k, v in values.items()})


class ServerProcess:
    """One ``magnetar <kind> --config <name>/<kind>.toml`` process.

    Args:
        kind: the ``magnetar`` sub-command (``bookie``, ``broker``, ``proxy``).
        id_key: the config key holding the process's id (``bookie_id``, ``broker_id``); None: the kind has no id
            setting (a proxy) and its id is ``name``.
        name: the default id and the name of its folder under ``base_dir``.
        base_dir: where ``<name>/<kind>.toml``, ``<name>/data`` and ``logs/<name>.log`` go.
        settings: the kind's own settings (before ``overrides``).
        overrides: any setting of the kind's config.
    """

    port_keys: tuple[str, ...] = ("port", "http_port")  # given a free port unless overridden (0 too)
    http_port_key = "http_port"  # the port of ``/health`` and ``/metrics``

    def __init__(self, kind: str, id_key: Optional[str], name: str, base_dir: pathlib.Path,
                 settings: dict[str, Any], overrides: dict[str, Any]) -> None:
        self.name = name
        self.id = str(overrides.pop(id_key, name)) if id_key else name
        ports = {key: int(overrides.pop(key, 0)) or free_port(HOST) for key in self.port_keys}
        root = pathlib.Path(base_dir) / name
        root.mkdir(parents=True, exist_ok=True)
        self.data_dir = pathlib.Path(overrides.pop("data_dir", root / "data"))
        self.config_path = root / f"{kind}.toml"
        self.settings = {
            **({id_key: self.id} if id_key else {}),
            "bind_host": HOST,
            "advertised_host": HOST,
            **ports,
            "data_dir": str(self.data_dir),
            **settings,
            **overrides,
        }
        # Where the test process reaches this server: its advertised host unless a topology says otherwise
        # (regions in network namespaces: a direct address, while clients are told a relayed one).
        self.connect_host = str(self.settings["advertised_host"])
        self.write_config()
        self.process = ManagedProcess(
            name,
            python_command(kind, "--config", str(self.config_path)),
            log_path=pathlib.Path(base_dir) / "logs" / f"{name}.log",
            health=self.healthy,
        )

    def write_config(self, **changes: Any) -> None:
        """(Re)writes the config file; changes apply at the next (re)start."""
        self.settings.update(changes)
        self.config_path.write_text(dumps_toml(self.settings))

    @property
    def port(self) -> int:
        return int(self.settings["port"])

    @property
    def http_port(self) -> int:
        return int(self.settings[self.http_port_key])

    @property
    def http_address(self) -> str:
        return f"{self.connect_host}:{self.http_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.http_address}"

    def endpoints(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "endpoints.json").read_text())

    def started_by_this_process(self) -> bool:
        """endpoints.json was written by the current process (not left over from a previous start)."""
        return self.endpoints().get("pid") == self.process.pid

    def answers_health(self) -> bool:
        """endpoints.json was written by the current process and ``/health`` answers 200."""
        try:
            if not self.started_by_this_process():
                return False
            with urllib.request.urlopen(f"{self.http_url}/health", timeout=1) as response:
                return response.status == 200
        except (OSError, ValueError):
            return False

    def healthy(self) -> bool:
        raise NotImplementedError

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self, *, wait: bool = True, timeout_s: float = 30.0):
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

    def restart(self, *, kill: bool = True, timeout_s: float = 30.0):
        """SIGKILL (or, with ``kill=False``, SIGTERM) and start again with the same ports and data."""
        self.process.restart(kill=kill, timeout_s=timeout_s)
        return self

    def kill(self) -> None:
        self.process.kill()

    def terminate(self, *, grace_s: float = 20.0) -> Optional[int]:
        return self.process.terminate(grace_s=grace_s)

    def timed_terminate(self, *, grace_s: float = 20.0) -> tuple[Optional[int], float]:
        """SIGTERM; (exit code, seconds until it exited), the process SIGKILLed after ``grace_s``."""
        began = time.monotonic()
        code = self.process.terminate(grace_s=grace_s)
        return code, time.monotonic() - began
