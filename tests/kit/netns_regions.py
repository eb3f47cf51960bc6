"""Regions really apart: every region's ZooKeeper, bookies and brokers in its own network namespace, the global
configuration store in the wan namespace, and 40 ms ± 5 ms between regions through clusters/wan_relay.py.

``start_netns_regions(["us-east", "eu-west"], tmp_path)`` returns an :class:`ApartRegions`: the usual
:class:`~tests.kit.regions.Regions` (admin calls, stats, restarts) plus the faults of issue 18 —
``cut(a, b)`` / ``heal(a, b)``, ``zookeeper[region]`` and ``config_store`` (``ManagedProcess`` with ``pause``/
``resume``/``kill``/``start``), ``in_region(name, argv)`` to run a client inside a region. ``stop()`` kills
every process and deletes every namespace, also when start-up fails half way.

Why the configuration store sits in the wan namespace: it is one service every region reaches, and a cut
between two regions must not also cut one of them from it (that is its own fault, ``config_store.pause()``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from clusters.netns import Wan
from clusters.wan_relay import send_command
from magnetar import zookeeper as zk
from magnetar.net import free_port

from . import leftovers
from .bookies import BookieProcess
from .brokers import BrokerHandle
from .process import ManagedProcess, python_command
from .regions import Region, Regions
from .wait import wait_for


def _in_netns(process: ManagedProcess, prefix: list[str]) -> None:
    process.argv = [*prefix, *process.argv]


def _zookeeper(name: str, host: str, prefix: list[str], base_dir: pathlib.Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    proc = ManagedProcess(name, [*prefix, *python_command("zookeeper", "--port", str(port), "--data-dir",
                                                          str(base_dir / name), "--host", host)],
                          log_path=base_dir / "logs" / f"{name}.log", health=lambda: zk.is_healthy(host, port))
    return proc, f"{host}:{port}"


@dataclass
class ApartRegions:
    wan: Wan
    regions: Regions
    relay: ManagedProcess
    relay_control: str
    config_store: ManagedProcess
    zookeeper: dict[str, ManagedProcess] = field(default_factory=dict)
    disk: Any = None  # a tests.kit.disk.SmallDisk a test put under a bookie, for the disk-full fault
    leftover_record: Optional[pathlib.Path] = None  # tests.kit.leftovers: swept by the next run if we are killed
    _stopped: bool = False

    # -- faults -----------------------------------------------------------------------------------------

    def _index(self, region: str) -> int:
        return self.wan.regions[region].index

    def cut(self, a: str, b: str) -> None:
        """Cuts the link between regions ``a`` and ``b``: live connections are reset, new ones refused."""
        send_command(self.relay_control, f"cut {self._index(a)} {self._index(b)}")

    def silence(self, a: str, b: str) -> None:
        """Partitions regions ``a`` and ``b`` silently: nothing passes, nothing is closed (see clusters.wan_relay)."""
        send_command(self.relay_control, f"silence {self._index(a)} {self._index(b)}")

    def heal(self, a: str, b: str) -> None:
        """Ends a cut or a silence between regions ``a`` and ``b``."""
        send_command(self.relay_control, f"heal {self._index(a)} {self._index(b)}")

    def set_delay(self, delay_ms: float, jitter_ms: float) -> None:
        send_command(self.relay_control, f"delay {delay_ms} {jitter_ms}")

    def in_region(self, region: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Starts ``argv`` inside ``region``'s namespace (a client "in" the region)."""
        return subprocess.Popen([*self.wan.regions[region].exec_prefix(), *argv], start_new_session=True, **kwargs)

    # -- lifecycle --------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Kills every process, then deletes every namespace (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.regions.stop()
            for proc in [*self.zookeeper.values(), self.config_store, self.relay]:
                proc.cleanup()
        finally:
            self.wan.close()
            leftovers.forget(self.leftover_record)

    def log_tails(self, n_bytes: int = 3000) -> str:
        extra = [self.relay, self.config_store, *self.zookeeper.values()]
        return self.regions.log_tails(n_bytes) + "\n" + "\n".join(
            f"----- {p.name} -----\n{p.log_tail(n_bytes)}" for p in extra)


def start_netns_regions(names: Sequence[str], base_dir: pathlib.Path, *, bookies: int = 2, brokers: int = 1,
                        delay_ms: float = 40.0, jitter_ms: float = 5.0, request: Any = None, timeout_s: float = 120.0,
                        bookie_data_dirs: Optional[Mapping[str, pathlib.Path]] = None,
                        **broker_overrides: Any) -> ApartRegions:
    """Builds the namespaces and starts everything (see the module docstring); waits until all serve.

    ``bookie_data_dirs``: a data directory by bookie name (``"east-bookie-1"``), e.g. on a :class:`SmallDisk`.
    """
    base_dir = pathlib.Path(base_dir)
    wan = Wan.create(names)
    record = leftovers.record("netns", layout=wan.layout.document())
    started: list[ManagedProcess] = []
    deployment: ApartRegions | None = None
    try:
        config_store, global_connect = _zookeeper("config-store", wan.address, wan.exec_prefix(), base_dir)
        zookeepers = {}
        region_objs = []
        for name in names:
            net = wan.regions[name]
            proc, connect = _zookeeper(f"{name}-zookeeper", net.direct_address, net.exec_prefix(), base_dir)
            zookeepers[name] = proc
            region_objs.append(Region(name=name, zk_connect=connect, base_dir=base_dir / name))
        for proc in [config_store, *zookeepers.values()]:
            health, proc.health = proc.health, None  # start all, then wait for all
            started.append(proc)
            proc.start()
            proc.health = health
        for proc in [config_store, *zookeepers.values()]:
            proc.wait_until(proc.health, timeout_s=timeout_s, what="healthy")

        for region in region_objs:
            net = wan.regions[region.name]
            region.bookies = [BookieProcess(f"{region.name}-bookie-{i}", region.base_dir / "bookies",
                                            region.zk_connect, bind_host="0.0.0.0",
                                            advertised_host=net.direct_address,
                                            **({"data_dir": (bookie_data_dirs or {})[f"{region.name}-bookie-{i}"]}
                                               if f"{region.name}-bookie-{i}" in (bookie_data_dirs or {}) else {}))
                              for i in range(1, bookies + 1)]
            settings = {"cluster": region.name, "configuration_store": global_connect, "bootstrap": True,
                        "bind_host": "0.0.0.0", "advertised_host": net.public_address,
                        "managed_ledger_ensemble_size": min(2, bookies), "managed_ledger_write_quorum": min(2, bookies),
                        "managed_ledger_ack_quorum": min(2, bookies), **broker_overrides}
            region.brokers = [BrokerHandle(f"{region.name}-broker-{i}", region.base_dir / "brokers",
                                           region.zk_connect, **settings) for i in range(1, brokers + 1)]
            for server in [*region.bookies, *region.brokers]:
                server.connect_host = net.direct_address
                _in_netns(server.process, net.exec_prefix())
            for broker in region.brokers:
                broker.write_config(cluster_service_url=region.http_service_url,
                                    cluster_broker_service_url=region.pulsar_url)
        regions = Regions(region_objs, global_connect)

        control = str(base_dir / "relay.sock")
        if os.path.exists(control):
            os.unlink(control)
        routes = []
        for region in region_objs:
            net = wan.regions[region.name]
            ports = ",".join(str(p) for b in region.brokers for p in (b.port, b.http_port))
            routes += ["--route", f"{net.public_address}={net.direct_address}:{ports}"]
        relay = ManagedProcess("wan-relay", [*wan.exec_prefix(), *python_command_module("clusters.wan_relay"),
                                             "--control", control, "--delay-ms", str(delay_ms),
                                             "--jitter-ms", str(jitter_ms), *routes],
                               log_path=base_dir / "logs" / "wan-relay.log", cwd=pathlib.Path.cwd(),
                               health=lambda: os.path.exists(control))
        relay.start(timeout_s=30)
        started.append(relay)
        deployment = ApartRegions(wan=wan, regions=regions, relay=relay, relay_control=control,
                                  config_store=config_store, zookeeper=zookeepers, leftover_record=record)
        if request is not None:
            request.addfinalizer(deployment.stop)

        all_bookies = [b for r in region_objs for b in r.bookies]
        for bookie in all_bookies:
            bookie.start(wait=False)
        for bookie in all_bookies:
            bookie.wait_healthy(timeout_s=timeout_s)
        all_brokers = [b for r in region_objs for b in r.brokers]
        for broker in all_brokers:
            broker.start(wait=False)
        for broker in all_brokers:
            broker.wait_healthy(timeout_s=timeout_s)
        for region in region_objs:
            wait_for(lambda: set(names) <= set(region.admin("GET", "/admin/v2/clusters")), 30,
                     what=f"{region.name} sees clusters {list(names)}")
    except BaseException:
        if deployment is not None:
            deployment.stop()
        else:
            for proc in started:
                proc.cleanup()
            wan.close()
            leftovers.forget(record)
        raise
    return deployment


def python_command_module(module: str) -> list[str]:
    return [sys.executable, "-m", module]
