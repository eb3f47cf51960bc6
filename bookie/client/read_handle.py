"""Reading a ledger: any replica that holds an entry will do; a failing or slow one is passed over.

Entries of a range are grouped by the replica tried first (the first healthy bookie of each entry's write
set), read with one streamed call per bookie, and whatever did not come back (missing, error, deadline)
is retried on the next replica of its write set, until every replica has been asked. Bookies that failed
a read are avoided for a while so later reads do not keep waiting on them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookie.errors import BookieError, BookieUnavailableError, NoSuchEntryError
from config_store import LedgerMetadata, LedgerState
from magnetar.proto import bookie_pb2

if TYPE_CHECKING:
    from .ledger_client import LedgerClient

log = logging.getLogger(__name__)

Status = bookie_pb2.Status
_IDS_PER_CALL = 2000


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    ledger_id: int
    entry_id: int
    payload: bytes


class ReadHandle:
    """A reader of one ledger. Obtain it from ``LedgerClient.open_ledger``.

    For a CLOSED ledger every entry up to ``last_add_confirmed`` (= its last entry) is readable and every
    reader sees the same bytes. For a ledger opened without recovery, ``last_add_confirmed`` is what the
    bookies reported at open time; refresh it with :meth:`read_last_add_confirmed`.
    """

    def __init__(self, client: "LedgerClient", metadata: LedgerMetadata, metadata_version: int, lac: int) -> None:
        self._client = client
        self.metadata = metadata
        self.metadata_version = metadata_version
        self.ledger_id = metadata.ledger_id
        self.last_add_confirmed = lac

    @property
    def is_closed(self) -> bool:
        return self.metadata.state is LedgerState.CLOSED

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        """Entries ``first..last`` inclusive, in order. Raises NoSuchEntryError beyond the readable end."""
        if first_entry_id < 0 or last_entry_id < first_entry_id:
            raise BookieError(f"ledger {self.ledger_id}: bad range {first_entry_id}..{last_entry_id}")
        if last_entry_id > self.last_add_confirmed:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: entry {last_entry_id} is past the last confirmed entry "
                f"{self.last_add_confirmed}"
            )
        payloads = await read_entries(self._client, self.metadata, list(range(first_entry_id, last_entry_id + 1)))
        return [LedgerEntry(self.ledger_id, e, payloads[e]) for e in range(first_entry_id, last_entry_id + 1)]

    async def read_all(self, *, batch_entries: int = 1000):
        """Yields every readable entry in order, ``batch_entries`` per bookie round trip."""
        next_id = 0
        while next_id <= self.last_add_confirmed:
            last = min(self.last_add_confirmed, next_id + batch_entries - 1)
            for entry in await self.read(next_id, last):
                yield entry
            next_id = last + 1

    async def read_last_add_confirmed(self) -> int:
        """Asks the last ensemble for the LAC (max over answers); for closed ledgers, the last entry."""
        if self.is_closed:
            return self.last_add_confirmed
        self.last_add_confirmed = max(self.last_add_confirmed, await read_lac(self._client, self.metadata))
        return self.last_add_confirmed


async def read_lac(client: "LedgerClient", md: LedgerMetadata) -> int:
    ensemble = md.ensembles[-1][1]
    results = await asyncio.gather(*(_lac_of(client, b, md.ledger_id) for b in ensemble), return_exceptions=True)
    lacs = [r.last_add_confirmed for r in results if not isinstance(r, BaseException)]
    if not lacs:
        raise BookieUnavailableError(f"ledger {md.ledger_id}: no bookie of {ensemble} answered for the LAC")
    # Entries before the last ensemble started were all confirmed when the ensemble changed.
    return max(max(lacs), md.ensembles[-1][0] - 1)


async def _lac_of(client: "LedgerClient", bookie_id: str, ledger_id: int):
    return await client.bookie_client(bookie_id).read_lac(ledger_id)


async def read_entries(client: "LedgerClient", md: LedgerMetadata, entry_ids: list[int]) -> dict[int, bytes]:
    """Reads ``entry_ids`` from whichever replicas answer; raises when some entry is on no live replica."""
    replicas = {e: client.order_replicas(md.write_set(e)) for e in entry_ids}
    found: dict[int, bytes] = {}
    missing_votes: dict[int, int] = {e: 0 for e in entry_ids}
    last_error: dict[int, str] = {}
    for round_no in range(md.write_quorum_size):
        wanted: dict[str, list[int]] = {}
        for e in entry_ids:
            if e not in found and round_no < len(replicas[e]):
                wanted.setdefault(replicas[e][round_no], []).append(e)
        if not wanted:
            break
        calls = []
        for bookie_id, ids in wanted.items():
            for i in range(0, len(ids), _IDS_PER_CALL):
                calls.append((bookie_id, ids[i : i + _IDS_PER_CALL]))
        results = await asyncio.gather(
            *(_read_from(client, md.ledger_id, b, ids) for b, ids in calls), return_exceptions=True
        )
        for (bookie_id, ids), result in zip(calls, results):
            if isinstance(result, BaseException):
                if not isinstance(result, BookieError):
                    raise result
                client.mark_suspect(bookie_id)
                for e in ids:
                    last_error[e] = str(result)
                continue
            for entry in result:
                if entry.status == Status.OK:
                    found[entry.entry_id] = entry.payload
                elif entry.status == Status.NO_SUCH_ENTRY:
                    missing_votes[entry.entry_id] = missing_votes.get(entry.entry_id, 0) + 1
                    last_error[entry.entry_id] = f"bookie {bookie_id}: no such entry"
                else:
                    last_error[entry.entry_id] = f"bookie {bookie_id}: {Status.Name(entry.status)}"
    for e in entry_ids:
        if e not in found:
            if missing_votes.get(e, 0) == len(replicas[e]):
                raise NoSuchEntryError(f"ledger {md.ledger_id}: entry {e} is on none of {replicas[e]}")
            raise BookieUnavailableError(
                f"ledger {md.ledger_id}: entry {e} could not be read from {replicas[e]}: {last_error.get(e)}"
            )
    return found


async def _read_from(client: "LedgerClient", ledger_id: int, bookie_id: str, ids: list[int]):
    return await client.bookie_client(bookie_id).read_entries(ledger_id, ids)
