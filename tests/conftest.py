"""Fixtures every test layer shares: a real ZooKeeper per session, a chroot per test, process cleanup,
the logs of every process a failing test started, and one local Spark session for every module that uses
Spark."""

from __future__ import annotations

import os
import pathlib

import pytest

from magnetar import net
from tests.kit import process as kit_process
from tests.kit.fixtures import bookie_factory  # noqa: F401 (a fixture)
from tests.kit.zookeeper import ZooKeeperServer, start_zookeeper


def pytest_configure(config) -> None:
    """Parallel workers (pytest-xdist) pick server ports from disjoint ranges: two workers picking the same free
    port made the second server unable to bind it (a CI failure). Within its range a worker keeps half for the
    ports it picks and hands the other half to the processes it starts (a supervisor picks its own)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        os.environ[net.PORT_RANGE_ENV] = net.split_port_range(int(worker[2:]), int(count))
    net.keep_half_for_children()


def pytest_sessionstart(session) -> None:
    """Network namespaces and FUSE mounts a killed earlier run left (with the servers inside them) go first; once,
    in the controlling process (parallel workers start after it)."""
    if hasattr(session.config, "workerinput"):
        return
    from tests.kit import leftovers

    for what in leftovers.sweep():
        print(f"removed what a killed test run left: {what}")


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory) -> ZooKeeperServer:
    """One real ZooKeeper server for the whole session (tests isolate themselves by chroot)."""
    base = tmp_path_factory.mktemp("zk")
    server = start_zookeeper(base)
    yield server
    server.process.cleanup()


# The tests' Spark JVM lives minutes and sees inputs of a few thousand rows: code that the C2 compiler would make
# faster never runs long enough to repay it, and its compiler threads took most of the JVM's CPU (measured: more
# than half of a warm audit's) on a 2-core machine. C1 alone compiles quickly and is plenty for such inputs.
SPARK_TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="session")
def spark_session():
    """One local Spark session (``local[2]``, the ``magnetar`` source registered) for every module that uses Spark:
    its JVM and context start once per test run instead of once per module. Modules must leave its settings as
    they found them."""
    pytest.importorskip("pyspark")
    from spark.session import session

    spark = session("local[2]", "magnetar-tests", conf={"spark.driver.extraJavaOptions": SPARK_TEST_JAVA_OPTIONS})
    yield spark
    spark.stop()


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    """A connect string ``host:port/chroot`` private to this test."""
    return zk_server.new_chroot()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        before = getattr(item, "_kit_before", set())
        for proc in [p for p in kit_process.live_processes() if p not in before]:
            report.sections.append((f"log of {proc.name} ({proc.log_path})", proc.log_tail(6000)))


@pytest.fixture(autouse=True)
def _kill_started_processes(request):
    """Kills every process a test started (by its process group) when the test ends."""
    before = set(kit_process.live_processes())
    request.node._kit_before = before
    yield
    started = [p for p in kit_process.live_processes() if p not in before]
    for proc in started:
        proc.cleanup()


def pytest_sessionfinish(session, exitstatus):
    kit_process.kill_all()
