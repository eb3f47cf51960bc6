"""Topic schemas in the global configuration store: one node per version.

Layout::

    /admin/schemas/<tenant>/<namespace>/<encoded topic>/<version>   StoredSchema (JSON)

``<encoded topic>`` is the topic's local name URL-encoded (Pulsar's schema id is ``tenant/namespace/topic``:
the domain takes no part, and a partitioned topic's partitions share their base name's schemas). Versions
are decimal integers from 0. A version node is written once and never changed, so adding a version is a
create: two writers racing for the same number see NodeExistsError and the loser re-reads. Deleting a
schema "softly" adds a version marked ``deleted``; deleting it for good removes the topic's node and its
versions (numbering then starts at 0 again), as Pulsar's forced delete does.

The data is kept as base64 in the JSON value (schemas need not be text). ZooKeeper refuses nodes over
about 1 MiB; the broker's registry bounds the size of what it stores well below that.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass, field

from .configuration import SCHEMAS, check_name
from .errors import InvalidMetadataError
from .models import _dumps, _field, _loads, _str_dict
from .store import MetadataStore


@dataclass(frozen=True)
class StoredSchema:
    """One version of a topic's schema, as stored (``type`` is a Pulsar ``SchemaType`` name)."""

    type: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    timestamp_ms: int = 0
    deleted: bool = False

    def to_json(self) -> bytes:
        return _dumps("StoredSchema", {"type": self.type, "data": base64.b64encode(self.data).decode("ascii"),
                                       "properties": dict(self.properties), "timestamp": self.timestamp_ms,
                                       "deleted": self.deleted})

    @classmethod
    def from_json(cls, data: bytes) -> "StoredSchema":
        k, o = "StoredSchema", _loads("StoredSchema", data)
        try:
            raw = base64.b64decode(_field(k, o, "data", str), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidMetadataError(f"{k}: field 'data' is not base64") from None
        return cls(type=_field(k, o, "type", str), data=raw, properties=_str_dict(k, o, "properties"),
                   timestamp_ms=_field(k, o, "timestamp", int, 0), deleted=_field(k, o, "deleted", bool, False))


class SchemaStore:
    """Typed access to the schema nodes (see the module docstring). Stateless: every call reads the store."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @staticmethod
    def topic_path(tenant: str, namespace: str, encoded_topic: str) -> str:
        if not encoded_topic or encoded_topic in (".", "..") or "/" in encoded_topic:
            raise InvalidMetadataError(f"invalid encoded topic name {encoded_topic!r}")
        return f"{SCHEMAS}/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}/{encoded_topic}"

    async def versions(self, tenant: str, namespace: str, encoded_topic: str) -> list[tuple[int, StoredSchema]]:
        """Every stored version, oldest first ([] when the topic has none)."""
        path = self.topic_path(tenant, namespace, encoded_topic)
        numbers = sorted(int(name) for name in await self.store.children(path) if name.isdigit())
        reads = await asyncio.gather(*(self.store.get(f"{path}/{n}") for n in numbers))
        out = []
        for number, read in zip(numbers, reads):
            if read is None:  # deleted for good meanwhile
                continue
            try:
                out.append((number, StoredSchema.from_json(read.value)))
            except InvalidMetadataError as e:
                raise InvalidMetadataError(f"{path}/{number}: {e}") from None
        return out

    async def add(self, tenant: str, namespace: str, encoded_topic: str, version: int, schema: StoredSchema) -> None:
        """Stores ``version``; NodeExistsError when another writer stored that number first."""
        path = self.topic_path(tenant, namespace, encoded_topic)
        await self.store.create(f"{path}/{version}", schema.to_json(), make_parents=True)

    async def delete_all(self, tenant: str, namespace: str, encoded_topic: str) -> bool:
        """Removes every version; False when there was none."""
        path = self.topic_path(tenant, namespace, encoded_topic)
        if await self.store.exists(path) is None:
            return False
        await self.store.delete(path, recursive=True)
        return True
