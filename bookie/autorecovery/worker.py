"""The replication worker: claims under-replicated ledgers and copies their fragments to new bookies.

Per ledger (BookKeeper's ``ReplicationWorker`` + ``LedgerFragmentReplicator`` roles):

1. claim it: create the ephemeral lock node ``/ledgers/underreplication/locks/<id>``; a ledger locked by
   another worker is skipped, and a worker that dies releases its ledgers with its ZooKeeper session;
2. read the record and the ledger's metadata; a deleted ledger's record is dropped; a ledger that is not
   CLOSED is left for later (``open_ledger_retry_ms``): a live writer owns its ensembles; with
   ``open_ledger_fence_ms`` set, one still open that long is recovered (fenced and closed: its writer, if
   any, is cut off, as BookKeeper's ``openLedgerRereplicationGracePeriod`` does) and then repaired;
3. for each fragment whose bookie still holds its slot: choose a writable bookie outside the segment's
   ensemble (and not lost, not decommissioning) as placement does; read every entry of the fragment from a
   surviving replica of its write set; write it to the new bookie as a *recovery add* (which the bookie
   accepts whatever the ledger's fence state, and re-accepts with the same bytes if a previous attempt
   already wrote it); then swap the new bookie into the old one's slot of that segment only, by
   compare-and-set of the ledger's metadata, and remove the fragment from the record;
4. release the lock.

Under the lock, the metadata is re-read before the swap: a fragment already repaired is not repaired again,
so each fragment costs exactly one metadata write. Copies are throttled (entries/s, bytes/s, shared by the
``parallel_ledgers`` ledgers a worker repairs at once).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Optional

from bookie.client import LedgerClient
from bookie.client.placement import choose_replacement
from bookie.client.wire import encode_entry
from bookie.errors import BookieError
from config_store import BadVersionError, LedgerMetadata, NotFoundError, RegionStore
from config_store.errors import MetadataError
from magnetar.proto import bookie_pb2

from .metrics import AutoRecoveryMetrics
from .model import (Fragment, Throttle, batches, fragment_entries, replace_in_segment, repairable_now, segment_at,
                    still_pending)
from .pulsar_check import pulsar_entry_intact
from .underreplication import LEDGERS, UnderReplicationStore

log = logging.getLogger("bookie.autorecovery.worker")

OK = bookie_pb2.Status.OK


class RepairError(BookieError):
    """A fragment could not be repaired now (retried later)."""


class ReplicationWorker:
    """One worker. ``start()`` runs its loop as a task; ``close()`` cancels and awaits it (idempotent)."""

    def __init__(self, region: RegionStore, client: LedgerClient, ur: UnderReplicationStore,
                 metrics: AutoRecoveryMetrics, *, worker_id: str, interval_s: float, open_ledger_retry_s: float,
                 throttle: Throttle, batch_entries: int, parallel_ledgers: int = 4,
                 open_ledger_fence_s: float = 0.0) -> None:
        self.region = region
        self.client = client
        self.ur = ur
        self.metrics = metrics
        self.worker_id = worker_id
        self.interval_s = interval_s
        self.open_ledger_retry_s = open_ledger_retry_s
        self.throttle = throttle
        self.batch_entries = batch_entries
        self.parallel_ledgers = parallel_ledgers
        self.open_ledger_fence_s = open_ledger_fence_s
        self._open_since: dict[int, float] = {}  # ledger -> when this worker first found it open and recorded
        self._later: dict[int, float] = {}  # ledger -> monotonic time before which it is not tried again
        self._wakeup = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._watch = None

    def start(self) -> None:
        if self._task is None:
            self._watch = self.ur.store.watch_children(LEDGERS, lambda _ids: self._wakeup.set())
            self._task = asyncio.create_task(self._run(), name="autorecovery-worker")

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            try:
                if await self.ur.enabled():
                    await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replication pass failed; will retry")
            try:
                async with asyncio.timeout(self.interval_s):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    async def run_once(self) -> int:
        """One pass over the records: every ledger not locked elsewhere and not waiting is tried, up to
        ``parallel_ledgers`` at a time. Returns the number of fragments repaired."""
        ids = await self.ur.list_ledgers()
        random.shuffle(ids)  # workers started together spread over the ledgers
        now = time.monotonic()
        ids = [lid for lid in ids if self._later.get(lid, 0.0) <= now]
        repaired = 0
        todo = iter(ids)

        async def lane() -> None:
            nonlocal repaired
            for ledger_id in todo:
                if not await self.ur.enabled():
                    return
                if not await self.ur.try_lock(ledger_id, self.worker_id):
                    continue
                try:
                    repaired += await self.repair_ledger(ledger_id)
                finally:
                    try:
                        await self.ur.unlock(ledger_id)
                    except MetadataError as err:  # the session went: the lock went with it
                        log.warning("[ledger %d] unlock: %s", ledger_id, err)

        await asyncio.gather(*(lane() for _ in range(self.parallel_ledgers)))
        return repaired

    async def repair_ledger(self, ledger_id: int) -> int:
        """Repairs the ledger's recorded fragments (the caller holds its lock)."""
        got = await self.ur.read(ledger_id)
        if got is None:
            return 0
        try:
            md = (await self.region.read_ledger(ledger_id)).value
        except NotFoundError:
            log.info("[ledger %d] deleted: its under-replication record goes", ledger_id)
            await self.ur.drop(ledger_id)
            return 0
        if not repairable_now(md):
            since = self._open_since.setdefault(ledger_id, time.monotonic())
            if not (self.open_ledger_fence_s > 0 and time.monotonic() - since >= self.open_ledger_fence_s):
                self.metrics.deferred.inc()
                log.info("[ledger %d] is %s: repaired once it is closed", ledger_id, md.state.value)
                self._later[ledger_id] = time.monotonic() + self.open_ledger_retry_s
                return 0
            # BookKeeper's openLedgerRereplicationGracePeriod: a ledger open this long with a lost fragment is
            # taken from its writer (fenced, its end settled, closed) so that it can be repaired.
            log.warning("[ledger %d] still %s after %.0f s with a lost fragment: fencing and closing it", ledger_id,
                        md.state.value, time.monotonic() - since)
            try:
                await self.client.open_ledger(ledger_id, recovery=True)
            except (BookieError, MetadataError) as err:
                self.metrics.failures.inc()
                log.warning("[ledger %d] recovery failed: %s", ledger_id, err)
                self._later[ledger_id] = time.monotonic() + self.open_ledger_retry_s
                return 0
            md = (await self.region.read_ledger(ledger_id)).value
        self._open_since.pop(ledger_id, None)
        repaired = 0
        for fragment in got.value.fragments:
            if not still_pending(md, fragment):
                await self.ur.resolve(ledger_id, fragment.key)
                continue
            try:
                md = await self.repair_fragment(md, fragment)
            except (RepairError, BookieError, MetadataError) as err:
                self.metrics.failures.inc()
                log.warning("[ledger %d] fragment %d/%s not repaired: %s", ledger_id, fragment.first_entry_id,
                            fragment.bookie, err)
                self._later[ledger_id] = time.monotonic() + self.open_ledger_retry_s
                break
            await self.ur.resolve(ledger_id, fragment.key)
            repaired += 1
        return repaired

    async def _excluded(self) -> set[str]:
        return set(await self.ur.decommissioning()) | set(await self.ur.missing_since())

    async def repair_fragment(self, md: LedgerMetadata, fragment: Fragment) -> LedgerMetadata:
        """Copies the fragment to a new bookie and swaps it in; returns the ledger's metadata after the swap."""
        ledger_id = md.ledger_id
        first, last, ensemble = segment_at(md, fragment.first_entry_id)
        target = choose_replacement(self.client.writable_bookies(), ensemble,
                                    exclude=await self._excluded() | {fragment.bookie})
        if target is None:
            raise RepairError(f"no writable bookie outside the ensemble {ensemble} to take {fragment.bookie}'s place")
        ids = fragment_entries(md, fragment)
        started = time.monotonic()
        nbytes = 0
        for batch in batches(ids, self.batch_entries):
            entries = await self._read(md, fragment, batch)
            size = sum(len(p) for _lac, p in entries.values())
            delay = self.throttle.delay_for(len(batch), size)
            if delay > 0:
                await asyncio.sleep(delay)
            await self._write(target, ledger_id, batch, entries)
            nbytes += size
            self.metrics.entries_copied.inc(len(batch))
            self.metrics.bytes_copied.inc(size)
        updated = await self._swap(md, fragment, (first, last, ensemble), target)
        self.metrics.fragments_replicated.inc()
        log.info("[ledger %d] fragment at %d: %s -> %s (%d entries, %d bytes, %.2f s, reason %s)", ledger_id,
                 first, fragment.bookie, target, len(ids), nbytes, time.monotonic() - started, fragment.reason)
        return updated

    async def _read(self, md: LedgerMetadata, fragment: Fragment, ids: list[int]) -> dict[int, tuple[int, bytes]]:
        """``entry -> (lac, payload)`` read from the surviving replicas (never from the fragment's bookie).

        A copy whose Pulsar checksum fails (:mod:`.pulsar_check`) is passed over for another replica's; if
        no replica has a better one, it is copied as it is (it is what was acknowledged)."""
        sources = {e: self.client.order_replicas([b for b in md.write_set(e) if b != fragment.bookie]) for e in ids}
        found: dict[int, tuple[int, bytes]] = {}
        suspect: dict[int, tuple[int, bytes]] = {}
        errors: dict[int, str] = {}
        for round_no in range(md.write_quorum_size):
            wanted: dict[str, list[int]] = {}
            for e in ids:
                if e not in found and round_no < len(sources[e]):
                    wanted.setdefault(sources[e][round_no], []).append(e)
            if not wanted:
                break
            results = await asyncio.gather(
                *(self._read_from(b, md.ledger_id, want) for b, want in wanted.items()), return_exceptions=True)
            for (bookie_id, want), result in zip(wanted.items(), results):
                if isinstance(result, BaseException):
                    if not isinstance(result, BookieError):
                        raise result
                    self.client.mark_suspect(bookie_id)
                    for e in want:
                        errors[e] = str(result)
                    continue
                for entry in result:
                    if entry.status != OK:
                        errors[entry.entry_id] = f"bookie {bookie_id}: {bookie_pb2.Status.Name(entry.status)}"
                    elif pulsar_entry_intact(entry.payload) is False:
                        suspect.setdefault(entry.entry_id, (entry.last_add_confirmed, entry.payload))
                        errors[entry.entry_id] = f"bookie {bookie_id}: Pulsar checksum mismatch"
                    else:
                        found[entry.entry_id] = (entry.last_add_confirmed, entry.payload)
        for e, copy in suspect.items():
            if e not in found:
                log.error("[ledger %d] entry %d fails Pulsar's checksum on every surviving replica; copied as it is",
                          md.ledger_id, e)
                found[e] = copy
        lacking = [e for e in ids if e not in found]
        if lacking:
            e = lacking[0]
            raise RepairError(f"ledger {md.ledger_id}: {len(lacking)} entries of the fragment readable from no "
                              f"surviving replica (entry {e} on {sources[e]}: {errors.get(e)})")
        return found

    async def _read_from(self, bookie_id: str, ledger_id: int, ids: list[int]):
        return await self.client.bookie_client(bookie_id).read_entries(ledger_id, ids)

    async def _write(self, target: str, ledger_id: int, ids: list[int], entries: dict[int, tuple[int, bytes]]) -> None:
        loop = asyncio.get_running_loop()
        client = self.client.bookie_client(target)
        futures = []
        for e in ids:
            lac, payload = entries[e]
            fut = loop.create_future()

            def done(_bookie: str, _entry: int, status: int, message: str, fut=fut) -> None:
                if not fut.done():
                    fut.set_result((status, message))

            client.add(encode_entry(ledger_id, e, max(lac, -1), payload), e, done, recovery=True)
            futures.append(fut)
        for e, (status, message) in zip(ids, await asyncio.gather(*futures)):
            if status != OK:
                raise RepairError(f"bookie {target} refused entry {ledger_id}:{e}: "
                                  f"{bookie_pb2.Status.Name(status)} {message}")

    async def _swap(self, md: LedgerMetadata, fragment: Fragment, segment, target: str) -> LedgerMetadata:
        """The compare-and-set that puts ``target`` in the fragment's slot; re-read on a lost race."""
        ledger_id = md.ledger_id
        for _ in range(20):
            current = await self.region.read_ledger(ledger_id)
            fresh = current.value
            if not still_pending(fresh, fragment):
                return fresh  # cannot happen under the lock; never write twice
            if segment_at(fresh, fragment.first_entry_id) != segment or not repairable_now(fresh):
                raise RepairError(f"ledger {ledger_id}: the segment at {fragment.first_entry_id} changed while copying")
            updated = replace_in_segment(fresh, fragment.first_entry_id, fragment.bookie, target)
            try:
                await self.region.write_ledger(updated, expected_version=current.version)
                return updated
            except BadVersionError:
                continue
        raise RepairError(f"ledger {ledger_id}: metadata kept changing")
