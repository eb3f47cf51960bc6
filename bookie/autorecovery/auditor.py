"""The auditor: one per region, elected through ZooKeeper, decides which fragments are under-replicated.

Election: whoever creates the ephemeral node ``/ledgers/underreplication/auditor`` is the auditor; the
other candidates watch it and try again when it vanishes (its holder closed, or its ZooKeeper session
expired after a crash). An auditor that finds the node no longer names it steps down. Two auditors for a
moment (a partitioned one that has not yet noticed) are harmless: marking is idempotent.

A scan (every ``audit_interval``, on every change of the registered bookies, and when a missing bookie's
grace period ends):

* bookies that ledger ensembles name but that are registered neither writable nor read-only are *missing*;
  since when is stored (``/ledgers/underreplication/missing/<id>``), so a new auditor does not restart the
  clock; a bookie that comes back is forgotten;
* a bookie missing for longer than ``lost_bookie_grace`` is lost, as is a bookie marked for decommission;
  every fragment of every ledger that names one is recorded under-replicated;
* records of deleted ledgers are dropped; the gauges are set.

With ``scrub_interval`` set, the auditor also runs the scrubber (:mod:`bookie.autorecovery.scrubber`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

from config_store import NotFoundError, RegionStore
from config_store.errors import InvalidMetadataError
from config_store.region import BOOKIES_AVAILABLE, BOOKIES_READONLY

from .metrics import AutoRecoveryMetrics
from .model import REASON_DECOMMISSION, REASON_LOST, bookies_of, fragments_of
from .scrubber import Scrubber
from .underreplication import AUDITOR, UnderReplicationStore

log = logging.getLogger("bookie.autorecovery.auditor")

_READ_CHUNK = 256


class Auditor:
    """An auditor candidate. ``start()`` runs election and scans as a task; ``close()`` resigns and stops."""

    def __init__(self, region: RegionStore, ur: UnderReplicationStore, metrics: AutoRecoveryMetrics, *,
                 worker_id: str, grace_s: float, interval_s: float, scrubber: Optional[Scrubber] = None,
                 scrub_interval_s: float = 0.0) -> None:
        self.region = region
        self.ur = ur
        self.metrics = metrics
        self.worker_id = worker_id
        self.grace_s = grace_s
        self.interval_s = interval_s
        self.scrubber = scrubber
        self.scrub_interval_s = scrub_interval_s
        self.is_leader = False
        self.scans = 0
        self._next_scrub = 0.0
        self._wakeup = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._watches: list = []

    def start(self) -> None:
        if self._task is not None:
            return
        store = self.ur.store
        poke = lambda *_: self._wakeup.set()  # noqa: E731
        self._watches = [store.watch_children(BOOKIES_AVAILABLE, poke), store.watch_children(BOOKIES_READONLY, poke),
                         store.watch_data(AUDITOR, poke)]
        self._task = asyncio.create_task(self._run(), name="autorecovery-auditor")

    async def close(self) -> None:
        for watch in self._watches:
            watch.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.is_leader:
            try:
                await self.ur.resign_auditor(self.worker_id)
            except Exception as err:  # noqa: BLE001 - the session's end removes it anyway
                log.warning("resigning as auditor: %s", err)
            self._step_down()

    def _step_down(self) -> None:
        self.is_leader = False
        self.metrics.auditor.set(0)
        for gauge in (self.metrics.under_replicated_ledgers, self.metrics.under_replicated_fragments,
                      self.metrics.oldest_under_replicated_seconds, self.metrics.lost_bookies):
            gauge.set(0)

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            wait_s = self.interval_s
            try:
                if await self._lead():
                    wait_s = await self.scan()
                    if self.scrubber is not None and self.scrub_interval_s > 0 and time.monotonic() >= self._next_scrub:
                        self._next_scrub = time.monotonic() + self.scrub_interval_s
                        await self.scrubber.scrub_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("audit failed; will retry")
                wait_s = min(wait_s, 1.0)
            try:
                async with asyncio.timeout(wait_s):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    async def _lead(self) -> bool:
        """True while this candidate is the auditor (elects itself when the seat is free)."""
        holder = await self.ur.auditor()
        if holder is None and await self.ur.try_become_auditor(self.worker_id):
            holder = self.worker_id
            log.info("%s is the region's auditor", self.worker_id)
        if holder == self.worker_id:
            self.is_leader = True
            self.metrics.auditor.set(1)
            return True
        if self.is_leader:
            log.info("%s is no longer the auditor (%s is)", self.worker_id, holder)
            self._step_down()
        return False

    async def scan(self) -> float:
        """One audit; returns how long to wait before the next (shorter when a grace period ends sooner)."""
        self.scans += 1
        if not await self.ur.enabled():
            await self._update_gauges(set(), {})
            return self.interval_s
        registered = set(await self.region.list_bookies()) | set(await self.region.list_bookies(read_only=True))
        decommissioning = set(await self.ur.decommissioning())
        ids = await self.region.list_ledgers()
        ledgers = {}
        for i in range(0, len(ids), _READ_CHUNK):
            chunk = ids[i:i + _READ_CHUNK]
            results = await asyncio.gather(*(self.region.read_ledger(lid) for lid in chunk), return_exceptions=True)
            for lid, result in zip(chunk, results):
                if isinstance(result, (NotFoundError, InvalidMetadataError)):
                    continue
                if isinstance(result, BaseException):
                    raise result
                ledgers[lid] = result.value
        referenced = set().union(*(bookies_of(md) for md in ledgers.values())) if ledgers else set()
        missing_now = referenced - registered
        known = await self.ur.missing_since()
        now_ms = int(time.time() * 1000)
        for bookie in sorted(missing_now - set(known)):
            log.warning("bookie %s is gone (ledgers still name it); lost after %.0f s unless it returns",
                        bookie, self.grace_s)
            await self.ur.note_missing(bookie, now_ms)
            known[bookie] = now_ms
        for bookie in sorted(set(known) - missing_now):
            log.info("bookie %s is back or no longer named by any ledger", bookie)
            await self.ur.forget_missing(bookie)
            del known[bookie]
        lost: dict[str, str] = {}
        next_wait = self.interval_s
        for bookie in missing_now:
            left_s = self.grace_s - (now_ms - known[bookie]) / 1000
            if left_s <= 0:
                lost[bookie] = REASON_LOST
            else:
                next_wait = min(next_wait, left_s + 0.05)
        for bookie in decommissioning:
            lost.setdefault(bookie, REASON_DECOMMISSION)
        marked = 0
        for lid, md in ledgers.items():
            fragments = fragments_of(md, lost)
            if fragments and await self.ur.mark(lid, fragments):
                marked += 1
        if marked:
            log.info("marked %d ledgers under-replicated (lost: %s)", marked, sorted(lost))
        for lid in await self.ur.list_ledgers():
            if lid not in ledgers and lid not in ids:
                await self.ur.drop(lid)
        await self._update_gauges(set(lost), ledgers)
        return next_wait

    async def _update_gauges(self, lost: set[str], ledgers: dict) -> None:
        records = await self.ur.list_records()
        now_ms = int(time.time() * 1000)
        self.metrics.under_replicated_ledgers.set(len(records))
        self.metrics.under_replicated_fragments.set(sum(len(r.fragments) for r in records))
        oldest = min((r.since_ms for r in records), default=now_ms)
        self.metrics.oldest_under_replicated_seconds.set(max(0.0, (now_ms - oldest) / 1000))
        self.metrics.lost_bookies.set(len(lost))
