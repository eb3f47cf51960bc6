"""The write cache: entries accepted but not yet in entry logs (BookKeeper's DbLedgerStorage write cache).

Two generations of ``ledger -> {entry -> (lac, payload)}``: adds go into *active*; a flush swaps active
out into *flushing*, writes it to entry logs and drops it once the index has committed its locations.
Reads look in both, so an entry is always findable: in active, in flushing, or through the index.
Event-loop only (no locking): the flush thread receives the swapped-out dict and never touches it here.
"""

from __future__ import annotations

from typing import Callable, Optional

Value = tuple[int, bytes]  # (last_add_confirmed, payload)
Generation = dict[int, dict[int, Value]]


class WriteCache:
    def __init__(self) -> None:
        self.active: Generation = {}
        self.active_bytes = 0
        self.flushing: Generation = {}
        self.flushing_bytes = 0

    @property
    def total_bytes(self) -> int:
        return self.active_bytes + self.flushing_bytes

    def get(self, ledger_id: int, entry_id: int) -> Optional[Value]:
        a_l = self.active.get(ledger_id)
        if a_l is not None:
            hit = a_l.get(entry_id)
            if hit is not None:
                return hit
        f_l = self.flushing.get(ledger_id)
        if f_l is not None:
            return f_l.get(entry_id)
        return None

    def ledger(self, ledger_id: int) -> dict[int, Value]:
        """The active dict of one ledger (created on demand) for the caller to insert into; the caller
        accounts the bytes with :meth:`added`."""
        entries = self.active.get(ledger_id)
        if entries is None:
            entries = self.active[ledger_id] = {}
        return entries

    def added(self, nbytes: int) -> None:
        self.active_bytes += nbytes

    def drop_ledger(self, ledger_id: int) -> None:
        """Forgets a deleted ledger's active entries (flushing ones are skipped by the flush itself)."""
        cached = self.active.pop(ledger_id, None)
        if cached:
            self.active_bytes -= sum(len(v[1]) for v in cached.values())

    def swap(self) -> tuple[Generation, int]:
        """Active becomes flushing (the flush's snapshot); returns it and its bytes."""
        snapshot, nbytes = self.active, self.active_bytes
        self.flushing, self.flushing_bytes = snapshot, nbytes
        self.active, self.active_bytes = {}, 0
        return snapshot, nbytes

    def flushed(self) -> None:
        """The snapshot is in entry logs and the index: stop serving it from memory."""
        self.flushing, self.flushing_bytes = {}, 0

    def restore(self, snapshot: Generation, keep: Callable[[int], bool]) -> None:
        """A flush failed: put its snapshot back into active (for ledgers ``keep`` accepts) to retry later."""
        self.flushing, self.flushing_bytes = {}, 0
        for ledger_id, entries in snapshot.items():
            if not keep(ledger_id):
                continue
            merged = self.ledger(ledger_id)
            for entry_id, value in entries.items():
                if entry_id not in merged:
                    merged[entry_id] = value
                    self.active_bytes += len(value[1])
