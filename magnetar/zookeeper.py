"""Runs a real standalone ZooKeeper server from an installed distribution.

Magnetar does not ship ZooKeeper: it uses the jars of Debian's ``zookeeper`` package
(``/usr/share/java``) or of an Apache release unpacked at ``ZOOKEEPER_HOME``. This module finds them,
writes a ``zoo.cfg`` for one server bound to a given address and port, and builds the ``java`` command
line. ``magnetar zookeeper`` execs it; the supervisor and the test kit spawn it as a child process.

With ``--metrics-port``, ``magnetar zookeeper`` stays the JVM's parent instead of exec-ing it (:func:`run_beside`),
so that something can run beside ZooKeeper in the same process group: the ``/metrics`` endpoint of
``observability.zookeeper``, which the command line wires in (this room imports no other).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from magnetar.errors import InstallError

INSTALL_HINT = (
    "ZooKeeper was not found. Install it with `sudo apt-get update && sudo apt-get install -y zookeeper` "
    "(Debian/Ubuntu), or unpack an Apache ZooKeeper release and set ZOOKEEPER_HOME to it."
)

# The jars a standalone server needs from Debian's package and its dependencies (/usr/share/java).
_DEBIAN_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-log4j12.jar",
    "log4j-1.2.jar",
    "netty-all.jar",
    "commons-cli.jar",
    "commons-io.jar",
    "metrics-core.jar",
    "snappy-java.jar",
)

_LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} [%t] %-5p %c{1} - %m%n
"""


def find_classpath() -> str:
    """Returns the Java classpath of an installed ZooKeeper, or raises InstallError naming the fix."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        root = pathlib.Path(home)
        jars = sorted(root.glob("lib/*.jar")) + sorted(root.glob("*.jar"))
        if any(j.name.startswith("zookeeper") for j in jars):
            return os.pathsep.join(str(j) for j in jars)
        raise InstallError(f"ZOOKEEPER_HOME={home} holds no zookeeper jar. {INSTALL_HINT}")
    java_dir = pathlib.Path("/usr/share/java")
    if (java_dir / "zookeeper.jar").exists():
        return os.pathsep.join(str(java_dir / j) for j in _DEBIAN_JARS if (java_dir / j).exists())
    raise InstallError(INSTALL_HINT)


def find_java() -> str:
    java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else None)
    if not java or not os.path.exists(java):
        raise InstallError("Java was not found. Install it with `sudo apt-get install -y default-jre`.")
    return java


@dataclass(frozen=True)
class ZooKeeperSettings:
    """One standalone server.

    Attributes:
        data_dir: where snapshots and the transaction log go (created if missing).
        port: client port.
        host: address to bind (127.0.0.1 by default: tests and local topologies never listen outside).
        tick_time_ms: ZooKeeper's tick; session timeouts are negotiated between 2 and 20 ticks.
        heap_mb: JVM heap.
    """

    data_dir: pathlib.Path
    port: int
    host: str = "127.0.0.1"
    tick_time_ms: int = 500
    heap_mb: int = 256


def write_config(settings: ZooKeeperSettings) -> pathlib.Path:
    """Writes ``zoo.cfg`` and ``log4j.properties`` into the data dir; returns the ``zoo.cfg`` path."""
    data_dir = settings.data_dir.resolve()
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    cfg = data_dir / "zoo.cfg"
    cfg.write_text(
        "\n".join(
            [
                f"tickTime={settings.tick_time_ms}",
                f"dataDir={data_dir / 'data'}",
                f"clientPort={settings.port}",
                f"clientPortAddress={settings.host}",
                "maxClientCnxns=0",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
                # Short timeouts keep session-expiry handling testable; clients ask for what they need.
                f"minSessionTimeout={settings.tick_time_ms * 2}",
                f"maxSessionTimeout={max(settings.tick_time_ms * 20, 30000)}",
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
                "",
            ]
        )
    )
    (data_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES)
    return cfg


def command(settings: ZooKeeperSettings) -> list[str]:
    """The full ``java ...`` command line for a standalone server with these settings."""
    cfg = write_config(settings)
    return [
        find_java(),
        f"-Xmx{settings.heap_mb}m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dzookeeper.log.dir={settings.data_dir.resolve()}",
        f"-Dlog4j.configuration=file:{settings.data_dir.resolve() / 'log4j.properties'}",
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        find_classpath(),
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(cfg),
    ]


def four_letter_word(host: str, port: int, word: str = "ruok", timeout_s: float = 1.0) -> bytes:
    """Sends a ZooKeeper four-letter command and returns the raw answer (raises OSError when down)."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while True:
            data = sock.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def is_healthy(host: str, port: int) -> bool:
    try:
        return four_letter_word(host, port, "ruok") == b"imok"
    except OSError:
        return False


def wait_healthy(host: str, port: int, *, timeout_s: float = 30.0) -> None:
    """Blocks until the server answers ``ruok`` with ``imok``; raises TimeoutError at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_healthy(host, port):
            return
        time.sleep(0.05)
    raise TimeoutError(f"ZooKeeper at {host}:{port} did not become healthy within {timeout_s:.0f} s")


def run_foreground(settings: ZooKeeperSettings) -> None:
    """Replaces this process with the ZooKeeper JVM (what ``magnetar zookeeper`` does)."""
    argv = command(settings)
    os.execv(argv[0], argv)


class Closeable(Protocol):
    def close(self) -> None: ...


_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _die_with_parent() -> None:
    """In the forked child: the kernel SIGKILLs it when its parent dies, however the parent dies."""
    name = ctypes.util.find_library("c")
    if name:
        ctypes.CDLL(name, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run_beside(settings: ZooKeeperSettings, beside: Callable[[], Closeable]) -> int:
    """Runs the ZooKeeper JVM as a child and ``beside()`` next to it until the JVM exits; returns its exit code.

    The JVM stays in this process's group (a supervisor stopping the group stops both), gets every stop signal
    this process gets, and is killed if this process dies first, so a ZooKeeper never outlives its wrapper. A
    JVM killed by a signal gives 128 + the signal, as a shell reports it.
    """
    argv = command(settings)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        # A process-directed signal goes to any thread that does not block it; only the main thread runs Python
        # handlers, and only its own wait is interrupted by one. So the helper's threads start with the stop
        # signals blocked (threads inherit the mask), and only the main thread takes them.
        signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        try:
            helper = beside()
        except BaseException:
            child.kill()
            child.wait()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
        try:
            code = child.wait()
        finally:
            helper.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
