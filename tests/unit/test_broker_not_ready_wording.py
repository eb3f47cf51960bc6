"""A topic closing under a request answers ServiceNotReady worded so pulsar-client keeps its connection.

pulsar-client's C++ core (``lib/ClientConnectionAdaptor.h``) closes the whole connection on a ServiceNotReady
error unless the message contains one of a few phrases Pulsar's broker uses, "is being unloaded" among them;
a closed connection fails every other producer and consumer sharing it. Seen as a 30 s subscribe stall while an
automatic bundle split unloaded the topic.
"""

from __future__ import annotations

from broker.service.errors import ServiceNotReadyError, topic_not_ready
from magnetar.protocol import pb


def test_topic_not_ready_is_retriable_service_not_ready_worded_as_an_unload() -> None:
    err = topic_not_ready("persistent://t/ns/x", "closing")
    assert isinstance(err, ServiceNotReadyError)
    assert err.server_error == pb.ServerError.ServiceNotReady
    assert "is being unloaded" in str(err) and "persistent://t/ns/x" in str(err) and "closing" in str(err)
