"""magnetar.net.free_port: ports a server can bind, never handed out twice, below the ephemeral range.

Regression: ports picked by the OS for "port 0" come from the ephemeral range, where client sockets take
their source ports too; one was taken between picking and binding ("cannot bind gRPC to 127.0.0.1:...").
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from magnetar import net


@pytest.fixture(autouse=True)
def _range_from_the_environment(monkeypatch) -> None:
    """These tests set the range through the environment, as a parent process would; the suite's own split
    (conftest: keep_half_for_children) is set aside for them."""
    monkeypatch.setattr(net, "_own_range", None)


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low = net._ephemeral_low()
    ports = [net.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    if low - net._LOWEST_PORT > 1_000:
        assert all(net._LOWEST_PORT <= p < low for p in ports), (low, sorted(ports)[:5], sorted(ports)[-5:])
    for port in ports[:20]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_handed_out(monkeypatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        monkeypatch.setenv(net.PORT_RANGE_ENV, f"{taken}-{taken}")  # the only candidate is busy
        port = net.free_port()
        assert port != taken
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # the fallback (the OS's choice) is free


def test_the_range_comes_from_the_environment_and_splits_without_overlap(monkeypatch) -> None:
    """Regression: two pytest workers picked the same free port; the second bookie could not bind it (CI)."""
    monkeypatch.setenv(net.PORT_RANGE_ENV, "20000-20999")
    assert net.port_range() == (20_000, 21_000)
    slices = [net.split_port_range(i, 3) for i in range(3)]
    assert slices == ["20000-20332", "20333-20665", "20666-20998"]
    monkeypatch.setenv(net.PORT_RANGE_ENV, slices[1])
    ports = {net.free_port() for _ in range(50)}
    assert all(20_333 <= p <= 20_665 for p in ports), sorted(ports)


def test_a_malformed_range_is_refused_by_name(monkeypatch) -> None:
    for bad in ("20000", "9-x", "30000-20000", "0-10", "1-70000"):
        monkeypatch.setenv(net.PORT_RANGE_ENV, bad)
        with pytest.raises(ValueError, match=net.PORT_RANGE_ENV):
            net.port_range()


def test_a_parent_keeps_half_of_its_range_and_hands_down_the_other(monkeypatch) -> None:
    """A test worker and the supervisor it starts both pick free ports; each from its own half, they cannot
    pick the same one."""
    monkeypatch.setenv(net.PORT_RANGE_ENV, "20000-20999")
    net.keep_half_for_children()
    assert net.port_range() == (20_000, 20_500)
    assert os.environ[net.PORT_RANGE_ENV] == "20500-20999"
    ours = {net.free_port() for _ in range(50)}
    assert all(20_000 <= p < 20_500 for p in ours), sorted(ours)
    child = subprocess.run([sys.executable, "-c", "from magnetar import net; print(net.port_range())"],
                           capture_output=True, text=True, check=True, timeout=60)
    assert child.stdout.strip() == "(20500, 21000)"
