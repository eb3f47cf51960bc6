"""magnetar.net.free_port: ports a server can bind, never handed out twice, below the ephemeral range.

Regression: ports picked by the OS for "port 0" come from the ephemeral range, where client sockets take
their source ports too; one was taken between picking and binding ("cannot bind gRPC to 127.0.0.1:...").
"""

from __future__ import annotations

import socket

from magnetar import net


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
        choices = iter([taken, taken, taken])
        monkeypatch.setattr(net.random, "randrange", lambda a, b: next(choices, a + 7))
        monkeypatch.setattr(net, "_ephemeral_low", lambda: 60_000)
        net._given.discard(net._LOWEST_PORT + 7)
        port = net.free_port()
        assert port != taken
