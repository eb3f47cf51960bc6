"""A small reader that builds the audit's input through the brokers, for when the data source is not installed.

The data source (``spark.read.format("magnetar")``) reads ledgers straight from the bookies on the executors;
this reader is its stand-in: on the driver, one non-durable reader per topic (partition) and region with
Magnetar's own asyncio client, which sees what the audit needs and pulsar-client does not expose (the
sequence id, ``replicated_from``, ``replicate_to``). It reads each topic up to the last message that was
stored when it started, and returns rows with the contract's columns plus ``__replicateTo``.

The read of a topic ends at the last message id the broker answers: its last deliverable message (the broker
steps back over trailing markers, which are never delivered), or once nothing arrived for ``idle_s`` after the
broker said there is more (a guard: a broker answering a marker's id, as Pulsar's did before 3.3, would
otherwise keep the read waiting).

Meant for tests and small deployments: every row passes through the driver.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from typing import Any, Iterable, Optional, Sequence

from pyspark.sql.types import StructType

from magnetar.protocol import MessageId
from magnetar.protocol.client import Auth, Client, Message
from magnetar.topic_name import TopicName

from . import columns as C
from .errors import AuditError
from .topology import RegionEndpoints, Topology

__all__ = ["SCHEMA", "read_rows"]

SCHEMA = StructType([*C.CONTRACT_SCHEMA.fields, C.REPLICATE_TO_FIELD])


def _timestamp(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def to_row(message: Message, region: str, topic: str) -> tuple:
    """One message as a row of :data:`SCHEMA`."""
    md = message.metadata
    mid = message.message_id
    event_ms = message.event_time_ms
    return (
        message.payload,
        message.key,
        topic,
        mid.to_proto().SerializeToString(),
        _timestamp(md.publish_time),
        _timestamp(event_ms) if event_ms else None,
        message.properties,
        region,
        md.producer_name,
        message.sequence_id,
        message.replicated_from,
        mid.ledger_id,
        mid.entry_id,
        mid.batch_index,
        list(md.replicate_to) or None,
    )


def _past(mid: MessageId, last: MessageId) -> bool:
    """True once ``mid`` is the last message (or beyond)."""
    if (mid.ledger_id, mid.entry_id) != (last.ledger_id, last.entry_id):
        return (mid.ledger_id, mid.entry_id) > (last.ledger_id, last.entry_id)
    return mid.batch_index < 0 or mid.batch_size <= 0 or mid.batch_index >= mid.batch_size - 1


async def _read_topic(client: Client, region: str, topic: str, idle_s: float) -> list[tuple]:
    reader = await client.create_reader(topic, MessageId.EARLIEST, receiver_queue_size=2000)
    rows: list[tuple] = []
    try:
        last = await reader.get_last_message_id()
        if last.entry_id < 0:
            return rows
        while True:
            batch = await reader.receive_batch(max_messages=2000, timeout_s=idle_s)
            if not batch:
                return rows  # nothing more arrives (see the module docstring)
            for message in batch:
                if (message.message_id.ledger_id, message.message_id.entry_id) > (last.ledger_id, last.entry_id):
                    return rows
                rows.append(to_row(message, region, topic))
                if _past(message.message_id, last):
                    return rows
    finally:
        await reader.close()


async def _partitions(client: Client, topic: str) -> list[str]:
    name = TopicName.parse(topic)
    if name.is_partition:
        return [topic]
    count = await client.get_partitions(topic)
    return [name.partition_name(i) for i in range(count)] if count else [topic]


async def _read_region(region: RegionEndpoints, topics: Sequence[str], auth: Optional[Auth],
                       ssl_context: Optional[ssl.SSLContext], idle_s: float) -> list[tuple]:
    rows: list[tuple] = []
    async with Client(region.service_url, auth=auth, ssl_context=ssl_context, operation_timeout_s=30.0) as client:
        for topic in topics:
            for partition in await _partitions(client, topic):
                rows.extend(await _read_topic(client, region.name, partition, idle_s))
    return rows


async def read_rows_async(topology: Topology, topics: Iterable[str], *, idle_s: float = 5.0) -> list[tuple]:
    """Every region's copies of ``topics`` as rows of :data:`SCHEMA` (regions read concurrently)."""
    topics = list(topics)
    auth = Auth.token(topology.token) if topology.token else None
    ctx = ssl.create_default_context(cafile=topology.tls_trust_certs_file or None) \
        if any(r.service_url.startswith("pulsar+ssl://") for r in topology.regions.values()) else None
    results = await asyncio.gather(*(_read_region(r, topics, auth, ctx, idle_s) for r in topology.regions.values()),
                                   return_exceptions=True)
    rows: list[tuple] = []
    for region, result in zip(topology.regions, results):
        if isinstance(result, BaseException):
            raise AuditError(f"{region}: reading through the brokers failed: {result}") from result
        rows.extend(result)
    return rows


def read_rows(topology: Topology, topics: Iterable[str], **kwargs: Any) -> list[tuple]:
    """:func:`read_rows_async` from synchronous code (its own event loop)."""
    return asyncio.run(read_rows_async(topology, topics, **kwargs))
