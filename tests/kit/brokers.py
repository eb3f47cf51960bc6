"""Real broker processes for tests: a config file, fixed ports and a data dir that survive restarts.

``start_brokers(2, tmp_path, zk_connect)`` starts two ``magnetar broker`` processes (in parallel) and returns
once every one serves. Each :class:`BrokerHandle` keeps its ports across ``restart()`` and its ``process``
is a :class:`~tests.kit.process.ManagedProcess` with the kit's faults (``kill``, ``pause``, ``terminate``...).
Healthy means: ``endpoints.json`` was written by this very process (its last start-up step), ``/health``
answers 200 and the binary port accepts connections.
"""

from __future__ import annotations

import contextlib
import pathlib
from typing import TYPE_CHECKING, Any, Iterator

from magnetar.net import free_port, is_listening

from .server import HOST, ServerProcess

if TYPE_CHECKING:
    from .zookeeper import ZooKeeperServer

# Tests kill brokers on purpose: a short session lets the survivors take their bundles over quickly.
_TEST_DEFAULTS: dict[str, Any] = {"zk_session_timeout_ms": 4000, "load_report_interval_ms": 500,
                                  "managed_ledger_ensemble_size": 2, "managed_ledger_write_quorum": 2,
                                  "managed_ledger_ack_quorum": 2}


class BrokerHandle(ServerProcess):
    """One broker process under test control.

    Args:
        name: the broker id and the name of its folder under ``base_dir``.
        base_dir: where ``<name>/broker.toml``, ``<name>/data`` and ``logs/<name>.log`` go.
        zk_connect: the region's ZooKeeper (with chroot); also the configuration store unless overridden.
        overrides: any :class:`broker.config.BrokerConfig` setting.
    """

    def __init__(self, name: str, base_dir: pathlib.Path, zk_connect: str, *, kafka: bool = False,
                 **overrides: Any) -> None:
        settings = {"cluster": "test", "zookeeper": zk_connect, **_TEST_DEFAULTS}
        if kafka:  # a Kafka listener on a fixed free port (kept across restarts, as the other ports)
            settings["kafka_listeners"] = f"PLAINTEXT://{HOST}:{free_port(HOST)}"
        super().__init__("broker", "broker_id", name, base_dir, settings, overrides)
        self.broker_id = self.id

    # -- addresses and state -------------------------------------------------------------------------------

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://{self.settings['advertised_host']}:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        """``host:port`` of the Kafka listener (brokers started with ``kafka=True``)."""
        return str(self.settings["kafka_listeners"]).split("://", 1)[1]

    @property
    def cluster(self) -> str:
        return str(self.settings["cluster"])

    def healthy(self) -> bool:
        return self.answers_health() and is_listening(self.connect_host, self.port)

    def __repr__(self) -> str:
        return f"BrokerHandle({self.broker_id} at {self.pulsar_url} {self.http_url})"


def start_brokers(
    n: int, tmp_path: pathlib.Path, zk_connect: str, *, first_index: int = 1, timeout_s: float = 60.0,
    kafka: bool = False, **config_overrides: Any,
) -> list[BrokerHandle]:
    """Starts ``n`` brokers ``broker-<i>`` under ``tmp_path/brokers`` together and waits until all serve
    (``kafka``: each with a Kafka listener, see :attr:`BrokerHandle.kafka_bootstrap`)."""
    base = pathlib.Path(tmp_path) / "brokers"
    brokers = [BrokerHandle(f"broker-{i}", base, zk_connect, kafka=kafka, **config_overrides)
               for i in range(first_index, first_index + n)]
    for b in brokers:
        b.start(wait=False)
    for b in brokers:
        b.wait_healthy(timeout_s=timeout_s)
    return brokers


@contextlib.contextmanager
def broker_on_own_zookeeper(tmp_path: pathlib.Path,
                            **broker_overrides: Any) -> Iterator[tuple["ZooKeeperServer", BrokerHandle]]:
    """A ZooKeeper of its own (so a test may kill it), one bookie and one broker at E/Qw/Qa 1/1/1 on it; yields
    ``(zookeeper, broker)`` (the ZooKeeper's ``new_chroot`` gave the region) and ends every process afterwards."""
    from .bookies import start_bookies
    from .zookeeper import start_zookeeper

    zookeeper = start_zookeeper(tmp_path / "own-zk")
    started = []
    try:
        zk_connect = zookeeper.new_chroot("gone")
        started += [b.process for b in start_bookies(1, tmp_path, zk_connect)]
        (broker,) = start_brokers(1, tmp_path, zk_connect, managed_ledger_ensemble_size=1,
                                  managed_ledger_write_quorum=1, managed_ledger_ack_quorum=1, **broker_overrides)
        started.append(broker.process)
        yield zookeeper, broker
    finally:
        for process in started:
            process.cleanup()
        zookeeper.process.cleanup()
