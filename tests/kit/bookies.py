"""Real bookie processes for tests: a config file, fixed ports and a data dir that survive restarts.

``start_bookies(3, tmp_path, zk_connect)`` starts three ``magnetar bookie`` processes (in parallel) and
returns once every one serves. Each :class:`BookieProcess` keeps its ports, data dir and config across
``restart()`` (so a restarted bookie is the same bookie), and its ``process`` is a
:class:`~tests.kit.process.ManagedProcess` with the kit's faults (``kill``, ``pause``, ``terminate``...).
Healthy means: GetBookieInfo answers *and* the process wrote ``endpoints.json`` (its last start-up step,
after the ZooKeeper registration).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Optional

import grpc

from clusters.kinds import dumps_toml as _dumps_toml
from magnetar.net import free_port
from magnetar.proto import bookie_pb2, bookie_pb2_grpc

from .process import ManagedProcess, python_command

HOST = "127.0.0.1"
# Tests run on shared disks: never let a nearly full /tmp turn the bookies read-only by surprise.
_TEST_DEFAULTS: dict[str, Any] = {"disk_free_min_bytes": 0, "disk_free_resume_bytes": 0}


def dumps_toml(values: dict[str, Any]) -> str:
    """The supervisor's TOML writer, with paths written as strings."""
    return _dumps_toml({k: str(v) if isinstance(v, pathlib.PurePath) else v for k, v in values.items()})


class BookieProcess:
    """One bookie process under test control.

    Args:
        name: the bookie id and the name of its folder under ``base_dir``.
        base_dir: where ``<name>/bookie.toml``, ``<name>/data`` and ``logs/<name>.log`` go.
        zk_connect: the region's ZooKeeper (with chroot); "" runs without registration.
        overrides: any :class:`bookie.config.BookieConfig` setting.
    """

    def __init__(self, name: str, base_dir: pathlib.Path, zk_connect: str = "", **overrides: Any) -> None:
        self.bookie_id = str(overrides.pop("bookie_id", name))
        self.port = int(overrides.pop("port", 0)) or free_port(HOST)
        self.http_port = int(overrides.pop("http_port", 0)) or free_port(HOST)
        root = pathlib.Path(base_dir) / name
        root.mkdir(parents=True, exist_ok=True)
        self.data_dir = pathlib.Path(overrides.pop("data_dir", root / "data"))
        self.config_path = root / "bookie.toml"
        self.settings = {
            "bookie_id": self.bookie_id,
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
            python_command("bookie", "--config", str(self.config_path)),
            log_path=pathlib.Path(base_dir) / "logs" / f"{name}.log",
            health=self.healthy,
        )

    def write_config(self, **changes: Any) -> None:
        """(Re)writes the config file; changes apply at the next (re)start."""
        self.settings.update(changes)
        self.config_path.write_text(dumps_toml(self.settings))

    # -- addresses and state -------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def http_address(self) -> str:
        return f"{HOST}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.http_address}/metrics"

    @property
    def journal_dir(self) -> pathlib.Path:
        return self.data_dir / "journal"

    def endpoints(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "endpoints.json").read_text())

    def info(self, *, timeout_s: float = 2.0) -> bookie_pb2.BookieInfoResponse:
        with grpc.insecure_channel(self.address) as channel:
            return bookie_pb2_grpc.BookieServiceStub(channel).GetBookieInfo(
                bookie_pb2.BookieInfoRequest(), timeout=timeout_s
            )

    def healthy(self) -> bool:
        try:
            if self.endpoints().get("pid") != self.process.pid:
                return False
            return self.info(timeout_s=1.0).bookie_id == self.bookie_id
        except (OSError, ValueError, grpc.RpcError):
            return False

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self, *, wait: bool = True, timeout_s: float = 30.0) -> "BookieProcess":
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

    def restart(self, *, kill: bool = True, timeout_s: float = 30.0) -> "BookieProcess":
        """SIGKILL (or, with ``kill=False``, SIGTERM) and start again with the same ports and data."""
        self.process.restart(kill=kill, timeout_s=timeout_s)
        return self

    def kill(self) -> None:
        self.process.kill()

    def terminate(self, *, grace_s: float = 20.0) -> Optional[int]:
        return self.process.terminate(grace_s=grace_s)

    def __repr__(self) -> str:
        return f"BookieProcess({self.bookie_id} at {self.address}, data {self.data_dir})"


def start_bookies(
    n: int, tmp_path: pathlib.Path, zk_connect: str = "", *, first_index: int = 1, timeout_s: float = 60.0,
    **config_overrides: Any,
) -> list[BookieProcess]:
    """Starts ``n`` bookies ``bookie-<i>`` under ``tmp_path/bookies`` and waits until all serve."""
    base = pathlib.Path(tmp_path) / "bookies"
    bookies = [
        BookieProcess(f"bookie-{i}", base, zk_connect, **config_overrides)
        for i in range(first_index, first_index + n)
    ]
    for b in bookies:
        b.start(wait=False)
    for b in bookies:
        b.wait_healthy(timeout_s=timeout_s)
    return bookies
