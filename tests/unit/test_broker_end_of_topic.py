"""Which clients the broker sends REACHED_END_OF_TOPIC to (``broker.service.session.consumer_endpoints.peer_handles_end_of_topic``).

The client versions are what each client announces in CONNECT: pulsar-client 3.13 (Python, over the C++
core 4.2.0) sends "Pulsar-CPP-v4.2.0" (a configured description is appended after a '-'); the Go client
"Pulsar Go <version>"; the Java client "Pulsar-Java-v<version>"; Magnetar's own client "magnetar-<version>".
"""

from __future__ import annotations

import pytest

from broker.service.session.consumer_endpoints import peer_handles_end_of_topic
from magnetar.protocol.client import CLIENT_VERSION, PROTOCOL_VERSION


@pytest.mark.parametrize("client_version", [
    "Pulsar-CPP-v4.2.0",          # pulsar-client 3.13: drops the connection ("Received invalid message")
    "Pulsar-CPP-v3.7.0-forked",
    "Pulsar Go v0.15.1",          # pulsar-client-go: drops it too ("Received invalid command type")
])
def test_clients_that_drop_the_connection_on_it_are_not_told(client_version):
    assert not peer_handles_end_of_topic(client_version, 20)


@pytest.mark.parametrize("client_version", ["Pulsar-Java-v3.3.1", CLIENT_VERSION, "some-other-client 1.0"])
def test_other_clients_are_told_as_pulsar_tells_them(client_version):
    assert peer_handles_end_of_topic(client_version, PROTOCOL_VERSION)
    assert peer_handles_end_of_topic(client_version, 9)
    assert not peer_handles_end_of_topic(client_version, 8)  # the command came with protocol v9
