"""The scrubber: reads back what every bookie is meant to hold and flags what it does not hold intact.

Every record a bookie keeps (journal and entry log) carries a CRC32C over its header and payload, and a
bookie never returns a record that fails it: it answers that entry ``INTERNAL`` (and counts it in
``magnetar_bookie_read_corrupt_total``). So a scrub of a fragment is a read of every entry of the fragment
from its bookie: ``INTERNAL`` means corrupt on disk, ``NO_SUCH_ENTRY`` means the metadata says the bookie
holds an entry it lacks. Either way the fragment is recorded under-replicated (reason ``corrupt`` or
``missing``) and a worker re-replicates it from a good copy to another bookie, which takes the bad bookie's
slot in that segment (the bad copy is no longer referenced).

Entries written by brokers also carry Pulsar's CRC32C, computed by the producer over metadata and payload
(:mod:`.pulsar_check`): a copy failing it while another replica's copy passes is flagged ``corrupt`` too.

Only CLOSED ledgers are scrubbed (an open ledger's tail is still being written), only on registered bookies
(a gone bookie is the auditor's business), throttled like the workers' copies. The scrub runs in the
elected auditor and reads over gRPC, so a bookie's own disk is checked by its ordinary read path.
"""

from __future__ import annotations

import asyncio
import logging

from bookie.client import LedgerClient
from bookie.errors import BookieError
from config_store import NotFoundError, RegionStore
from config_store.errors import InvalidMetadataError
from magnetar.proto import bookie_pb2

from .metrics import AutoRecoveryMetrics
from .model import REASON_CORRUPT, REASON_MISSING, Fragment, Throttle, batches, fragment_entries, segments
from .pulsar_check import pulsar_entry_intact
from .underreplication import UnderReplicationStore

log = logging.getLogger("bookie.autorecovery.scrubber")

Status = bookie_pb2.Status


class Scrubber:
    def __init__(self, region: RegionStore, client: LedgerClient, ur: UnderReplicationStore,
                 metrics: AutoRecoveryMetrics, *, throttle: Throttle, batch_entries: int) -> None:
        self.region = region
        self.client = client
        self.ur = ur
        self.metrics = metrics
        self.throttle = throttle
        self.batch_entries = batch_entries

    async def scrub_once(self) -> list[tuple[int, Fragment]]:
        """Scrubs every closed ledger once; returns the fragments it flagged."""
        registered = set(await self.region.list_bookies()) | set(await self.region.list_bookies(read_only=True))
        flagged: list[tuple[int, Fragment]] = []
        for ledger_id in await self.region.list_ledgers():
            try:
                md = (await self.region.read_ledger(ledger_id)).value
            except (NotFoundError, InvalidMetadataError):
                continue
            if md.state.value != "CLOSED":
                continue
            for first, _last, ensemble in segments(md):
                for bookie in ensemble:
                    if bookie not in registered:
                        continue
                    reason = await self._scrub_fragment(md, Fragment(first, bookie))
                    if reason is not None:
                        fragment = Fragment(first, bookie, reason)
                        await self.ur.mark(ledger_id, [fragment])
                        flagged.append((ledger_id, fragment))
                        log.warning("[ledger %d] bookie %s: %s entries in the segment at %d; flagged for "
                                    "re-replication", ledger_id, bookie, reason, first)
        return flagged

    async def _scrub_fragment(self, md, fragment: Fragment):
        """None when every entry read back intact; else the reason (corrupt wins over missing)."""
        reason = None
        client = self.client.bookie_client(fragment.bookie)
        for batch in batches(fragment_entries(md, fragment), self.batch_entries):
            try:
                entries = await client.read_entries(md.ledger_id, batch)
            except BookieError as err:
                log.info("[ledger %d] scrub of %s skipped: %s", md.ledger_id, fragment.bookie, err)
                return None
            nbytes = sum(len(e.payload) for e in entries)
            delay = self.throttle.delay_for(len(entries), nbytes)
            if delay > 0:
                await asyncio.sleep(delay)
            self.metrics.scrubbed_entries.inc(len(entries))
            for entry in entries:
                if entry.status == Status.INTERNAL or (
                        entry.status == Status.OK and pulsar_entry_intact(entry.payload) is False
                        and await self._good_copy_elsewhere(md, fragment, entry.entry_id)):
                    reason = REASON_CORRUPT
                    self.metrics.scrub_bad_entries.inc()
                elif entry.status == Status.NO_SUCH_ENTRY:
                    reason = reason or REASON_MISSING
                    self.metrics.scrub_bad_entries.inc()
        return reason

    async def _good_copy_elsewhere(self, md, fragment: Fragment, entry_id: int) -> bool:
        """Whether another replica holds the entry with Pulsar's checksum intact. A copy that fails it here
        but nowhere else is this bookie's fault; one that fails it everywhere was stored that way (nothing
        to repair it from: logged, not flagged)."""
        for bookie in md.write_set(entry_id):
            if bookie == fragment.bookie:
                continue
            try:
                got = await self.client.bookie_client(bookie).read_entries(md.ledger_id, [entry_id])
            except BookieError:
                continue
            if got and got[0].status == Status.OK and pulsar_entry_intact(got[0].payload):
                return True
        log.error("[ledger %d] entry %d fails Pulsar's checksum on every replica read", md.ledger_id, entry_id)
        self.metrics.scrub_bad_entries.inc()
        return False
