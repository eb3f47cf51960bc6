"""Managed-ledger and cursor metadata in a region's local store: typed values, strict JSON, compare-and-set.

Layout (in the region's own ZooKeeper)::

    /managed-ledgers/<name>                                  ManagedLedgerInfo
    /managed-ledgers/<name>/__cursors/<encoded cursor name>  ManagedCursorInfo

``<name>`` is the topic's path form ``tenant/namespace/persistent/encoded-local-name`` (``TopicName.path``),
so managed ledgers are nested znodes and a namespace's topics are the children of
``/managed-ledgers/<tenant>/<namespace>/persistent``. Cursors live one level further down, under the fixed
folder ``__cursors``, never directly under the topic node: a cursor name can then never be mistaken for a
deeper topic segment (a managed-ledger name may not contain a ``__cursors`` segment, so the folder is
unambiguous). Cursor names are URL-encoded as Pulsar encodes local names (``encode_local_name``: only
``A-Za-z0-9.-*_`` kept, space as ``+``), with ``.`` escaped when the whole name is ``.`` or ``..``.
Intermediate nodes (tenant, namespace, domain) are empty; a node holding a managed ledger has JSON.

Values (``"version": 1`` is the schema, as everywhere in ``config_store``)::

    ManagedLedgerInfo  {"version": 1, "ledgers": [{"ledgerId", "entries", "size", "timestamp"}, ...],
                        "state": "OPEN" | "TERMINATED", "properties": {str: str}}
    ManagedCursorInfo  {"version": 1, "markDelete": {"ledgerId", "entryId"},
                        "individuallyDeleted": [[startLedger, startEntry, endLedger, endEntry], ...],
                        "properties": {str: int}, "lastActive": <ms since epoch>,
                        "batchDeletedIndexes": [[ledgerId, entryId, [word, ...]], ...]}   (optional)

``individuallyDeleted`` ranges are open-closed ``(start, end]`` like Pulsar's. ``batchDeletedIndexes`` is
Pulsar's ``batchedEntryDeletionIndexInfo``: for a batch entry some of whose members are acknowledged (batch-index
acks), the bit set of the members *still unacknowledged* as signed int64 words (``java.util.BitSet.toLongArray``
order: bit ``i`` of the set is bit ``i % 64`` of word ``i // 64``), positions ascending, above ``markDelete``. The
field is left out when empty, so records without it read as before and older readers ignore it.

``entries``/``size`` of a ledger are recorded when it is closed (rollover); the open ledger is listed with zeros
and its length is established from the ledger's own metadata (after recovery) when the managed ledger is next
opened.

Guarantees: every write of an existing node is a compare-and-set on its ZooKeeper version; a write whose
outcome is unknown (connection lost while it was in flight) is resolved by re-reading the node, never by a
blind retry: it counts as applied only if the node holds exactly the bytes written at the next version.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from magnetar.topic_name import decode_local_name, encode_local_name

from .errors import (BadVersionError, InvalidMetadataError, MetadataUnavailableError, NodeExistsError,
                     NotEmptyError, NotFoundError, SessionLostError)
from .models import Versioned, _dumps, _field, _loads, _str_dict
from .store import MetadataStore, join_path
from .watches import WatchHandle

log = logging.getLogger("config_store")

MANAGED_LEDGERS = "/managed-ledgers"
CURSORS_FOLDER = "__cursors"
_UNKNOWN_OUTCOME_ATTEMPTS_MAX = 5


# ---------------------------------------------------------------------------------------------- values


class ManagedLedgerMetaState(enum.Enum):
    """The stored state of a managed ledger: OPEN accepts appends; TERMINATED (topic termination) does not."""

    OPEN = "OPEN"
    TERMINATED = "TERMINATED"


@dataclass(frozen=True)
class LedgerInfo:
    """One ledger of a managed ledger: its id and, once closed, its entry count, byte size and close time."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp_ms: int = 0

    def __post_init__(self) -> None:
        for name in ("ledger_id", "entries", "size", "timestamp_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise InvalidMetadataError(f"LedgerInfo: {name} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True)
class ManagedLedgerInfo:
    """A managed ledger's stored state: its ledgers in ascending id order (the last one is written to)."""

    ledgers: list[LedgerInfo] = field(default_factory=list)
    state: ManagedLedgerMetaState = ManagedLedgerMetaState.OPEN
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ledgers", list(self.ledgers))
        object.__setattr__(self, "properties", dict(self.properties))
        ids = [info.ledger_id for info in self.ledgers]
        if any(b <= a for a, b in zip(ids, ids[1:])):
            raise InvalidMetadataError(f"ManagedLedgerInfo: ledger ids must strictly ascend, got {ids}")

    def to_json(self) -> bytes:
        return _dumps("ManagedLedgerInfo", {
            "ledgers": [{"ledgerId": i.ledger_id, "entries": i.entries, "size": i.size, "timestamp": i.timestamp_ms}
                        for i in self.ledgers],
            "state": self.state.value,
            "properties": dict(self.properties),
        })

    @classmethod
    def from_json(cls, data: bytes) -> "ManagedLedgerInfo":
        k, o = "ManagedLedgerInfo", _loads("ManagedLedgerInfo", data)
        ledgers = []
        for item in _field(k, o, "ledgers", list):
            if not isinstance(item, dict):
                raise InvalidMetadataError(f"{k}: each ledger must be an object")
            kl = k + ".ledgers"
            ledgers.append(LedgerInfo(ledger_id=_field(kl, item, "ledgerId", int),
                                      entries=_field(kl, item, "entries", int, 0),
                                      size=_field(kl, item, "size", int, 0),
                                      timestamp_ms=_field(kl, item, "timestamp", int, 0)))
        state = _field(k, o, "state", str, "OPEN")
        try:
            state_enum = ManagedLedgerMetaState(state)
        except ValueError:
            raise InvalidMetadataError(f"{k}: unknown state {state!r}") from None
        return cls(ledgers=ledgers, state=state_enum, properties=_str_dict(k, o, "properties"))


@dataclass(frozen=True)
class ManagedCursorInfo:
    """A durable cursor's stored state.

    ``mark_delete`` is ``(ledger_id, entry_id)``; ``individually_deleted`` holds open-closed ranges
    ``(start_ledger, start_entry, end_ledger, end_entry)`` above it, ascending and disjoint.
    ``batch_deleted`` holds ``(ledger_id, entry_id, words)`` for partly acknowledged batch entries above it,
    ascending: ``words`` are the signed int64 words of the bit set of members still unacknowledged (not all 0).
    """

    mark_delete: tuple[int, int]
    individually_deleted: list[tuple[int, int, int, int]] = field(default_factory=list)
    properties: dict[str, int] = field(default_factory=dict)
    last_active_ms: int = 0
    batch_deleted: list[tuple[int, int, tuple[int, ...]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        md = tuple(self.mark_delete)
        if len(md) != 2 or not all(type(x) is int for x in md) or md[0] < 0 or md[1] < -1:
            raise InvalidMetadataError(f"ManagedCursorInfo: bad markDelete {self.mark_delete!r}")
        object.__setattr__(self, "mark_delete", md)
        ranges = [tuple(r) for r in self.individually_deleted]
        for r in ranges:
            if len(r) != 4 or not all(type(x) is int for x in r) or not (r[0], r[1]) < (r[2], r[3]):
                raise InvalidMetadataError(f"ManagedCursorInfo: bad individually deleted range {list(r)!r}")
        for a, b in zip(ranges, ranges[1:]):
            if not (a[2], a[3]) < (b[0], b[1]):
                raise InvalidMetadataError(f"ManagedCursorInfo: ranges {list(a)} and {list(b)} overlap or are unsorted")
        if ranges and (ranges[0][0], ranges[0][1]) < md:
            raise InvalidMetadataError(f"ManagedCursorInfo: range {list(ranges[0])} starts below markDelete {md}")
        object.__setattr__(self, "individually_deleted", ranges)
        props = dict(self.properties)
        if not all(isinstance(k, str) and type(v) is int for k, v in props.items()):
            raise InvalidMetadataError("ManagedCursorInfo: properties must map strings to integers")
        object.__setattr__(self, "properties", props)
        if type(self.last_active_ms) is not int:
            raise InvalidMetadataError("ManagedCursorInfo: lastActive must be an integer")
        batch = []
        for b in self.batch_deleted:
            ok = isinstance(b, (tuple, list)) and len(b) == 3 and type(b[0]) is int and type(b[1]) is int \
                and isinstance(b[2], (tuple, list)) and (b[0], b[1]) > md and any(b[2]) \
                and all(type(w) is int and -2**63 <= w < 2**63 for w in b[2])
            if not ok:
                raise InvalidMetadataError(f"ManagedCursorInfo: bad batch deleted indexes {b!r} (markDelete {md})")
            batch.append((b[0], b[1], tuple(b[2])))
        for a, b in zip(batch, batch[1:]):
            if not (a[0], a[1]) < (b[0], b[1]):
                raise InvalidMetadataError(f"ManagedCursorInfo: batch deleted indexes at {a[:2]} and {b[:2]} are "
                                           "unsorted or repeated")
        object.__setattr__(self, "batch_deleted", batch)

    def to_json(self) -> bytes:
        fields = {
            "markDelete": {"ledgerId": self.mark_delete[0], "entryId": self.mark_delete[1]},
            "individuallyDeleted": [list(r) for r in self.individually_deleted],
            "properties": dict(self.properties),
            "lastActive": self.last_active_ms,
        }
        if self.batch_deleted:
            fields["batchDeletedIndexes"] = [[lid, eid, list(words)] for lid, eid, words in self.batch_deleted]
        return _dumps("ManagedCursorInfo", fields)

    @classmethod
    def from_json(cls, data: bytes) -> "ManagedCursorInfo":
        k, o = "ManagedCursorInfo", _loads("ManagedCursorInfo", data)
        md = _field(k, o, "markDelete", dict)
        ranges = _field(k, o, "individuallyDeleted", list, list)
        for r in ranges:
            if not isinstance(r, list) or len(r) != 4 or not all(type(x) is int for x in r):
                raise InvalidMetadataError(f"{k}: each individually deleted range must be 4 integers, got {r!r}")
        props = _field(k, o, "properties", dict, dict)
        if not all(type(v) is int for v in props.values()):
            raise InvalidMetadataError(f"{k}: field 'properties' must map strings to integers")
        batch = _field(k, o, "batchDeletedIndexes", list, list)
        for b in batch:
            if not isinstance(b, list) or len(b) != 3 or not isinstance(b[2], list):
                raise InvalidMetadataError(f"{k}: each batch deleted index must be [ledgerId, entryId, [words]], "
                                           f"got {b!r}")
        return cls(mark_delete=(_field(k + ".markDelete", md, "ledgerId", int),
                                _field(k + ".markDelete", md, "entryId", int)),
                   individually_deleted=[tuple(r) for r in ranges], properties=dict(props),
                   last_active_ms=_field(k, o, "lastActive", int, 0),
                   batch_deleted=[(b[0], b[1], tuple(b[2])) for b in batch])


# ---------------------------------------------------------------------------------------------- paths


def check_managed_ledger_name(name: str) -> str:
    """Returns ``name`` if usable as a managed-ledger name (``a/b/c/d``-style, no empty, ``.``, ``..`` or
    ``__cursors`` segment), else InvalidMetadataError."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidMetadataError(f"invalid managed-ledger name {name!r}")
    for segment in name.split("/"):
        if segment in ("", ".", "..", CURSORS_FOLDER):
            raise InvalidMetadataError(f"invalid managed-ledger name {name!r}: bad segment {segment!r}")
    return name


def managed_ledger_path(name: str) -> str:
    return f"{MANAGED_LEDGERS}/{check_managed_ledger_name(name)}"


def encode_cursor_name(cursor: str) -> str:
    if not isinstance(cursor, str) or not cursor:
        raise InvalidMetadataError(f"invalid cursor name {cursor!r}: must be a non-empty string")
    encoded = encode_local_name(cursor)
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def decode_cursor_name(encoded: str) -> str:
    return decode_local_name(encoded)


def cursors_path(name: str) -> str:
    return join_path(managed_ledger_path(name), CURSORS_FOLDER)


def cursor_path(name: str, cursor: str) -> str:
    return join_path(cursors_path(name), encode_cursor_name(cursor))


# ---------------------------------------------------------------------------------------------- access


class ManagedLedgerStore:
    """Typed access to managed-ledger and cursor metadata (see the module docstring for layout and
    guarantees). Errors are ``config_store`` errors: BadVersionError for a lost compare-and-set race."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # -- managed ledgers -----------------------------------------------------------------------------------

    async def get(self, name: str) -> Versioned[ManagedLedgerInfo] | None:
        """The managed ledger's info, or None if it does not exist (an empty intermediate node is none)."""
        path = managed_ledger_path(name)
        versioned = await self.store.get(path)
        if versioned is None or versioned.value == b"":
            return None
        try:
            return Versioned(ManagedLedgerInfo.from_json(versioned.value), versioned.version)
        except InvalidMetadataError as e:
            raise InvalidMetadataError(f"{path}: {e}") from None

    async def create(self, name: str, info: ManagedLedgerInfo) -> int:
        """Creates the managed ledger's node and returns its version. NodeExistsError if it already holds
        a managed ledger (an empty intermediate node at the path is filled in by compare-and-set)."""
        path = managed_ledger_path(name)
        data = info.to_json()
        try:
            await self.store.create(path, data, make_parents=True)
            return 0
        except NodeExistsError:
            pass
        current = await self.store.get(path)
        if current is None or current.value != b"":
            raise NodeExistsError(f"managed ledger {name} already exists ({path})")
        return await cas_write(self.store, path, data, current.version)

    async def write(self, name: str, info: ManagedLedgerInfo, *, expected_version: int) -> int:
        """Compare-and-set of the managed ledger's info; returns the new version."""
        return await cas_write(self.store, managed_ledger_path(name), info.to_json(), expected_version)

    async def delete(self, name: str) -> None:
        """Deletes the managed ledger's cursors and node. A missing one is a no-op. If other nodes live below
        it (a managed ledger whose name extends this one), the node stays as an empty intermediate node."""
        await self.store.delete(cursors_path(name), recursive=True)
        try:
            await self.store.delete(managed_ledger_path(name))
        except NotEmptyError:
            await self.store.set(managed_ledger_path(name), b"", expected_version=-1)

    async def list(self, prefix: str) -> list[str]:
        """Names of managed ledgers directly under ``prefix`` (e.g. ``tenant/ns/persistent``), sorted."""
        prefix = prefix.strip("/")
        base = f"{MANAGED_LEDGERS}/{prefix}" if prefix else MANAGED_LEDGERS
        names = []
        for child in await self.store.children(base):
            if child == CURSORS_FOLDER:
                continue
            versioned = await self.store.get(join_path(base, child))
            if versioned is not None and versioned.value != b"":
                names.append(f"{prefix}/{child}" if prefix else child)
        return names

    def watch_list(self, prefix: str, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """Calls ``callback(names)`` on the loop with what :meth:`list` returns for ``prefix``, now and after every
        change of it (a ZooKeeper children watch; intermediate states may be coalesced). Cancel the handle to
        stop.

        A new child is read once to tell a managed ledger from an empty intermediate node; one whose read fails
        counts as a managed ledger (under a domain folder, every child is one). A managed ledger whose node is
        later emptied but not removed (one with deeper managed ledgers below it) stays listed until the
        child list next changes.
        """
        prefix = prefix.strip("/")
        base = f"{MANAGED_LEDGERS}/{prefix}" if prefix else MANAGED_LEDGERS
        holds: dict[str, bool] = {}  # child -> holds a managed ledger

        async def on_children(children: list[str]) -> Any:
            fresh = [c for c in children if c != CURSORS_FOLDER and c not in holds]
            reads = await asyncio.gather(*(self.store.get(join_path(base, c)) for c in fresh), return_exceptions=True)
            for child, read in zip(fresh, reads):
                if isinstance(read, BaseException):
                    log.warning("[%s] reading %s/%s for a topic list failed (%s); counting it as a managed ledger",
                                self.store.name, base, child, read)
                    holds[child] = True
                else:
                    holds[child] = read is not None and read.value != b""
            current = set(children)
            for child in [c for c in holds if c not in current]:
                del holds[child]
            return callback([f"{prefix}/{c}" if prefix else c for c in sorted(holds) if holds[c]])

        return self.store.watch_children(base, on_children)

    # -- cursors -------------------------------------------------------------------------------------------

    async def cursors(self, name: str) -> dict[str, Versioned[ManagedCursorInfo]]:
        """Every cursor of the managed ledger by (decoded) name. Unreadable cursor nodes raise."""
        base = cursors_path(name)
        encoded = await self.store.children(base)
        values = await asyncio.gather(*(self.store.get(join_path(base, e)) for e in encoded))
        result: dict[str, Versioned[ManagedCursorInfo]] = {}
        for enc, versioned in zip(encoded, values):
            if versioned is None:
                continue  # deleted between the listing and the read
            try:
                result[decode_cursor_name(enc)] = Versioned(ManagedCursorInfo.from_json(versioned.value),
                                                            versioned.version)
            except (InvalidMetadataError, UnicodeDecodeError) as e:
                raise InvalidMetadataError(f"{join_path(base, enc)}: {e}") from None
        return result

    async def get_cursor(self, name: str, cursor: str) -> Versioned[ManagedCursorInfo] | None:
        path = cursor_path(name, cursor)
        versioned = await self.store.get(path)
        if versioned is None:
            return None
        try:
            return Versioned(ManagedCursorInfo.from_json(versioned.value), versioned.version)
        except InvalidMetadataError as e:
            raise InvalidMetadataError(f"{path}: {e}") from None

    async def create_cursor(self, name: str, cursor: str, info: ManagedCursorInfo) -> int:
        """Creates the cursor's node (version 0); NodeExistsError if it exists."""
        await self.store.create(cursor_path(name, cursor), info.to_json(), make_parents=True)
        return 0

    async def write_cursor(self, name: str, cursor: str, info: ManagedCursorInfo, *, expected_version: int) -> int:
        """Compare-and-set of the cursor's state; returns the new version."""
        return await cas_write(self.store, cursor_path(name, cursor), info.to_json(), expected_version)

    async def delete_cursor(self, name: str, cursor: str) -> None:
        """Deletes the cursor's node; a missing one is a no-op."""
        await self.store.delete(cursor_path(name, cursor))


async def cas_write(store: MetadataStore, path: str, data: bytes, expected_version: int) -> int:
    """Compare-and-set ``data`` at ``path`` from ``expected_version``; returns the new version.

    A write whose outcome is unknown (MetadataUnavailableError / SessionLostError) is resolved by re-reading:
    the node at ``expected_version + 1`` holding exactly ``data`` means it was applied; still at
    ``expected_version`` means it was not, and it is sent again; anything else is a lost race
    (BadVersionError). Gives up with MetadataUnavailableError after a bounded number of attempts.
    """
    if expected_version < 0:
        raise InvalidMetadataError(f"{path}: writes are compare-and-set; expected_version must be >= 0")
    for attempt in range(1, _UNKNOWN_OUTCOME_ATTEMPTS_MAX + 1):
        try:
            return await store.set(path, data, expected_version=expected_version)
        except (MetadataUnavailableError, SessionLostError) as e:
            if attempt == _UNKNOWN_OUTCOME_ATTEMPTS_MAX:
                raise MetadataUnavailableError(f"{path}: compare-and-set outcome unknown: {e}") from None
        # The outcome is unknown: find out what happened before doing anything else.
        current = await _reread(store, path)
        if current is None:
            raise NotFoundError(f"{path}: node vanished during a compare-and-set")
        if current.version == expected_version + 1 and current.value == data:
            log.info("%s: write of unknown outcome was applied (version %d)", path, current.version)
            return current.version
        if current.version != expected_version:
            raise BadVersionError(f"{path}: version is {current.version}, expected {expected_version}")
        log.info("%s: write of unknown outcome was not applied; sending it again", path)
    raise AssertionError("unreachable")


async def _reread(store: MetadataStore, path: str) -> Versioned[bytes] | None:
    for attempt in range(1, _UNKNOWN_OUTCOME_ATTEMPTS_MAX + 1):
        await asyncio.sleep(min(2.0, 0.05 * 2 ** attempt))
        try:
            return await store.get(path)
        except (MetadataUnavailableError, SessionLostError) as e:
            if attempt == _UNKNOWN_OUTCOME_ATTEMPTS_MAX:
                raise MetadataUnavailableError(f"{path}: could not re-read after a write of unknown outcome: "
                                               f"{e}") from None
    raise AssertionError("unreachable")


__all__ = ["MANAGED_LEDGERS", "CURSORS_FOLDER", "ManagedLedgerMetaState", "LedgerInfo", "ManagedLedgerInfo",
           "ManagedCursorInfo", "ManagedLedgerStore", "check_managed_ledger_name", "managed_ledger_path",
           "cursors_path", "cursor_path", "encode_cursor_name", "decode_cursor_name", "cas_write"]
