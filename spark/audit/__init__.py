"""The cross-region consistency audit (DESIGN §9) as a Spark job.

Public face:

* :func:`load` — every region's copies of some topics as one DataFrame (the Magnetar data source when
  installed, else a reader through the brokers).
* :func:`build` — the checks as lazy DataFrame transformations (:mod:`spark.audit.checks` explains identity,
  expected regions and each check); :func:`run_audit` — runs them, writes Parquet of every violation and the
  JSON report, returns the report.
* :func:`check_subscriptions` — replicated-subscription divergence, through the admin APIs and the snapshot
  markers (:mod:`spark.audit.subscriptions`).
* :func:`read_topology` / :class:`Topology` — the regions of a deployment; :func:`session` — a Spark session;
  :func:`run_session` — one for a run, stopped at its end unless it was already running.
"""

from ._session import run_session, session
from .checks import CHECKS, AuditFrames, build
from .errors import AuditError, AuditInputError
from .job import run_audit
from .load import load, source_available
from .report import comparable, summary
from .runner import audit_deployment
from .subscriptions import SubscriptionOutcome, check_subscriptions
from .topology import RegionEndpoints, Topology, read_topology

__all__ = [
    "CHECKS", "AuditError", "AuditFrames", "AuditInputError", "RegionEndpoints", "SubscriptionOutcome", "Topology",
    "audit_deployment",
    "build", "check_subscriptions", "comparable", "load", "read_topology", "run_audit", "run_session", "session",
    "source_available", "summary",
]
