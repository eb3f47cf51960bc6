"""Small network helpers shared by the supervisor, the test kit and benchmarks."""

from __future__ import annotations

import os
import random
import re
import socket
import threading
import time

# Ports are picked below the kernel's ephemeral range: a port the OS hands out for "port 0" comes from that
# range, which is also where every outgoing connection takes its source port, so between picking a port and
# the server binding it a client socket could take it ("cannot bind": seen in test runs). Below the range only
# listeners bind. Ports handed out by this process are not handed out again.
#
# Processes that pick ports side by side (the test suite's parallel workers) cannot see each other's picks: two
# could pick the same free port and the second server to bind it fails (seen in CI). Each is given a range of
# its own with MAGNETAR_PORT_RANGE="LOW-HIGH" (inherited by the processes it starts); see port_range(). A process
# that also starts processes picking ports of their own (a test worker starting `magnetar up`) keeps half of its
# range for itself and hands the other half down: keep_half_for_children().
_LOWEST_PORT = 10_000
PORT_RANGE_ENV = "MAGNETAR_PORT_RANGE"
_given: set[int] = set()
_given_lock = threading.Lock()
_own_range: tuple[int, int] | None = None  # set by keep_half_for_children(): this process's half


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def port_range() -> tuple[int, int]:
    """Where :func:`free_port` picks from: ``[low, high)``; MAGNETAR_PORT_RANGE="LOW-HIGH" (both inclusive)
    when set, else from 10,000 up to the ephemeral range. A malformed value is an error, not ignored. After
    :func:`keep_half_for_children`, this process's half."""
    if _own_range is not None:
        return _own_range
    value = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not value:
        return _LOWEST_PORT, _ephemeral_low()
    match = re.fullmatch(r"(\d+)\s*-\s*(\d+)", value)
    if not match or not 1 <= int(match[1]) <= int(match[2]) <= 65_535:
        raise ValueError(f"{PORT_RANGE_ENV}={value!r}: expected LOW-HIGH, 1 <= LOW <= HIGH <= 65535")
    return int(match[1]), int(match[2]) + 1


def split_port_range(index: int, count: int) -> str:
    """The MAGNETAR_PORT_RANGE value of the ``index``-th of ``count`` processes sharing this one's range."""
    if not 0 <= index < count:
        raise ValueError(f"index {index} outside 0..{count - 1}")
    low, high = port_range()
    size = (high - low) // count
    return f"{low + index * size}-{low + (index + 1) * size - 1}"


def keep_half_for_children() -> None:
    """From now on this process picks ports from the lower half of its range, and the processes it starts
    inherit the upper half (MAGNETAR_PORT_RANGE): a supervisor it starts, picking its own servers' ports,
    cannot pick one this process picked or will pick."""
    global _own_range
    low, high = port_range()
    middle = low + (high - low) // 2
    os.environ[PORT_RANGE_ENV] = f"{middle}-{high - 1}"
    _own_range = (low, middle)


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago, from :func:`port_range` when it can be."""
    low, high = port_range()
    with _given_lock:
        for port in random.sample(range(low, high), min(200, max(0, high - low))):
            if port not in _given and _bindable(host, port):
                _given.add(port)
                return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # fall back to the OS's choice
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        _given.add(port)
        return port


def is_listening(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_listening(host: str, port: int, *, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_listening(host, port):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s:.0f} s")


def tune_tcp_socket(sock: socket.socket | None, *, keepalive_idle_s: float, keepalive_timeout_s: float) -> None:
    """TCP_NODELAY (a frame leaves at once, not behind Nagle), and TCP keepalive: after ``keepalive_idle_s``
    without traffic the kernel probes the peer and drops the connection when ``keepalive_timeout_s`` of
    probes go unanswered, so a dead peer of an idle connection is noticed (Linux options; skipped where
    missing). Sent data left unacknowledged that long also drops it (TCP_USER_TIMEOUT)."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    probes = 3
    interval_s = max(1, int(keepalive_timeout_s / probes))
    for name, value in (("TCP_KEEPIDLE", max(1, int(keepalive_idle_s))), ("TCP_KEEPINTVL", interval_s),
                        ("TCP_KEEPCNT", probes),
                        ("TCP_USER_TIMEOUT", int((keepalive_idle_s + keepalive_timeout_s) * 1000))):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
