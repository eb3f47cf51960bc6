"""The connection as its consumers' sink (``topics.api.ConsumerSink``): what a consumer sends its client.

MESSAGE frames splice each stored entry, untouched, behind a hand-encoded header
(``wire.message_frame_header``): one vectored write per dispatch round, no copy of the entry. The entry's
broker entry metadata (the 0x0e02 section the managed ledger stored) goes along only to clients that asked for
it in CONNECT when the broker exposes it (``exposes_broker_entry_metadata``); for the others the frame starts
after it (a memoryview slice, still no copy), as Pulsar strips it.

REACHED_END_OF_TOPIC goes only to clients that handle it (:func:`peer_handles_end_of_topic`). Pulsar sends it to
every client speaking protocol v9 or later, but the C++ core that pulsar-client (Python, C++, Node.js) wraps
has never had a case for it: ``ClientConnection::handleIncomingCommand`` (pulsar-client-cpp v4.2.0,
lib/ClientConnection.cc:991-993) falls through to ``default``, logs "Received invalid message from server"
and closes the connection; pulsar-client-go's ``connection.receivedCommand`` does the same ("Received invalid
command type"). Their consumers then reconnect, the new consumer is again at the end, is told again, and so
on (pulsar-client: every 100 ms, its first reconnection delay). Those clients simply wait at the end; their
readers learn it from GET_LAST_MESSAGE_ID (``has_message_available()`` is False).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Sequence

from broker.managed_ledger.api import Entry
from magnetar.protocol import encode_command, pb, wrap
from magnetar.protocol.frames import MAGIC_BROKER_ENTRY_METADATA

from . import wire

if TYPE_CHECKING:
    from ..topics.consumer import Consumer

_BEM_MAGIC = struct.pack(">H", MAGIC_BROKER_ENTRY_METADATA)
_U32 = struct.Struct(">I")
_END_OF_TOPIC_MIN_PROTOCOL = 9  # the protocol version that added REACHED_END_OF_TOPIC
# CONNECT client_version prefixes of official clients that close the connection on REACHED_END_OF_TOPIC
# (see the module docstring): the C++ core ("Pulsar-CPP-v4.2.0", also under Python and Node.js) and Go.
_CLIENTS_WITHOUT_END_OF_TOPIC = ("Pulsar-CPP-v", "Pulsar Go ")


def peer_handles_end_of_topic(client_version: str, protocol_version: int) -> bool:
    """Whether a client that announced ``client_version`` / ``protocol_version`` in CONNECT may be sent
    REACHED_END_OF_TOPIC: as Pulsar, protocol v9 or later, except the clients known to drop the connection
    on it (the Java client and Magnetar's own handle it)."""
    return protocol_version >= _END_OF_TOPIC_MIN_PROTOCOL and not client_version.startswith(
        _CLIENTS_WITHOUT_END_OF_TOPIC)


class ConsumerEndpoints:
    """Mixed into ``Connection`` (which provides ``write``, ``writelines``, ``consumers``, ``forget_consumer``,
    ``client_version``, ``protocol_version`` and ``exposes_broker_entry_metadata``)."""

    exposes_broker_entry_metadata = False  # set per connection by CONNECT (commands.handle_connect)

    def send_messages(self, consumer: "Consumer", items: Sequence[tuple[Entry, int, Sequence[int]]]) -> None:
        cid = consumer.consumer_id
        epoch = consumer.consumer_epoch
        partition = consumer.partition_index
        frames: list = []
        strip = not self.exposes_broker_entry_metadata
        for entry, redeliveries, ack_set in items:
            pos = entry.position
            data = entry.data
            if strip and data[:2] == _BEM_MAGIC:
                data = memoryview(data)[6 + _U32.unpack_from(data, 2)[0]:]
            frames.append(wire.message_frame_header(cid, pos.ledger_id, pos.entry_id, len(data),
                                                    redelivery_count=redeliveries, ack_set=ack_set,
                                                    consumer_epoch=epoch, partition=partition))
            frames.append(data)
        self.writelines(frames)

    def notify_active(self, consumer: "Consumer", active: bool) -> None:
        self.write(encode_command(wrap(pb.CommandActiveConsumerChange(
            consumer_id=consumer.consumer_id, is_active=active))))

    def notify_end_of_topic(self, consumer: "Consumer") -> bool:
        if not peer_handles_end_of_topic(self.client_version, self.protocol_version):
            return False
        self.write(encode_command(wrap(pb.CommandReachedEndOfTopic(consumer_id=consumer.consumer_id))))
        return True

    def notify_consumer_closed(self, consumer: "Consumer") -> None:
        if self.consumers.get(consumer.consumer_id) is consumer:
            self.forget_consumer(consumer.consumer_id, consumer)
            self.write(encode_command(wrap(pb.CommandCloseConsumer(consumer_id=consumer.consumer_id, request_id=0))))
