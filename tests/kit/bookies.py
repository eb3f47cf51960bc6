"""Real bookie processes for tests: a config file, fixed ports and a data dir that survive restarts.

``start_bookies(3, tmp_path, zk_connect)`` starts three ``magnetar bookie`` processes (in parallel) and
returns once every one serves. Each :class:`BookieProcess` keeps its ports, data dir and config across
``restart()`` (so a restarted bookie is the same bookie), and its ``process`` is a
:class:`~tests.kit.process.ManagedProcess` with the kit's faults (``kill``, ``pause``, ``terminate``...).
Healthy means: GetBookieInfo answers *and* the process wrote ``endpoints.json`` (its last start-up step,
after the ZooKeeper registration).
"""

from __future__ import annotations

import pathlib
from typing import Any

import grpc


from magnetar.proto import bookie_pb2, bookie_pb2_grpc

from .server import HOST, ServerProcess, dumps_toml  # noqa: F401 (dumps_toml: re-exported)

# Tests run on shared disks: never let a nearly full /tmp turn the bookies read-only by surprise.
_TEST_DEFAULTS: dict[str, Any] = {"disk_free_min_bytes": 0, "disk_free_resume_bytes": 0}


class BookieProcess(ServerProcess):
    """One bookie process under test control (its gRPC, HTTP and add ports fixed, see ``port_keys``).

    Args:
        name: the bookie id and the name of its folder under ``base_dir``.
        base_dir: where ``<name>/bookie.toml``, ``<name>/data`` and ``logs/<name>.log`` go.
        zk_connect: the region's ZooKeeper (with chroot); "" runs without registration.
        overrides: any :class:`bookie.config.BookieConfig` setting.
    """

    port_keys = ("port", "http_port", "add_port")

    def __init__(self, name: str, base_dir: pathlib.Path, zk_connect: str = "", **overrides: Any) -> None:
        super().__init__("bookie", "bookie_id", name, base_dir, {"zookeeper": zk_connect, **_TEST_DEFAULTS}, overrides)
        self.bookie_id = self.id

    # -- addresses and state -------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.connect_host}:{self.port}"

    @property
    def add_address(self) -> str:
        """The add port's ``host:port`` ("" with ``add_port=-1``: no add port)."""
        port = int(self.settings["add_port"])
        return f"{self.connect_host}:{port}" if port > 0 else ""

    @property
    def metrics_url(self) -> str:
        return f"http://{self.http_address}/metrics"

    @property
    def journal_dir(self) -> pathlib.Path:
        return self.data_dir / "journal"

    def info(self, *, timeout_s: float = 2.0) -> bookie_pb2.BookieInfoResponse:
        with grpc.insecure_channel(self.address) as channel:
            return bookie_pb2_grpc.BookieServiceStub(channel).GetBookieInfo(
                bookie_pb2.BookieInfoRequest(), timeout=timeout_s
            )

    def healthy(self) -> bool:
        try:
            if not self.started_by_this_process():
                return False
            return self.info(timeout_s=1.0).bookie_id == self.bookie_id
        except (OSError, ValueError, grpc.RpcError):
            return False

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
