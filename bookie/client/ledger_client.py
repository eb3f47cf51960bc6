"""The ledger client brokers use: create, write, close, open (with recovery), read and delete ledgers.

It plays BookKeeper's client role over Magnetar's bookies: ledger metadata lives in the region's ZooKeeper
(``config_store.RegionStore``, compare-and-set on every change), bookies are found through their ephemeral
registrations (a watch-driven ``BookieCache``), and entries travel over each bookie's gRPC stream.

Recovery (``open_ledger(recovery=True)`` on a ledger that is not CLOSED) makes a crashed writer's ledger
final, so every reader afterwards sees the same entries:

1. mark the metadata IN_RECOVERY (compare-and-set; the writer's next ensemble change will then fail);
2. fence the ledger on every bookie of the last ensemble, and require answers from ``Qw - Qa + 1`` bookies
   of every write set: then no writer can gather Qa acknowledgements for any new entry;
3. start from the highest LAC any bookie holds (everything up to it was acknowledged) and read forward:
   an entry any replica holds is kept; an entry that ``Qw - Qa + 1`` bookies of its write set deny ends the
   ledger (it cannot have been acknowledged); an entry neither found nor surely absent aborts the recovery
   (retriable) rather than guess;
4. re-write the recovered tail to its full write sets (recovery adds pass the fence, and an ensemble change
   replaces a dead bookie), then close the metadata at the last recovered entry.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Optional

from bookie.errors import BookieError, BookieUnavailableError
from config_store import BadVersionError, LedgerMetadata, LedgerState, NotFoundError, RegionStore, Versioned
from magnetar.errors import ConfigError
from magnetar.proto import bookie_pb2

from bookie.autorecovery.underreplication import DECOMMISSION

from .bookie_client import BookieClient
from .errors import LedgerNotFoundError, LedgerRecoveryError, NotEnoughBookiesError
from .placement import choose_ensemble, entry_absent_for_sure, fencing_covers_every_write_set, write_set
from .read_handle import ReadHandle, read_lac
from .write_handle import WriteHandle

log = logging.getLogger(__name__)

ADD_TRANSPORTS = ("tcp", "grpc")

_RECOVERY_WINDOW_ENTRIES = 256


@dataclass(frozen=True)
class LedgerClientConfig:
    """Settings of a ledger client.

    Attributes:
        ensemble_size, write_quorum_size, ack_quorum_size: defaults for new ledgers (E/Qw/Qa).
        add_timeout_s: a bookie that has not answered an add for this long is replaced.
        read_timeout_s: a read, fence or LAC call that takes longer moves on to another replica.
        suspect_s: how long a bookie that failed a read is tried last.
        entry_max_size_bytes: larger entries are refused before they are sent.
        max_request_bytes: upper bound of one AddRequest (many entries per gRPC message).
        max_inflight_requests: AddRequests in flight per bookie. Small on purpose (Nagle-like): while
            requests are in flight, new entries queue up and leave together in the next request, so
            batches grow with load and the per-request cost (gRPC, fsync) is paid per batch.
        ensemble_change_attempts_max: bound on successive ensemble-change rounds for one failure burst.
        recovery_attempts_max: bound on recovery retries when bookies do not answer.
        keepalive_interval_ms: each bookie channel pings its bookie this often (gRPC keepalive); at least
            the bookies' ``grpc_keepalive_interval_ms``, or they answer GOAWAY ``too_many_pings``.
        keepalive_timeout_ms: a ping not acknowledged within this drops the connection.
        add_transport: what carries adds to a bookie: ``"tcp"`` uses its add port (AddEntries over plain
            TCP, ``bookie.add_frames``) when its registration names one and gRPC otherwise; ``"grpc"``
            always uses gRPC's AddEntries stream (for comparison). Reads and every other call use gRPC.
        explicit_lac_interval_ms: BookKeeper's ``explicitLacInterval``. Bookies learn a writer's LAC from
            the adds that follow it, so an idle open ledger's newest entry would stay unreadable for readers
            that do not share the writer (the Spark source, a non-recovering open): when the writer's LAC has
            moved past what its adds carried and adds stopped flowing for this long, it sends the LAC to the
            bookies of its ensemble (WriteLastAddConfirmed). 0 turns it off.
    """

    ensemble_size: int = 3
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    add_timeout_s: float = 10.0
    read_timeout_s: float = 5.0
    suspect_s: float = 30.0
    entry_max_size_bytes: int = 5 * 1024 * 1024 + 512
    max_request_bytes: int = 4 * 1024 * 1024
    max_inflight_requests: int = 2
    ensemble_change_attempts_max: int = 8
    recovery_attempts_max: int = 5
    keepalive_interval_ms: int = 10_000
    keepalive_timeout_ms: int = 5_000
    add_transport: str = "tcp"
    explicit_lac_interval_ms: int = 100

    def __post_init__(self) -> None:
        if self.add_transport not in ADD_TRANSPORTS:
            raise ConfigError(f"add_transport must be one of {', '.join(ADD_TRANSPORTS)}, "
                              f"not {self.add_transport!r}")


class LedgerClient:
    """Entry point of the ledger API. Use as ``async with LedgerClient(region) as client: ...``."""

    def __init__(self, region: RegionStore, *, config: LedgerClientConfig = LedgerClientConfig()) -> None:
        self.region = region
        self.config = config
        self._bookies = None
        self._clients: dict[str, BookieClient] = {}
        self._suspect_until: dict[str, float] = {}
        self._decommissioning: frozenset[str] = frozenset()
        self._decommission_watch = None
        self._closed = False

    async def start(self) -> "LedgerClient":
        if self._bookies is None:
            self._bookies = await self.region.bookie_cache()
            # Bookies marked for decommission take no new ledger and no ensemble-change slot (auto-recovery
            # is moving their data away); reads still reach them.
            self._decommission_watch = self.region.store.watch_children(DECOMMISSION, self._on_decommissioning)
        return self

    def _on_decommissioning(self, ids: list[str]) -> None:
        self._decommissioning = frozenset(ids)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(c.close() for c in self._clients.values()), return_exceptions=True)
        self._clients.clear()
        if self._decommission_watch is not None:
            self._decommission_watch.cancel()
        if self._bookies is not None:
            result = self._bookies.close()
            if inspect.isawaitable(result):
                await result

    async def __aenter__(self) -> "LedgerClient":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- bookies ------------------------------------------------------------------------------------------

    def writable_bookies(self) -> list[str]:
        return sorted(b for b in self._bookies.writable() if b not in self._decommissioning)

    def bookie_client(self, bookie_id: str) -> BookieClient:
        """The (shared) client of a bookie, by id; follows a bookie that re-registered at a new address."""
        registration = self._bookies.registration_of(bookie_id)
        if registration is None:
            raise BookieUnavailableError(f"bookie {bookie_id} is not registered and its address is unknown")
        address = registration.address
        add_address = registration.add_address if self.config.add_transport == "tcp" else ""
        client = self._clients.get(bookie_id)
        if client is None or client.address != address or client.add_address != add_address:
            if client is not None:
                asyncio.get_running_loop().create_task(client.close())
            client = BookieClient(
                bookie_id,
                address,
                add_address=add_address,
                add_timeout_s=self.config.add_timeout_s,
                read_timeout_s=self.config.read_timeout_s,
                max_request_bytes=self.config.max_request_bytes,
                max_inflight_requests=self.config.max_inflight_requests,
                keepalive_interval_ms=self.config.keepalive_interval_ms,
                keepalive_timeout_ms=self.config.keepalive_timeout_ms,
            )
            self._clients[bookie_id] = client
        return client

    def mark_suspect(self, bookie_id: str) -> None:
        self._suspect_until[bookie_id] = time.monotonic() + self.config.suspect_s

    def order_replicas(self, replicas: list[str]) -> list[str]:
        """Replicas in the order to try them: healthy first (write-set order), suspects last."""
        now = time.monotonic()
        return sorted(replicas, key=lambda b: self._suspect_until.get(b, 0.0) > now)

    # -- ledgers ------------------------------------------------------------------------------------------

    async def create_ledger(
        self,
        *,
        ensemble_size: Optional[int] = None,
        write_quorum_size: Optional[int] = None,
        ack_quorum_size: Optional[int] = None,
        custom_metadata: Optional[dict[str, str]] = None,
    ) -> WriteHandle:
        """Creates a ledger on E writable bookies and returns its writer."""
        e = ensemble_size or self.config.ensemble_size
        qw = write_quorum_size or self.config.write_quorum_size
        qa = ack_quorum_size or self.config.ack_quorum_size
        if not 1 <= qa <= qw <= e:
            raise BookieError(f"invalid quorums E={e} Qw={qw} Qa={qa}: need 1 <= Qa <= Qw <= E")
        writable = self.writable_bookies()
        ensemble = choose_ensemble(writable, e)
        if ensemble is None:
            raise NotEnoughBookiesError(
                f"cannot create a ledger on {e} bookies: only {len(writable)} writable ({writable})"
            )
        ledger_id = await self.region.allocate_ledger_id()
        md = LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=e,
            write_quorum_size=qw,
            ack_quorum_size=qa,
            ensembles=[(0, ensemble)],
            ctime_ms=int(time.time() * 1000),
            custom_metadata=dict(custom_metadata or {}),
        )
        version = await self.region.create_ledger(md)
        log.info("[ledger %d] created on %s (E/Qw/Qa %d/%d/%d)", ledger_id, ensemble, e, qw, qa)
        return WriteHandle(self, md, version)

    async def _read_metadata(self, ledger_id: int):
        try:
            return await self.region.read_ledger(ledger_id)
        except NotFoundError as err:
            raise LedgerNotFoundError(f"ledger {ledger_id} does not exist") from err

    async def open_ledger(self, ledger_id: int, *, recovery: bool = True) -> ReadHandle:
        """Opens a ledger for reading.

        With ``recovery`` (the default), a ledger that is not CLOSED is recovered first (fenced, its end
        established, closed), so the handle sees the final contents. Without it the writer is left alone
        and the handle reads up to the LAC the bookies report.
        """
        versioned = await self._read_metadata(ledger_id)
        md = versioned.value
        if md.state is LedgerState.CLOSED:
            return ReadHandle(self, md, versioned.version, md.last_entry_id)
        if not recovery:
            return ReadHandle(self, md, versioned.version, await read_lac(self, md))
        attempt = 0
        while True:
            attempt += 1
            try:
                versioned = await self._recover(ledger_id)
                break
            except (LedgerRecoveryError, BookieUnavailableError) as err:
                if attempt >= self.config.recovery_attempts_max:
                    raise
                log.warning("[ledger %d] recovery attempt %d failed: %s", ledger_id, attempt, err)
                await asyncio.sleep(min(2.0, 0.2 * 2**attempt))
        md = versioned.value
        return ReadHandle(self, md, versioned.version, md.last_entry_id)

    async def _recover(self, ledger_id: int):
        while True:
            versioned = await self._read_metadata(ledger_id)
            md = versioned.value
            if md.state is LedgerState.CLOSED:
                return versioned
            if md.state is LedgerState.OPEN:
                marked = md.in_recovery()
                try:
                    version = await self.region.write_ledger(marked, expected_version=versioned.version)
                except BadVersionError:
                    continue  # the writer changed its ensemble meanwhile: start over with fresh metadata
                md, md_version = marked, version
            else:
                md_version = versioned.version
            break

        ensemble = list(md.ensembles[-1][1])
        ensemble_start = md.ensembles[-1][0]
        fenced = await asyncio.gather(
            *(self.bookie_client(b).fence(ledger_id) for b in ensemble), return_exceptions=True
        )
        answered = {b: r for b, r in zip(ensemble, fenced) if not isinstance(r, BaseException)}
        if not fencing_covers_every_write_set(ensemble, md.write_quorum_size, md.ack_quorum_size, answered):
            errors = {b: str(r) for b, r in zip(ensemble, fenced) if isinstance(r, BaseException)}
            raise LedgerRecoveryError(f"ledger {ledger_id}: too few bookies answered the fence: {errors}")
        lac = max([r.last_add_confirmed for r in answered.values()] + [ensemble_start - 1])

        tail = await self._read_tail(md, ensemble, lac)
        log.info("[ledger %d] recovery: LAC %d on the bookies, %d entries past it to re-replicate", ledger_id, lac, len(tail))
        writer = WriteHandle(self, md, md_version, recovery=True, next_entry_id=lac + 1, last_add_confirmed=lac)
        if tail:
            futures = [writer.add_nowait(payload) for payload in tail]
            await asyncio.gather(*futures)
        last_entry_id = lac + len(tail)
        closed = writer.metadata.closed(last_entry_id, 0)
        try:
            version = await self.region.write_ledger(closed, expected_version=writer._md_version)
        except BadVersionError:
            current = await self._read_metadata(ledger_id)
            if current.value.state is LedgerState.CLOSED:
                return current  # a concurrent recoverer closed it first
            raise LedgerRecoveryError(f"ledger {ledger_id}: metadata changed during recovery") from None
        log.info("[ledger %d] recovered and closed at entry %d", ledger_id, last_entry_id)
        return Versioned(closed, version)

    async def _read_tail(self, md: LedgerMetadata, ensemble: list[str], lac: int) -> list[bytes]:
        """Entries after ``lac`` that any replica holds, up to the first one that surely was never acked."""
        qw, qa = md.write_quorum_size, md.ack_quorum_size
        tail: list[bytes] = []
        first = lac + 1
        while True:
            window = list(range(first, first + _RECOVERY_WINDOW_ENTRIES))
            per_bookie: dict[str, list[int]] = {}
            for e in window:
                for b in write_set(ensemble, qw, e):
                    per_bookie.setdefault(b, []).append(e)
            results = await asyncio.gather(
                *(self.bookie_client(b).read_entries(md.ledger_id, ids) for b, ids in per_bookie.items()),
                return_exceptions=True,
            )
            found: dict[int, bytes] = {}
            absent: dict[int, int] = {}
            for result in results:
                if isinstance(result, BaseException):
                    if not isinstance(result, BookieError):
                        raise result
                    continue
                for entry in result:
                    if entry.status == bookie_pb2.Status.OK:
                        found[entry.entry_id] = entry.payload
                    elif entry.status == bookie_pb2.Status.NO_SUCH_ENTRY:
                        absent[entry.entry_id] = absent.get(entry.entry_id, 0) + 1
            for e in window:
                if e in found:
                    tail.append(found[e])
                elif entry_absent_for_sure(qw, qa, absent.get(e, 0)):
                    return tail
                else:
                    raise LedgerRecoveryError(
                        f"ledger {md.ledger_id}: entry {e} neither found nor surely absent (bookies unreachable)"
                    )
            first += _RECOVERY_WINDOW_ENTRIES

    async def delete_ledger(self, ledger_id: int) -> None:
        """Deletes the ledger from every bookie that may hold it, then its metadata.

        A bookie that is down keeps its copy until an operator deletes it (no metadata-driven GC yet).
        """
        versioned = await self._read_metadata(ledger_id)
        bookies = sorted({b for _, ensemble in versioned.value.ensembles for b in ensemble})
        results = await asyncio.gather(
            *(self.bookie_client(b).delete_ledger(ledger_id) for b in bookies), return_exceptions=True
        )
        for bookie_id, result in zip(bookies, results):
            if isinstance(result, BaseException):
                log.warning("[ledger %d] delete on bookie %s failed: %s", ledger_id, bookie_id, result)
        await self.region.delete_ledger(ledger_id)
