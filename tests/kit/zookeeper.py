"""A real ZooKeeper server for tests, and per-test chroots."""

from __future__ import annotations

import pathlib
import uuid
from dataclasses import dataclass

from kazoo.client import KazooClient

from magnetar import zookeeper as zk
from magnetar.net import free_port

from .process import ManagedProcess, python_command


@dataclass
class ZooKeeperServer:
    host: str
    port: int
    process: ManagedProcess

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def new_chroot(self, prefix: str = "t") -> str:
        """Creates a fresh chroot node and returns a connect string rooted there."""
        path = f"/{prefix}-{uuid.uuid4().hex[:12]}"
        client = KazooClient(hosts=self.connect, timeout=10)
        client.start(timeout=15)
        try:
            client.ensure_path(path)
        finally:
            client.stop()
            client.close()
        return f"{self.connect}{path}"


def start_zookeeper(base_dir: pathlib.Path, *, name: str = "zookeeper") -> ZooKeeperServer:
    host = "127.0.0.1"
    port = free_port(host)
    data_dir = base_dir / name
    proc = ManagedProcess(
        name,
        python_command("zookeeper", "--port", str(port), "--data-dir", str(data_dir), "--host", host),
        log_path=base_dir / "logs" / f"{name}.log",
        health=lambda: zk.is_healthy(host, port),
    )
    proc.start(timeout_s=60)
    return ZooKeeperServer(host=host, port=port, process=proc)
