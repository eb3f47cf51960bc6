"""A partition's Kafka log start offset (the low watermark DeleteRecords moves), kept durably.

It is the managed ledger's property ``kafka.log_start_offset`` (a decimal string, in the managed ledger's
metadata: stored with a compare-and-set before DeleteRecords answers, read back when any broker opens the
topic again). The effective log start offset is the larger of it and the first retained index
(``ManagedLedger.first_index``): retention may trim beyond it. Messages below it stay stored until
retention trims their ledgers; Kafka clients no longer see them (ListOffsets earliest, Fetch).
"""

from __future__ import annotations

from typing import Any

PROPERTY = "kafka.log_start_offset"


def stored(ml: Any) -> int:
    """The offset DeleteRecords stored (0 when none, or when the property is not a number)."""
    try:
        return max(int(ml.properties.get(PROPERTY, "0")), 0)
    except ValueError:
        return 0


async def log_start_offset(ml: Any) -> int:
    """The partition's low watermark: the first offset Kafka consumers may fetch."""
    return max(await ml.first_index(), stored(ml))


async def store(ml: Any, offset: int) -> None:
    """Stores ``offset`` as the log start offset (returns once it is in the managed ledger's metadata)."""
    await ml.set_properties({PROPERTY: str(offset)})
