"""Auto-recovery: a bookie lost for good leaves no ledger under-replicated (DESIGN §6).

* :mod:`.model` — fragments, records and the throttle (pure);
* :mod:`.underreplication` — the records, locks, election, missing and decommissioned bookies in ZooKeeper;
* :mod:`.auditor` — the elected auditor that marks fragments of lost and decommissioned bookies;
* :mod:`.worker` — the replication worker that copies them to new bookies and swaps them in;
* :mod:`.scrubber` — reads every fragment back from its bookie and flags corrupt and missing entries;
* :mod:`.process` — ``magnetar autorecovery``, which runs all three.

See docs/autorecovery.md.
"""

from .config import AutoRecoveryConfig
from .model import Fragment, Throttle, UnderReplicatedLedger
from .underreplication import UnderReplicationStore

__all__ = ["AutoRecoveryConfig", "Fragment", "Throttle", "UnderReplicatedLedger", "UnderReplicationStore"]
