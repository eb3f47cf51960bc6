"""Fault injection for the consistency audit: real inconsistencies made through the brokers, never by editing
what the audit reads.

Everything goes through Magnetar's own asyncio client (``magnetar.protocol.client``), which can send an entry
with chosen metadata: a *planted* entry is stored in one region as a replicator would store a copy, with
``replicated_from`` naming its origin, the origin producer's name and sequence id, by a producer named like a
replicator (``pulsar.repl.faults.<origin>``; with authentication on, such a name needs a superuser role).

Why this makes faults and not noise:

* A replicator forwards only entries without ``replicated_from`` (no loops), so a planted entry stays in the
  region it was sent to. Planted in its own origin region (``replicated_from`` = that region), it is an
  origin copy no replicator carries anywhere: "published here, never replicated".
* The planting producer has a name of its own, so it never displaces a real replicator (a replicator's name
  is ``pulsar.repl.<origin>``) and the broker's deduplication, which is per producer name, neither drops a
  planted entry nor learns anything from it that would make it drop a real replicated copy later (no
  ``__magnetar.repl.source_position`` property is set, so recovery ignores planted entries too).

Each fault returns the :class:`Fault` the audit should report: kind, region, topic, origin, producer, sequence.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from magnetar.errors import MagnetarError
from magnetar.protocol import MessageId, pb
from magnetar.protocol.client import Auth, Client, InitialPosition, Producer, message_metadata

__all__ = ["Fault", "FaultError", "FaultInjector", "PLANTING_PRODUCER_PREFIX"]

PLANTING_PRODUCER_PREFIX = "pulsar.repl.faults."


class FaultError(MagnetarError):
    """A fault could not be injected (the message to copy is not found, a region refused the entry)."""


@dataclass(frozen=True)
class Fault:
    """What the audit must find: ``kind`` (a check's name) at ``region`` for (topic, origin, producer, seq)."""

    kind: str
    region: str
    topic: str
    origin: str
    producer: str
    seq: int


class FaultInjector:
    """Injects faults into a deployment's regions. ``async with FaultInjector({"us-east": url, ...}) as f:``.

    Args:
        service_urls: region -> binary-protocol URL.
        auth: credentials for every region (a superuser's token when authentication is on).
        ssl_context: for ``pulsar+ssl://`` URLs.
    """

    def __init__(self, service_urls: Mapping[str, str], *, auth: Optional[Auth] = None,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.service_urls = dict(service_urls)
        self.auth = auth
        self.ssl_context = ssl_context
        self._clients: dict[str, Client] = {}
        self._producers: dict[tuple[str, str, str], Producer] = {}
        self._next_seq: dict[tuple[str, str, str], int] = {}

    async def __aenter__(self) -> "FaultInjector":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every producer and client (idempotent)."""
        clients, self._clients = list(self._clients.values()), {}
        self._producers.clear()
        for client in clients:
            await client.close()

    def _client(self, region: str) -> Client:
        if region not in self.service_urls:
            raise FaultError(f"unknown region {region!r}; known: {', '.join(self.service_urls)}")
        client = self._clients.get(region)
        if client is None:
            client = self._clients[region] = Client(self.service_urls[region], auth=self.auth,
                                                    ssl_context=self.ssl_context)
        return client

    async def _producer(self, region: str, topic: str, origin: str) -> Producer:
        key = (region, topic, origin)
        producer = self._producers.get(key)
        if producer is None:
            producer = await self._client(region).create_producer(
                topic, producer_name=PLANTING_PRODUCER_PREFIX + origin, send_timeout_s=30.0)
            self._producers[key] = producer
            self._next_seq[key] = producer.broker_last_sequence_id + 1
        return producer

    # -------------------------------------------------------------------------------------- the primitive

    async def plant(self, region: str, topic: str, *, origin: str, producer: str, seq: int, payload: bytes,
                    properties: Optional[Mapping[str, str]] = None, key: Optional[str] = None,
                    replicate_to: Optional[Sequence[str]] = None, publish_time_ms: Optional[int] = None,
                    metadata: Optional[pb.MessageMetadata] = None, num_messages: int = 1) -> MessageId:
        """Stores one entry in ``region`` as a copy of a message of ``origin`` (``origin == region``: an origin
        copy that is never replicated); ``metadata`` (an origin entry's, batch included) replaces the built one.

        Raises:
            FaultError: the region refused the entry.
        """
        if metadata is None:
            md = message_metadata(producer_name=producer, sequence_id=seq, key=key, properties=properties,
                                  replicate_to=replicate_to,
                                  publish_time_ms=publish_time_ms if publish_time_ms is not None
                                  else int(time.time() * 1000))
        else:
            md = pb.MessageMetadata()
            md.CopyFrom(metadata)
        md.replicated_from = origin
        sender = await self._producer(region, topic, origin)
        send_key = (region, topic, origin)
        send_seq = self._next_seq[send_key]
        self._next_seq[send_key] = send_seq + 1
        try:
            receipt = await sender.send_entry(md, payload, num_messages=num_messages, sequence_id=send_seq)
            return await receipt
        except Exception as e:
            raise FaultError(f"{region} refused the planted entry {producer}/{seq} on {topic}: {e}") from e

    # -------------------------------------------------------------------------------------- the faults

    async def only_in(self, region: str, others: Sequence[str], topic: str, *, producer: str, seq: int,
                      payload: bytes = b"only here") -> list[Fault]:
        """A message published in ``region`` that never reaches ``others``: missing in each of them."""
        await self.plant(region, topic, origin=region, producer=producer, seq=seq, payload=payload)
        return [Fault("missing", other, topic, region, producer, seq) for other in others]

    async def duplicate(self, topic: str, *, origin: str, into: str, producer: str, seq: int,
                        timeout_s: float = 30.0) -> list[Fault]:
        """Stores the entry holding ``producer``'s message ``seq`` (as ``origin`` stored it) once more in ``into``,
        byte for byte: every message of that entry is then held twice in ``into``."""
        metadata, payload = await self._find_entry(origin, topic, producer, seq, timeout_s)
        count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        await self.plant(into, topic, origin=origin, producer=producer, seq=seq, payload=payload,
                         metadata=metadata, num_messages=count)
        first = metadata.sequence_id
        return [Fault("duplicate", into, topic, origin, producer, s) for s in range(first, first + count)]

    async def reorder(self, topic: str, *, origin: str, into: str, producer: str, seqs: tuple[int, int],
                      payload: bytes = b"reordered") -> list[Fault]:
        """Two messages stored in ``origin`` in order, and in ``into`` swapped: the first of them is stored
        after the second in ``into``."""
        low, high = sorted(seqs)
        for seq in (low, high):
            await self.plant(origin, topic, origin=origin, producer=producer, seq=seq, payload=payload)
        for seq in (high, low):
            await self.plant(into, topic, origin=origin, producer=producer, seq=seq, payload=payload)
        return [Fault("order", into, topic, origin, producer, low)]

    async def changed_payload(self, topic: str, *, origin: str, into: str, producer: str, seq: int,
                              payload: bytes = b"original", changed: bytes = b"changed") -> list[Fault]:
        """One message whose copy in ``into`` carries another payload than its origin's."""
        await self.plant(origin, topic, origin=origin, producer=producer, seq=seq, payload=payload)
        await self.plant(into, topic, origin=origin, producer=producer, seq=seq, payload=changed)
        return [Fault("payload_mismatch", into, topic, origin, producer, seq)]

    async def stray(self, topic: str, *, origin: str, into: str, producer: str, seq: int,
                    replicate_to: Optional[Sequence[str]] = None, payload: bytes = b"stray") -> list[Fault]:
        """A message of ``origin`` that arrives in ``into`` although it was not routed there: its
        ``replicate_to`` names ``origin`` only (default), or ``into`` is outside the topic's replication
        clusters (pass ``replicate_to=()``)."""
        routed = [origin] if replicate_to is None else list(replicate_to)
        for region in (origin, into):
            await self.plant(region, topic, origin=origin, producer=producer, seq=seq, payload=payload,
                             replicate_to=routed)
        return [Fault("stray", into, topic, origin, producer, seq)]

    async def _find_entry(self, region: str, topic: str, producer: str, seq: int,
                          timeout_s: float) -> tuple[pb.MessageMetadata, bytes]:
        """The stored entry (metadata, payload as stored) holding ``producer``'s message ``seq`` in ``region``."""
        reader = await self._client(region).subscribe(
            topic, f"faults-{time.monotonic_ns()}", durable=False, whole_entries=True,
            initial_position=InitialPosition.EARLIEST, start_message_id=MessageId.EARLIEST)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                for message in await reader.receive_batch(timeout_s=max(0.1, deadline - time.monotonic())):
                    md = message.metadata
                    count = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
                    if md.producer_name == producer and md.sequence_id <= seq < md.sequence_id + count:
                        return md, message.payload
            raise FaultError(f"no message {producer}/{seq} found in {topic} in {region} within {timeout_s} s")
        finally:
            await reader.close()
